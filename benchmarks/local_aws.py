"""Instances to a usable cluster on the emulated AWS, and a replacement to a rejoined node (root; minutes).

    python3 benchmarks/local_aws.py [--net 10.83.0.0/24]

Brings ``examples/local-aws.yaml`` up with ``clusterforge local up`` (moto's EC2/Auto Scaling/
DynamoDB server populated from the plan, node namespaces booted as its instances, each claiming
its name at boot, ``site.yml`` through the real aws_ec2 inventory) in a private state folder on a
network of its own, then prints wall-clock seconds:

* instances: moto populated -> every instance booted, user data run, name claimed;
* configure: the playbook on all instances;
* usable: until ``srun -N4 hostname`` answers from the four named GPU nodes;
* replace: ``clusterforge local replace gpu-003`` (terminate in the Auto Scaling group -> the
  replacement boots, claims gpu-003, one host configured, slurmd registered with its new address),
  with its phases.

The plan of the 2,048-node cluster (O(groups) resources) is ``benchmarks/plan_scale.py``.
The rootfs and apt repository are cached by ``make setup`` / the first local cluster.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clusterforge.local import LocalCluster, missing_prerequisites  # noqa: E402
from clusterforge.local.aws.flavour import replace  # noqa: E402


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
            t = time.monotonic()
            rj = replace(lc.aws(), "gpu-003", reason="benchmark", say=lambda _m: None)
            print(f"replacement to rejoined node     {time.monotonic() - t:7.1f} s  "
                  f"(cumulative: {({k: round(v, 1) for k, v in rj.seconds.items()})})")
        finally:
            lc.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
