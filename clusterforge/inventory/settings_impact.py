"""What a change of one inventory variable does to the hosts: the roles that re-run, where, and
whether the hosts need a service restart, a reinstall, a remount, a reformat or a reboot, and a
drain first. The one table beside the inventory's variable contract (``generate.py`` writes the
variables, ``roles/*/meta/argument_specs.yml`` and ``roles/*/tasks`` read them).

``clusterforge diff`` flattens both sides' inventory variables to key paths
(``clusterforge_gpu_stack.driver_branch``, ``clusterforge_storage[scratch].mount``) and looks each
changed path up with :func:`rule_for`. A path the table does not know is never "no change": it
re-runs every role that reads its top-level variable (:data:`READERS`), drained first.

Sources cited by the rules:

* the roles themselves (``roles/<role>/tasks``): what a task does when its input changes;
* ``playbooks/site.yml``: which inventory groups each role runs on (:data:`ROLE_GROUPS`);
* NVIDIA Driver Installation Guide <https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/>:
  a new driver's kernel modules replace the loaded ones only after a reboot (or unloading them,
  which needs every GPU process gone);
* AWS, "Install the EFA software in a container"
  <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-installer-containers.html>: the installer
  installs the EFA kernel module unless ``--skip-kmod``; aws/aws-cdi-sdk INSTALL_GUIDE_LINUX.md:
  "install the latest EFA driver and REBOOT the system";
* ROCm installation (amdgpu-dkms) <https://rocm.docs.amd.com/projects/install-on-linux/en/latest/>:
  a new amdgpu kernel driver needs a reboot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class HostAction(StrEnum):
    """Ordered from harmless to disruptive (``HOST_SEVERITY``)."""

    NONE = "none"
    RESTART_SERVICE = "restart-service"
    REINSTALL = "reinstall"
    REMOUNT = "remount"
    REBOOT = "reboot"
    REFORMAT = "reformat"  # a file system is made anew: its data is lost


HOST_SEVERITY = {a: i for i, a in enumerate(HostAction)}

#: Role -> the inventory groups its play targets (playbooks/site.yml).
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "common": ("all",),
    "nvidia_driver": ("gpu_nvidia",),
    "cuda": ("gpu_nvidia",),
    "rocm": ("gpu_amd",),
    "efa": ("fabric_efa",),
    "infiniband": ("fabric_infiniband",),
    "storage": ("all",),
    "nccl": ("gpu_nvidia", "gpu_amd"),
    "munge": ("slurm_controller", "slurm_compute", "slurm_login"),
    "slurm": ("slurm_controller", "slurm_compute", "slurm_login"),
    "dcgm": ("gpu_nvidia",),
    "monitoring": ("all",),
}

#: Top-level variable -> the roles that read it (grep of roles/*/{tasks,vars,defaults,templates};
#: the fallback for a path the rules do not know). ``()``: no role reads it.
READERS: dict[str, tuple[str, ...]] = {
    "clusterforge_gpu_stack": ("nvidia_driver", "cuda", "rocm", "efa", "nccl", "dcgm"),
    "clusterforge_storage": ("storage",),
    "clusterforge_local_nvme_raid0": ("storage",),
    "clusterforge_monitoring": ("monitoring", "dcgm"),
    "clusterforge_accounting": ("slurm",),
    "clusterforge_rollout": ("slurm",),
    "clusterforge_slurm_version": ("slurm",),
    "clusterforge_slurm_package_repo": ("slurm",),
    "clusterforge_secret_names": ("slurm", "monitoring"),
    "clusterforge_secret_parameters": ("slurm",),
    "clusterforge_service_manager": tuple(ROLE_GROUPS),
    "clusterforge_cluster_name": ("slurm", "monitoring"),
    "clusterforge_cluster_group": ("common", "monitoring"),
    "clusterforge_node_group": ("slurm", "nccl", "monitoring"),
    "clusterforge_os": tuple(ROLE_GROUPS),
    "clusterforge_node_role": tuple(ROLE_GROUPS),
    "clusterforge_profile": tuple(ROLE_GROUPS),
    "clusterforge_location": tuple(ROLE_GROUPS),
    "clusterforge_gpu": ("nvidia_driver", "cuda", "rocm", "nccl", "dcgm"),
    "clusterforge_fabric": ("efa", "infiniband"),
}


@dataclass(frozen=True)
class SettingRule:
    """What a change of one variable path needs. ``groups``: the inventory groups it applies to
    (``None``: wherever its roles run); ``drain``: drain the Slurm nodes among those hosts first."""

    roles: tuple[str, ...]
    action: HostAction
    drain: bool
    why: str
    source: str
    groups: tuple[str, ...] | None = None


_ROLES_SRC = "roles/{}/tasks"
_NVIDIA = "NVIDIA Driver Installation Guide https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/"
_EFA = ("AWS EFA installer docs (kernel module unless --skip-kmod) "
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-installer-containers.html; aws/aws-cdi-sdk "
        "INSTALL_GUIDE_LINUX.md")
_ROCM = "ROCm install docs https://rocm.docs.amd.com/projects/install-on-linux/en/latest/; roles/rocm/tasks"
_RENDERED = "read by the renderer only: the change shows in the rendered files above (their impact applies)"

#: Variable path (``[*]`` matches one list item by name) -> rule. The longest matching path wins.
SETTINGS: dict[str, SettingRule] = {
    # ------------------------------------------------------------------ the GPU stack
    "clusterforge_gpu_stack.driver_branch": SettingRule(
        ("nvidia_driver", "cuda", "nccl", "dcgm"), HostAction.REBOOT, True,
        "the new branch's driver and fabric manager packages are installed and held; the loaded kernel "
        "modules change only with a reboot, and GPU jobs cannot run across it",
        f"{_ROLES_SRC.format('nvidia_driver')}/driver.yml; {_NVIDIA}",
    ),
    "clusterforge_gpu_stack.cuda": SettingRule(
        ("cuda", "nccl", "dcgm"), HostAction.REINSTALL, False,
        "cuda-toolkit-<version> is installed beside the old one (/usr/local/cuda-<version>), NCCL is "
        "re-pinned to +cuda<version> and DCGM follows the CUDA major; running jobs keep the old toolkit, "
        "new jobs get the new one",
        "roles/cuda/defaults/main.yml; roles/nccl/defaults/main.yml; roles/dcgm/defaults/main.yml",
    ),
    "clusterforge_gpu_stack.rocm": SettingRule(
        ("rocm", "nccl"), HostAction.REBOOT, True,
        "the ROCm repository moves to the new release and the amdgpu kernel driver is reinstalled "
        "(rocm_install_kernel_driver); the new driver loads only after a reboot",
        _ROCM,
    ),
    "clusterforge_gpu_stack.nccl": SettingRule(
        ("nccl",), HostAction.REINSTALL, False,
        "libnccl2/libnccl-dev are re-pinned to the new version and held; running jobs keep the library "
        "they loaded, new jobs load the new one",
        "roles/nccl/tasks/main.yml; roles/nccl/defaults/main.yml",
    ),
    "clusterforge_gpu_stack.aws_ofi_nccl": SettingRule(
        ("efa",), HostAction.REINSTALL, False,
        "the plugin comes with the EFA installer (the efa role checks libnccl-net.so is there); NCCL "
        "loads it when a job initialises, so new jobs get it. The renderer's NCCL settings gate on this "
        "version: see the nccl/ files",
        "roles/efa/tasks/main.yml",
    ),
    "clusterforge_gpu_stack.efa_installer": SettingRule(
        ("efa",), HostAction.REBOOT, True,
        "the installer runs again (the installed version differs) and replaces libfabric and the EFA "
        "kernel module under jobs' EFA traffic; the new module loads after a reboot",
        f"roles/efa/tasks/main.yml; {_EFA}",
    ),
    "clusterforge_gpu_stack.vendor": SettingRule(
        ("nvidia_driver", "cuda", "rocm", "nccl", "dcgm"), HostAction.REBOOT, True,
        "another GPU vendor's driver stack: a new kernel driver", f"{_NVIDIA}; {_ROCM}",
    ),
    # ------------------------------------------------------------------ storage
    "clusterforge_storage[*]": SettingRule(
        ("storage",), HostAction.REMOUNT, True,
        "a shared file system is mounted, changed or no longer managed (the role does not unmount a removed "
        "one); jobs reading the old mount fail, so drain first",
        "roles/storage/tasks/nfs.yml, lustre.yml (ansible.posix.mount state=mounted)",
    ),
    "clusterforge_storage[*].dns_name": SettingRule(
        ("storage",), HostAction.REMOUNT, True,
        "the file system is reached at another address (a new FSx/EFS): remounted", "roles/storage/tasks",
    ),
    "clusterforge_local_nvme_raid0": SettingRule(
        ("storage",), HostAction.REFORMAT, True,
        "the instance-store NVMe RAID0 scratch: switched on, the role creates the array and makes its file "
        "system (mdadm --create, mkfs: whatever the disks held is lost); moved, it is mounted at the new path "
        "and jobs using the old path lose their scratch",
        "roles/storage/tasks/nvme.yml",
    ),
    # ------------------------------------------------------------------ monitoring
    "clusterforge_monitoring.node_exporter": SettingRule(
        ("monitoring",), HostAction.RESTART_SERVICE, False,
        "node_exporter is installed/started or stopped on every host, Prometheus re-reads its targets; "
        "no job is touched", "roles/monitoring/tasks/main.yml",
    ),
    "clusterforge_monitoring.dcgm_exporter": SettingRule(
        ("dcgm", "monitoring"), HostAction.RESTART_SERVICE, False,
        "dcgm-exporter is started or stopped on the NVIDIA GPU hosts and Prometheus scrapes it or not; "
        "no job is touched", "roles/dcgm/defaults/main.yml; roles/monitoring/vars/main.yml",
        ("gpu_nvidia", "monitoring_server"),
    ),
    "clusterforge_monitoring.prometheus": SettingRule(
        ("monitoring",), HostAction.RESTART_SERVICE, False,
        "Prometheus is installed/started or stopped on the monitoring server; no job is touched",
        "roles/monitoring/tasks/main.yml", ("monitoring_server",),
    ),
    "clusterforge_monitoring.grafana": SettingRule(
        ("monitoring",), HostAction.RESTART_SERVICE, False,
        "Grafana is installed/started or stopped on the monitoring server; no job is touched",
        "roles/monitoring/tasks/main.yml", ("monitoring_server",),
    ),
    "clusterforge_monitoring.scrape_interval_s": SettingRule(
        ("monitoring",), HostAction.RESTART_SERVICE, False,
        "prometheus.yml changes and Prometheus restarts; no job is touched",
        "roles/monitoring/vars/main.yml", ("monitoring_server",),
    ),
    "clusterforge_monitoring.alertmanager": SettingRule(
        ("monitoring",), HostAction.RESTART_SERVICE, False,
        "the rendered alertmanager.yml changes (receivers, routes) and Alertmanager reloads on the monitoring "
        "server; no job is touched", "roles/monitoring/tasks/alertmanager_config.yml", ("monitoring_server",),
    ),
    # ------------------------------------------------------------------ accounting, secrets
    "clusterforge_accounting": SettingRule(
        ("slurm",), HostAction.RESTART_SERVICE, False,
        "slurmdbd (and MariaDB when it is local) is installed, set up and restarted on the controller; "
        "slurm.conf/slurmdbd.conf changes show above", "roles/slurm/tasks/mariadb.yml, daemons.yml",
        ("slurm_controller",),
    ),
    "clusterforge_rollout": SettingRule(
        ("slurm",), HostAction.NONE, False,
        "how the next configure rolls a change out (batch size, drain wait); nothing on the hosts changes",
        "playbooks/site.yml, roles/slurm/tasks/prepare.yml", ("slurm_compute",),
    ),
    "clusterforge_secret_names": SettingRule(
        ("slurm",), HostAction.RESTART_SERVICE, False, "slurmdbd's database password is read anew",
        "roles/slurm/tasks/mariadb.yml", ("slurm_controller",),
    ),
    "clusterforge_secret_parameters": SettingRule(
        ("slurm",), HostAction.RESTART_SERVICE, False, "the SSM parameters the secrets are read from",
        "roles/slurm/tasks", ("slurm_controller",),
    ),
    # ------------------------------------------------------------------ the cluster and its groups
    "clusterforge_os": SettingRule(
        tuple(ROLE_GROUPS), HostAction.REBOOT, True,
        "another operating system is a reimage: every role's packages and repositories follow it",
        "playbooks/site.yml",
    ),
    "clusterforge_service_manager": SettingRule(
        tuple(ROLE_GROUPS), HostAction.RESTART_SERVICE, True,
        "every daemon is started another way (systemd or direct): all are restarted",
        "roles/common/tasks/service.yml",
    ),
    "clusterforge_cluster_name": SettingRule(
        ("slurm", "monitoring"), HostAction.RESTART_SERVICE, False,
        "labels and ClusterName; the slurm.conf change (restart-all) shows above", "roles/slurm/tasks",
    ),
    "clusterforge_node_role": SettingRule(
        tuple(ROLE_GROUPS), HostAction.REINSTALL, True,
        "the hosts change Slurm role (controller/compute/login): other daemons, other plays",
        "playbooks/site.yml",
    ),
    "clusterforge_profile": SettingRule(
        tuple(ROLE_GROUPS), HostAction.REINSTALL, True,
        "other hardware (on AWS new instances: see the resources), so the GPU, fabric and storage roles "
        "run for it", "playbooks/site.yml",
    ),
    "clusterforge_location": SettingRule(
        tuple(ROLE_GROUPS), HostAction.REINSTALL, True, "the group moves between AWS and on-prem hosts",
        "playbooks/site.yml",
    ),
    "clusterforge_gpu": SettingRule(
        ("nvidia_driver", "cuda", "rocm", "nccl", "dcgm"), HostAction.REBOOT, True,
        "other GPUs (the gpu_nvidia/gpu_amd/nvswitch groups change): another driver stack, fabric manager",
        f"playbooks/site.yml; {_NVIDIA}",
    ),
    "clusterforge_fabric.type": SettingRule(
        ("efa", "infiniband"), HostAction.REBOOT, True,
        "another fabric (the fabric_efa/fabric_infiniband groups change): its kernel drivers", _EFA,
    ),
    # read by the renderer, not by a role: their effect is the rendered files' impact
    "clusterforge_fabric.hcas": SettingRule((), HostAction.NONE, False, _RENDERED, "clusterforge/render"),
    "clusterforge_fabric.port": SettingRule((), HostAction.NONE, False, _RENDERED, "clusterforge/render"),
    "clusterforge_fabric.gid_index": SettingRule((), HostAction.NONE, False, _RENDERED, "clusterforge/render"),
    "clusterforge_fabric.socket_ifname": SettingRule((), HostAction.NONE, False, _RENDERED, "clusterforge/render"),
    # the Slurm role pins the packages to the target family and checks `slurmd -V` against it: another
    # family is a package upgrade (the role holds the packages, so it stops and says how)
    "clusterforge_slurm_version": SettingRule(
        ("slurm",), HostAction.REINSTALL, True,
        _RENDERED + "; the packages are pinned to this release family (an upgrade: see docs/slurm-packages.md)",
        "roles/slurm/tasks/packages.yml",
    ),
    "clusterforge_slurm_package_repo": SettingRule(
        ("slurm",), HostAction.REINSTALL, True,
        "the apt repository the Slurm packages come from (the site's own builds)", "roles/slurm/tasks/packages.yml",
    ),
    "clusterforge_slurm_hostlist": SettingRule(
        (), HostAction.NONE, False, "the node set: shows as NodeName in slurm.conf above", "clusterforge/render",
    ),
    "clusterforge_controller_host": SettingRule(
        (), HostAction.NONE, False, "the controller: shows as SlurmctldHost in slurm.conf above",
        "clusterforge/render",
    ),
    "clusterforge_aws_region": SettingRule(
        (), HostAction.NONE, False, "the region the stack outputs came from; the resources show the move",
        "clusterforge/aws",
    ),
    "ansible_host": SettingRule(
        (), HostAction.NONE, False,
        "where Ansible reaches the host; the Slurm side shows as NodeAddr in slurm.conf above", "playbooks/site.yml",
    ),
}

#: Bookkeeping of the inventory itself (validate.yml reads it): never a host change.
IGNORED = frozenset(
    {"clusterforge_inventory_version", "clusterforge_inventory_generator", "clusterforge_manifest_dir"}
)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested variables -> ``{key path: leaf}``: dicts by key (``a.b``), lists of named dicts by
    name (``a[scratch].b``); other lists are one leaf (their order is part of the value)."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping):
        if not value and prefix:
            out[prefix] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif (
        isinstance(value, list) and value and prefix
        and all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in value)
    ):
        for item in value:
            out.update(flatten({k: v for k, v in item.items() if k != "name"}, f"{prefix}[{item['name']}]"))
    else:
        out[prefix] = value
    return out


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile(re.escape(path).replace(re.escape("[*]"), r"\[[^\]]+\]") + r"(?:$|[.\[])")


_PATTERNS = sorted(((p, _pattern(p)) for p in SETTINGS), key=lambda x: -len(x[0]))


def top_level(path: str) -> str:
    return re.split(r"[.\[]", path, maxsplit=1)[0]


def rule_for(path: str) -> SettingRule:
    """The rule of one flattened variable path; for an unknown one, the conservative fallback."""
    for p, rx in _PATTERNS:
        if rx.match(path):
            return SETTINGS[p]
    roles = READERS.get(top_level(path), tuple(ROLE_GROUPS))
    return SettingRule(
        roles, HostAction.REINSTALL, True,
        "not in the settings table (clusterforge/inventory/settings_impact.py): re-run every role that reads it, "
        "drained first, until the table says what it needs",
        "clusterforge/inventory/settings_impact.py (fallback)",
    )


def role_groups(roles: Iterable[str]) -> tuple[str, ...]:
    """The inventory groups the plays of ``roles`` target (``all`` for a role it does not know)."""
    out: list[str] = []
    for r in roles:
        for g in ROLE_GROUPS.get(r, ("all",)):
            if g not in out:
                out.append(g)
    return tuple(out)
