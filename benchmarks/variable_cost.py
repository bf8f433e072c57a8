"""Which variables the controller's thread spends its templating on in an idempotent re-run (root).

    python3 benchmarks/variable_cost.py --state DIR [--strategy mitogen] [--top 30]

On a local cluster that is up (``clusterforge local up SPEC --state DIR``), runs the idempotent
re-run once, with a ``sitecustomize`` module on ``PYTHONPATH`` that wraps ansible-core 2.19's lazy
variable lookup (``_AnsibleLazyTemplateMixin._proxy_or_render_lazy_value``) inside the
``ansible-playbook`` process only. Each time a template names a variable whose value is itself a
template (a role's ``vars/main.yml`` entry, an inventory value such as ``clusterforge_manifest_dir``),
it times that variable's templating in the main thread's CPU (``time.thread_time``), and subtracts
the variables it names in turn, so each row is the variable's own expression: its filters, tests
and lookups.

Prints the run's configure seconds, the main thread's CPU, the sum of these exclusive times, and
the variables that cost the most: exclusive and inclusive milliseconds, evaluations, and the
exclusive microseconds per evaluation. A variable evaluated for every host and task that names it
shows up with many evaluations; one expensive expression with a few. The wrapper adds a few
microseconds per evaluation; compare rows, not runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from local_cluster import load1  # noqa: E402  (this folder is the script's, first on sys.path)
from rerun_pairs import (  # noqa: E402
    rerun,
    running_cluster_args,
    running_spec,
    with_sitecustomize,
    written_by_sitecustomize,
)

OUT_ENV = "CLUSTERFORGE_BENCH_VARIABLES_OUT"

SITECUSTOMIZE = r'''
import os, sys
if os.environ.get("@ENV@") and os.path.basename(sys.argv[0] if sys.argv else "") == "ansible-playbook":
    import atexit, json, time
    from ansible._internal._templating import _lazy_containers as _lazy

    _inner = _lazy._AnsibleLazyTemplateMixin._proxy_or_render_lazy_value
    _stats = {}    # variable -> [evaluations, exclusive CPU s, inclusive CPU s]
    _stack = []    # the inclusive time of the variables each open evaluation named
    _cpu = time.thread_time

    def _timed(self, key, value):
        # only a variable whose value is a template to evaluate; a plain value is a dict lookup
        if type(value) is not _lazy._LazyValue or not isinstance(key, str) or not isinstance(value.value, str) \
                or "{" not in value.value:
            return _inner(self, key, value)
        start = _cpu()
        _stack.append(0.0)
        try:
            return _inner(self, key, value)
        finally:
            took = _cpu() - start
            named = _stack.pop()
            if _stack:
                _stack[-1] += took
            entry = _stats.setdefault(key, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += took - named
            entry[2] += took

    _lazy._AnsibleLazyTemplateMixin._proxy_or_render_lazy_value = _timed
    _pid = os.getpid()
    _born = _cpu()

    def _dump():
        if os.getpid() == _pid:
            with open(os.environ["@ENV@"], "w") as fh:
                json.dump({"variables": _stats, "main_thread_cpu": _cpu() - _born}, fh)
    atexit.register(_dump)
'''.replace("@ENV@", OUT_ENV)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    running_cluster_args(ap)
    ap.add_argument("--top", type=int, default=30, help="variables to list")
    args = ap.parse_args()
    spec = running_spec(args.state, "variable_cost")
    with with_sitecustomize(SITECUSTOMIZE, OUT_ENV, args.strategy, "cf-variable-cost-") as (env, out):
        before = load1()
        seconds, changed, _ = rerun(ROOT, spec, args.state, env)
        after = load1()
        found = written_by_sitecustomize(out)
    stats: dict[str, list[float]] = found["variables"]
    total = sum(v[1] for v in stats.values())
    print(f"spec {spec}, strategy {env.get('CLUSTERFORGE_ANSIBLE_STRATEGY', 'linear')}: configure {seconds:.1f} s, "
          f"changed={changed}" + ("" if changed == 0 else "  (not an idempotent re-run)"))
    print(f"ansible-playbook's main thread: {found['main_thread_cpu']:.2f} s CPU; templating variables whose value "
          f"is a template: {total:.2f} s exclusive, {len(stats)} variables")
    print("  exclusive ms  inclusive ms  evaluations  exclusive us each  variable")
    for name, (count, excl, incl) in sorted(stats.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"  {excl * 1000:12.1f}  {incl * 1000:12.1f}  {int(count):11d}  {excl / count * 1e6:17.0f}  {name}")
    print(f"machine: {os.cpu_count()} CPUs, load average {before:.2f} before, {after:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
