"""How long a site's own Slurm packages take to build: docs/slurm-packages.md way (b), measured.

    python3 benchmarks/slurm_deb_build.py [--tag slurm-25-05-8-1] [--suite trixie] [--jobs N] [--out DIR]

Runs the page's commands for the release's own packaging (`packaging: schedmd`, the `debian/`
folder every tag carries from 23.11 on) in a throwaway overlay over the cached root filesystem of
SUITE, the build host's OS (clusterforge/local/rootfs.sh CACHE SUITE slurm; the cache itself is
never written): the tag's tree (`git archive` of SchedMD's repository, what the release tarball
holds), the build tools, `mk-build-deps -i debian/control`, `debuild -b -uc -us` (with
DEB_BUILD_OPTIONS=parallel=N, as a site would on a build host). Prints the seconds of each phase
and the slurm-smd packages built; with --out DIR the .deb files are copied there (a repository's
input, docs/slurm-packages.md step 2). Needs root, a clone of SchedMD's repository (--slurm-git)
and the Debian archive. Way (a), Debian's source package, needs deb-src from a mirror that serves
sources; this machine's mirror serves binary packages only (`apt-get source` gets 404 for the
.dsc). This is why CI does not build Slurm: the figure answers "does it fit in the suite's 45
minutes".
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE = Path(os.environ.get("CLUSTERFORGE_CACHE", "/var/cache/clusterforge"))
SLURM_GIT = Path("/work/.mirror/SchedMD+slurm/repo")

# each phase prints "@@ name" before it starts; the script stops at the first failing command
SCRIPT = r"""
set -euo pipefail
M=$1 SUITE=$2 JOBS=$3
mount -t overlay overlay -o lowerdir="$4",upperdir="$5",workdir="$6" "$M"
mount -t proc proc "$M/proc"; mount --rbind /dev "$M/dev"; mount --rbind /sys "$M/sys"
cp /etc/resolv.conf "$M/etc/resolv.conf"
inroot() { chroot "$M" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive \
  LC_ALL=C.UTF-8 DEB_BUILD_OPTIONS="parallel=$JOBS" bash -c "$1"; }
echo "@@ tools"
inroot "apt-get update -qq && apt-get install -y -qq --no-install-recommends build-essential fakeroot devscripts equivs >/dev/null"
echo "@@ source"
mkdir -p "$M/build/src" && git --git-dir="$7" archive "$8" | tar -x -C "$M/build/src"
echo "@@ build-dep"
inroot "cd /build/src && mk-build-deps -i -r -t 'apt-get -y -qq --no-install-recommends' debian/control >/dev/null"
echo "@@ build"
inroot "cd /build/src && debuild -b -uc -us >/build/build.log 2>&1 || { tail -40 /build/build.log; exit 1; }"
echo "@@ done"
ls "$M/build/"*.deb
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", default="slurm-25-05-8-1", help="the release to build (a tag of SchedMD's repository)")
    ap.add_argument("--slurm-git", type=Path, default=SLURM_GIT, help="a clone of github.com/SchedMD/slurm")
    ap.add_argument("--suite", default="trixie", help="the build host's Debian release (its cached rootfs)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, help="copy the .deb files here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (a mount namespace, an overlay mount, chroot)", file=sys.stderr)
        return 2
    lower = CACHE / f"rootfs-{args.suite}-slurm"
    if not (lower / ".complete").is_file():
        print(f"{lower} is not built: run clusterforge/local/rootfs.sh {CACHE} {args.suite} slurm", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="cf-deb-build-", dir="/var/tmp"))  # a build's gigabytes: not tmpfs
    try:
        dirs = [tmp / d for d in ("merged", "upper", "work")]
        for d in dirs:
            d.mkdir()
        cmd = ["unshare", "-m", "--propagation", "private", "bash", "-c", SCRIPT, "build",
               str(dirs[0]), args.suite, str(args.jobs), str(lower), str(dirs[1]), str(dirs[2]),
               str(args.slurm_git), args.tag]
        marks: list[tuple[str, float]] = []
        debs: list[str] = []
        print(f"{args.tag} (debian/ of the release, slurm-smd-*) on Debian {args.suite}, debuild -b with parallel={args.jobs} on "
              f"{os.cpu_count()} cores (load before: {os.getloadavg()[0]:.2f})")
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
            assert p.stdout is not None
            for line in p.stdout:
                if line.startswith("@@ "):
                    marks.append((line[3:].strip(), time.monotonic()))
                elif line.strip().endswith(".deb"):
                    debs.append(Path(line.strip()).name)
                else:
                    print("  " + line.rstrip())
        if p.returncode != 0 or not marks or marks[-1][0] != "done":
            print(f"the build failed (rc={p.returncode}) in phase {marks[-1][0] if marks else 'setup'}", file=sys.stderr)
            return 1
        for (name, t0), (_, t1) in itertools.pairwise(marks):
            print(f"  {name:<10} {t1 - t0:8.1f} s")
        print(f"  {'total':<10} {marks[-1][1] - marks[0][1]:8.1f} s   ({len(debs)} packages)")
        version = sorted({m.group(1) for d in debs if (m := re.match(r"slurm-smd-slurmctld_([^_]+)_", d))})
        print(f"  slurm-smd-slurmctld {', '.join(version) or '?'}: " + " ".join(sorted(d.split("_")[0] for d in debs)))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            for d in debs:
                shutil.copy2(tmp / "upper" / "build" / d, args.out / d)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
