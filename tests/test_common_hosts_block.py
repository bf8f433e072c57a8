"""The common role's /etc/hosts block, built once per play, is the block each host must write.

The role's own task that lists the hosts with fixed addresses (taken from
``roles/common/tasks/hosts.yml``, not copied) and the role's own vars file run under the real
``ansible-playbook`` on an inventory of eight hosts, all of them this machine through the local
connection: static hosts with IPv4 and IPv6 addresses, a host whose address is a name (never
listed), and three compute nodes of an Auto Scaling group (``clusterforge_dynamic_address``), each
listed only in its own block. Each host writes the block it would write; the expected blocks are
spelled out here. With the once-built list no host may build the list again (a lookup in the list's
template records each build); without it (the block template run without that task) each host
builds it for itself, and the blocks must be the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_site_package_read import _LOCAL_VARS, _run_play, _tasks

ROOT = Path(__file__).resolve().parent.parent
ROLE = ROOT / "roles" / "common"

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")

_HOSTS: dict[str, dict[str, Any]] = {
    "ctl": {"ansible_host": "10.0.0.1"},
    "login-1": {"ansible_host": "10.0.0.2"},
    "cpu-b": {"ansible_host": "10.0.0.5"},
    "gpu-v6": {"ansible_host": "fd00::7"},
    "named": {"ansible_host": "named.example.org"},
    "cpu-a": {"ansible_host": "10.0.0.9", "clusterforge_dynamic_address": True},
    "gpu-z": {"ansible_host": "10.0.0.10", "clusterforge_dynamic_address": True},
    "worker-9": {"ansible_host": "10.0.0.11", "clusterforge_dynamic_address": True},
}
_INVENTORY = {"all": {"vars": {**_LOCAL_VARS, "clusterforge_cluster_group": "c1"},
                      "children": {"c1": {"hosts": _HOSTS}}}}

# by name, as `groups | sort` orders them; "named" has no address to pin, and a dynamic node
# appears only in its own block
_FIXED = "10.0.0.5 cpu-b\n10.0.0.1 ctl\nfd00::7 gpu-v6\n10.0.0.2 login-1\n"
_EXPECTED = {
    **{h: _FIXED for h in ("ctl", "login-1", "cpu-b", "gpu-v6", "named")},
    "cpu-a": "10.0.0.9 cpu-a\n" + _FIXED,
    "gpu-z": "10.0.0.5 cpu-b\n10.0.0.1 ctl\nfd00::7 gpu-v6\n10.0.0.10 gpu-z\n10.0.0.2 login-1\n",
    "worker-9": _FIXED + "10.0.0.11 worker-9\n",
}


def _once_task() -> dict[str, Any]:
    by_name = {t.get("name"): t for t in _tasks(ROLE / "tasks" / "hosts.yml")}
    task = by_name["List the cluster hosts with fixed addresses"]
    return task


def _blocks(tmp_path: Path, with_once_task: bool) -> tuple[dict[str, tuple[str, str]], list[str]]:
    out = tmp_path / "out"
    out.mkdir()
    tasks: list[dict[str, Any]] = [_once_task()] if with_once_task else []
    tasks.append({
        "name": "Write the block and whether the once-built list was there",
        "ansible.builtin.copy": {
            "dest": f"{out}/{{{{ inventory_hostname }}}}", "mode": "0600",
            "content": "{{ (__common_hosts_static is defined) | string }}\n---\n{{ __common_hosts_block }}",
        },
    })
    # each time a host's template builds the fixed hosts' list, a line in `built` says so: with the
    # once-built list, no host's block may build it again. (Jinja resolves each name a template
    # reads when it starts, and ansible-core 2.19 templates a variable as it is resolved, so
    # merely naming the list's own template in the block would build it on every host.)
    built = tmp_path / "built"
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    tasks[-1]["vars"] = {
        "__common_hosts_static_text": "{{ lookup('ansible.builtin.pipe', 'echo ' ~ inventory_hostname ~ ' >> "
                                      + str(built) + "') }}{{ __test_static_text }}",
        "__test_static_text": role_vars["__common_hosts_static_text"],
    }
    play = [{"name": "hosts block", "hosts": "c1", "gather_facts": False,
             "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")], "tasks": tasks}]
    # the role's filters, which a play of the role's tasks alone does not load
    p = _run_play(tmp_path, play, _INVENTORY, env={"ANSIBLE_FILTER_PLUGINS": str(ROLE / "filter_plugins")})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    found = {}
    for f in out.iterdir():
        defined, block = f.read_text().split("\n---\n", 1)
        found[f.name] = (defined, block)
    return found, sorted(built.read_text().split()) if built.exists() else []


def test_the_once_built_list_gives_every_host_its_block(tmp_path: Path) -> None:
    task = _once_task()
    # once per play for all hosts, and never skipped by the first host alone
    assert task.get("run_once") is True and "when" not in task, task
    found, built = _blocks(tmp_path, with_once_task=True)
    assert built == [], "a host's block built the fixed hosts' list again"
    assert {h: d for h, (d, _) in found.items()} == {h: "True" for h in _HOSTS}
    assert {h: b for h, (_, b) in found.items()} == _EXPECTED


def test_without_the_once_built_list_each_host_builds_the_same_block(tmp_path: Path) -> None:
    found, built = _blocks(tmp_path, with_once_task=False)
    assert set(built) == set(_HOSTS), built  # each host built it for itself
    assert {h: d for h, (d, _) in found.items()} == {h: "False" for h in _HOSTS}
    assert {h: b for h, (_, b) in found.items()} == _EXPECTED
