"""`clusterforge check` of 2,048 to 65,536 nodes: time to "Running as primary controller".

    sudo python3 benchmarks/check_scale.py [--nodes 2048,16384,65536] [--repeat N] [--slurm 22.05]

The cluster is examples/p5-training.yaml with its two compute groups scaled to N nodes in all
(four fifths p5.48xlarge on EFA, one fifth c7i.48xlarge), rendered for ``--slurm`` (22.05: the
host's Debian 12 daemons; other releases run their family's cached root filesystem). Each render
is checked ``--repeat`` times, one check at a time (each makes its private namespaces and removes
them). Figures: the median of the whole check and of ``slurmctld_start`` (from starting slurmctld
to its "Running as primary controller" line), and the other steps' medians, among them the CPU
seconds slurmctld used to that line (``slurmctld_start_cpu``) and ``slurmd -G`` used
(``slurmd_G_cpu``): on a loaded machine those stay put while the wall times grow. Needs root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterforge.check import check_dir, format_report  # noqa: E402
from clusterforge.check.environment import thread_ceiling  # noqa: E402
from clusterforge.clusterspec import parse_spec  # noqa: E402
from clusterforge.render import render_cluster  # noqa: E402
from clusterforge.render.writer import write_render  # noqa: E402


def scaled_spec(nodes: int, slurm: str, kind: str = "cloud") -> dict[str, Any]:
    """p5-training (``cloud``: State=CLOUD nodes) or onprem-dgx (``onprem``: DGX H100 and CPU
    hosts given by name only, no addresses, no racks) with N compute nodes, 4/5 of them GPU nodes."""
    gpu = nodes * 4 // 5
    if kind == "cloud":
        spec: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "p5-training.yaml").read_text())
        counts = {"gpu": gpu, "cpu": nodes - gpu}
        for g in spec["node_groups"]:
            if g["name"] in counts:
                g["cloud"]["count"] = counts[g["name"]]
    else:
        spec = yaml.safe_load((ROOT / "examples" / "onprem-dgx.yaml").read_text())
        hosts = {"dgx": f"dgx-[00001-{gpu:05d}]", "cpu": f"cpu-[00001-{nodes - gpu:05d}]"}
        for g in spec["node_groups"]:
            if g["name"] in hosts:
                g["onprem"] = {"hosts": hosts[g["name"]], "profile": g["onprem"]["profile"]}
        spec.pop("topology", None)
    spec["slurm"]["version"] = slurm
    return spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="2048,16384,65536", help="comma-separated node counts")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--slurm", default="22.05", help="the Slurm release to render for")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds each check may take")
    ap.add_argument("--kind", choices=("cloud", "onprem"), default="cloud",
                    help="cloud: p5-training's Auto Scaling groups (State=CLOUD); onprem: onprem-dgx's hosts")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cf-check-scale-"))
    try:
        example = "p5-training" if args.kind == "cloud" else "onprem-dgx"
        print(f"examples/{example}.yaml scaled, Slurm {args.slurm}, {args.repeat} checks each (seconds); "
              f"load average {os.getloadavg()[0]:.2f} before")
        ceiling, limits = thread_ceiling()
        # on-prem nodes: slurmctld may need a thread per node after its start (no slurmd answers)
        print(f"thread ceiling per process about {ceiling:,} ({limits})")
        print("  nodes  ok   check median (min-max)   to primary median   steps (median)")
        for nodes in (int(n) for n in args.nodes.split(",")):
            out = tmp / str(nodes)
            cluster = parse_spec(scaled_spec(nodes, args.slurm, args.kind))
            write_render(render_cluster(cluster, base_dir=ROOT / "examples"), out)
            totals: list[float] = []
            steps: dict[str, list[float]] = {}
            ok = True
            for _ in range(args.repeat):
                report = check_dir(out, timeout_s=args.timeout)
                if not report.ok:
                    ok = False
                    print(format_report(report)[-3000:], file=sys.stderr)
                totals.append(report.timings["total"])
                for k, v in report.timings.items():
                    if k != "total":
                        steps.setdefault(k.split(":")[0], []).append(v)
            start = statistics.median(steps.get("slurmctld_start", [float("nan")]))
            med = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in steps.items() if k != "slurmctld_start")
            print(f"  {nodes:5d}  {'yes' if ok else 'NO':3s}  {statistics.median(totals):6.2f} "
                  f"({min(totals):.2f}-{max(totals):.2f})        {start:6.2f}            {med}", flush=True)
        print(f"load average {os.getloadavg()[0]:.2f} after")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
