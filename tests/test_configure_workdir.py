"""Where configure puts ansible-runner's private folder (clusterforge/configure/workdir.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clusterforge.configure import ConfigureError, configure
from clusterforge.configure.workdir import EVENT_BYTES_PER_HOST, HEADROOM_BYTES, runner_parent

ROOT = Path(__file__).resolve().parents[1]


def _free(p: Path) -> int:
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize


def test_memory_when_the_run_fits(tmp_path: Path) -> None:
    assert _free(tmp_path) > EVENT_BYTES_PER_HOST + HEADROOM_BYTES, "the test needs 520 MiB free"
    assert runner_parent(6, env={}, shm=tmp_path) == tmp_path


def test_the_default_when_the_run_would_not_fit(tmp_path: Path) -> None:
    # one host more than the free space holds, after the headroom
    hosts = (_free(tmp_path) - HEADROOM_BYTES) // EVENT_BYTES_PER_HOST + 1
    assert runner_parent(hosts, env={}, shm=tmp_path) is None
    assert runner_parent(hosts - 2, env={}, shm=tmp_path) == tmp_path


def test_the_default_without_a_usable_tmpfs(tmp_path: Path) -> None:
    assert runner_parent(6, env={}, shm=tmp_path / "absent") is None
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anywhere: the access check cannot refuse it
        assert runner_parent(6, env={}, shm=ro) is None


def test_the_variable_names_the_folder_outright(tmp_path: Path) -> None:
    chosen = tmp_path / "disk"
    chosen.mkdir()
    assert runner_parent(10**9, env={"CLUSTERFORGE_RUNNER_TMP": str(chosen)}, shm=tmp_path) == chosen


def test_a_variable_naming_no_folder_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ansible_runner")
    monkeypatch.setenv("CLUSTERFORGE_RUNNER_TMP", str(tmp_path / "missing"))
    with pytest.raises(ConfigureError, match=r"CLUSTERFORGE_RUNNER_TMP=.*missing.*not a folder.*unset it"):
        configure(ROOT / "examples" / "local.yaml", playbook="validate.yml", inventory_dir=tmp_path / "inv")
    assert not (tmp_path / "inv").exists()  # refused before the inventory was written
