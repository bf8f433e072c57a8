"""What the slurm role's filter plugins pay to import clusterforge's restart policy (issue 17, item 4).

    python3 benchmarks/filter_import.py [--runs N]

``roles/slurm/filter_plugins/clusterforge_restart.py`` imports ``clusterforge.render.restart`` and
``clusterforge.render.manifest`` when its filter first runs, and Ansible runs each host's task in a
worker of its own, so the import is paid once per host for each of the two tasks that use it
("Work out what this host needs ...", "Work out the daemon actions ..."). Prints, each the median
of ``--runs`` (default 7) new processes with this checkout's code, and the load average:

* ``policy only``: those two imports, as the filter does them now (``clusterforge.render`` loads
  its pipeline, ``render/build.py``, on first use);
* ``policy + pipeline``: the same imports plus ``clusterforge.render.build``, which is what they
  cost while the package's ``__init__`` loaded the whole renderer (templates, builders, spec
  models) eagerly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICY = "from clusterforge.render import restart; from clusterforge.render.manifest import Manifest"
PROBE = (
    "import time; t = time.perf_counter(); {imports}; "
    "import sys; print((time.perf_counter() - t) * 1000, len(sys.modules))"
)


def once(imports: str) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE.format(imports=imports)], capture_output=True, text=True,
                         check=True, timeout=120, env=env, cwd=ROOT).stdout.split()
    return float(out[0]), int(out[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"the restart policy's import, median of {a.runs} new processes (load {load} before)")
    for label, imports in (("policy only", POLICY), ("policy + pipeline", POLICY + "; import clusterforge.render.build")):
        once(imports)  # byte-compile once, outside the figures
        runs = [once(imports) for _ in range(a.runs)]
        ms = statistics.median(r[0] for r in runs)
        print(f"  {label:18s} {ms:6.0f} ms   {runs[0][1]} modules")
    print(f"  machine: {os.cpu_count()} CPUs, load {Path('/proc/loadavg').read_text().split()[0]} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
