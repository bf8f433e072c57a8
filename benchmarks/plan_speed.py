"""How long ``clusterforge plan`` and a repeated ``clusterforge diff`` take (issue 17, item 3).

    python3 benchmarks/plan_speed.py [--runs N] [--groups 17,65,129,257] [--profile N] [--only-profile] [--json]

Prints, with the machine's load average (the figures are wall times, so a loaded machine
stretches them; CPU seconds are printed beside them as the steadier figure):

* ``clusterforge plan examples/p5-training.yaml --json`` end to end, each run a new process as a
  user starts it: the median of ``--runs`` (default 5);
* the share of that run spent importing modules (``python -X importtime``: the top-level imports'
  cumulative times over the run's wall time; pulumi_aws's services are imported while the program
  runs, and they count);
* the offline plan of the synthetic cluster of ``benchmarks/plan_scale.py`` with 17, 65, 129 and
  257 node groups (8 nodes each), in one process after a warm-up plan, so imports are not in it:
  the CPU time of each group added since the previous size shows whether the plan grows linearly
  with the groups (the per-group average rises a little with size only because the fixed part,
  network, storage and head nodes, weighs less);
* with ``--profile N`` (default 65), where one synthetic plan of N groups spends its time:
  cProfile's own time of every function, summed by where the function lives (this checkout's
  ``clusterforge`` and ``infra``, the ``pulumi`` SDK, ``pulumi_aws``, asyncio, protobuf and gRPC,
  the rest; a builtin's or another library's time goes to its callers), and the functions with
  the most own time. cProfile roughly doubles the run, so only
  the shares are figures, not the seconds;
* ``clusterforge diff --base-spec examples/p5-training.yaml --head-spec <one count changed>``
  with an empty plan cache (cold) and again with the entries the first run left (warm).

Every process runs this checkout's code (``PYTHONPATH`` = the checkout), with the environment
this script got: with ``PYTHONDONTWRITEBYTECODE=1`` every run compiles clusterforge from source,
which the figures then include (the script says so).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CLI = "import sys; from clusterforge.cli import main; sys.argv[0] = 'clusterforge'; main()"
P5 = ROOT / "examples" / "p5-training.yaml"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(args: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one process."""
    c, t = _children_cpu(), time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    wall, cpu = time.perf_counter() - t, _children_cpu() - c
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return wall, cpu, proc.stderr


def import_group(module: str) -> str:
    """What an imported module's own import time is charged to: pulumi_aws by service (its
    ``ec2`` input and output types are most of it), clusterforge by subpackage, others by package."""
    parts = module.split(".")
    if parts[0] in ("pulumi_aws", "clusterforge") and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def plan_end_to_end(runs: int) -> dict[str, Any]:
    args = [sys.executable, "-c", CLI, "plan", str(P5), "--json"]
    timed(args, _env())  # warm the page cache; not counted
    samples = [timed(args, _env())[:2] for _ in range(runs)]
    wall, _, err = timed([sys.executable, "-X", "importtime", *args[1:]], _env())
    imports_us = 0
    by_package: dict[str, int] = {}
    for line in err.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)  # no indent: a top-level import
        if m:
            imports_us += int(m.group(1))
        own = re.match(r"import time:\s+(\d+) \|\s+\d+ \| \s*(\S+)$", line)  # every module's own time
        if own:
            by_package[import_group(own.group(2))] = by_package.get(import_group(own.group(2)), 0) + int(own.group(1))
    return {
        "wall_s": [round(w, 2) for w, _ in samples],
        "cpu_s": [round(c, 2) for _, c in samples],
        "median_wall_s": round(statistics.median(w for w, _ in samples), 2),
        "median_cpu_s": round(statistics.median(c for _, c in samples), 2),
        "importtime_run_wall_s": round(wall, 2),
        "import_s_by_package": {k: round(v / 1e6, 3) for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])},
        "import_s": round(imports_us / 1e6, 2),
        "import_share": round(imports_us / 1e6 / wall, 2),
    }


def plan_groups(sizes: list[int]) -> list[dict[str, Any]]:
    from plan_scale import synthetic_spec

    from clusterforge.clusterspec.models import Cluster
    from clusterforge.plan import build_plan
    from clusterforge.resolve import resolve

    def plan(groups: int) -> tuple[float, float, int]:
        # 2 head groups + 4 CPU groups + the rest GPU groups (half on demand, half capacity blocks)
        cluster = Cluster.model_validate(synthetic_spec(gpu_groups=groups - 6, gpu_per_group=8, cpu_groups=4))
        assert len(cluster.node_groups) == groups
        t, c = time.perf_counter(), _cpu()
        rc = resolve(cluster, base_dir=ROOT / "benchmarks")
        p = build_plan(rc, spec_path=ROOT / "benchmarks" / "scale.yaml", render=False)
        return time.perf_counter() - t, _cpu() - c, len(p.resources)

    plan(9)  # warm-up: the imports, pulumi's first-use costs
    out: list[dict[str, Any]] = []
    for n in sizes:
        wall, cpu, regs = plan(n)
        row = {"groups": n, "registrations": regs, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
               "cpu_ms_per_group": round(cpu / n * 1000, 1)}
        if out:  # the cost of each group added since the previous size: flat if the plan is O(groups)
            prev = out[-1]
            row["marginal_cpu_ms_per_group"] = round((cpu - prev["cpu_s"]) / (n - prev["groups"]) * 1000, 1)
        out.append(row)
    return out


#: Where a profiled function lives, by its file's path: the first pattern that matches names it.
PLACES = (
    ("this checkout (clusterforge, infra)", (f"{ROOT}/clusterforge/", f"{ROOT}/infra/")),
    ("pulumi_aws", ("/pulumi_aws/",)),
    ("pulumi SDK", ("/pulumi/",)),
    ("asyncio", ("/asyncio/",)),
    ("protobuf, grpc", ("/google/protobuf/", "/grpc/")),
    ("importlib (function-level imports)", ("<frozen importlib",)),
)


#: Places whose own time is charged to their callers (what called ``isinstance`` or ``typing``).
UNPLACED = ("builtins and the rest", "other libraries")


def place_of(filename: str) -> str:
    for name, patterns in PLACES:
        if any(p in filename for p in patterns):
            return name
    return "builtins and the rest" if filename.startswith("~") or not filename.startswith("/") else "other libraries"


def plan_profile(groups: int) -> dict[str, Any]:
    """cProfile's own time per function of one synthetic plan of ``groups`` groups, by place."""
    import cProfile
    import pstats

    from plan_scale import synthetic_spec

    from clusterforge.clusterspec.models import Cluster
    from clusterforge.plan import build_plan
    from clusterforge.resolve import resolve

    def plan(n: int) -> None:
        cluster = Cluster.model_validate(synthetic_spec(gpu_groups=n - 6, gpu_per_group=8, cpu_groups=4))
        rc = resolve(cluster, base_dir=ROOT / "benchmarks")
        build_plan(rc, spec_path=ROOT / "benchmarks" / "scale.yaml", render=False)

    plan(9)  # warm-up, as plan_groups
    prof = cProfile.Profile()
    prof.runcall(plan, groups)
    stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    by_place: dict[str, float] = {}

    def charge(key: Any, seconds: float, depth: int) -> None:
        # a builtin's or the standard library's own time is charged to whoever called it (its
        # callers' shares of it, as cProfile recorded each edge), up to four calls up
        place = place_of(key[0])
        callers = stats[key][4] if key in stats else {}
        edges = sum(e[2] for e in callers.values())
        if place in UNPLACED and depth < 4 and edges > 0:
            for caller, e in callers.items():
                charge(caller, seconds * e[2] / edges, depth + 1)
            return
        by_place[place] = by_place.get(place, 0.0) + seconds

    for key, v in stats.items():
        charge(key, v[2], 0)
    top = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:8]
    return {
        "groups": groups,
        "profiled_s": round(total, 2),
        "share_by_place": {k: round(v / total, 3) for k, v in sorted(by_place.items(), key=lambda kv: -kv[1])},
        "top_functions": [
            {"function": f"{Path(fn).name if fn.startswith('/') else fn}:{line}({func})", "calls": v[1],
             "share": round(v[2] / total, 3), "place": place_of(fn)}
            for (fn, line, func), v in top
        ],
    }


def diff_cold_warm(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="plan-speed-") as tmp:
        head = Path(tmp) / "p5-training.yaml"
        text = P5.read_text()
        head.write_text(text.replace("count: 16", "count: 12", 1))
        assert head.read_text() != text
        args = [sys.executable, "-c", CLI, "diff", "--base-spec", str(P5), "--head-spec", str(head), "--format", "json"]
        cold, warm = [], []
        for i in range(runs):
            env = _env(CLUSTERFORGE_CACHE_DIR=str(Path(tmp) / f"cache{i}"))
            env.pop("CLUSTERFORGE_NO_CACHE", None)
            cold.append(timed(args, env, ok=(1,))[:2])  # exit 1: the diff has changes
            warm.append(timed(args, env, ok=(1,))[:2])
    return {
        "cold_median_wall_s": round(statistics.median(w for w, _ in cold), 2),
        "cold_median_cpu_s": round(statistics.median(c for _, c in cold), 2),
        "warm_median_wall_s": round(statistics.median(w for w, _ in warm), 2),
        "warm_median_cpu_s": round(statistics.median(c for _, c in warm), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each end-to-end command (the median is shown)")
    parser.add_argument("--diff-runs", type=int, default=3, help="cold/warm pairs of the diff")
    parser.add_argument("--groups", default="17,65,129,257", help="node-group counts of the synthetic plan")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile one synthetic plan of N node groups (65 is the usual)")
    parser.add_argument("--only-profile", action="store_true", help="run only --profile (default N 65)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.only_profile and not args.profile:
        args.profile = 65
    warnings.simplefilter("ignore", DeprecationWarning)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as the CLI does

    load_before = os.getloadavg()
    figures: dict[str, Any] = {}
    if not args.only_profile:
        figures["plan_p5"] = plan_end_to_end(args.runs)
        figures["diff_p5"] = diff_cold_warm(args.diff_runs)
        figures["plan_groups"] = plan_groups([int(x) for x in args.groups.split(",")])
    if args.profile:
        figures["plan_profile"] = plan_profile(args.profile)
    figures["machine"] = {
        "cpus": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "bytecode_written": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(figures, indent=2, sort_keys=True))
        return 0
    m = figures["machine"]
    if not args.only_profile:
        print_timings(figures, args)
    if args.profile:
        pr = figures["plan_profile"]
        print(f"where one synthetic plan of {pr['groups']} node groups spends its time "
              f"(cProfile, own time of each function, {pr['profiled_s']:.2f} s profiled):")
        for place, share in pr["share_by_place"].items():
            print(f"  {share:6.1%}  {place}")
        print("  the functions with the most own time:")
        for f in pr["top_functions"]:
            print(f"  {f['share']:6.1%}  {f['calls']:8d} calls  {f['function']}  [{f['place']}]")
    print(f"machine: {m['cpus']} CPUs, load average {' '.join(f'{x:.2f}' for x in m['load_avg_before'])} before, "
          f"{' '.join(f'{x:.2f}' for x in m['load_avg_after'])} after; Python {m['python']}; "
          f"bytecode {'cached' if m['bytecode_written'] else 'not written (PYTHONDONTWRITEBYTECODE): compiled every run'}")
    return 0


def print_timings(figures: dict[str, Any], args: argparse.Namespace) -> None:
    p, d = figures["plan_p5"], figures["diff_p5"]
    print(f"clusterforge plan examples/p5-training.yaml --json (new process each, {args.runs} runs):")
    print(f"  median {p['median_wall_s']:.2f} s wall, {p['median_cpu_s']:.2f} s CPU  (wall {p['wall_s']})")
    print(f"  imports: {p['import_s']:.2f} s of a {p['importtime_run_wall_s']:.2f} s run "
          f"= {p['import_share']:.0%} (-X importtime, top-level imports incl. pulumi_aws's services)")
    top = list(p["import_s_by_package"].items())[:8]
    print("  the largest, by each module's own import time: "
          + ", ".join(f"{name} {sec * 1000:.0f} ms" for name, sec in top))
    print(f"clusterforge diff p5-training vs one count changed ({args.diff_runs} runs each):")
    print(f"  cold plan cache: median {d['cold_median_wall_s']:.2f} s wall, {d['cold_median_cpu_s']:.2f} s CPU")
    print(f"  warm plan cache: median {d['warm_median_wall_s']:.2f} s wall, {d['warm_median_cpu_s']:.2f} s CPU")
    print("synthetic plan by node groups (one process, after a warm-up plan; 8 nodes per group):")
    for g in figures["plan_groups"]:
        marginal = g.get("marginal_cpu_ms_per_group")
        print(f"  {g['groups']:4d} groups, {g['registrations']:5d} registrations: {g['wall_s']:6.2f} s wall, "
              f"{g['cpu_s']:6.2f} s CPU, {g['cpu_ms_per_group']:5.1f} ms CPU per group"
              + (f", {marginal:5.1f} ms per group added" if marginal is not None else ""))


if __name__ == "__main__":
    raise SystemExit(main())
