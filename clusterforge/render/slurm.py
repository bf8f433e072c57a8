"""slurm.conf, gres.conf, cgroup.conf, topology.conf/yaml and slurmdbd.conf from the config model.

Version-aware: settings are chosen for the spec's target Slurm version (``versions.py`` has
the gates); the templates only print what is built here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterforge import hostlist
from clusterforge.render.model import ClusterModel, NodeSet
from clusterforge.render.versions import has


@dataclass(frozen=True)
class Setting:
    key: str
    value: str
    why: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    settings: tuple[Setting, ...]


SLURM_CONF = "/etc/slurm"
SECRET = "{{{{ SECRET:{name} }}}}"


def controller_line(m: ClusterModel) -> list[Setting]:
    out = []
    for i, (name, addr) in enumerate(m.controllers):
        why = "primary controller" if i == 0 else "backup controller (shares StateSaveLocation)"
        out.append(Setting("SlurmctldHost", f"{name}({addr})" if addr else name, why))
    return out


def slurm_sections(m: ClusterModel) -> list[Section]:
    c = m.cluster
    s = c.slurm
    v = m.version
    sections = [
        Section(
            "Cluster and daemons",
            (
                Setting("ClusterName", c.name.replace("-", "_")[:40], "slurmdbd keys accounting by this name"),
                *controller_line(m),
                Setting("SlurmUser", "slurm"),
                Setting("AuthType", "auth/munge"),
                Setting("CredType", "cred/munge"),
                Setting("SlurmctldPort", "6817"),
                Setting("SlurmdPort", "6818"),
                Setting("StateSaveLocation", s.state_save_location),
                Setting("SlurmdSpoolDir", "/var/spool/slurmd"),
                Setting("SlurmctldPidFile", "/run/slurmctld.pid"),
                Setting("SlurmdPidFile", "/run/slurmd.pid"),
                Setting("SlurmctldLogFile", "/var/log/slurm/slurmctld.log"),
                Setting("SlurmdLogFile", "/var/log/slurm/slurmd.log"),
                Setting(
                    "MailProg", "/bin/true", "no MTA on cluster nodes; set slurm.extra_conf.MailProg to mail users"
                ),
                Setting(
                    "ReturnToService",
                    str(s.return_to_service),
                    {
                        0: "a DOWN node stays DOWN until an admin resumes it",
                        1: "a node that was DOWN for not responding returns when it registers with valid config",
                        2: "a node returns to service when it registers with a valid configuration",
                    }[s.return_to_service],
                ),
                Setting("SlurmctldTimeout", "300"),
                Setting(
                    "SlurmdTimeout",
                    str(s.slurmd_timeout_s),
                    "large jobs' nodes can be slow to answer during checkpoint I/O"
                    if s.slurmd_timeout_s >= 300
                    else "a node that stops answering is DOWN (and its --requeue jobs requeued) this fast",
                ),
            ),
        ),
        Section(
            "Scheduling and resource isolation",
            tuple(
                x
                for x in (
                    Setting(
                        "SelectType",
                        "select/cons_tres",
                        "GPUs as consumable resources; the default before 23.11 was select/linear"
                        if not has(v, "cons_tres_default")
                        else "GPUs as consumable resources (the default since 23.11, stated for review)",
                    ),
                    Setting("SelectTypeParameters", "CR_Core_Memory", "cores and memory are consumable"),
                    Setting(
                        "ProctrackType", "proctrack/cgroup", "tracks every process of a job, needed for clean kills"
                    ),
                    Setting(
                        "TaskPlugin",
                        "task/cgroup,task/affinity",
                        "cgroup confinement (see cgroup.conf) plus CPU binding",
                    ),
                    Setting("PrologFlags", "Contain", "an extern step per job so ssh sessions can be adopted"),
                    Setting("GresTypes", "gpu", "without it slurmctld silently drops every Gres=gpu from nodes")
                    if m.has_gpus
                    else None,
                )
                if x is not None
            ),
        ),
    ]
    if m.topology.plugin and not has(v, "topology_yaml"):
        sections.append(
            Section(
                "Network topology",
                (Setting("TopologyPlugin", m.topology.plugin, "topology-aware placement from topology.conf"),),
            )
        )
    if c.health_checks.enabled:
        hc = c.health_checks
        sections.append(
            Section(
                "Health checks",
                (
                    Setting("HealthCheckProgram", hc.program, "drains a node with a reason when a check fails"),
                    Setting("HealthCheckInterval", str(hc.interval_s)),
                    Setting("HealthCheckNodeState", hc.node_state),
                ),
            )
        )
    if c.accounting.enabled:
        ctl = m.controllers[0][0]
        sections.append(
            Section(
                "Accounting",
                (
                    Setting("AccountingStorageType", "accounting_storage/slurmdbd"),
                    # only with storage: slurmctld logs an error for gathered-but-not-stored data
                    Setting("JobAcctGatherType", "jobacct_gather/cgroup", "per-job CPU, memory and GPU use"),
                    Setting("AccountingStorageHost", ctl, "slurmdbd runs on the controller"),
                    Setting("AccountingStorageTRES", "gres/gpu", "record GPU use per job")
                    if m.has_gpus
                    else Setting("AccountingStorageEnforce", "associations"),
                ),
            )
        )
    if s.extra_conf:
        sections.append(
            Section(
                "Extra settings from the spec (slurm.extra_conf)",
                tuple(Setting(k, val) for k, val in sorted(s.extra_conf.items())),
            )
        )
    return sections


def node_fields(n: NodeSet) -> list[dict[str, Any]]:
    def one(names: str, addrs: str | None) -> list[str]:
        f = [f"NodeName={names}"]
        if addrs:
            f.append(f"NodeAddr={addrs}")
        f.append(f"CPUs={n.cpus}")
        if n.sockets is not None:
            f += [
                f"Boards={n.boards}",
                f"SocketsPerBoard={n.sockets}",
                f"CoresPerSocket={n.cores_per_socket}",
                f"ThreadsPerCore={n.threads_per_core}",
            ]
        f.append(f"RealMemory={n.real_memory}")
        if n.gres:
            f.append(f"Gres={n.gres}")
        if n.features:
            f.append(f"Features={','.join(n.features)}")
        if n.weight is not None:
            f.append(f"Weight={n.weight}")
        f.append("State=UNKNOWN")
        return f

    layout = (
        f"{n.sockets}x{n.cores_per_socket}x{n.threads_per_core}"
        if n.sockets is not None
        else "socket layout unknown (CPUs only)"
    )
    comment = (
        f"{n.group}: {len(n.names)} x {n.profile.name}, {layout}, RealMemory = OS-visible memory "
        f"less slurm.os_memory_reserve_mib"
        + (", from discovered facts" if n.profile.discovered else "")
    )
    if n.addresses is not None and n.addr_hostlist is None:
        return [
            {"comment": comment if i == 0 else "", "fields": one(name, addr)}
            for i, (name, addr) in enumerate(zip(n.names, n.addresses, strict=True))
        ]
    return [{"comment": comment, "fields": one(n.hostlist, n.addr_hostlist)}]


def partition_fields(m: ClusterModel) -> list[dict[str, Any]]:
    out = []
    for p in m.partitions:
        f = [
            f"PartitionName={p.name}",
            f"Nodes={p.nodes}",
            f"Default={'YES' if p.default else 'NO'}",
            f"MaxTime={p.max_time}",
            f"DefMemPerCPU={p.def_mem_per_cpu}",
        ]
        if p.exclusive:
            f.append("OverSubscribe=EXCLUSIVE")
        f.append("State=UP")
        out.append({"fields": f})
    return out


def gres_groups(m: ClusterModel) -> list[dict[str, Any]]:
    groups = []
    for n in m.compute:
        g = n.gpus
        if g is None:
            continue
        flags = ["Flags=amd_gpu_env"] if g.vendor == "amd" and has(m.version, "gres_env_flags") else []
        per_device = any(link is not None for link in g.links)
        lines: list[list[str]] = []
        if per_device:
            # Links= describes one device's connections, so each GPU gets its own line.
            for i, dev in enumerate(g.device_paths):
                line = [f"NodeName={n.hostlist}", "Name=gpu", f"Type={g.type}", f"File={dev}"]
                if g.cores[i] is not None:
                    line.append(f"Cores={g.cores[i]}")
                line.append(f"Links={g.links[i]}")
                lines.append(line + flags)
        else:
            # Group consecutive GPUs sharing the same core set into one File= range.
            i = 0
            while i < g.count:
                j = i
                while j + 1 < g.count and g.cores[j + 1] == g.cores[i]:
                    j += 1
                file_ = hostlist.compress(g.device_paths[i : j + 1])
                line = [f"NodeName={n.hostlist}", "Name=gpu", f"Type={g.type}", f"File={file_}"]
                if g.cores[i] is not None:
                    line.append(f"Cores={g.cores[i]}")
                lines.append(line + flags)
                i = j + 1
        affinity = "core affinity from " + ("discovered facts" if n.profile.discovered else "the catalog")
        if all(c is None for c in g.cores):
            affinity = "core affinity unknown (no Cores=): run playbooks/discover.yml and render with --facts"
        groups.append(
            {"comment": f"{n.group}: {g.count} x {g.type} on {n.profile.name}; {affinity}", "lines": lines}
        )
    return groups


def cgroup_settings(m: ClusterModel) -> list[Setting]:
    out = [
        Setting("CgroupPlugin", "autodetect", "cgroup v2 where the host runs it, else v1"),
    ]
    if not has(m.version, "no_cgroup_automount"):
        out.append(Setting("CgroupAutomount", "yes", "mount missing v1 controllers (removed in 23.11)"))
    out += [
        Setting("ConstrainCores", "yes", "a job runs only on the cores it was given"),
        Setting("ConstrainDevices", "yes", "a job can open only the GPUs it was given (/dev/nvidia* by GRES)"),
        Setting("ConstrainRAMSpace", "yes", "a job is OOM-killed at its memory request instead of the node"),
    ]
    return out


def slurmdbd_settings(m: ClusterModel) -> list[Setting]:
    a = m.cluster.accounting
    ctl = m.controllers[0][0]
    return [
        Setting("AuthType", "auth/munge"),
        Setting("DbdHost", ctl),
        Setting("DbdPort", "6819"),
        Setting("SlurmUser", "slurm"),
        Setting("LogFile", "/var/log/slurm/slurmdbd.log"),
        Setting("PidFile", "/run/slurmdbd.pid"),
        Setting("StorageType", "accounting_storage/mysql"),
        Setting("StorageHost", a.storage_host),
        Setting("StorageLoc", a.database),
        Setting("StorageUser", "slurm"),
        Setting("StoragePass", SECRET.format(name=a.password_secret)),
    ]
