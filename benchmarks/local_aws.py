"""Instances to a usable cluster on the emulated AWS, and a replacement to a rejoined node (root; minutes).

    python3 benchmarks/local_aws.py [--net 10.83.0.0/24]

Brings ``examples/local-aws.yaml`` up with ``clusterforge local up`` (moto's EC2/Auto Scaling/
DynamoDB server populated from the plan, node namespaces booted as its instances, each claiming
its name at boot, ``site.yml`` through the real aws_ec2 inventory) in a private state folder on a
network of its own, then prints wall-clock seconds:

* instances: moto populated -> every instance booted, user data run, name claimed;
* configure: the playbook on all instances;
* usable: until ``srun -N4 hostname`` answers from the four named GPU nodes;
* replace: ``clusterforge local replace p5-003`` (terminate in the Auto Scaling group -> the
  replacement boots, claims p5-003, one host configured, slurmd registered with its new address),
  with its phases;
* replacement to topology updated: from the terminate call until ``scontrol show topology`` has
  p5-003 under the leaf the (stand-in) DescribeInstanceTopology gives its new instance, watched
  while the replacement runs (the controller's cloud agent passes every 5 s locally,
  ``cloud_agents_interval_s``; 60 s by default, which adds up to 55 s);
* interruption notice to node drained: a spot notice served by p5-002's metadata stand-in until
  ``scontrol show node`` has it DRAIN with the notice's reason (the node agent polls every
  ``poll_s``), repeated on each of three nodes.

The plan of the 2,048-node cluster (O(groups) resources) is ``benchmarks/plan_scale.py``.
The rootfs and apt repository are cached by ``make setup`` / the first local cluster.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clusterforge.local import LocalCluster, missing_prerequisites  # noqa: E402
from clusterforge.local.aws.flavour import ec2_leaves, interrupt, replace, slurm_leaves, withdraw_notice  # noqa: E402


def usable(lc: LocalCluster, timeout: float = 120) -> float:
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        p = lc.on("head-001", "timeout 30 srun -N4 -p gpu hostname", timeout=45)
        if p.returncode == 0 and len(set(p.stdout.split())) == 4:
            return time.monotonic() - t
        time.sleep(1)
    raise RuntimeError(f"srun -N4 did not succeed within {timeout:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", default="10.83.0.0/24")
    a = ap.parse_args()
    why = missing_prerequisites()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    base = a.net.rsplit(".", 2)[0]
    with tempfile.TemporaryDirectory(prefix="cf-bench-aws-") as tmp:
        spec = Path(tmp) / "local-aws.yaml"
        spec.write_text((ROOT / "examples" / "local-aws.yaml").read_text().replace("10.79.", f"{base}."))
        lc = LocalCluster(Path(tmp) / "state")
        try:
            t = time.monotonic()
            res = lc.up(spec, net=a.net)
            if res.configure is None or not res.configure.ok:
                raise RuntimeError(f"the playbook failed: {res.configure.failures[:3] if res.configure else ''}")
            wait = usable(lc)
            total = time.monotonic() - t
            ph = {k: round(v, 1) for k, v in res.seconds.items()}
            print(f"instances to usable cluster      {total:7.1f} s  (phases: {ph}, srun ready +{wait:.1f} s)")
            aws = lc.aws()
            old_leaf = ec2_leaves(aws)["p5-003"]
            moved: list[float] = []

            def watch_topology(t0: float) -> None:
                # the cloud agent places the replacement as soon as it has claimed the name (its
                # tag), before it is configured: watch slurmctld's view while the replace runs
                while time.monotonic() - t0 < 600:
                    want = ec2_leaves(aws).get("p5-003")
                    if want and want != old_leaf and slurm_leaves(aws).get("p5-003") == want:
                        moved.append(time.monotonic() - t0)
                        return
                    time.sleep(0.5)

            t = time.monotonic()
            watcher = threading.Thread(target=watch_topology, args=(t,), daemon=True)
            watcher.start()
            rj = replace(aws, "p5-003", reason="benchmark", say=lambda _m: None)
            print(f"replacement to rejoined node     {time.monotonic() - t:7.1f} s  "
                  f"(cumulative: {({k: round(v, 1) for k, v in rj.seconds.items()})})")
            watcher.join(600)
            if not moved:
                raise RuntimeError("p5-003 did not reach its new EC2 leaf in scontrol show topology")
            print(f"replacement to topology updated  {moved[0]:7.1f} s  (terminate -> p5-003 under its new "
                  f"instance's leaf in scontrol show topology; the name was claimed at +{rj.seconds['claimed']:.1f} s)")
            drained = []
            for node in ("p5-001", "p5-002", "p5-004"):
                when = interrupt(aws, node, lead_s=120)
                t = time.monotonic()
                reason = f"spot interruption: terminate at {when}"
                while reason not in lc.on("head-001", f"scontrol show node {node} -o", timeout=30).stdout:
                    if time.monotonic() - t > 60:
                        raise RuntimeError(f"{node} was not drained within 60 s of its notice")
                    time.sleep(0.1)
                drained.append(time.monotonic() - t)
                withdraw_notice(aws, node)
            print(f"interruption notice to drained   {max(drained):7.1f} s  "
                  f"(max of 3 nodes; each: {', '.join(f'{d:.1f}' for d in drained)} s; the node agent polls every 5 s)")
        finally:
            lc.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
