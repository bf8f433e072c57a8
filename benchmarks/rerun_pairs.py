"""An idempotent re-run of this checkout against one of an earlier commit, in alternating pairs (root).

    python3 benchmarks/rerun_pairs.py --state DIR [--base REV] [--pairs 5] [--strategy mitogen]

On a local cluster that is up (``clusterforge local up SPEC --state DIR``), runs ``clusterforge
local up SPEC --state DIR`` (the idempotent re-run of ``site.yml``) from this checkout and from a
git worktree of ``--base`` (default ``HEAD``: this checkout's uncommitted change against its
commit), alternately, ``--pairs`` times each; the first of a pair swaps sides each time, so neither
side always runs after the other. The spec is the one the cluster was brought up from, the same
file for both sides, so only the playbooks, roles and Python differ.

Prints each run's configure seconds (what ``configure`` reports, ``successful in``), the CPU
seconds of the re-run command and everything it started and waited for (``RUSAGE_CHILDREN``: the
CLI, ``ansible-playbook`` and its workers, the connections' processes; the wait for a CPU is not
in it, so it moves less with the machine's load than the seconds do), the host changes it reported (a re-run that changes anything is not what is being compared, and is flagged),
the 1-minute load average before it, and each side's median. A single re-run on this 2-core machine
varies by a second or more, so compare medians, and only under similar load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from local_cluster import load1  # noqa: E402  (this folder is the script's, first on sys.path)

_DONE = re.compile(r"successful in ([0-9.]+) s: (.*)$", re.M)


def rerun(tree: Path, spec: Path, state: Path, env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(configure seconds, host changes, the run's last lines) of one re-run from ``tree``, with
    ``env`` (default: this process's environment)."""
    # `python3 -m` from the tree puts that tree's clusterforge first on sys.path (before an
    # editable install's finder), and the playbooks are found beside the package
    p = subprocess.run([sys.executable, "-m", "clusterforge.cli", "local", "up", str(spec), "--state", str(state)],
                       cwd=tree, env=env, capture_output=True, text=True, timeout=1800, check=False)
    m = _DONE.search(p.stdout + p.stderr)
    if p.returncode != 0 or not m:
        raise SystemExit(f"re-run from {tree} failed (rc {p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")
    changed = sum(int(n) for n in re.findall(r"changed=(\d+)", m.group(2)))
    return float(m.group(1)), changed, m.group(2)


@contextlib.contextmanager
def with_sitecustomize(code: str, out_env: str, strategy: str | None, prefix: str) -> Iterator[tuple[dict[str, str], Path]]:
    """``(env, out)``: this process's environment, in which every Python loads ``code`` as its
    ``sitecustomize`` module and ``out_env`` names ``out``, a file in the same temporary folder for
    that code to write (gone when the block ends); ``strategy`` sets the Ansible strategy. The
    benchmarks that time pieces of ``ansible-playbook``'s own process run their re-run in it."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(code)
        out = Path(tmp) / "out.json"
        env = {**os.environ, out_env: str(out),
               "PYTHONPATH": os.pathsep.join([tmp, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        if strategy:
            env["CLUSTERFORGE_ANSIBLE_STRATEGY"] = strategy
        yield env, out


def written_by_sitecustomize(out: Path) -> Any:
    """What the ``sitecustomize`` code wrote to ``out`` (JSON); exits when it wrote nothing."""
    if not out.exists():
        raise SystemExit("ansible-playbook wrote no timings: was sitecustomize loaded (PYTHONPATH)?")
    return json.loads(out.read_text())


def running_cluster_args(ap: argparse.ArgumentParser) -> None:
    """``--state`` (the running local cluster's folder) and ``--strategy``, as the benchmarks that
    time one re-run of it take them."""
    ap.add_argument("--state", type=Path, required=True, help="state folder of the running local cluster")
    ap.add_argument("--strategy", choices=("linear", "mitogen"), default=None,
                    help="Ansible strategy (CLUSTERFORGE_ANSIBLE_STRATEGY; default linear)")


def running_spec(state: Path, who: str) -> Path:
    """The spec the local cluster in ``state`` was brought up from (`local up` of a running cluster
    takes only that spec); exits 2 with what to do when no cluster is up there."""
    from clusterforge.local import LocalCluster

    lc = LocalCluster(state)
    if not lc.is_up():
        print(f"{who}: no local cluster is up from {state}: bring one up first "
              "(clusterforge local up SPEC --state DIR)", file=sys.stderr)
        raise SystemExit(2)
    return Path(lc.layout().source)


def _children_cpu() -> float:
    """User and system CPU seconds of this process's waited-for children and their descendants."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", type=Path, required=True, help="state folder of the running local cluster")
    ap.add_argument("--base", default="HEAD", help="the commit to compare this checkout with (default HEAD)")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--strategy", choices=("linear", "mitogen"), default=None,
                    help="Ansible strategy of both sides (CLUSTERFORGE_ANSIBLE_STRATEGY; default linear)")
    args = ap.parse_args()
    if args.strategy:
        os.environ["CLUSTERFORGE_ANSIBLE_STRATEGY"] = args.strategy
    spec = running_spec(args.state, "rerun_pairs")
    work = Path(tempfile.mkdtemp(prefix="cf-rerun-pairs-"))
    base = work / "base"
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), args.base], check=True)
        rev = subprocess.run(["git", "-C", str(base), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        print(f"spec {spec}, state {args.state}, base {args.base} ({rev}), {args.pairs} pairs, "
              f"strategy {os.environ.get('CLUSTERFORGE_ANSIBLE_STRATEGY', 'linear')}, {os.cpu_count()} CPUs", flush=True)
        seconds: dict[str, list[float]] = {"this checkout": [], f"base {rev}": []}
        cpus: dict[str, list[float]] = {side: [] for side in seconds}
        sides = {"this checkout": ROOT, f"base {rev}": base}
        for i in range(args.pairs):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for side in order:
                before = load1()
                cpu_before = _children_cpu()
                s, changed, _ = rerun(sides[side], spec, args.state)
                cpu = _children_cpu() - cpu_before
                seconds[side].append(s)
                cpus[side].append(cpu)
                flag = "" if changed == 0 else "   (changed something: not an idempotent re-run)"
                print(f"  pair {i + 1}  {side:<16} {s:6.1f} s  CPU {cpu:6.1f} s  changed={changed}  load {before:.2f}{flag}",
                      flush=True)
        for side, vals in seconds.items():
            print(f"{side:<18} median {statistics.median(vals):6.1f} s  (runs {min(vals):.1f}-{max(vals):.1f} s)"
                  f"   CPU median {statistics.median(cpus[side]):6.1f} s  ({min(cpus[side]):.1f}-{max(cpus[side]):.1f} s)")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
