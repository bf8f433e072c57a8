"""The idempotent re-run under Ansible's ``free`` strategy where it is sound, against linear (root).

    python3 benchmarks/free_strategy.py --state DIR [--pairs 3] [--strategy mitogen]

Under the linear strategy every host finishes a task before any host starts the next one, so a
re-run waits at each task for its slowest host. The ``free`` strategy lets each host run on through
the play. It is sound only for a play in which no step crosses hosts: ``run_once`` runs on every
host under ``free`` (with a warning), and a ``serial`` rollout or a ``delegate_to`` orders hosts.
The plays of ``site.yml`` listed in ``FREE_PLAYS`` are those whose roles have none of these; the
benchmark checks that in the roles' task and handler files before it runs, and refuses otherwise.

On a local cluster that is up (``clusterforge local up SPEC --state DIR``), runs the idempotent
re-run (``clusterforge local up`` of the cluster's own spec) in alternating pairs: as it is (every
play linear, or Mitogen's linear with ``--strategy mitogen``), and with those plays run by the
free strategy with the same controller skips (and Mitogen's connection with ``--strategy
mitogen``). The free side is swapped in by a ``sitecustomize`` module on ``PYTHONPATH``, inside
``ansible-playbook``'s own process, for the listed plays only: the playbook is not changed.

Prints each run's configure seconds, its host changes (each run must change nothing), the load
before it, and each side's median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from local_cluster import load1  # noqa: E402  (this folder is the script's, first on sys.path)
from rerun_pairs import rerun, running_spec  # noqa: E402

PLAYS_ENV = "CLUSTERFORGE_BENCH_FREE_PLAYS"
RAN_ENV = "CLUSTERFORGE_BENCH_FREE_RAN"

# The plays after the Facts play whose roles have no run_once, delegate_to or serial (checked by
# cross_host_steps below). Base settings (the hosts list, run once), Munge (the key, from one
# host) and the Slurm plays (the config's run-once checks, the rollout's batches) are not.
FREE_PLAYS = (
    "NVIDIA driver and CUDA", "AMD driver and ROCm", "EFA", "InfiniBand and RoCE", "Storage", "NCCL",
    "Cloud lifecycle agents", "GPU telemetry", "Monitoring",
)
CROSS_HOST = ("run_once", "delegate_to", "serial")

# Loaded by every Python that starts with this on PYTHONPATH; it acts only in ansible-playbook.
SITECUSTOMIZE = r'''
import os, sys
if os.environ.get("@ENV@") and os.path.basename(sys.argv[0] if sys.argv else "") == "ansible-playbook":
    from ansible.executor import task_queue_manager as _tqm

    _plays = set(os.environ["@ENV@"].split("|"))
    _run = _tqm.TaskQueueManager.run
    _free = []

    def _free_class():
        # composed as playbooks/strategy_plugins/clusterforge_*linear.py compose theirs, on first
        # use (Mitogen's loaders are set up by then: the first play ran the configured strategy)
        if not _free:
            from ansible.plugins.loader import strategy_loader
            from clusterforge.configure.controller_skip import ControllerSkipMixin
            base = strategy_loader.get("free", class_only=True)
            if os.environ.get("ANSIBLE_STRATEGY", "").endswith("mitogen_linear"):
                import ansible_mitogen.strategy
                bases = (ControllerSkipMixin, ansible_mitogen.strategy.StrategyMixin, base)
            else:
                bases = (ControllerSkipMixin, base)
            _free.append(type("FreeStrategyModule", bases, {}))
        return _free[0]

    def run(self, play):
        if play.get_name() not in _plays:
            return _run(self, play)
        with open(os.environ["@RAN@"], "a") as fh:   # the benchmark checks the swap happened
            fh.write(play.get_name() + "\n")
        free = _free_class()   # before the swap: it asks the same loader for Ansible's free
        real_get = _tqm.strategy_loader.get
        _tqm.strategy_loader.get = lambda name, *args, **kwargs: free(*args, **kwargs)
        try:
            return _run(self, play)
        finally:
            _tqm.strategy_loader.get = real_get
    _tqm.TaskQueueManager.run = run
'''.replace("@ENV@", PLAYS_ENV).replace("@RAN@", RAN_ENV)


def cross_host_steps(root: Path = ROOT) -> list[str]:
    """Each listed play that is missing from site.yml, or whose roles hold a cross-host keyword."""
    plays = {p.get("name"): p for p in yaml.safe_load((root / "playbooks" / "site.yml").read_text())}
    problems = []
    for name in FREE_PLAYS:
        play = plays.get(name)
        if play is None:
            problems.append(f"{name}: no such play in site.yml")
            continue
        problems += [f"{name}: the play has {k}" for k in CROSS_HOST if k in play]
        for entry in play.get("roles", []):
            role = entry["role"] if isinstance(entry, dict) else entry
            for sub in ("tasks", "handlers"):
                for f in sorted((root / "roles" / role / sub).glob("*.yml")):
                    for key in CROSS_HOST:
                        if f"{key}:" in f.read_text():
                            problems.append(f"{name}: {f.relative_to(root)} has {key}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", type=Path, required=True, help="state folder of the running local cluster")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--strategy", choices=("linear", "mitogen"), default=None,
                    help="Ansible strategy of the other plays, and of both sides' listed plays' connection "
                         "(CLUSTERFORGE_ANSIBLE_STRATEGY; default linear)")
    args = ap.parse_args()
    problems = cross_host_steps()
    if problems:
        print("free_strategy: these plays cannot run free:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    spec = running_spec(args.state, "free_strategy")
    times: dict[str, list[float]] = {"linear": [], "free": []}
    with tempfile.TemporaryDirectory(prefix="cf-free-strategy-") as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        ran = Path(tmp) / "free-plays.txt"
        base = {**os.environ}
        if args.strategy:
            base["CLUSTERFORGE_ANSIBLE_STRATEGY"] = args.strategy
        envs = {
            "linear": base,
            "free": {**base, PLAYS_ENV: "|".join(FREE_PLAYS), RAN_ENV: str(ran),
                     "PYTHONPATH": os.pathsep.join([tmp, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
        }
        print(f"spec {spec}; strategy {base.get('CLUSTERFORGE_ANSIBLE_STRATEGY', 'linear')}; "
              f"free plays: {', '.join(FREE_PLAYS)}")
        for i in range(args.pairs):
            for side in (("linear", "free") if i % 2 == 0 else ("free", "linear")):
                before = load1()
                seconds, changed, _ = rerun(ROOT, spec, args.state, envs[side])
                times[side].append(seconds)
                if side == "free":
                    swapped = ran.read_text().splitlines() if ran.exists() else []
                    ran.unlink(missing_ok=True)
                    if not swapped:
                        raise SystemExit("free_strategy: no play ran free: was sitecustomize loaded (PYTHONPATH)?")
                flag = "" if changed == 0 else "  (changed: not an idempotent re-run)"
                print(f"  pair {i + 1}  {side:<6}  configure {seconds:6.1f} s  changed={changed}  load {before:.2f}{flag}"
                      + (f"  ({len(swapped)} plays run free)" if side == "free" else ""))
    for side, ts in times.items():
        print(f"{side:<6} median {statistics.median(ts):.1f} s  ({min(ts):.1f}-{max(ts):.1f} s, {len(ts)} runs)")
    print(f"machine: {os.cpu_count()} CPUs, load average {load1():.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
