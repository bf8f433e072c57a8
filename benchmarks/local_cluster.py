"""Time to a usable local cluster, and of an idempotent re-run (root; minutes).

    python3 benchmarks/local_cluster.py [--cold] [--spec examples/local.yaml] [--net 10.82.0.0/24]
                                        [--os debian-12|debian-13] [--boot systemd|chroot]
                                        [--no-again] [--profile DIR] [--state DIR]
                                        [--strategy linear|mitogen] [--forks N]
                                        [--image bare|baked] [--drop-images]

Brings ``examples/local.yaml`` up with ``clusterforge local`` in a private state folder, and
prints per phase wall-clock seconds:

* ``--cold`` first deletes the cached rootfs and apt repository (what a fresh machine has), so
  the first ``up`` builds them (debootstrap, package download, stand-in repositories);
* the first ``up`` (rootfs cached unless ``--cold``): nodes created, ``site.yml`` run, until
  ``srun -N4 hostname`` answers from all four compute nodes ("usable");
* ``down``, then ``up`` again with the rootfs and repository cached;
* a second ``up`` on the running cluster: the idempotent re-run (must report changed=0).

``--image baked`` boots each node on its node group's baked image (``clusterforge local up --image
baked``, clusterforge/local/image.py): a first ``up`` whose images are not cached yet bakes them
(its ``image`` phase: site.yml's image phase on the bare nodes), the ``up again`` after ``down``
boots on them; ``--drop-images`` first deletes the cached images, so that the first ``up`` bakes.
``--no-again`` leaves out the ``down`` and second ``up`` (first run and re-run only). Each line
ends with the 1-minute load average before and after it: compare only runs under similar load.
``--profile DIR`` keeps each configure run's ansible-runner events in ``DIR/<phase>`` and prints
its ten slowest tasks (``benchmarks/configure_profile.py DIR/<phase>`` prints the whole profile).

It runs on its own network (10.82.0.0/24 by default), so a demo cluster can stay up meanwhile,
and removes everything it made at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from clusterforge.local import LocalCluster, missing_prerequisites
from clusterforge.local.cluster import DEFAULT_SPEC

CACHE = Path("/var/cache/clusterforge")


def usable(lc: LocalCluster, timeout: float = 120) -> float:
    """Seconds until ``srun -N4 hostname`` answers from four distinct nodes."""
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        p = lc.on(lc.submit_node(), "timeout 30 srun -N4 -p all hostname", timeout=45)
        if p.returncode == 0 and len(set(p.stdout.split())) == 4:
            return time.monotonic() - t
        time.sleep(1)
    raise RuntimeError(f"srun -N4 did not succeed within {timeout:.0f} s")


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def one_up(
    lc: LocalCluster, spec: Path, net: str, label: str, os_name: str | None = None, boot: str | None = None,
    profile: Path | None = None, image: str = "bare",
) -> dict[str, float]:
    before = load1()
    t = time.monotonic()
    res = lc.up(spec, net=net, os_name=os_name, boot=boot, image=image)
    if res.configure is None or not res.configure.ok:
        fails = res.configure.failures if res.configure else []
        raise RuntimeError(f"{label}: the playbook failed: {fails[:3]}")
    wait = usable(lc)
    total = time.monotonic() - t
    phases = {k: round(v, 1) for k, v in res.seconds.items()}
    print(f"{label:<34} {total:7.1f} s  to usable  (phases: {phases}, srun ready +{wait:.1f} s, "
          f"changed={res.configure.changed}; load {before:.1f} before, {load1():.1f} after)", flush=True)
    if profile is not None and (lc.state / "artifacts").is_dir():
        from configure_profile import profile as task_profile

        dest = profile / label.split(" (")[0].replace(" ", "-")
        shutil.copytree(lc.state / "artifacts", dest, dirs_exist_ok=True)
        tasks, wall, execs = task_profile(dest)
        print(f"  {dest}: {wall:.1f} s of events, {execs} module executions; slowest tasks:", flush=True)
        for tk in sorted(tasks, key=lambda x: -x.wall)[:10]:
            print(f"    {tk.wall:6.1f} s  {tk.role:<14} {tk.name[:70]}", flush=True)
    return {"total": total, "changed": float(res.configure.changed)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", action="store_true", help="delete the cached rootfs and apt repository first")
    ap.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    ap.add_argument("--net", default="10.82.0.0/24")
    ap.add_argument("--os", dest="os_name", default=None, help="node OS instead of the spec's (debian-12, debian-13)")
    ap.add_argument("--boot", default=None, help="systemd (the default) or chroot (the earlier nodes)")
    ap.add_argument("--no-again", action="store_true", help="first run and re-run only (no down + second up)")
    ap.add_argument("--profile", type=Path, default=None, help="keep each run's events here and print its slowest tasks")
    ap.add_argument("--state", type=Path, default=None, help="state folder (default: a new temporary one)")
    ap.add_argument("--strategy", choices=("linear", "mitogen"), default=None,
                    help="Ansible strategy of every configure run (CLUSTERFORGE_ANSIBLE_STRATEGY; default linear)")
    ap.add_argument("--forks", type=int, default=None, help="Ansible forks (ANSIBLE_FORKS; ansible.cfg has 32)")
    ap.add_argument("--image", choices=("bare", "baked"), default="bare",
                    help="node image: bare minbase (the default) or each node group's baked image")
    ap.add_argument("--drop-images", action="store_true", help="delete the cached node images first")
    args = ap.parse_args()
    if args.strategy:
        os.environ["CLUSTERFORGE_ANSIBLE_STRATEGY"] = args.strategy
    if args.forks:
        os.environ["ANSIBLE_FORKS"] = str(args.forks)
    why = missing_prerequisites()
    if why:
        print(f"local_cluster benchmark: {why}", file=sys.stderr)
        return 2
    if args.cold:
        # the node root filesystems (rootfs-SUITE-node-HASH) and the apt repositories; the check's
        # rootfs-SUITE-slurm folders are not the local cluster's and stay
        for p in [*CACHE.glob("rootfs-*-node-*"), *CACHE.glob("apt-repo-*")]:
            shutil.rmtree(p, ignore_errors=True)
    if args.cold or args.drop_images:
        for p in CACHE.glob("image-*"):
            shutil.rmtree(p, ignore_errors=True)
    lc = LocalCluster(args.state or Path(tempfile.mkdtemp(prefix="cf-bench-")) / "state")
    print(f"spec {args.spec}, network {args.net}, {'cold (no cache)' if args.cold else 'rootfs cached'}, "
          f"{os.cpu_count()} CPUs, load {load1():.1f}, strategy {os.environ.get('CLUSTERFORGE_ANSIBLE_STRATEGY', 'linear')}, "
          f"forks {os.environ.get('ANSIBLE_FORKS', '32 (ansible.cfg)')}, image {args.image}", flush=True)
    prof = args.profile
    try:
        one_up(lc, args.spec, args.net, "first up" + (" (cold: builds caches)" if args.cold else ""), args.os_name,
               args.boot, prof, args.image)
        if not args.no_again:
            t = time.monotonic()
            lc.down()
            print(f"{'down':<34} {time.monotonic() - t:7.1f} s", flush=True)
            again = "up again (rootfs + repo" + (" + images" if args.image == "baked" else "") + " cached)"
            one_up(lc, args.spec, args.net, again, args.os_name, args.boot, prof, args.image)
        rerun = one_up(lc, args.spec, args.net, "idempotent re-run (cluster up)", args.os_name, args.boot, prof,
                       args.image)
        if rerun["changed"] != 0:
            print("the re-run changed something: not idempotent", file=sys.stderr)
            return 1
    finally:
        lc.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
