"""What a configure run pays per host before its first task, and per task after it (root; a running
local cluster).

    sudo python3 benchmarks/connection_start.py --state STATE [--repeat 3]

Runs the real ``ansible-playbook`` against the running local cluster in ``STATE`` (its generated
inventory, from the bridge's network namespace, as ``clusterforge configure`` does), with a play
of one ``ping`` and then three ``command: true``. Its cases are the two strategies
(``clusterforge_linear``, ``clusterforge_mitogen_linear``) times the interpreter: the one the
inventory names (``/usr/bin/python3``, ``clusterforge/inventory/generate.py``'s ``SYSTEM_PYTHON``)
or Ansible's discovery (``-e ansible_python_interpreter=auto_silent``). It prints, as medians of
``--repeat`` runs, the seconds of the first task (each host's connection start: under Mitogen a
Python started over SSH, under discovery one more first) and of one later task (the floor of a
task: a worker forked per host and one module call), from ``ansible.posix.profile_tasks``. No
host outside the cluster's namespace is contacted.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusterforge.configure import ANSIBLE_CFG, strategy_env
from clusterforge.local import LocalCluster

PLAY = """\
- name: Connection start and the floor of a task
  hosts: all
  gather_facts: false
  tasks:
    - name: first task
      ansible.builtin.ping:
    - name: later task 1
      ansible.builtin.command: "true"
      changed_when: false
    - name: later task 2
      ansible.builtin.command: "true"
      changed_when: false
    - name: later task 3
      ansible.builtin.command: "true"
      changed_when: false
"""
# profile_tasks' summary: "first task ---------- 1.23s"
LINE = re.compile(r"^(first task|later task \d) -+ (\d+\.\d+)s$", re.M)


def one_run(lc: LocalCluster, play: Path, strategy: str, discover: bool) -> dict[str, float]:
    layout = lc.layout()
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        # as ansible-runner sets it for configure: the nodes' keys are new at every `local up`
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
        "ANSIBLE_NOCOLOR": "1",
        **strategy_env(strategy),
    }
    cmd = ["ip", "netns", "exec", f"{layout.prefix}-br", "ansible-playbook",
           "-i", str(lc.state / "inventory" / layout.cluster), "-i", str(lc.state / "inventory-local"), str(play)]
    if discover:
        cmd += ["-e", "ansible_python_interpreter=auto_silent"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{strategy}, discover={discover}: ansible-playbook failed:\n{p.stdout[-3000:]}{p.stderr[-2000:]}")
    times = {m.group(1): float(m.group(2)) for m in LINE.finditer(p.stdout)}
    later = [v for k, v in times.items() if k.startswith("later")]
    return {"first": times["first task"], "later": statistics.median(later)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", type=Path, required=True, help="the running local cluster's state folder")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    lc = LocalCluster(args.state)
    hosts = len(lc.layout().nodes)
    print(f"{hosts} hosts, 2 strategies x 2 interpreters, median of {args.repeat}; "
          f"load {os.getloadavg()[0]:.2f} before", flush=True)
    print(f"  {'strategy':<8} {'interpreter':<28} {'first task s':>12} {'later task s':>12}")
    with tempfile.TemporaryDirectory(prefix="cf-connection-start-") as d:
        play = Path(d) / "play.yml"
        play.write_text(PLAY)
        for strategy in ("linear", "mitogen"):
            for discover in (True, False):
                runs = [one_run(lc, play, strategy, discover) for _ in range(args.repeat)]
                first = statistics.median(r["first"] for r in runs)
                later = statistics.median(r["later"] for r in runs)
                label = "discovered (auto_silent)" if discover else "named (/usr/bin/python3)"
                print(f"  {strategy:<8} {label:<28} {first:12.2f} {later:12.2f}", flush=True)
    print(f"  load {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
