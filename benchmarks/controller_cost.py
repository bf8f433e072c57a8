"""What Ansible's controller spends on tasks that need no host, and on compiling templates, with
clusterforge's strategy code switched on one piece at a time.

    python3 benchmarks/controller_cost.py [--rounds 10] [--hosts 6] [--repeat 3]

Runs the real ``ansible-playbook`` (the repository's ansible.cfg, connection local, so no host is
contacted) with ``clusterforge_linear`` and the callbacks of ``playbooks/`` (as for site.yml) on a
play shaped like one of the site playbook's roles,
``--rounds`` times over: an argument-spec check, two assertions, a ``set_fact``, a ``debug``, a
``when`` that holds on half the hosts and one that holds on none, and a module (``command``), each
with templated arguments, over ``--hosts`` inventory hosts. The cases add one switch at a time:

* ``ansible``: Ansible's own behaviour (``CLUSTERFORGE_CONTROLLER_SKIP=0``,
  ``CLUSTERFORGE_TEMPLATE_CACHE=0``, ``CLUSTERFORGE_CONTROLLER_RUN=0``);
* ``+ skips``: a host's skip decided in the controller (controller_skip.py);
* ``+ template cache``: each template string compiled once per run (template_cache.py);
* ``+ controller run``: the tasks that need no host run in the controller (controller_run.py),
  which is what ``clusterforge configure`` runs.

Prints the median wall-clock and CPU seconds (ansible-playbook and its children, user + system)
of ``--repeat`` runs of each, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from skip_cost import _run

from clusterforge.configure import PLAYBOOKS

ROUND = """
    - name: check the arguments {i}
      ansible.builtin.validate_argument_spec:
        argument_spec:
          size: {{type: int, required: true}}
          names: {{type: list, elements: str, required: true}}
    - name: the size is sane {i}
      ansible.builtin.assert:
        that: [size | int > 0, names | length == size | int]
        quiet: true
    - name: the names are short {i}
      ansible.builtin.assert:
        that: names | map('length') | max < 10
        quiet: true
    - name: work out the plan {i}
      ansible.builtin.set_fact:
        plan_{i}: "{{{{ names | map('upper') | zip(range(size | int)) | list }}}}"
    - name: show the plan {i}
      ansible.builtin.debug:
        msg: "{{{{ plan_{i} | map('join', '=') | join(',') }}}} on {{{{ inventory_hostname }}}}"
    - name: half the hosts {i}
      ansible.builtin.debug: {{msg: "{{{{ names | first }}}}"}}
      when: inventory_hostname is match('h[135]')
    - name: no host {i}
      ansible.builtin.debug: {{msg: never}}
      when: size | int > 100
    - name: a module {i}
      ansible.builtin.command: "true"
      changed_when: false
"""

CASES = {  # each case's three switches (1 = clusterforge's, 0 = Ansible's own behaviour)
    name: dict(zip(("CLUSTERFORGE_CONTROLLER_SKIP", "CLUSTERFORGE_TEMPLATE_CACHE", "CLUSTERFORGE_CONTROLLER_RUN"),
                   switches, strict=True))
    for name, switches in (
        ("ansible", "000"),
        ("+ skips", "100"),
        ("+ template cache", "110"),
        ("+ controller run", "111"),
    )
}

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--hosts", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    play = "- hosts: all\n  gather_facts: false\n  tasks:" + "".join(ROUND.format(i=i) for i in range(args.rounds))
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cf-controller-cost-") as tmp:
        folder = Path(tmp)
        (folder / "hosts.ini").write_text(
            "[all]\n" + "".join(f"h{i} ansible_connection=local size=3 names='[\"a\", \"bb\", \"ccc\"]'\n"
                                for i in range(1, args.hosts + 1))
        )
        figures = {}
        for name, switches in CASES.items():
            # the callbacks of playbooks/ too, as for site.yml: clusterforge_preload imports the
            # restart policy into the controller, so its forks copy what configure's forks copy
            switches = {**switches, "ANSIBLE_CALLBACK_PLUGINS": str(PLAYBOOKS / "callback_plugins")}
            runs = [_run(folder, play, args.hosts, True, switches) for _ in range(args.repeat)]  # switches decide
            figures[name] = (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
    tasks = 8 * args.rounds
    print(f"{tasks} tasks x {args.hosts} hosts, connection local, clusterforge_linear, median of {args.repeat} runs")
    print(f"  {'case':18s} {'wall s':>8s} {'CPU s':>8s}   vs ansible (wall / CPU)")
    base_wall, base_cpu = figures["ansible"]
    for name, (wall, cpu) in figures.items():
        print(f"  {name:18s} {wall:8.2f} {cpu:8.2f}   {wall / base_wall:6.0%} / {cpu / base_cpu:.0%}")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
