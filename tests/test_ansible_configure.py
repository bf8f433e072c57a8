"""clusterforge.configure: ansible-runner wrapper (progress, check/diff/limit/tags, no secrets left)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterforge.configure import (
    INVENTORY_PLUGINS_WITHOUT_EC2,
    ConfigureError,
    ProgressEvent,
    TextProgress,
    _events_to_progress,
    configure,
    inventory_env,
    scrub_artifacts,
)

ROOT = Path(__file__).resolve().parents[1]


def test_scrub_finds_secret_values(tmp_path: Path) -> None:
    (tmp_path / "job_events").mkdir()
    (tmp_path / "job_events" / "1.json").write_text('{"res": "StoragePass=hunter2-xyz"}')
    (tmp_path / "command").write_text("ansible-playbook -e @/tmp/x/secrets.yml")
    assert scrub_artifacts(tmp_path, ["hunter2-xyz", ""]) == [tmp_path / "job_events" / "1.json"]
    assert scrub_artifacts(tmp_path, []) == []


def test_progress_lines_from_runner_events() -> None:
    lines: list[str] = []
    handler = _events_to_progress(TextProgress(lines.append))
    for ev in (
        {"event": "playbook_on_play_start", "event_data": {"play": "Slurm controller"}},
        {"event": "playbook_on_task_start", "event_data": {"task": "Install the rendered files"}},
        {"event": "runner_on_ok", "event_data": {"host": "ctl", "res": {"changed": True}}},
        {"event": "runner_on_ok", "event_data": {"host": "gpu-001", "res": {"changed": False}}},
        {"event": "runner_on_failed", "event_data": {"host": "gpu-002", "res": {"msg": "boom"}}},
        {"event": "runner_on_failed", "event_data": {"host": "gpu-002", "ignore_errors": True, "res": {"msg": "x"}}},
    ):
        assert handler(ev) is True
    assert lines == [
        "== Slurm controller",
        "  [  1] ctl: changed Install the rendered files",
        "  [  1] gpu-002: failed Install the rendered files: boom",
    ]


def _local_with_accounting(tmp_path: Path) -> Path:
    """The 6-host local example: slurmdbd on its controller, so its render needs the slurmdbd secret."""
    spec = ROOT / "examples" / "local.yaml"
    assert "accounting: {enabled: true" in spec.read_text()
    return spec


def test_unknown_playbook_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("ansible_runner")
    with pytest.raises(ConfigureError, match="no playbook"):
        configure(ROOT / "examples" / "local.yaml", playbook="nope.yml", inventory_dir=tmp_path / "inv")


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
def test_validate_through_ansible_runner_leaves_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ansible-runner run (validate.yml runs on the Ansible host only): the secret handed in
    reaches the play (its check passes) but no artifact holds it, and the temp folder is gone."""
    pytest.importorskip("ansible_runner")
    secret = "cf-unit-Secret-51b2"
    events: list[ProgressEvent] = []
    # the run's private folder goes where CLUSTERFORGE_RUNNER_TMP says (clusterforge/configure/workdir.py)
    runner_tmp = tmp_path / "runner-tmp"
    runner_tmp.mkdir()
    seen_during_run: set[str] = set()

    def progress(e: ProgressEvent) -> None:
        seen_during_run.update(p.name for p in runner_tmp.iterdir())
        events.append(e)

    monkeypatch.setenv("CLUSTERFORGE_RUNNER_TMP", str(runner_tmp))
    res = configure(
        _local_with_accounting(tmp_path),
        playbook="validate.yml",
        inventory_dir=tmp_path / "inv",
        secrets={"slurmdbd_storage_pass": secret},
        keep_artifacts=tmp_path / "artifacts",
        progress=progress,
        check=True,
        diff=True,
    )
    assert res.ok, res.failures
    assert res.stats["localhost"].get("failed", 0) == 0
    assert res.changed == 0
    assert any(e.kind == "task" and "secrets" in e.name for e in events)
    files = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    assert files, "artifacts were kept"
    for f in files:
        assert secret.encode() not in f.read_bytes(), f
    assert not any(p.name in ("env", "envvars", "extravars", "passwords", "stdout", "fact_cache") for p in (tmp_path / "artifacts").rglob("*"))
    assert (tmp_path / "inv" / "hosts.yml").is_file()
    assert [n for n in seen_during_run if n.startswith("clusterforge-configure-")], seen_during_run
    assert list(runner_tmp.iterdir()) == []


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
def test_missing_secret_fails_validation(tmp_path: Path) -> None:
    pytest.importorskip("ansible_runner")
    res = configure(_local_with_accounting(tmp_path), playbook="validate.yml", inventory_dir=tmp_path / "inv")
    assert not res.ok
    assert any("slurmdbd_storage_pass" in f and "Vault" in f for f in res.failures), res.failures


def test_the_inventory_plugins_are_ansible_cfgs_without_aws_ec2() -> None:
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    enabled = [p.strip() for p in cfg["inventory"]["enable_plugins"].split(",")]
    assert "amazon.aws.aws_ec2" in enabled
    assert INVENTORY_PLUGINS_WITHOUT_EC2.split(",") == [p for p in enabled if p != "amazon.aws.aws_ec2"]


@pytest.mark.skipif(shutil.which("ansible-inventory") is None, reason="ansible-core is not installed")
def test_a_run_without_an_aws_ec2_config_does_not_load_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_INVENTORY_ENABLED", raising=False)
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "onprem-example", inv)
    env = inventory_env([inv])
    assert env == {"ANSIBLE_INVENTORY_ENABLED": "ansible.builtin.yaml,ansible.builtin.ini"}
    # the generated inventory still reads in full with those plugins
    p = subprocess.run(["ansible-inventory", "-i", str(inv), "--list"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, check=False,
                       env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), **env})
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["dgx_pod_dgx"]["hosts"]) == 32
    # an aws_ec2 config, in the folder or given as a file, keeps ansible.cfg's plugins
    (inv / "aws_ec2.yml").write_text("plugin: amazon.aws.aws_ec2\n")
    assert inventory_env([inv]) == {}
    assert inventory_env([tmp_path / "none", inv / "aws_ec2.yml"]) == {}
    assert inventory_env([inv / "hosts.yml"]) == env
    # the user's own choice of plugins is theirs
    monkeypatch.setenv("ANSIBLE_INVENTORY_ENABLED", "ansible.builtin.yaml,community.general.proxmox")
    assert inventory_env([inv / "hosts.yml"]) == {}
