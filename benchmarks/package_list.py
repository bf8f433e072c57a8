"""What a host's installed-package list costs Ansible's controller: a fact, or a host variable; a
list, or the keys of a mapping.

    python3 benchmarks/package_list.py [--calls 300]

site.yml's Facts play used to run ``package_facts``: its answer (a record per package) became the
host's fact ``packages``. It now reads dpkg itself and keeps the names with ``set_fact``
(``clusterforge_installed_packages``). This prints what each costs in the one place that is paid
for every task on every host: ansible-core's own ``VariableManager.get_vars``, which the strategy
calls for each host it queues a task on.

Both lists are this machine's real ones: ``package_facts`` run by the real ``ansible`` (connection
local, the system Python, whose python3-apt it needs) and the Facts play's own dpkg read (its
command, taken from site.yml, run by bash). One inventory host gets each in turn, the way Ansible
stores it: ``set_host_facts`` for the fact, ``set_nonpersistent_facts`` for the ``set_fact``.
Prints the median of ``--calls`` calls each, in milliseconds, with the load average.

Then what a role's install pays to be skipped: its ``when``, ``names | reject('in',
clusterforge_installed_packages) | list | length > 0``, templated by ansible-core's ``Templar`` with
that host's variables, for the first five package names of ``roles/common/defaults/main.yml``
that this machine has installed (a skip, as on a configured node). The read keeps the installed packages as the keys of a mapping; the
same names as a list (what it kept before) are timed beside it. ansible-core 2.19 hands a template
a list as a lazy container that templates each item it yields, so ``in`` over a list walks every
entry; over a mapping it is one key lookup.

Last, the slurm role's read of slurmdbd's version (``__slurm_dbd_package_read``, taken from
``roles/slurm/vars/main.yml``): a key lookup, each key of the read valued with its version, beside
the match over every key that it replaced. The package looked up is one this machine has
(``slurmdbd`` when it is installed, else the first of the common role's five).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def _package_facts() -> dict[str, object]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    out = subprocess.run(
        ["ansible", "localhost", "-c", "local", "-e", "ansible_python_interpreter=/usr/bin/python3",
         "-m", "ansible.builtin.package_facts", "-a", "manager=apt", "-o"],
        env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    facts: dict[str, object] = json.loads(out.split("=>", 1)[1])["ansible_facts"]
    return facts


def _dpkg_read() -> dict[str, Any]:
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    play_vars = next(p for p in site if p.get("name") == "Facts")["vars"]
    # the command's Jinja, filled in as Ansible would for a host with no files or daemons to read
    fill = {"ansible_facts['python']['executable'] | default('python3')": sys.executable,
            "__site_read_files_py | quote": shlex.quote(play_vars["__site_read_files_py"]),
            "__site_read_files_all | to_json | quote": "'[]'", "__site_read_daemons | to_json | quote": "'[]'"}
    cmd = re.sub(r"\{\{ (.*?) \}\}", lambda m: fill[m.group(1)], play_vars["__site_read_host"])
    out = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    read: dict[str, Any] = json.loads(out)
    return read


def _median_ms(fn: object, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()

    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.vars.manager import VariableManager

    init_plugin_loader([])  # what ansible-playbook's CLI does first: the collection loader

    load = os.getloadavg()[0]
    facts = _package_facts()
    read = _dpkg_read()
    with tempfile.TemporaryDirectory() as tmp:
        inv = Path(tmp) / "hosts.yml"
        inv.write_text("all:\n  hosts:\n    h1:\n")
        loader = DataLoader()
        inventory = InventoryManager(loader=loader, sources=[str(inv)])
        vm = VariableManager(loader=loader, inventory=inventory)
        host = inventory.get_host("h1")

        base = _median_ms(lambda: vm.get_vars(host=host), args.calls)
        vm.set_host_facts("h1", facts)
        as_fact = _median_ms(lambda: vm.get_vars(host=host), args.calls)
        vm.clear_facts("h1")
        vm.set_nonpersistent_facts("h1", {"clusterforge_installed_packages": read["installed"],
                                          "clusterforge_held_packages": read["held"]})
        as_var = _median_ms(lambda: vm.get_vars(host=host), args.calls)

        from ansible.template import Templar, trust_as_template

        # the first five of the common role's packages that this machine has: a skip, as on a node
        common = [n for n in yaml.safe_load((REPO / "roles" / "common" / "defaults" / "main.yml").read_text())["common_packages"]
                  if n in read["installed"]][:5]
        check = trust_as_template("{{ names | reject('in', clusterforge_installed_packages) | list | length > 0 }}")
        when: dict[str, float] = {}
        for form, installed in (("a list", list(read["installed"])), ("keys", read["installed"])):
            vm.set_nonpersistent_facts("h1", {"clusterforge_installed_packages": installed})
            templar = Templar(loader=loader, variables={**vm.get_vars(host=host), "names": common})
            assert templar.template(check) is False, "the check must skip: every name is installed"
            when[form] = _median_ms(lambda t=templar: t.template(check), max(args.calls // 10, 5))

        # slurmdbd's version: the role's own expression, and the match over every key it replaced
        slurm_vars = yaml.safe_load((REPO / "roles" / "slurm" / "vars" / "main.yml").read_text())
        package = "slurmdbd" if "slurmdbd" in read["installed"] else common[0]
        matched = ("{{ (clusterforge_installed_packages | default([]))"
                   " | select('match', '^' ~ (__slurm_dbd_package | regex_escape) ~ '=')"
                   " | map('regex_replace', '^[^=]*=', '') | first | default('') }}")
        version: dict[str, float] = {}
        vm.set_nonpersistent_facts("h1", {"clusterforge_installed_packages": read["installed"]})
        templar = Templar(loader=loader, variables={**vm.get_vars(host=host), "__slurm_dbd_package": package})
        for form, expr in (("a match over every key", matched), ("the key's value (the role's)",
                                                                 slurm_vars["__slurm_dbd_package_read"])):
            trusted = trust_as_template(expr.strip())
            got = templar.template(trusted)
            assert got == read["installed"][package], (form, got)
            version[form] = _median_ms(lambda t=templar, e=trusted: t.template(e), max(args.calls // 10, 5))

    packages = facts["packages"]
    assert isinstance(packages, dict)
    print(f"VariableManager.get_vars for one host, median of {args.calls} calls (this machine's packages)")
    print(f"  no package list                          {base:7.3f} ms")
    print(f"  package_facts' fact ({len(packages)} packages)        {as_fact:7.3f} ms")
    print(f"  the Facts play's lists ({len(read['installed'])} entries)      {as_var:7.3f} ms")
    print(f"an install's skip: its `when` over {len(common)} installed names ({', '.join(common)}), median")
    for form, ms in when.items():
        print(f"  installed packages as {form:<8} ({len(read['installed'])} entries)   {ms:7.3f} ms")
    print(f"slurmdbd's version ({package} {read['installed'][package]}) from the read, median")
    for form, ms in version.items():
        print(f"  {form:<40} {ms:7.3f} ms")
    print(f"  machine: {os.cpu_count()} CPUs, load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
