"""`clusterforge check` time per release family: one example rendered for a target of each family.

    python3 benchmarks/check_release.py [--repeat N] [--example onprem-dgx.yaml]

The same example (default onprem-dgx: 42 nodes, a 3-leaf tree, 8 GPUs per DGX) is rendered for
22.05 (the host's Debian 12 daemons), 24.05 (Debian 13 trixie's 24.11.5, chrooted) and 25.05
(Debian sid's 26.05.5, chrooted; topology.yaml), and each render is checked N times. Figures:
the median and range of the whole check, and the median of each step (preflight, client parse,
munged, slurmctld start, scontrol queries, slurmd -G). Needs root and the root filesystems
(clusterforge/local/rootfs.sh CACHE trixie|sid slurm; built once).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterforge.check import check_dir, format_report  # noqa: E402
from clusterforge.clusterspec import load_spec  # noqa: E402
from clusterforge.render import render_cluster  # noqa: E402
from clusterforge.render.writer import write_render  # noqa: E402

TARGETS = ("22.05", "24.05", "25.05")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--example", default="onprem-dgx.yaml")
    args = ap.parse_args()
    examples = ROOT / "examples"
    spec = load_spec(examples / args.example)
    tmp = Path(tempfile.mkdtemp(prefix="cf-check-bench-"))
    try:
        print(f"{args.example}, {args.repeat} checks per target (seconds)")
        print("target  daemons                                    ok   median   min    max    steps (median)")
        for target in TARGETS:
            out = tmp / target
            write_render(render_cluster(spec, base_dir=examples, slurm_version=target), out)
            totals: list[float] = []
            steps: dict[str, list[float]] = {}
            ok = True
            daemons = ""
            for _ in range(args.repeat):
                report = check_dir(out, timeout_s=60)
                if not report.ok:
                    ok = False
                    print(format_report(report), file=sys.stderr)
                daemons = (report.daemons or "?").split(" (")[0] + (" host" if "this host" in (report.daemons or "") else " chroot")
                totals.append(report.timings["total"])
                for k, v in report.timings.items():
                    if k != "total":
                        steps.setdefault(k.split(":")[0], []).append(v)
            med = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in steps.items())
            print(f"{target:7s} {daemons:42s} {'yes' if ok else 'NO':4s} {statistics.median(totals):6.2f} "
                  f"{min(totals):6.2f} {max(totals):6.2f}   {med}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
