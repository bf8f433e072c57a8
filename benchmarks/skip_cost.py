"""What a task that a host skips costs Ansible's controller, with and without the controller's skips.

    python3 benchmarks/skip_cost.py [--tasks 100] [--hosts 6] [--repeat 3]

Runs the real ``ansible-playbook`` (the repository's ansible.cfg, connection local, so no host
is contacted) on a play of ``--tasks`` tasks, each ``when: false``, over ``--hosts`` inventory
hosts, with the strategy ``clusterforge configure`` uses (``clusterforge_linear``):

* ``worker``: Ansible's own behaviour (``CLUSTERFORGE_CONTROLLER_SKIP=0``,
  ``CLUSTERFORGE_CONTROLLER_RUN=0``, ``CLUSTERFORGE_TEMPLATE_CACHE=0``): a forked worker per host
  and task evaluates the ``when``;
* ``controller``: the default, the controller decides the skip (clusterforge/configure/controller_skip.py);
* ``ran``: the same tasks without the ``when`` (``debug``), which the controller runs
  (clusterforge/configure/controller_run.py). The play's tasks are one block, as a role's are,
  so this includes what each host's copy of a task and its blocks costs (``own_copy``);
* ``ran in workers``: the same, in a forked worker per host and task (Ansible's own), for scale.

Prints the median wall-clock and CPU seconds (the process and its children, user + system) of
``--repeat`` runs, and the milliseconds per skipped host-task above a play of no tasks, with the
load average before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from clusterforge.configure import ANSIBLE_CFG, strategy_env  # noqa: E402


def _play(tasks: int, when: bool) -> str:
    cond = "\n      when: false" if when else ""
    body = "".join(f"\n    - name: t{i}\n      ansible.builtin.debug: {{msg: x}}{cond}" for i in range(tasks))
    return f"- hosts: all\n  gather_facts: false\n  tasks:{body or ' []'}\n"


def _run(folder: Path, play: str, hosts: int, skip: bool, switches: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (ansible-playbook and its children) of one run of ``play``."""
    (folder / "play.yml").write_text(play)
    env = {
        **os.environ,
        **strategy_env("linear"),
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "CLUSTERFORGE_CONTROLLER_SKIP": "1" if skip else "0",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        **(switches or {}),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(
        ["ansible-playbook", "-i", str(folder / "hosts.ini"), str(folder / "play.yml")],
        check=True, stdout=subprocess.DEVNULL, env=env, cwd=REPO, timeout=600,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--hosts", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cf-skip-cost-") as tmp:
        folder = Path(tmp)
        (folder / "hosts.ini").write_text(
            "[all]\n" + "".join(f"h{i} ansible_connection=local\n" for i in range(1, args.hosts + 1))
        )
        ansible_own = {"CLUSTERFORGE_CONTROLLER_RUN": "0", "CLUSTERFORGE_TEMPLATE_CACHE": "0"}
        cases = [
            ("no tasks", _play(0, False), True, None),
            ("worker", _play(args.tasks, True), False, ansible_own),
            ("controller", _play(args.tasks, True), True, None),
            ("ran", _play(args.tasks, False), True, None),
            ("ran in workers", _play(args.tasks, False), False, ansible_own),
        ]
        figures: dict[str, tuple[float, float]] = {}
        for name, play, skip, switches in cases:
            runs = [_run(folder, play, args.hosts, skip, switches) for _ in range(args.repeat)]
            figures[name] = (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
    host_tasks = args.tasks * args.hosts
    base_wall, base_cpu = figures["no tasks"]
    print(f"{args.tasks} tasks x {args.hosts} hosts, connection local, median of {args.repeat} runs")
    print(f"  {'case':14s} {'wall s':>8s} {'CPU s':>8s} {'ms per host-task (wall / CPU)':>32s}")
    for name, (wall, cpu) in figures.items():
        per = "" if name == "no tasks" else (
            f"{(wall - base_wall) / host_tasks * 1000:8.1f} / {(cpu - base_cpu) / host_tasks * 1000:.1f}"
        )
        print(f"  {name:14s} {wall:8.2f} {cpu:8.2f} {per:>32s}")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
