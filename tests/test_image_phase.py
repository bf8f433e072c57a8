"""site.yml's image phase: ``--tags packages`` reaches every package install of every role.

A baked node image (``local up --image baked``, clusterforge/local/image.py) is what
``site.yml --tags packages`` leaves on a node. An install that tag does not reach still runs on
every boot of the image (slower, not wrong); an install reached through an include that lacks the
tag is silently left out of the image. This walks the roles' task files as Ansible does: an
import's and a block's tags go to every task inside; an include's tags decide only whether the
include itself runs, and its tasks then run on their own tags (and ``apply``'s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ROLES = ROOT / "roles"
TAG = "packages"
IMPORT = ("ansible.builtin.import_tasks", "import_tasks")
INCLUDE = ("ansible.builtin.include_tasks", "include_tasks")
INSTALL = ("ansible.builtin.apt", "apt", "ansible.builtin.package", "package")


def _tags(task: dict[str, Any]) -> set[str]:
    t = task.get("tags", [])
    return {t} if isinstance(t, str) else set(t)


def _file_of(task: dict[str, Any], key: str) -> str:
    arg = task[key]
    return arg if isinstance(arg, str) else arg["file"]


def _walk(role: Path, name: str, inherited: set[str], reached: bool, seen: list[tuple[str, str, bool]]) -> None:
    """Every install task under tasks/``name``: (file, task name, runs under --tags packages)."""
    tasks = yaml.safe_load((role / "tasks" / name).read_text()) or []
    _tasks(role, name, tasks, inherited, reached, seen)


def _tasks(role: Path, name: str, tasks: list[dict[str, Any]], inherited: set[str], reached: bool,
           seen: list[tuple[str, str, bool]]) -> None:
    for task in tasks:
        tags = inherited | _tags(task)
        if "block" in task:
            for part in ("block", "rescue", "always"):
                _tasks(role, name, task.get(part, []), tags, reached, seen)
        elif key := next((k for k in IMPORT if k in task), None):
            _walk(role, _file_of(task, key), tags, reached, seen)
        elif key := next((k for k in INCLUDE if k in task), None):
            runs = reached and (TAG in tags or "always" in tags)
            arg = task[key]
            applied = set(arg.get("apply", {}).get("tags", [])) if isinstance(arg, dict) else set()
            _walk(role, _file_of(task, key), applied, runs, seen)
        elif (key := next((k for k in INSTALL if k in task), None)) and isinstance(task[key], dict) \
                and "name" in task[key]:  # an install, not a cache refresh
            seen.append((name, task["name"], reached and bool({TAG, "always"} & tags)))


def _installs() -> list[tuple[str, str, str, bool]]:
    out: list[tuple[str, str, str, bool]] = []
    for role in sorted(p for p in ROLES.iterdir() if (p / "tasks" / "main.yml").exists()):
        seen: list[tuple[str, str, bool]] = []
        _walk(role, "main.yml", set(), True, seen)
        out += [(role.name, *s) for s in seen]
    return out


def test_the_walk_sees_the_installs_it_must() -> None:
    # the walk itself read right: installs behind an import, an include and a block are all seen
    names = {(role, task) for role, _, task, _ in _installs()}
    assert ("slurm", "Install the Slurm packages of this host's roles") in names  # import
    assert ("monitoring", "Install Grafana") in names  # include with apply
    assert ("storage", "Install the Lustre client") in names  # include
    assert ("common", "Install iptables") in names  # include of a plain file name
    assert len(names) >= 20


@pytest.mark.parametrize("role,file,task,reached", _installs(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_install_runs_in_the_image_phase(role: str, file: str, task: str, reached: bool) -> None:
    assert reached, (
        f"roles/{role}/tasks/{file}: {task!r} does not run under `site.yml --tags {TAG}`: tag it "
        f"{TAG} (and every include_tasks on its way from tasks/main.yml), or a baked image lacks it"
    )


def test_a_missing_tag_is_caught(tmp_path: Path) -> None:
    # the same walk over a role whose include lacks the tag: its install is reported unreached
    role = tmp_path / "r"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([
        {"name": "Part", "ansible.builtin.include_tasks": {"file": "part.yml", "apply": {"tags": ["r"]}},
         "tags": ["r"]},
    ]))
    (role / "tasks" / "part.yml").write_text(yaml.safe_dump([
        {"name": "Install x", "ansible.builtin.apt": {"name": "x"}, "tags": [TAG]},
    ]))
    seen: list[tuple[str, str, bool]] = []
    _walk(role, "main.yml", set(), True, seen)
    assert seen == [("part.yml", "Install x", False)]
