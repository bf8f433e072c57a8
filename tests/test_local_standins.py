"""The local layer's stand-in hardware, without a cluster: the stand-in file, AMD GPUs from the
spec, and the role variables it writes (each one a variable the roles declare)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterforge.local import standin_hw
from clusterforge.local.layout import LocalError, plan_layout

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "local-roles.yaml"


def test_the_example_stand_in_file_gives_cpu_001_efa_and_one_disk() -> None:
    assert standin_hw.sidecar(SPEC) == ROOT / "examples" / "standins" / "local-roles.yaml"
    got = standin_hw.read_standins(SPEC, ["ctl", "mi-01", "cpu-01"])
    assert got == {"cpu-01": standin_hw.HostStandins(efa=True, nvme_disks=1, nvme_mount="/scratch")}


def test_a_spec_without_a_stand_in_file_has_none() -> None:
    assert standin_hw.read_standins(ROOT / "examples" / "local.yaml", ["ctl"]) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hosts: {nope: {efa: true}}", r"hosts\.nope: no such host in the spec \(hosts: a, b\)"),
        ("hosts: {a: {gpus: 2}}", r"hosts\.a: give only efa \(bool\), nvme_disks"),
        ("hosts: {a: {nvme_disks: 1}}", r"hosts\.a\.nvme_mount: None: nvme_disks needs an absolute mount point"),
        ("hosts: {a: {nvme_disks: 9, nvme_mount: /s}}", r"hosts\.a\.nvme_disks: 9 is not 0-4"),
        ("nodes: {}", r"expected one key 'hosts'"),
    ],
)
def test_a_bad_stand_in_file_is_refused_with_the_key(tmp_path: Path, text: str, message: str) -> None:
    spec = tmp_path / "s.yaml"
    (tmp_path / "standins").mkdir()
    (tmp_path / "standins" / "s.yaml").write_text(text)
    with pytest.raises(LocalError, match=message):
        standin_hw.read_standins(spec, ["a", "b"])


def test_amd_gpus_come_from_the_profile_and_nodes_sh_fakes_no_nvidia_devices_for_them() -> None:
    assert standin_hw.amd_gpus(SPEC) == {"mi-01": 8}  # mi300x-8gpu
    lay = plan_layout(SPEC, "10.87.9.0/24")
    assert {n.name: n.gpus for n in lay.nodes} == {"ctl": 0, "mi-01": 0, "cpu-01": 0}


def test_every_role_variable_is_one_a_role_declares() -> None:
    declared: dict[str, set[str]] = {}
    for spec in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        opts = yaml.safe_load(spec.read_text())["argument_specs"]["main"]["options"]
        declared[spec.parts[-3]] = set(opts)
    v = standin_hw.role_vars("10.87.9")
    for name in v:
        role = name.split("_", 1)[0]
        assert name in declared[role], f"{name} is not an option of roles/{role}"
    assert v["efa_installer_checksum"] == "sha256:http://10.87.9.1:8081/efa/SHA256SUMS"
    assert v["efa_installer_args"] == ["-y", "--skip-kmod", "--no-verify"]
    assert v["rocm_repo_url"] == "http://10.87.9.1:8081/rocm/apt/{{ clusterforge_gpu_stack.rocm }}"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("losetup") is None, reason="needs root and losetup")
def test_detach_finds_a_loop_device_the_record_missed(tmp_path: Path) -> None:
    """`up` killed between `losetup` and writing the device into standins/loops: `down`'s detach
    still finds it by its file (under the state folder) and detaches it; one of someone else's
    stays attached."""
    state = tmp_path / "state"
    (state / "standins").mkdir(parents=True)
    mine, theirs = state / "standins" / "cpu-01-nvme0.img", tmp_path / "theirs.img"
    for img in (mine, theirs):
        with open(img, "wb") as fh:
            fh.truncate(1 << 20)
    devs = [subprocess.run(["losetup", "--find", "--show", str(img)], capture_output=True, text=True, check=True,
                           timeout=60).stdout.strip() for img in (mine, theirs)]
    try:
        assert standin_hw.detach(state) == [f"loop device: {devs[0]}"]
        listed = subprocess.run(["losetup", "--list", "--noheadings", "--raw", "--output", "NAME,BACK-FILE"],
                                capture_output=True, text=True, check=True, timeout=60).stdout
        assert f"{devs[0]} {mine}" not in listed
        assert f"{devs[1]} {theirs}" in listed
        assert not mine.exists()
    finally:
        for d in devs:
            subprocess.run(["losetup", "--detach", d], capture_output=True, check=False, timeout=60)
