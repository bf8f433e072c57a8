"""A role's templates evaluated as ansible-playbook's controller evaluates them, without a play or a
host: the setup of ``benchmarks/hosts_block.py`` and ``benchmarks/registration_wait.py``.

Everything here is ansible-core's own: the collection loader the CLI starts first, the role's
filter plugins added as a play of the role adds them, an ``InventoryManager`` and
``VariableManager`` over a generated inventory with ``hostvars`` (which the task queue manager
sets up for a play), the role's vars file loaded as trusted templates, and ``Templar``.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


def start_ansible(role: Path) -> None:
    """What ansible-playbook does first (the collection loader), plus ``role``'s filter plugins."""
    from ansible.plugins.loader import filter_loader, init_plugin_loader

    init_plugin_loader([])
    filter_loader.add_directory(str(role / "filter_plugins"))


@contextlib.contextmanager
def inventory(data: dict[str, Any]) -> Iterator[tuple[Any, Any, Any]]:
    """``(loader, inventory, variable_manager)`` for the YAML inventory ``data``, with ``hostvars``."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hosts.yml"
        path.write_text(yaml.safe_dump(data))
        loader = DataLoader()
        inv = InventoryManager(loader=loader, sources=[str(path)])
        vm = VariableManager(loader=loader, inventory=inv)
        HostVars(inventory=inv, variable_manager=vm, loader=loader)
        yield loader, inv, vm


def role_file(loader: Any, path: Path) -> dict[str, Any]:
    """A role's vars or defaults file, as Ansible loads it (its strings trusted as templates)."""
    data: dict[str, Any] = loader.load_from_file(str(path), trusted_as_template=True)
    return data


def timed(templar: Any, expr: str) -> tuple[Any, float]:
    """``expr`` templated, and the seconds it took."""
    from ansible.template import trust_as_template

    start = time.perf_counter()
    got = templar.template(trust_as_template(expr))
    return got, time.perf_counter() - start


def timed_facts(templar: Any, set_fact_args: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """A ``set_fact`` task's arguments (loaded as Ansible loads a playbook: its strings trusted as
    templates) templated as its action does; the facts and the seconds it took."""
    start = time.perf_counter()
    facts = {k: templar.template(v) for k, v in set_fact_args.items()}
    return facts, time.perf_counter() - start


def run_once_facts(tasks_file: Path, templar: Any, vm: Any, hosts: list[str]) -> float:
    """Each ``run_once`` ``set_fact`` of ``tasks_file`` templated once and set on every host of
    ``hosts``, as the strategy does with a run-once ``set_fact``'s result; the seconds templating took."""
    from ansible.template import trust_as_template

    took = 0.0
    for task in yaml.safe_load(tasks_file.read_text()):
        if not (task.get("run_once") and "ansible.builtin.set_fact" in task):
            continue
        start = time.perf_counter()
        facts = {k: templar.template(trust_as_template(v)) for k, v in task["ansible.builtin.set_fact"].items()}
        took += time.perf_counter() - start
        for name in hosts:
            vm.set_nonpersistent_facts(name, facts)
    return took
