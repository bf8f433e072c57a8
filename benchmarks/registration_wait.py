"""What the slurm role's registration wait costs Ansible's controller, by batch size.

    python3 benchmarks/registration_wait.py [--nodes 256,1024,2048] [--sample 10]

``roles/slurm/tasks/start_compute.yml`` asks the controller once per batch for the batch's compute
nodes (``scontrol show node <nodes> --oneliner``, run once) and retries until none is
unregistered; then each node decides from the answer whether it registered (the report of one
that did not, and the lift of this run's drain, both read ``__slurm_node_registered``). All of
that is templating on the controller's one thread. This prints, for a batch of N compute nodes
all IDLE (an idempotent re-run), with the role's own vars file loaded as Ansible loads it and
ansible-core's own ``Templar``:

* the query's node list (``__slurm_batch_nodes``), once per batch;
* one try's check (``__slurm_batch_unregistered``), once per try;
* the run-once ``set_fact`` tasks of start_compute.yml after the query, if any, once per batch;
* one node's decision (``__slurm_node_registered``), the median over ``--sample`` nodes;
* what the batch costs: the first three plus N times the fourth.

The answer's lines have the shape Slurm 24.11 prints (``tests/fixtures/scontrol/
show-node-oneliner-24.11.txt``, its IDLE line with the name changed). Work that grows with N in
one node's decision makes the last column grow with N squared. No host is contacted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import role_templating

REPO = Path(__file__).resolve().parents[1]
ROLE = REPO / "roles" / "slurm"
FIXTURE = REPO / "tests" / "fixtures" / "scontrol" / "show-node-oneliner-24.11.txt"


def _idle_line() -> str:
    for line in FIXTURE.read_text().splitlines():
        if " State=IDLE " in line:
            return line
    raise SystemExit(f"{FIXTURE}: no IDLE line to copy")


def _measure(n: int, sample: int) -> dict[str, float]:
    from ansible.template import Templar

    names = [f"gpu-{i:05d}" for i in range(n)]
    template_line = _idle_line()
    first = template_line.split(" ", 1)[0].removeprefix("NodeName=")
    lines = [template_line.replace(first, name) for name in names]
    data = {"all": {"children": {"slurm_compute": {"hosts": dict.fromkeys(names)},
                                 "slurm_login": {"hosts": {"login": None}}}}}
    with role_templating.inventory(data) as (loader, inv, vm):
        role_vars = role_templating.role_file(loader, ROLE / "vars" / "main.yml")
        # what the play gives every host of the batch, and the query's registered result (run
        # once, so every host of the batch has it)
        batch = {"ansible_play_batch": ["login", *names], "ansible_check_mode": False,
                 "__slurm_batch_show": {"rc": 0, "stdout_lines": lines, "stderr_lines": []}}

        def templar(name: str) -> Templar:
            return Templar(loader=loader, variables={**vm.get_vars(host=inv.get_host(name)), **role_vars, **batch})

        t = templar(names[0])
        listed, list_s = role_templating.timed(t, "{{ __slurm_batch_nodes }}")
        assert sorted(listed) == names, "the batch's compute nodes, without the login node"
        left, try_s = role_templating.timed(t, "{{ __slurm_batch_unregistered }}")
        assert list(left) == [], left
        once_s = role_templating.run_once_facts(ROLE / "tasks" / "start_compute.yml", t, vm, names)
        step = max(n // sample, 1)
        per_node = []
        for name in sorted({*names[::step][:sample - 1], names[-1]}):
            ok, took = role_templating.timed(templar(name), "{{ __slurm_node_registered }}")
            assert ok is True, (name, ok)
            per_node.append(took)
        node_s = statistics.median(per_node)
        return {"list": list_s, "try": try_s, "once": once_s, "node": node_s,
                "batch": list_s + try_s + once_s + n * node_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="256,1024,2048")
    ap.add_argument("--sample", type=int, default=10)
    args = ap.parse_args()
    role_templating.start_ansible(ROLE)
    load = os.getloadavg()
    print(f"the slurm role's registration wait on the controller, one batch of N compute nodes all IDLE "
          f"(one node's decision: median of {args.sample})")
    print("   nodes   node list   one try   run-once facts   one node's decision   the batch")
    for n in (int(x) for x in args.nodes.split(",")):
        f = _measure(n, args.sample)
        print(f"  {n:6d}  {f['list'] * 1000:8.1f} ms  {f['try'] * 1000:6.1f} ms  {f['once'] * 1000:12.1f} ms  "
              f"{f['node'] * 1000:16.2f} ms  {f['batch']:8.2f} s")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
