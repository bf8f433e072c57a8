"""The render's manifest, read once by site.yml's Facts play, is what every role's manifest variable gives.

site.yml's own task ("Read the render's manifest once for the play's hosts", taken from the
playbook, not copied) and the five roles' own vars files run under the real ``ansible-playbook``
on three hosts of this machine (local connection): two name one manifest folder, the third
another. After the once-read, the first folder's manifest is deleted, so a role variable that
still read the file for those hosts would fail the run; the third host, whose manifest is not the
one read, must read its own. Without the once-read (a role run alone) each host reads its file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_site_package_read import _LOCAL_VARS, _run_play

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")

#: role -> its manifest variable (roles/<role>/vars/main.yml), parsed
_ROLE_VARS = {
    "slurm": "__slurm_manifest",
    # the file lists (manifest_files) and the slurm role's restart policy get it as JSON text
    "slurm_text": "(__slurm_manifest_text | from_json)",
    "monitoring": "(__monitoring_manifest_text | from_json)",
    "dcgm": "(__dcgm_manifest_text | from_json)",
    "nccl": "(__nccl_manifest_text | from_json)",
    "cloud_agents": "(__cloud_agents_manifest_text | from_json)",
}
_TASK = "Read the render's manifest once for the play's hosts"


def _once_task() -> dict[str, Any]:
    plays = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    facts = next(p for p in plays if p.get("name") == "Facts")
    return next(t for t in facts["tasks"] if t.get("name") == _TASK)


def _run(tmp_path: Path, with_once_task: bool) -> dict[str, dict[str, Any]]:
    first, other, out = tmp_path / "render-a", tmp_path / "render-b", tmp_path / "out"
    for folder, name in ((first, "from-a"), (other, "from-b")):
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps({"files": [{"name": name}]}))
    out.mkdir()
    inventory = {"all": {"vars": _LOCAL_VARS, "hosts": {
        "h1": {"clusterforge_manifest_dir": str(first)},
        "h2": {"clusterforge_manifest_dir": str(first)},
        "h3": {"clusterforge_manifest_dir": str(other)},
    }}}
    tasks: list[dict[str, Any]] = []
    if with_once_task:
        tasks += [
            _once_task(),
            # from here on a read of the first folder's manifest fails the run
            {"name": "Remove the manifest read once", "run_once": True,
             "ansible.builtin.file": {"path": str(first / "manifest.json"), "state": "absent"}},
        ]
    content = "{{ {" + ", ".join(f"'{role}': {var}" for role, var in _ROLE_VARS.items()) + "} | to_json }}"
    tasks.append({"name": "Write what each role's manifest variable gives",
                  "ansible.builtin.copy": {"dest": f"{out}/{{{{ inventory_hostname }}}}", "mode": "0600",
                                           "content": content}})
    play = [{"name": "manifest", "hosts": "all", "gather_facts": False,
             "vars_files": [str(ROOT / "roles" / role / "vars" / "main.yml") for role in _ROLE_VARS],
             "tasks": tasks}]
    p = _run_play(tmp_path, play, inventory)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return {f.name: json.loads(f.read_text()) for f in out.iterdir()}


def _expected(h1_h2: str, h3: str) -> dict[str, dict[str, Any]]:
    def got(name: str) -> dict[str, Any]:
        return {role: {"files": [{"name": name}]} for role in _ROLE_VARS}

    return {"h1": got(h1_h2), "h2": got(h1_h2), "h3": got(h3)}


def test_every_role_reads_the_manifest_the_facts_play_read_once(tmp_path: Path) -> None:
    task = _once_task()
    # once per play for all hosts, and never skipped by the first host alone
    assert task.get("run_once") is True and "when" not in task, task
    # h1 and h2 from the once-read (their file is gone), h3 from its own file
    assert _run(tmp_path, with_once_task=True) == _expected("from-a", "from-b")


def test_without_the_once_read_each_host_reads_its_own_manifest(tmp_path: Path) -> None:
    assert _run(tmp_path, with_once_task=False) == _expected("from-a", "from-b")
