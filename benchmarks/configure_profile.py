"""Where a configure run's time went, from the ansible-runner events it kept (no re-run).

    python3 benchmarks/configure_profile.py ARTIFACTS [--top 25] [--compare OTHER_ARTIFACTS]

``ARTIFACTS`` is a folder ``clusterforge configure --keep-artifacts`` (or ``clusterforge local``,
in ``STATE/artifacts``) wrote. Prints, from the events' own timestamps:

* per task (as the playbook names it, role included): its wall-clock time, from its start to the
  next task's start (so a task's handlers and a play's fact gathering count where they run), the
  hosts it ran on, their results and the number of loop items;
* per role: the sum of its tasks' wall-clock time;
* the whole run's wall-clock time and its module executions (host results plus loop items that
  were not skipped);
* the tasks every host skipped: Ansible still starts a worker per host for each, to evaluate its
  ``when``, so their number and wall-clock time are printed too.

``--compare`` prints a second run's wall-clock time per role beside the first (e.g. the first run
and the idempotent re-run).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusterforge.configure.controller_run import LOCAL_ACTIONS


@dataclass
class Task:
    name: str
    role: str
    play: str
    start: float
    wall: float = 0.0
    results: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    items: int = 0
    hosts: set[str] = field(default_factory=set)


def _ts(created: str) -> float:
    return datetime.fromisoformat(created).timestamp()


def load_events(artifacts: Path) -> list[dict]:
    files = sorted(artifacts.glob("*/job_events/*.json"))
    if not files:
        files = sorted(artifacts.glob("job_events/*.json"))
    events = []
    for f in files:
        try:
            events.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    events.sort(key=lambda e: (e.get("counter", 0)))
    return events


def profile(artifacts: Path) -> tuple[list[Task], float, int]:
    """(tasks in run order, the run's wall-clock seconds, module executions)."""
    events = load_events(artifacts)
    if not events:
        raise SystemExit(f"no ansible-runner events under {artifacts}")
    tasks: list[Task] = []
    by_uuid: dict[str, Task] = {}
    t0 = _ts(events[0]["created"])
    end = _ts(events[-1]["created"])
    execs = 0
    boundaries: list[float] = []
    for ev in events:
        kind = ev.get("event", "")
        data = ev.get("event_data") or {}
        at = _ts(ev["created"])
        if kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            t = Task(name=data.get("task", ""), role=data.get("role", "") or "-", play=data.get("play", ""), start=at)
            if kind == "playbook_on_handler_task_start":
                t.name = "(handler) " + t.name
            tasks.append(t)
            by_uuid[data.get("task_uuid", "") + kind] = t
            boundaries.append(at)
        elif kind in ("playbook_on_play_start", "playbook_on_stats"):
            boundaries.append(at)
            if kind == "playbook_on_play_start":
                tasks.append(Task(name="(play start) " + data.get("play", ""), role="-", play=data.get("play", ""), start=at))
        elif kind.startswith("runner_item_on_"):
            execs += 0 if kind == "runner_item_on_skipped" else 1
            for t in reversed(tasks):
                if t.name == data.get("task") or t.name == "(handler) " + str(data.get("task")):
                    t.items += 1
                    break
        elif kind.startswith("runner_on_") and kind not in ("runner_on_start",):
            res = kind.removeprefix("runner_on_")
            if res == "ok" and (data.get("res") or {}).get("changed"):
                res = "changed"
            for t in reversed(tasks):
                if t.name == data.get("task") or t.name == "(handler) " + str(data.get("task")):
                    t.results[res] += 1
                    t.hosts.add(data.get("host", ""))
                    if not (data.get("res") or {}).get("results"):
                        execs += 1 if res != "skipped" else 0
                    break
    starts = sorted(set([t.start for t in tasks] + boundaries + [end]))
    for t in tasks:
        nxt = [s for s in starts if s > t.start]
        t.wall = (nxt[0] if nxt else end) - t.start
    return tasks, end - t0, execs


def ran_by_action(artifacts: Path) -> Counter[str]:
    """Host results that were not skips, by the task's action: before the controller ran the tasks
    that need no host (clusterforge/configure/controller_run.py), each was a forked worker."""
    ran: Counter[str] = Counter()
    for ev in load_events(artifacts):
        if ev.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            data = ev.get("event_data") or {}
            ran[str(data.get("resolved_action") or data.get("task_action"))] += 1
    return ran


# what a strategy does in the controller, with no module on the host: an include hands it tasks
_NO_HOST = frozenset({"include_tasks", "include_role", "import_tasks", "import_role", "meta"})


def ran_on_hosts(artifacts: Path) -> dict[str, int]:
    """Per host, the results that ran a module there: not skips, not the tasks the controller runs
    itself (``LOCAL_ACTIONS``), not includes. A loop's items count one each."""
    ran: dict[str, int] = defaultdict(int)
    for ev in load_events(artifacts):
        kind = ev.get("event", "")
        data = ev.get("event_data") or {}
        action = str(data.get("resolved_action") or data.get("task_action"))
        if action in LOCAL_ACTIONS or action.removeprefix("ansible.builtin.") in _NO_HOST:
            continue
        looped = bool((data.get("res") or {}).get("results"))
        if kind in ("runner_item_on_ok", "runner_item_on_failed") or (
                kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable") and not looped):
            ran[str(data.get("host", ""))] += 1
    return dict(ran)


def role_totals(tasks: list[Task]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for t in tasks:
        out[t.role if not t.name.startswith("(play start)") else "(fact gathering, play starts)"] += t.wall
    return dict(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("artifacts", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--compare", type=Path, default=None)
    args = ap.parse_args()
    tasks, total, execs = profile(args.artifacts)
    print(f"{args.artifacts}: {total:.1f} s wall, {len([t for t in tasks if not t.name.startswith('(play')])} tasks, "
          f"{execs} module executions")
    print(f"\ntop {args.top} tasks by wall-clock time")
    print(f"{'wall s':>7} {'share':>6}  {'role':<14} {'results':<28} {'items':>5}  task")
    for t in sorted(tasks, key=lambda x: -x.wall)[: args.top]:
        res = " ".join(f"{k}={v}" for k, v in sorted(t.results.items()))
        print(f"{t.wall:7.1f} {100 * t.wall / total:5.1f}%  {t.role[:14]:<14} {res[:28]:<28} {t.items:5d}  {t.name[:80]}")
    skipped = [t for t in tasks if t.results and set(t.results) == {"skipped"}]
    print(f"\ntasks every host skipped: {len(skipped)}, {sum(t.wall for t in skipped):.1f} s wall")
    ran = ran_by_action(args.artifacts)
    here = sum(n for action, n in ran.items() if action in LOCAL_ACTIONS)
    print(f"host results that ran: {sum(ran.values())}, of which {here} need no host "
          f"({', '.join(sorted(a.removeprefix('ansible.builtin.') for a in LOCAL_ACTIONS))}: "
          "the controller runs them, controller_run.py)")
    on_hosts = ran_on_hosts(args.artifacts)
    print("module runs on each host (no skip, no include, none of those): "
          + ", ".join(f"{h} {n}" for h, n in sorted(on_hosts.items(), key=lambda kv: (-kv[1], kv[0]))))
    first = role_totals(tasks)
    other: dict[str, float] = {}
    other_total = 0.0
    if args.compare:
        otasks, other_total, oexecs = profile(args.compare)
        other = role_totals(otasks)
        print(f"\n{args.compare}: {other_total:.1f} s wall, {oexecs} module executions")
    print("\nper role (wall-clock s)" + (f"   {'':>8} compare" if other else ""))
    for role in sorted(set(first) | set(other), key=lambda r: -first.get(r, 0.0)):
        line = f"  {role:<32} {first.get(role, 0.0):7.1f}"
        if other:
            line += f"   {other.get(role, 0.0):7.1f}"
        print(line)
    print(f"  {'total':<32} {total:7.1f}" + (f"   {other_total:7.1f}" if other else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
