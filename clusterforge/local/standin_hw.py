"""Stand-in hardware for local nodes: what the efa, rocm, infiniband and storage roles need to run.

Made after the nodes boot and before Ansible runs (``attach``), removed by ``down`` (``detach``):

* AMD GPUs, from the spec (a node group whose profile has AMD GPUs): ``/dev/kfd`` and, per GPU,
  ``/dev/dri/cardN`` + ``/dev/dri/renderD(128+N)`` (DRM's major 226), the device files the
  rendered gres.conf names; no driver stands behind them, as none stands behind ``/dev/nvidiaN``.
* What an on-prem spec cannot say, from ``standins/<spec file name>`` beside the spec (for
  ``examples/local-roles.yaml``: ``examples/standins/local-roles.yaml``; a folder of its own, so
  that nothing mistakes it for a spec): EFA and
  instance-store NVMe exist only on EC2 (the spec keeps them under ``cloud:``), so a host listed
  there with ``efa: true`` joins ``fabric_efa`` (the efa role runs the stand-in installer), and
  one with ``nvme_disks: N`` gets N file-backed loop devices of ``NVME_MIB`` each, passed into
  the node as ``/dev/loopK`` and given to the storage role (``storage_nvme_devices``) with the
  mount point ``nvme_mount`` (``clusterforge_local_nvme_raid0``).
* Ansible variables for the roles (``role_vars``): the stand-in repositories, and the checks that
  need hardware or kernel modules this machine cannot give a node (``*_expect_devices: false``,
  ``storage_network_filesystems: false``), each stated in the layout's overrides.

Everything made is recorded in ``STATE/standins/`` and ``detach`` removes exactly that.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clusterforge import proc
from clusterforge.local.layout import REPO_PORT, LocalError, LocalLayout

#: mkfs.xfs refuses file systems under 300 MB (xfsprogs 5.19 and later); sparse, so cheap
NVME_MIB = 512
SIDECAR_DIR = "standins"
#: /dev/kfd's major is allocated when amdgpu loads; any number stands in (nothing opens it here)
KFD_MAJOR = 511
DRM_MAJOR = 226


@dataclass(frozen=True)
class HostStandins:
    efa: bool = False
    nvme_disks: int = 0
    nvme_mount: str | None = None


def sidecar(spec_path: Path) -> Path:
    return spec_path.parent / SIDECAR_DIR / spec_path.name


def read_standins(spec_path: Path, hosts: list[str]) -> dict[str, HostStandins]:
    """The stand-in hardware file next to the spec (none: {}); errors name the key and the fix."""
    f = sidecar(spec_path)
    if not f.is_file():
        return {}
    data = yaml.safe_load(f.read_text()) or {}
    raw = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(raw, dict) or set(data) - {"hosts"}:
        raise LocalError(f"{f}: expected one key 'hosts' mapping host names to {{efa, nvme_disks, nvme_mount}}")
    out: dict[str, HostStandins] = {}
    for host, v in raw.items():
        where = f"{f}: hosts.{host}"
        if host not in hosts:
            raise LocalError(f"{where}: no such host in the spec (hosts: {', '.join(hosts)})")
        if not isinstance(v, dict) or set(v) - {"efa", "nvme_disks", "nvme_mount"}:
            raise LocalError(f"{where}: give only efa (bool), nvme_disks (0-4) and nvme_mount (an absolute path)")
        hs = HostStandins(bool(v.get("efa", False)), v.get("nvme_disks", 0), v.get("nvme_mount"))
        if not isinstance(hs.nvme_disks, int) or not 0 <= hs.nvme_disks <= 4:
            raise LocalError(f"{where}.nvme_disks: {hs.nvme_disks!r} is not 0-4 (each is a {NVME_MIB} MiB loop device)")
        if hs.nvme_disks and not (isinstance(hs.nvme_mount, str) and hs.nvme_mount.startswith("/")):
            raise LocalError(f"{where}.nvme_mount: {hs.nvme_mount!r}: nvme_disks needs an absolute mount point")
        out[host] = hs
    return out


def amd_gpus(spec_path: Path) -> dict[str, int]:
    """Host -> AMD GPU count, from the spec's profiles."""
    from clusterforge import hostlist
    from clusterforge.resolve import resolve_file

    rc = resolve_file(spec_path)
    found: dict[str, int] = {}
    for g in rc.spec.node_groups:
        prof = rc.group(g.name).profile
        if g.onprem is not None and prof is not None and prof.gpu is not None and prof.gpu.vendor == "amd":
            found.update({h: prof.gpu.count for h in hostlist.expand(g.onprem.hosts)})
    return found


def role_vars(net: str) -> dict[str, Any]:
    """Ansible variables of the efa, rocm, infiniband and storage roles on local nodes."""
    repo = f"http://{net}.1:{REPO_PORT}"
    return {
        # vendor repositories: stand-ins on the bridge (clusterforge/local/standin-*.sh)
        "rocm_repo_url": f"{repo}/rocm/apt/{{{{ clusterforge_gpu_stack.rocm }}}}",
        "rocm_amdgpu_repo_url": f"{repo}/amdgpu/{{{{ clusterforge_gpu_stack.rocm }}}}/ubuntu",
        "rocm_repo_key_url": f"{repo}/rocm/rocm.gpg.key",
        "efa_installer_url": f"{repo}/efa/aws-efa-installer-{{{{ clusterforge_gpu_stack.efa_installer }}}}.tar.gz",
        "efa_installer_checksum": f"sha256:{repo}/efa/SHA256SUMS",
        # a node shares this machine's kernel: no efa module to build, no EFA device to test
        # (the flags AWS gives for containers, less --skip-limit-conf: limits.d is the node's own)
        "efa_installer_args": ["-y", "--skip-kmod", "--no-verify"],
        "efa_expect_devices": False,
        # no RDMA hardware or ib_* modules here: packages and boot configuration only
        "infiniband_expect_devices": False,
        # no NFS or Lustre client in this kernel
        "storage_network_filesystems": False,
    }


ROLE_VARS_NOTE = (
    "Ansible: efa/infiniband device checks off (efa_expect_devices, infiniband_expect_devices=false), efa installer "
    "-y --skip-kmod --no-verify, NFS/Lustre not mounted (storage_network_filesystems=false): this kernel has no "
    "EFA/RDMA devices or modules and no NFS/Lustre client; ROCm and EFA from stand-ins on the bridge"
)


def _run(argv: list[str], what: str) -> str:
    p = proc.run(argv, timeout=60)
    if p.returncode != 0:
        raise LocalError(f"stand-in hardware: {what} failed (rc={p.returncode}): {p.stderr.strip()[-500:]}")
    return p.stdout.strip()


def attach(
    state: Path, layout: LocalLayout, spec_path: Path, on_node: Callable[[str, str], subprocess.CompletedProcess[str]]
) -> list[str]:
    """Make the nodes' stand-in hardware and the inventory that points the roles at it.

    ``on_node(name, script)`` runs a shell script in a node (``LocalCluster.on``). Returns the
    override lines to show the user."""
    d = state / "standins"
    d.mkdir(exist_ok=True)
    notes = [ROLE_VARS_NOTE]
    for host, n in sorted(amd_gpus(spec_path).items()):
        script = f"set -e; mkdir -p /dev/dri; mknod -m 666 /dev/kfd c {KFD_MAJOR} 0\n" + "".join(
            f"mknod -m 666 /dev/dri/card{i} c {DRM_MAJOR} {i}; mknod -m 666 /dev/dri/renderD{128 + i} c {DRM_MAJOR} "
            f"{128 + i}\n"
            for i in range(n)
        )
        p = on_node(host, script)
        if p.returncode != 0:
            raise LocalError(f"stand-in hardware: AMD device files on {host} failed: {p.stderr.strip()[-500:]}")
        notes.append(f"{host}: {n} AMD GPUs as /dev/kfd + /dev/dri/renderD{128}..{127 + n} (no driver behind them)")
    hosts: dict[str, dict[str, Any]] = {}
    efa: list[str] = []
    for host, hs in read_standins(spec_path, layout.names).items():
        if hs.efa:
            efa.append(host)
            notes.append(f"{host}: joins fabric_efa ({SIDECAR_DIR}/{spec_path.name}; EFA exists only on EC2)")
        devs: list[str] = []
        for k in range(hs.nvme_disks):
            img = d / f"{host}-nvme{k}.img"
            with open(img, "wb") as fh:
                fh.truncate(NVME_MIB << 20)
            dev = _run(["losetup", "--find", "--show", str(img)], f"losetup {img}")
            with open(d / "loops", "a") as fh:  # recorded before anything else can fail
                fh.write(dev + "\n")
            rdev = os.stat(dev).st_rdev
            p = on_node(host, f"mknod -m 660 {dev} b {os.major(rdev)} {os.minor(rdev)}")
            if p.returncode != 0:
                raise LocalError(f"stand-in hardware: {dev} into {host} failed: {p.stderr.strip()[-500:]}")
            devs.append(dev)
        if devs:
            hosts[host] = {"clusterforge_local_nvme_raid0": hs.nvme_mount, "storage_nvme_devices": devs}
            notes.append(f"{host}: NVMe stand-in {', '.join(devs)} ({NVME_MIB} MiB loop each) for {hs.nvme_mount}")
    inv = state / "inventory-local"
    (inv / "host_vars").mkdir(parents=True, exist_ok=True)
    for host, hv in hosts.items():
        (inv / "host_vars" / f"{host}.yml").write_text(
            "# Stand-in hardware (clusterforge/local/standin_hw.py).\n" + yaml.safe_dump(hv, sort_keys=False)
        )
    tree: dict[str, Any] = {"all": {"vars": role_vars(layout.net)}}
    if efa:
        tree["all"]["children"] = {"fabric_efa": {"hosts": {h: {} for h in efa}}}
    (inv / "standins.yml").write_text(
        "# Local mode's role variables and stand-in groups (clusterforge/local/standin_hw.py).\n"
        + yaml.safe_dump(tree, sort_keys=False, explicit_start=True, width=200)
    )
    return notes


def detach(state: Path) -> list[str]:
    """Detach the loop devices ``attach`` recorded and delete their files; safe to run twice."""
    f = state / "standins" / "loops"
    removed: list[str] = []
    recorded = [ln.strip() for ln in f.read_text().split() if ln.strip()] if f.is_file() else []
    # and every loop device whose file is one of ours: a run killed between `losetup` and its
    # record leaves one attached that the record does not name
    listed = proc.run(["losetup", "--list", "--noheadings", "--raw", "--output", "NAME,BACK-FILE"], timeout=60)
    ours = [ln.split(" ", 1)[0] for ln in listed.stdout.splitlines()
            if " " in ln and ln.split(" ", 1)[1].startswith(f"{state / 'standins'}/")]
    for dev in dict.fromkeys(recorded + ours):
        # only while it is still ours: a number detached since may be someone else's now
        back = proc.run(["losetup", "--noheadings", "--output", "BACK-FILE", "--list", dev], timeout=60)
        if str(state / "standins") not in back.stdout:
            continue
        p = proc.run(["losetup", "--detach", dev], timeout=60)
        if p.returncode == 0:
            removed.append(f"loop device: {dev}")
    f.unlink(missing_ok=True)
    for img in sorted((state / "standins").glob("*.img")) if (state / "standins").is_dir() else []:
        img.unlink()
    return removed
