"""The typed manifest of the hand-made fixture tests/fixtures/check/good (every value by hand),
and the session fixture that makes sure a release family's daemons are here (``release_daemons``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clusterforge.check import family_for
from clusterforge.render.manifest import (
    ConfigRecords,
    Expect,
    ExpectController,
    ExpectNode,
    ExpectPartition,
    ExpectTopology,
    GresRecord,
    Manifest,
    ManifestFile,
    NodeRecord,
    SlurmLayout,
    SwitchRecord,
)
from clusterforge.render.restart import on_change_for

GOOD = Path(__file__).parent / "fixtures" / "check" / "good"
_DAEMONS = {
    "slurm/cgroup.conf": ("slurmd",),
    "slurm/gres.conf": ("slurmctld", "slurmd"),
    "slurm/slurm.conf": ("slurmctld", "slurmd"),
    "slurm/topology.conf": ("slurmctld",),
}
_GPU = {
    "NodeAddr": "10.10.1.[1-4]", "CPUs": "224", "Boards": "1", "SocketsPerBoard": "2", "CoresPerSocket": "56",
    "ThreadsPerCore": "2", "RealMemory": "2040000", "Gres": "gpu:h100:8", "Features": "h100,ib-ndr",
    "Weight": "10", "State": "UNKNOWN",
}
_CPU = {
    "NodeAddr": "10.10.2.[1-2]", "CPUs": "192", "Boards": "1", "SocketsPerBoard": "2", "CoresPerSocket": "48",
    "ThreadsPerCore": "2", "RealMemory": "384000", "Features": "cpu", "Weight": "100", "State": "UNKNOWN",
}
_GLOBALS = {
    "ClusterName": "dgx-pod", "SlurmctldHost": "head-01(10.10.0.10)", "SlurmUser": "slurm",
    "AuthType": "auth/munge", "CredType": "cred/munge", "SlurmctldPort": "6817", "SlurmdPort": "6818",
    "StateSaveLocation": "/var/spool/slurmctld", "SlurmdSpoolDir": "/var/spool/slurmd",
    "SlurmctldPidFile": "/run/slurmctld.pid", "SlurmdPidFile": "/run/slurmd.pid",
    "SlurmctldLogFile": "/var/log/slurm/slurmctld.log", "SlurmdLogFile": "/var/log/slurm/slurmd.log",
    "ProctrackType": "proctrack/cgroup", "TaskPlugin": "task/cgroup,task/affinity",
    "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core_Memory", "MaxNodeCount": "6",
    "GresTypes": "gpu",
    "TopologyPlugin": "topology/tree", "ReturnToService": "2",
}


def _links(i: int) -> str:
    return ",".join("-1" if j == i else "18" for j in range(8))


def good_manifest(folder: Path = GOOD) -> Manifest:
    files = tuple(
        ManifestFile(
            name=name, node_path="/etc/" + name, owner="root",
            group="root", mode="0644", node_groups=("head", "gpu", "cpu"), daemons=daemons,
            sha256=hashlib.sha256((folder / name).read_bytes()).hexdigest(),
            on_change=on_change_for(name, daemons),
        )
        for name, daemons in sorted(_DAEMONS.items())
    )
    gres_lines = tuple(
        {"Name": "gpu", "Type": "h100", "File": f"/dev/nvidia{i}", "Cores": "0-55" if i < 4 else "56-111",
         "Links": _links(i)}
        for i in range(8)
    )
    switches = (
        SwitchRecord(name="leaf-a", nodes="gpu-[001-002]"),
        SwitchRecord(name="leaf-b", nodes="gpu-[003-004]"),
        SwitchRecord(name="leaf-c", nodes="cpu-[01-02]"),
        SwitchRecord(name="spine", switches="leaf-a,leaf-b,leaf-c"),
    )
    return Manifest(
        cluster="dgx-pod",
        slurm_version="22.05",
        files=files,
        slurm=SlurmLayout(
            user="slurm", state_save_location="/var/spool/slurmctld", slurmd_spool_dir="/var/spool/slurmd",
            slurmctld_log_file="/var/log/slurm/slurmctld.log", slurmd_log_file="/var/log/slurm/slurmd.log",
        ),
        config=ConfigRecords(
            slurm_globals={k: (v,) for k, v in _GLOBALS.items()},
            nodes=(
                NodeRecord(group="gpu", names="gpu-[001-004]", params=_GPU),
                NodeRecord(group="cpu", names="cpu-[01-02]", params=_CPU),
            ),
            partitions={
                "gpu": {"Nodes": "gpu-[001-004]", "Default": "YES", "MaxTime": "3-00:00:00", "State": "UP"},
                "cpu": {"Nodes": "cpu-[01-02]", "Default": "NO", "MaxTime": "1-00:00:00", "State": "UP"},
            },
            gres=(GresRecord(group="gpu", names="gpu-[001-004]", lines=gres_lines),),
            topology_plugin="topology/tree",
            switches=switches,
        ),
        expect=Expect(
            controllers=(ExpectController(name="head-01", address="10.10.0.10"),),
            nodes=(
                ExpectNode(
                    names="gpu-[001-004]", group="gpu", cpus=224, boards=1, sockets=2, cores_per_socket=56,
                    threads_per_core=2, real_memory=2040000, gres="gpu:h100:8", gpu_count=8, gpu_type="h100",
                    gpu_files="/dev/nvidia[0-7]", gpu_vendor="nvidia", features=("h100", "ib-ndr"), weight=10,
                ),
                ExpectNode(
                    names="cpu-[01-02]", group="cpu", cpus=192, boards=1, sockets=2, cores_per_socket=48,
                    threads_per_core=2, real_memory=384000, gres=None, gpu_count=0, gpu_type=None,
                    gpu_files=None, features=("cpu",), weight=100,
                ),
            ),
            partitions=(
                ExpectPartition(name="gpu", nodes="gpu-[001-004]", default=True, max_time="3-00:00:00"),
                ExpectPartition(name="cpu", nodes="cpu-[01-02]", default=False, max_time="1-00:00:00"),
            ),
            # spine first: the tests edit switches[0] (spine) and switches[1] (leaf-a) by index
            topology=ExpectTopology(plugin="topology/tree", switches=(switches[3], *switches[:3])),
        ),
        notes=("hand-made fixture for tests/test_check.py; built by tests/check_fixture.py",),
    )


# --- the release families' daemons -----------------------------------------------------------

ROOTFS_SH = Path(__file__).resolve().parents[1] / "clusterforge" / "local" / "rootfs.sh"
ROOTFS_BUILD_TIMEOUT_S = 600  # one debootstrap: ~50 s on a quiet 2-core machine


def _host_release() -> str:
    ctld = shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if ctld is None:
        return ""
    return subprocess.run([ctld, "-V"], capture_output=True, text=True, timeout=10).stdout.strip()


@pytest.fixture(scope="session")
def release_daemons() -> Callable[[str], None]:
    """``ensure(target)``: the daemons of the target's release family are here, either the host's
    own (Debian 12's 22.05) or the family's root filesystem in the cache (CLUSTERFORGE_CACHE or
    /var/cache/clusterforge), built by rootfs.sh the first time a run needs it (~50 s, ~190 MB)
    and kept across runs."""
    host = _host_release()
    done: set[str] = set()

    def ensure(target: str) -> None:
        family = family_for(target)
        assert family is not None, f"no release family for {target}"
        if family.suite in done or family_for(host) == family:
            return
        cache = os.environ.get("CLUSTERFORGE_CACHE") or "/var/cache/clusterforge"
        t0 = time.monotonic()
        cp = subprocess.run(
            [str(ROOTFS_SH), cache, family.suite, "slurm"], capture_output=True, text=True,
            timeout=ROOTFS_BUILD_TIMEOUT_S,
        )
        assert cp.returncode == 0, f"rootfs.sh {family.suite} slurm failed: {cp.stderr[-2000:]}"
        print(f"rootfs {cp.stdout.strip()} ready in {time.monotonic() - t0:.1f} s")
        done.add(family.suite)

    return ensure
