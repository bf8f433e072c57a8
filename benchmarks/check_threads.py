"""Peak thread count of the check's slurmctld after its start (the 65,536-node thread ceiling).

    sudo python3 benchmarks/check_threads.py [--nodes 65536] [--hold 40]

Renders examples/onprem-dgx.yaml scaled to ``--nodes`` (as benchmarks/check_scale.py does),
checks it, and keeps slurmctld up ``--hold`` seconds after the check's queries, reading
``/proc/PID/status`` every 20 ms. Prints the peak thread count, the host's thread ceiling and the
check's result. The figures in docs/performance.md were taken with the host limits as printed (raise them with
``sysctl -w vm.max_map_count=262144 kernel.pid_max=262144`` for the "raised" runs, and set them
back afterwards). Needs root.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import check_scale  # noqa: E402

from clusterforge.check import check_dir  # noqa: E402
from clusterforge.check.environment import thread_ceiling  # noqa: E402
from clusterforge.check.slurmctld import Slurmctld  # noqa: E402
from clusterforge.clusterspec import parse_spec  # noqa: E402
from clusterforge.render import render_cluster  # noqa: E402
from clusterforge.render.writer import write_render  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=65536)
    ap.add_argument("--hold", type=float, default=40.0, help="seconds slurmctld stays up after the queries")
    args = ap.parse_args()
    peak = {"threads": 0}
    query = Slurmctld.query

    def held(self: Slurmctld, pid: int, env: Any, expect: Any) -> None:
        query(self, pid, env, expect)
        end = time.monotonic() + args.hold
        while time.monotonic() < end:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                break  # slurmctld is gone
            peak["threads"] = max(peak["threads"], int(status.split("Threads:\t")[1].split()[0]))
            time.sleep(0.02)

    Slurmctld.query = held  # type: ignore[method-assign]
    ceiling, limits = thread_ceiling()
    out = Path(tempfile.mkdtemp(prefix="cf-check-threads-")) / "render"
    cluster = parse_spec(check_scale.scaled_spec(args.nodes, "22.05", "onprem"))
    write_render(render_cluster(cluster, base_dir=ROOT / "examples"), out)
    report = check_dir(out, timeout_s=300)
    print(f"{args.nodes} on-prem nodes, slurmctld held {args.hold:.0f} s after the queries")
    print(f"  peak slurmctld threads {peak['threads']:,}; ceiling about {ceiling:,} ({limits})")
    print(f"  check ok={report.ok} inconclusive={report.inconclusive}")
    for p in report.problems[:3]:
        print(f"  {p.kind.value}: {p.message[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
