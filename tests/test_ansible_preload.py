"""The controller-side preload of the restart policy (playbooks/callback_plugins/clusterforge_preload.py).

A probe filter, called inside the forked worker that runs a task, reports whether
``clusterforge.render.restart`` was already imported when the worker started: only the playbook
folder's preload plugin puts it there. Another reports the cyclic collector's state the worker
inherited from the controller: objects frozen at the play's start and the young threshold raised.
The same playbook without the plugin folder is the control, so each probe is known to tell the two
apart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
import sys


def inherited(_value):
    # evaluated in the worker Ansible forked for this host and task, before the slurm role's
    # filters (which would import the policy themselves) ran in it
    return "clusterforge.render.restart" in sys.modules


def collector_tuned(_value):
    # the controller's collector as the forked worker inherited it at the play's start
    import gc
    return gc.get_freeze_count() > 10000 and gc.get_threshold()[0] == 50000


class FilterModule:
    def filters(self):
        return {"inherited": inherited, "collector_tuned": collector_tuned}
'''


def _run(play_dir: Path, that: str = "0 | inherited") -> subprocess.CompletedProcess[str]:
    (play_dir / "filter_plugins").mkdir(parents=True)
    (play_dir / "filter_plugins" / "probe.py").write_text(PROBE)
    (play_dir / "play.yml").write_text(yaml.safe_dump([{
        "name": "Probe", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "The worker inherited the restart policy",
                   "ansible.builtin.assert": {"that": [that], "quiet": True}}],
    }], sort_keys=False))
    (play_dir / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h1": {}, "h2": {}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["ansible-playbook", "-i", "hosts.yml", "play.yml"], cwd=play_dir, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
def test_workers_inherit_the_restart_policy_from_the_controller(tmp_path: Path) -> None:
    with_plugin = tmp_path / "with"
    with_plugin.mkdir()
    # the playbook folder's plugin, found the way site.yml finds it: beside the playbook
    (with_plugin / "callback_plugins").symlink_to(ROOT / "playbooks" / "callback_plugins")
    p = _run(with_plugin)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "ok=1" in p.stdout and "failed=0" in p.stdout, p.stdout[-2000:]

    control = _run(tmp_path / "without")
    assert control.returncode != 0, control.stdout[-2000:]
    assert "Assertion failed" in control.stdout, control.stdout[-2000:]


def test_the_preload_plugin_sits_beside_the_playbooks_that_use_the_policy() -> None:
    """Ansible finds a playbook folder's plugins only beside the playbook (add_all_plugin_dirs):
    site.yml runs the slurm role whose filters the plugin serves."""
    plugin = ROOT / "playbooks" / "callback_plugins" / "clusterforge_preload.py"
    assert plugin.is_file()
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    assert any(r == "slurm" or (isinstance(r, dict) and r.get("role") == "slurm")
               for play in site for r in play.get("roles", []))


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
def test_the_controller_freezes_what_it_holds_and_collects_young_objects_less_often(tmp_path: Path) -> None:
    with_plugin = tmp_path / "with"
    with_plugin.mkdir()
    (with_plugin / "callback_plugins").symlink_to(ROOT / "playbooks" / "callback_plugins")
    p = _run(with_plugin, "0 | collector_tuned")
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "ok=1" in p.stdout and "failed=0" in p.stdout, p.stdout[-2000:]

    control = _run(tmp_path / "without", "0 | collector_tuned")
    assert control.returncode != 0, control.stdout[-2000:]
    assert "Assertion failed" in control.stdout, control.stdout[-2000:]
