"""Where the controller's one thread spends an idempotent re-run, per host (root).

    python3 benchmarks/controller_per_host.py --state DIR [--strategy mitogen]

What is left of "configure grows with hosts" is work that ansible-playbook's main thread does for
each host and task, one host after another: on a real cluster the hosts run their modules side by
side, but this thread does not. This measures it in a real re-run.

On a local cluster that is up (``clusterforge local up SPEC --state DIR``), runs the idempotent
re-run (``clusterforge local up`` of the cluster's own spec) once, with a ``sitecustomize`` module
on ``PYTHONPATH`` that times, inside the ``ansible-playbook`` process only (not its workers):

* the strategy's ``_queue_task`` for each host and task (``clusterforge/configure/controller_skip.py``),
  split by what it did: a skip decided in the controller (``skip_result``: the host's variables,
  the play context and the ``when``), a task run in the controller (``controller_run.run_here``),
  or a task queued to a forked worker (the rest: the skip check that found the task runs, and the
  fork);
* the fork of each worker (``WorkerProcess.start``), part of a handoff to a worker, and inside it
  multiprocessing's start within ansible-core's display lock, and ``os.fork`` itself;
* ``VariableManager.get_vars`` (the strategy asks it for each host and task first);
* ``TaskQueueManager.send_callback`` (the callbacks: ansible-runner's events), which runs inside
  the queueing above and the results processing below, and at each task's start;
* the strategy's ``_process_pending_results`` (the results, the callbacks on them, registered
  variables), which the thread runs between queueing;
* the cyclic garbage collector's passes in that thread, by generation (``gc.callbacks``).

Each piece is timed twice: its wall time and the main thread's own CPU time in it
(``time.thread_time``). Where the wall is longer, the thread was waiting: for one of the machine's
CPUs, which the nodes, the forked workers and ansible-runner use too, for the GIL or for a lock.

Prints the run's configure seconds, each piece's totals and its milliseconds per host and per call
(wall and CPU), ``ansible-playbook``'s peak resident memory, the CPU of the whole re-run (the
machine's busy time from ``/proc/stat`` against what its CPUs could give, the main thread's CPU
against its wall, the process's and its reaped workers'), the tasks that cost the most per host
and the callbacks by event, with the load average before and after. The wrappers add a few
microseconds per call; the figures are of this one run on a 2-core machine that also runs every
node, so compare the shares and the per-host figures across cluster sizes, not the seconds alone.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
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

OUT_ENV = "CLUSTERFORGE_BENCH_CONTROLLER_OUT"

# Loaded by every Python that starts with this on PYTHONPATH; it acts only in ansible-playbook's own
# process (its forked workers inherit the wrappers but never write: the pid check at exit).
SITECUSTOMIZE = r'''
import os, sys
if os.environ.get("@ENV@") and os.path.basename(sys.argv[0] if sys.argv else "") == "ansible-playbook":
    import atexit, json, time
    from ansible.executor import task_queue_manager as _tqm
    from ansible.plugins import strategy as _strategy
    from ansible.vars import manager as _vm
    from clusterforge.configure import controller_run as _run, controller_skip as _skip

    _totals = {}   # (piece, task name) -> [calls, seconds, CPU seconds of this thread, hosts]
    _now = time.perf_counter
    _cpu = time.thread_time   # the calling thread's own CPU: the wall less the waits for a CPU or a lock

    def _add(piece, name, took, cpu, host=None):
        entry = _totals.setdefault((piece, name), [0, 0.0, 0.0, set()])
        entry[0] += 1
        entry[1] += took
        entry[2] += cpu
        if host is not None:
            entry[3].add(host)

    def _wrap(owner, attr, piece_of):
        inner = getattr(owner, attr)
        def timed(*args, **kwargs):
            start, start_cpu = _now(), _cpu()
            try:
                return inner(*args, **kwargs)
            finally:
                _add(*piece_of(args, kwargs), _now() - start, _cpu() - start_cpu)
        setattr(owner, attr, timed)

    _state = {}
    def _skip_result(*args, **kwargs):
        result = _skip_inner(*args, **kwargs)
        _state["skipped"] = result is not None
        return result
    _skip_inner = _skip.skip_result
    _skip.skip_result = _skip_result

    _run_inner = _run.run_here
    def _run_here(*args, **kwargs):
        _state["ran_here"] = True
        return _run_inner(*args, **kwargs)
    _run.run_here = _run_here

    _queue_inner = _skip.ControllerSkipMixin._queue_task
    def _queue_task(self, host, task, task_vars, play_context):
        _state.clear()
        start, start_cpu = _now(), _cpu()
        try:
            return _queue_inner(self, host, task, task_vars, play_context)
        finally:
            took, cpu = _now() - start, _cpu() - start_cpu
            piece = ("skip decided in the controller" if _state.get("skipped")
                     else "run in the controller" if _state.get("ran_here") else "queued to a worker")
            _add(piece, task.get_name(), took, cpu, host.name)
    _skip.ControllerSkipMixin._queue_task = _queue_task

    from ansible.executor.process import worker as _worker
    _wrap(_worker.WorkerProcess, "start", lambda a, k: ("fork of a worker", ""))
    # inside it: ansible-core takes the display lock around the start (worker.py), then
    # multiprocessing's fork start method calls os.fork (popen_fork.py looks it up at each call)
    import multiprocessing.process as _mp_process
    _wrap(_mp_process.BaseProcess, "start", lambda a, k: ("  the start inside the display lock", ""))
    _wrap(os, "fork", lambda a, k: ("  os.fork itself", ""))
    _wrap(_vm.VariableManager, "get_vars", lambda a, k: ("get_vars", ""))
    _wrap(_tqm.TaskQueueManager, "send_callback", lambda a, k: ("callbacks", a[1] if len(a) > 1 else ""))
    _wrap(_strategy.StrategyBase, "_process_pending_results", lambda a, k: ("results processing", ""))

    # the cyclic collector's passes in this thread: generation -> [passes, CPU seconds]
    import gc, threading
    _gc = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    _gc_start = [0.0]
    def _collector(phase, info):
        if threading.current_thread() is not threading.main_thread():
            return
        if phase == "start":
            _gc_start[0] = _cpu()
        else:
            _gc[info["generation"]][0] += 1
            _gc[info["generation"]][1] += _cpu() - _gc_start[0]
    gc.callbacks.append(_collector)

    _pid = os.getpid()
    _born = _now()
    def _dump():
        if os.getpid() != _pid:
            return
        rows = [[p, n, c, s, cpu, sorted(h)] for (p, n), (c, s, cpu, h) in _totals.items()]
        import resource
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        rows.append(["peak RSS MiB", "", 1, me.ru_maxrss / 1024, 0.0, []])
        # atexit runs in the main thread: its CPU since the start, against the process's wall
        rows.append(["main thread", "", 1, _now() - _born, _cpu(), []])
        rows.append(["process, all threads", "", 1, 0.0, me.ru_utime + me.ru_stime, []])
        rows.append(["reaped children", "", 1, 0.0, kids.ru_utime + kids.ru_stime, []])
        for gen, (passes, cpu) in _gc.items():
            rows.append([f"collector generation {gen}", "", passes, 0.0, cpu, []])
        with open(os.environ["@ENV@"], "w") as fh:
            json.dump(rows, fh)
    atexit.register(_dump)
'''.replace("@ENV@", OUT_ENV)

QUEUE_PIECES = ("skip decided in the controller", "run in the controller", "queued to a worker")
FORK_PIECES = ("fork of a worker", "  the start inside the display lock", "  os.fork itself")


def machine_busy() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (``/proc/stat``'s first line:
    everything but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    ticks = sum(fields[:8]) - fields[3] - fields[4]
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    running_cluster_args(ap)
    ap.add_argument("--top", type=int, default=12, help="tasks to list by their cost per host")
    args = ap.parse_args()
    spec = running_spec(args.state, "controller_per_host")
    with with_sitecustomize(SITECUSTOMIZE, OUT_ENV, args.strategy, "cf-controller-per-host-") as (env, out):
        before = load1()
        busy_before, started = machine_busy(), time.monotonic()
        seconds, changed, _ = rerun(ROOT, spec, args.state, env)
        busy, wall = machine_busy() - busy_before, time.monotonic() - started
        after = load1()
        rows = written_by_sitecustomize(out)
    # the cluster's hosts (the inventory check's play runs on localhost: its time counts, not as a host)
    hosts = sorted({h for *_, hs in rows for h in hs} - {"localhost"})
    n = len(hosts)
    totals: dict[str, float] = collections.Counter()
    cpus: dict[str, float] = collections.Counter()
    calls: dict[str, int] = collections.Counter()
    for piece, _name, c, s, cpu, _hosts in rows:
        totals[piece] += s
        cpus[piece] += cpu
        calls[piece] += c
    print(f"spec {spec}: {n} hosts, strategy {env.get('CLUSTERFORGE_ANSIBLE_STRATEGY', 'linear')}; "
          f"configure {seconds:.1f} s, changed={changed}" + ("" if changed == 0 else "  (not an idempotent re-run)"))
    print("ansible-playbook's main thread        total s  CPU s   per host ms  CPU ms   calls  per call ms  CPU ms")

    def line(label: str, wall: float, cpu: float, count: int) -> None:
        print(f"  {label:<34} {wall:7.2f} {cpu:6.2f}   {wall / n * 1000:11.1f} {cpu / n * 1000:7.1f}   {count:5d}"
              f"  {wall / max(count, 1) * 1000:11.2f} {cpu / max(count, 1) * 1000:7.2f}")

    for piece in (*QUEUE_PIECES, *FORK_PIECES, "get_vars", "callbacks", "results processing"):
        line(piece, totals[piece], cpus[piece], calls[piece])
    line("queueing, all three (_queue_task)", sum(totals[p] for p in QUEUE_PIECES),
         sum(cpus[p] for p in QUEUE_PIECES), sum(calls[p] for p in QUEUE_PIECES))
    print("  (CPU is the main thread's own CPU time in the piece; the rest of its wall is waiting: for a CPU that the\n"
          "   nodes, the workers and ansible-runner also use on this machine, for the GIL or for a lock.\n"
          "   The forks are part of a handoff to a worker, and the two indented rows part of the fork; the callbacks run\n"
          "   inside queueing, results processing and the task starts, and get_vars also inside templates that read\n"
          "   hostvars: those rows overlap the others)")
    print(f"  ansible-playbook's peak RSS: {totals['peak RSS MiB']:.0f} MiB (a fork copies its page tables)")
    cores = os.cpu_count() or 1
    print(f"CPU of the whole re-run command ({wall:.1f} s, {cores} CPUs: {cores * wall:.1f} CPU s to use):")
    print(f"  the machine busy (/proc/stat)            {busy:7.2f} s  {busy / (cores * wall) * 100:5.1f} % of its CPUs"
          "  (the nodes, the workers, ansible-runner, this command)")
    print(f"  ansible-playbook's main thread           {cpus['main thread']:7.2f} s  "
          f"{cpus['main thread'] / max(totals['main thread'], 1e-9) * 100:5.1f} % of its own "
          f"{totals['main thread']:.1f} s of wall")
    print(f"  ansible-playbook, all its threads        {cpus['process, all threads']:7.2f} s")
    print(f"  its workers and helpers, reaped          {cpus['reaped children']:7.2f} s")
    gens = [f"collector generation {g}" for g in range(3)]
    print(f"  the cyclic collector in the main thread  {sum(cpus[g] for g in gens):7.2f} s  "
          f"({' / '.join(str(calls[g]) for g in gens)} passes of generations 0 / 1 / 2; "
          f"{' / '.join(f'{cpus[g]:.2f}' for g in gens)} s)")
    print("the tasks whose queueing cost the most per host (ms per host, the hosts it was queued on, how):")
    tasks = sorted((r for r in rows if r[0] in QUEUE_PIECES), key=lambda r: -r[3] / max(len(r[5]), 1))
    for piece, name, _c, s, _cpu, hs in tasks[: args.top]:
        print(f"  {s / len(hs) * 1000:6.1f}  {len(hs):3d}  {piece:<31} {name[:80]}")
    print("the callbacks by event (total s, CPU s, calls, ms per call):")
    events = sorted((r for r in rows if r[0] == "callbacks"), key=lambda r: -r[3])
    for _piece, name, c, s, cpu, _hs in events[: args.top]:
        print(f"  {s:6.2f} {cpu:6.2f}  {c:5d}  {s / max(c, 1) * 1000:6.2f}  {name}")
    print(f"machine: {os.cpu_count()} CPUs, load average {before:.2f} before, {after:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
