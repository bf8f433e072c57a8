"""``configure --strategy``: Ansible's own linear strategy, or Mitogen's (one Python per host).

The local cluster's end-to-end test runs a configure under Mitogen on the running cluster
(tests/test_local_cluster.py); these pin the selection and its errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clusterforge.configure import ConfigureError, strategy_env


def test_linear_is_the_default_and_names_the_controller_skip_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERFORGE_ANSIBLE_STRATEGY", raising=False)
    env = strategy_env(None)
    assert env == strategy_env("linear")
    assert env["ANSIBLE_STRATEGY"] == "clusterforge_linear"
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "clusterforge_linear.py").is_file()


def test_mitogen_points_ansible_at_its_strategy_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ansible_mitogen", reason="pip install mitogen (requirements-ci.txt)")
    monkeypatch.setenv("CLUSTERFORGE_ANSIBLE_STRATEGY", "mitogen")
    env = strategy_env(None)
    assert env["ANSIBLE_STRATEGY"] == "clusterforge_mitogen_linear"
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "clusterforge_mitogen_linear.py").is_file()


def test_an_unknown_strategy_says_which_ones_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERFORGE_ANSIBLE_STRATEGY", "free")
    with pytest.raises(ConfigureError) as err:
        strategy_env(None)
    msg = str(err.value)
    assert "'free'" in msg and "CLUSTERFORGE_ANSIBLE_STRATEGY" in msg and "linear" in msg and "mitogen" in msg


_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.command: python3 -c 'import os; print(os.getppid())'
      register: first
      changed_when: false
    - ansible.builtin.command: python3 -c 'import os; print(os.getppid())'
      register: second
      changed_when: false
    - ansible.builtin.debug: {msg: "parents {{ first.stdout }} {{ second.stdout }}"}
"""


def _parents(tmp_path: Path, strategy: str) -> tuple[str, str]:
    """Run the play with the real ansible-playbook (connection local; outside the repository, whose
    ansible.cfg accepts only inventory files): the parent PID of each task's command."""
    play = tmp_path / "play.yml"
    play.write_text(_PLAY)
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", **strategy_env(strategy)}
    cp = subprocess.run(
        ["ansible-playbook", "-c", "local", "-i", "localhost,", str(play)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
        cwd=tmp_path,
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    first, second = cp.stdout.split('"parents ', 1)[1].split('"', 1)[0].split()
    return first, second


def test_mitogen_runs_every_task_in_one_python_per_host(tmp_path: Path) -> None:
    """Under Mitogen both tasks' commands are started by the same long-lived interpreter on the
    host; under Ansible's linear strategy each task starts Python anew (the control case)."""
    pytest.importorskip("ansible_mitogen", reason="pip install mitogen (requirements-ci.txt)")
    a, b = _parents(tmp_path, "mitogen")
    assert a == b, (a, b)
    c, d = _parents(tmp_path, "linear")
    assert c != d, (c, d)
