"""What the common role's /etc/hosts block costs Ansible's controller per host, by cluster size.

    python3 benchmarks/hosts_block.py [--hosts 64,256,1024] [--sample 20]

Every host's "Write the cluster hosts into /etc/hosts" decides in the controller whether its block
already reads as it would be written (``__common_hosts_as_wanted``, roles/common/vars/main.yml),
and a host whose block differs templates the block again for the module. This prints what that
costs on one host of an N-host cluster: ansible-core's own ``Templar`` over the host's variables
from ``VariableManager.get_vars`` (the same inputs the strategy gives a task's ``when``), with the
role's own vars file loaded as Ansible loads it. A task of ``roles/common/tasks/hosts.yml`` that
runs once per play (``run_once`` with ``set_fact``) is templated once first, timed apart, and its
facts set on every host, as the strategy does with a run-once ``set_fact``'s result.

Each host has this machine's facts as the Facts play gathers them (``gather_subset: [min]``). Three
layouts per size, every address an IP literal as the generated inventories write:

* ``on-prem``: every host static (each lists all of them);
* ``cloud``: a controller and a login node static, the rest compute nodes of an Auto Scaling group
  (``clusterforge_dynamic_address``: each lists the static hosts and itself);
* ``hybrid``: the first half static (an on-prem partition), the second half dynamic (cloud burst
  nodes, each listing the static half and itself).

Per layout and size it prints the once-per-play time, the median time of one host's decision for
up to ``--sample`` static and ``--sample`` dynamic hosts (spread over the names), and what one
task's decisions cost the controller's single thread for the whole cluster (the once-per-play time
plus each kind's median times its count). Work that grows with N in one host's decision makes the
last column grow with N squared. No host is contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import role_templating

REPO = Path(__file__).resolve().parents[1]
ROLE = REPO / "roles" / "common"
GROUP = "c1"


def _inventory(n: int, layout: str) -> dict[str, Any]:
    hosts: dict[str, dict[str, Any]] = {}
    for i in range(n):
        name = "ctl" if i == 0 else "login" if i == 1 else f"node-{i:05d}"
        h: dict[str, Any] = {"ansible_host": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"}
        if (layout == "cloud" and i > 1) or (layout == "hybrid" and i >= n // 2):
            h["clusterforge_dynamic_address"] = True
        hosts[name] = h
    return {"all": {"vars": {"clusterforge_cluster_group": GROUP}, "children": {GROUP: {"hosts": hosts}}}}


def _min_facts() -> dict[str, Any]:
    """This machine's facts as site.yml's Facts play gathers them (``gather_subset: [min]``), by
    the real ``ansible``: each host of the inventory gets them, as every host of a run has its own."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    out = subprocess.run(
        ["ansible", "localhost", "-c", "local", "-m", "ansible.builtin.setup", "-a", "gather_subset=min", "-o"],
        env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    facts: dict[str, Any] = json.loads(out.split("=>", 1)[1])["ansible_facts"]
    return facts


def _measure(n: int, layout: str, sample: int, facts: dict[str, Any]) -> tuple[float, dict[str, tuple[int, float]]]:
    from ansible.template import Templar

    with role_templating.inventory(_inventory(n, layout)) as (loader, inv, vm):
        names = sorted(h.name for h in inv.get_hosts())
        for name in names:
            vm.set_host_facts(name, facts)
        role_vars = role_templating.role_file(loader, ROLE / "vars" / "main.yml")
        defaults = role_templating.role_file(loader, ROLE / "defaults" / "main.yml")

        def templar(name: str) -> Templar:
            return Templar(loader=loader, variables={**defaults, **vm.get_vars(host=inv.get_host(name)), **role_vars})

        once = role_templating.run_once_facts(ROLE / "tasks" / "hosts.yml", templar(names[0]), vm, names)
        static = [h for h in names if not inv.get_host(h).vars.get("clusterforge_dynamic_address")]
        kinds = {"static": static, "dynamic": sorted(set(names) - set(static))}
        per_kind: dict[str, tuple[int, float]] = {}
        for kind, hosts in kinds.items():
            if not hosts:
                continue
            step = max(len(hosts) // sample, 1)
            times = []
            for name in sorted({*hosts[::step][:sample - 1], hosts[-1]}):
                wanted, took = role_templating.timed(templar(name), "{{ __common_hosts_as_wanted }}")
                assert wanted in (True, False), wanted
                times.append(took)
            per_kind[kind] = (len(hosts), statistics.median(times))
        return once, per_kind


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="64,256,1024")
    ap.add_argument("--sample", type=int, default=20)
    args = ap.parse_args()
    role_templating.start_ansible(ROLE)
    load = os.getloadavg()
    facts = _min_facts()
    print(f"the common role's /etc/hosts decision (__common_hosts_as_wanted) per host, median of up to {args.sample} "
          "hosts of each kind")
    print("  layout   hosts   once per play   static host   dynamic host   all hosts (one task, controller)")
    for layout in ("on-prem", "cloud", "hybrid"):
        for n in (int(x) for x in args.hosts.split(",")):
            once, per_kind = _measure(n, layout, args.sample, facts)
            total = once + sum(count * t for count, t in per_kind.values())
            cells = [f"{per_kind[k][1] * 1000:9.2f} ms" if k in per_kind else f"{'-':>12}" for k in ("static", "dynamic")]
            print(f"  {layout:<7} {n:6d}   {once * 1000:10.1f} ms  {cells[0]}  {cells[1]}   {total:20.2f} s")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
