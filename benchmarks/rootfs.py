"""Cold build of each release's Slurm root filesystem (what `clusterforge check` chroots into).

    python3 benchmarks/rootfs.py [--suites bookworm,trixie,sid] [--kind slurm]

Each suite is built by ``clusterforge/local/rootfs.sh CACHE SUITE KIND`` into a fresh temporary
cache folder (nothing cached is reused or touched), timed, measured (``du``-style: the sum of
the file sizes) and removed. Needs root and debootstrap; downloads from the host's Debian mirror,
so the figures include the network. A second call of rootfs.sh on a built folder returns at once
(printed as "cached").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTFS_SH = ROOT / "clusterforge" / "local" / "rootfs.sh"
TIMEOUT_S = 900


def tree_mb(path: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="bookworm,trixie,sid")
    ap.add_argument("--kind", default="slurm", choices=["slurm", "node"])
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (debootstrap)", file=sys.stderr)
        return 2
    rows = []
    for suite in args.suites.split(","):
        cache = Path(tempfile.mkdtemp(prefix=f"cf-rootfs-bench-{suite}-", dir="/var/tmp"))
        try:
            t0 = time.monotonic()
            cp = subprocess.run([str(ROOTFS_SH), str(cache), suite, args.kind], capture_output=True, text=True,
                                timeout=TIMEOUT_S)
            cold = time.monotonic() - t0
            if cp.returncode != 0:
                print(f"{suite}: rootfs.sh failed rc={cp.returncode}: {cp.stderr[-800:]}", file=sys.stderr)
                return 1
            root = Path(cp.stdout.strip())
            t1 = time.monotonic()
            subprocess.run([str(ROOTFS_SH), str(cache), suite, args.kind], capture_output=True, check=True, timeout=60)
            cached = time.monotonic() - t1
            version = subprocess.run(["chroot", str(root), "slurmctld", "-V"], capture_output=True, text=True,
                                     timeout=30).stdout.strip() if args.kind == "slurm" else "-"
            rows.append((suite, cold, tree_mb(root), cached, version))
            print(f"{suite:9s} cold {cold:6.1f} s  {rows[-1][2]:6.0f} MB  cached {cached:5.2f} s  {version}", flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    print("suite      cold build (s)   size (MB)   second call (s)   slurmctld -V")
    for suite, cold, mb, cached, version in rows:
        print(f"{suite:9s}  {cold:14.1f}   {mb:9.0f}   {cached:15.2f}   {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
