"""End to end: the efa, infiniband, rocm and storage roles run on local hosts, twice.

``examples/local-roles.yaml`` (a controller, an AMD MI300X node on RoCE, a CPU node that
``standins/local-roles.yaml`` gives an EFA interface and an NVMe disk) comes up on a /24 of its
own; ``playbooks/site.yml`` runs once for real and once more, when it must change nothing. In
between each host is asked what the roles really did: packages from the stand-in ROCm repository
(pinned), Debian's rdma-core, the stand-in EFA installer's packages and bookkeeping, the loop
device formatted and mounted, and the tools' exit codes on hosts without the hardware. The module
fixture tears the cluster down (loop devices included) even when a step fails.

Lint only (this kernel has no such modules or devices), and so not asserted here: loading RDMA
modules and the HCA check, the EFA device check, NFS/Lustre mounts and md RAID0 of several disks.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterforge.configure import TextProgress
from clusterforge.local import LocalCluster, missing_prerequisites

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "local-roles.yaml"
#: its own network, not the demo's (10.79), test_local_cluster's (10.81) or the AWS flavour's
NET = os.environ.get("CLUSTERFORGE_ROLES_TEST_NET", "10.87.0.0/24")
NODES = ["ctl", "mi-01", "cpu-01"]
ROCM_VERSION = "6.3.0.60300-39~22.04"  # the stand-in repository's, in AMD's version scheme

pytestmark = [pytest.mark.local]
_why = missing_prerequisites()
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))


class Runs:
    first: Any
    second: Any
    first_lines: list[str]
    second_lines: list[str]
    seconds: dict[str, float]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Runs]]:
    lc = LocalCluster(tmp_path_factory.mktemp("roles") / "state")
    r = Runs()
    r.first_lines, r.second_lines = [], []
    t0 = time.monotonic()
    try:
        up = lc.up(SPEC, net=NET, configure=False)
        r.seconds = dict(up.seconds)
        r.first = lc.configure(progress=TextProgress(r.first_lines.append))
        r.second = lc.configure(progress=TextProgress(r.second_lines.append))
        r.seconds.update(first=r.first.duration_s, second=r.second.duration_s, total=time.monotonic() - t0)
        print(f"\nlocal-roles: {', '.join(f'{k}={v:.0f}s' for k, v in r.seconds.items())}")
        yield lc, r
    finally:
        lc.down()


def run(lc: LocalCluster, node: str, script: str) -> subprocess.CompletedProcess[str]:
    return lc.on(node, f"timeout 60 bash -c {shlex.quote(script)}", timeout=75)


def sh(lc: LocalCluster, node: str, script: str) -> str:
    p = run(lc, node, script)
    assert p.returncode == 0, f"{node}: {script}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def installed(lc: LocalCluster, node: str, pkg: str) -> str | None:
    """The installed version of ``pkg`` on ``node``, or None."""
    p = run(lc, node, f"dpkg-query -W -f '${{Status}} ${{Version}}' {pkg}")
    m = re.fullmatch(r"(?:install|hold) ok installed (\S+)", p.stdout.strip())  # held: the roles hold some
    return m.group(1) if p.returncode == 0 and m else None


# ----------------------------------------------------------------------------- the runs


def test_first_run_succeeds_on_every_host(cluster: tuple[LocalCluster, Runs]) -> None:
    _, r = cluster
    assert r.first.ok, "\n".join(r.first.failures + r.first_lines[-40:])
    assert set(r.first.stats) - {"localhost"} == set(NODES)
    assert r.first.changed > 0


def test_second_run_changes_nothing_on_any_host(cluster: tuple[LocalCluster, Runs]) -> None:
    _, r = cluster
    assert r.second.ok, "\n".join(r.second.failures + r.second_lines[-40:])
    per_host = {h: s.get("changed", 0) for h, s in r.second.stats.items() if h != "localhost"}
    assert per_host == {h: 0 for h in NODES}, "\n".join(ln for ln in r.second_lines if ": changed " in ln)


# --------------------------------------------------------------------------------- rocm


def test_rocm_comes_from_the_pinned_amd_repository(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    for pkg in ("rocm", "rocm-hip-runtime", "rocm-smi-lib", "rccl", "rocm-core", "amdgpu-dkms"):
        assert installed(lc, "mi-01", pkg), f"{pkg} is not installed on mi-01"
    assert installed(lc, "mi-01", "rocm") == ROCM_VERSION
    assert installed(lc, "mi-01", "amdgpu-dkms") == "1:6.10.5.60300-2084815.22.04"
    src = sh(lc, "mi-01", "cat /etc/apt/sources.list.d/clusterforge-rocm.list")
    assert "signed-by=/etc/apt/keyrings/clusterforge-rocm.asc] http://" in src and " jammy main" in src
    # AMD's rocm-pin-600: the installed version's source has priority 600 (Origin repo.radeon.com)
    policy = sh(lc, "mi-01", "apt-cache policy rocm")
    assert re.search(rf"\*\*\* {re.escape(ROCM_VERSION)} 600\n\s+600 http://\S+/rocm/apt/6.3 jammy/main", policy), policy
    # the nccl role installs RCCL for AMD and holds it
    assert "rccl" in sh(lc, "mi-01", "apt-mark showhold").split()
    # the stand-in rocm-smi sees the device files the local layer made: 8 GPUs
    smi = sh(lc, "mi-01", "/opt/rocm-6.3.0/bin/rocm-smi")
    assert len(re.findall(r"^GPU\[\d\]", smi, re.M)) == 8
    assert sh(lc, "mi-01", "stat -c '%t:%T' /dev/dri/renderD128 /dev/dri/renderD135").split() == ["e2:80", "e2:87"]


def test_slurm_registers_the_amd_gpus(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    out = sh(lc, "ctl", "scontrol show node mi-01 --oneliner")
    assert re.search(r"Gres=gpu:mi300x:8\b", out), out
    gres = sh(lc, "mi-01", "cat /etc/slurm/gres.conf")
    assert "/dev/dri/renderD" in gres


# --------------------------------------------------------------------------- infiniband


def test_infiniband_userspace_is_debians_rdma_core(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    for pkg in ("rdma-core", "ibverbs-utils", "infiniband-diags", "ibverbs-providers", "perftest"):
        assert installed(lc, "mi-01", pkg) is not None, f"{pkg} is not installed on mi-01"
    assert installed(lc, "mi-01", "rdma-core") == "44.0-2"  # bookworm's
    mods = sh(lc, "mi-01", "grep -v '^#' /etc/modules-load.d/clusterforge-rdma.conf").split()
    assert mods == ["ib_ipoib", "ib_umad", "rdma_ucm"]


def test_rdma_tools_without_hardware(cluster: tuple[LocalCluster, Runs]) -> None:
    """What rdma-core 44's tools do on a host without ib_uverbs or a device (what the role's device
    checks, off here, would meet): ibv_devinfo fails with 255, ibstat lists nothing and exits 0."""
    lc, _ = cluster
    for argv in ("ibv_devinfo", "ibv_devinfo -l"):
        p = run(lc, "mi-01", argv)
        assert p.returncode == 255, (argv, p.returncode, p.stdout, p.stderr)
        assert "Failed to get IB devices list: Function not implemented" in p.stderr, (argv, p.stderr)
    p = run(lc, "mi-01", "ibstat")
    assert (p.returncode, p.stdout) == (0, ""), (p.returncode, p.stdout, p.stderr)


# --------------------------------------------------------------------------------- efa


def test_efa_installer_was_downloaded_verified_and_run(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    marker = sh(lc, "cpu-01", "cat /opt/amazon/efa_installed_packages")
    assert marker.startswith("# EFA installer version: 1.40.0\n")
    # the tarball the role fetched is the one the SHA256SUMS next to it names
    got = sh(lc, "cpu-01", "sha256sum /var/cache/clusterforge/efa-1.40.0/installer.tar.gz").split()[0]
    want = sh(lc, "cpu-01", "curl -sf http://$(ip route | awk '/default/ {print $3}'):8081/efa/SHA256SUMS").split()[0]
    assert got == want
    for pkg in ("libfabric-aws", "openmpi40-aws", "efa-config", "efa-profile", "aws-ofi-nccl", "ibverbs-utils"):
        assert installed(lc, "cpu-01", pkg) is not None, f"{pkg} is not installed on cpu-01"
    assert installed(lc, "cpu-01", "efa") is None  # --skip-kmod: no kernel module package
    assert "memlock unlimited" in sh(lc, "cpu-01", "cat /etc/security/limits.d/efa.conf")
    assert sh(lc, "cpu-01", "cat /etc/ld.so.conf.d/clusterforge-aws-ofi-nccl.conf").splitlines()[-1] == (
        "/opt/amazon/ofi-nccl/lib"
    )
    sh(lc, "cpu-01", "test -f /opt/amazon/ofi-nccl/lib/libnccl-net.so")
    # no EFA device here: the provider finds none (the check the role skips with efa_expect_devices)
    p = run(lc, "cpu-01", "/opt/amazon/efa/bin/fi_info -p efa")
    assert p.returncode == 1 and "fi_getinfo: -61" in p.stderr, (p.returncode, p.stderr)
    # only the EFA host ran it
    assert run(lc, "mi-01", "test -e /opt/amazon/efa_installed_packages").returncode == 1


def test_efa_installer_refuses_what_the_real_one_refuses(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    d = "cd /var/cache/clusterforge/efa-1.40.0/aws-efa-installer && "
    p = run(lc, "cpu-01", d + "./efa_installer.sh -y --bogus")
    assert p.returncode == 1 and "unknown option --bogus" in p.stderr
    assert "--skip-limit-conf" in sh(lc, "cpu-01", d + "./efa_installer.sh --help")
    # without --no-verify it looks for an EFA device, and there is none
    p = run(lc, "cpu-01", d + "./efa_installer.sh -y --skip-kmod")
    assert p.returncode == 1 and "no EFA device found" in p.stderr


# ------------------------------------------------------------------------------ storage


def test_nvme_stand_in_is_formatted_and_mounted(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    fstype, source = sh(lc, "cpu-01", "findmnt -n -o FSTYPE,SOURCE /scratch").split()
    assert fstype == "xfs" and re.fullmatch(r"/dev/loop\d+", source), (fstype, source)
    assert sh(lc, "cpu-01", "blkid -o value -s TYPE " + source).strip() == "xfs"
    assert sh(lc, "cpu-01", "stat -c %a /scratch").strip() == "1777"
    fstab = sh(lc, "cpu-01", "cat /etc/fstab")
    assert re.search(rf"^{source} /scratch xfs defaults,noatime,nofail 0 0$", fstab, re.M), fstab
    # one disk: no md array, no mdadm
    assert installed(lc, "cpu-01", "mdadm") is None
    # the loop device is the one the local layer recorded for this cluster
    assert source in (lc.state / "standins" / "loops").read_text().split()


def test_hosts_without_stand_ins_get_no_scratch(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    assert run(lc, "mi-01", "findmnt /scratch").returncode == 1
