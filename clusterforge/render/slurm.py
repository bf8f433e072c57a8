"""slurm.conf, gres.conf, cgroup.conf, topology.conf/yaml and slurmdbd.conf from the config model.

Version-aware: settings are chosen for the spec's target Slurm version (``versions.py`` has
the gates); the templates only print what is built here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from clusterforge import hostlist
from clusterforge.clusterspec.models import STATE_VOLUME_MOUNT, Cluster, EbsStateStorage
from clusterforge.render.health import phase_scripts_wanted
from clusterforge.render.model import ClusterModel, NodeSet
from clusterforge.render.versions import has


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Setting(NamedTuple):
    key: str
    value: str
    why: str = ""


class Section(NamedTuple):
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


def node_table_setting(m: ClusterModel) -> Setting | None:
    """``MaxNodeCount`` = the node count: Slurm's own default, but known before the nodes are read.

    Without it slurmctld and every slurmd grow the node table 100 records at a time while reading
    the NodeName lines, and rehash every node at each growth (``grow_node_record_table_ptr``,
    src/common/node_conf.c @ slurm-22-05-8-1, the same in 24.11 and 26.05): quadratic in nodes, 9.35
    against 3.05 s to "Running as primary" for 65,536 on-prem nodes (benchmarks/check_scale.py
    --node-table grown; docs/performance.md). The value must not be below the count (24.11 refuses
    to create a node record past it), so it is the sum of the very NodeSets the NodeName lines
    print. Slurm takes it with select/cons_tres only (the render's), and refuses one above 65,536
    (MAX_SLURM_NODES), which the spec's own limit on compute hosts already keeps it under."""
    nodes = sum(n.count for n in m.compute)
    if not nodes:
        return None
    return Setting(
        "MaxNodeCount", str(nodes),
        "the node count (Slurm's default), known before the nodes are read: the node table is sized once",
    )


def job_mapping_wanted(m: ClusterModel) -> bool:
    """Whether the render has the prolog/epilog of dcgm-exporter's job mapping: dcgm-exporter runs on
    NVIDIA GPU nodes and Prometheus reads it (the GpuLowUtilisation alert needs the hpc_job label)."""
    mon = m.cluster.monitoring
    return mon.prometheus and mon.dcgm_exporter and any(
        n.gpus is not None and n.gpus.vendor == "nvidia" for n in m.compute
    )


def phase_folders(m: ClusterModel) -> tuple[str, ...]:
    """The job phases (prolog, epilog) slurm.conf runs a folder of scripts for: the dcgm job map's
    and the health check's, each rendered for every compute group."""
    health = phase_scripts_wanted(m.cluster)
    mapping = job_mapping_wanted(m)
    return tuple(p for p in ("prolog", "epilog") if mapping or p in health)


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
                *(
                    [
                        Setting(
                            "AuthInfo",
                            f"cred_expire={s.cred_expire_s}",
                            "credential lifetime; a requeued job waits it out before it starts again "
                            "(job_mgr.c: begin_time = now + cred_expire + 1)",
                        )
                    ]
                    if s.cred_expire_s is not None
                    else []
                ),
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
                Setting(
                    "SlurmctldTimeout",
                    str(s.slurmctld_timeout_s),
                    "the backup controller takes over after the primary is silent this long"
                    if len(m.controllers) > 1
                    else "how long a backup would wait for the primary (one controller: no backup)",
                ),
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
                    node_table_setting(m),
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
    extra = dict(s.extra_conf)
    phases = phase_folders(m)
    if phases:
        health = phase_scripts_wanted(c)
        sections.append(
            Section(
                "Job prolog and epilog",
                tuple(
                    x
                    for x in (
                        # a glob (slurm.conf(5) from 22.05 on): each concern drops its own script into
                        # the folder; every compute node has one there (a glob matching nothing fails
                        # the job: prep_script_slurmd.c "Unable to create list of paths")
                        Setting("Prolog", f"{SLURM_CONF}/prolog.d/*", "run by slurmd as root when a job starts here")
                        if "prolog" in phases
                        else None,
                        Setting("Epilog", f"{SLURM_CONF}/epilog.d/*", "run by slurmd as root when a job ends here")
                        if "epilog" in phases
                        else None,
                        Setting(
                            "SchedulerParameters",
                            _merged("nohold_on_prolog_fail", "SchedulerParameters", extra),
                            "a job whose prolog check failed is requeued to run elsewhere, not held",
                        )
                        if "prolog" in health
                        else None,
                    )
                    if x is not None
                ),
            )
        )
    if c.health_checks.enabled:
        hc = c.health_checks
        sections.append(
            Section(
                "Health checks",
                (
                    Setting(
                        "HealthCheckProgram",
                        hc.program,
                        f"drains a node after {hc.consecutive_failures} failing run(s) in a row and resumes the "
                        "nodes it drained when every check passes",
                    ),
                    Setting("HealthCheckInterval", str(hc.interval_s)),
                    Setting(
                        "HealthCheckNodeState",
                        hc.node_state,
                        "drained nodes are checked too: that is how they return" if hc.node_state == "ANY" else "",
                    ),
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
    if any(n.cloud for n in m.compute):
        sections.append(Section("Cloud nodes (fixed-size Auto Scaling groups)", cloud_settings(m, extra)))
    if extra:
        sections.append(
            Section(
                "Extra settings from the spec (slurm.extra_conf)",
                tuple(Setting(k, val) for k, val in sorted(extra.items())),
            )
        )
    return sections


def _merged(flag: str, key: str, extra: dict[str, str]) -> str:
    """``flag`` added to the comma list the spec's extra_conf gives for ``key`` (taken out of it)."""
    have = [x for x in extra.pop(key, "").split(",") if x]
    return ",".join(have + ([flag] if flag not in have else []))


def cloud_settings(m: ClusterModel, extra: dict[str, str]) -> tuple[Setting, ...]:
    """What State=CLOUD nodes whose instances an ASG keeps running need (observed with real 22.05
    daemons: tests/test_slurm_cloud_nodes.py)."""
    out = []
    if not has(m.version, "cloud_reg_addrs_default"):
        # from 23.11 this is what slurmctld always does, and it logs an error for the defunct option
        out.append(
            Setting(
                "SlurmctldParameters",
                _merged("cloud_reg_addrs", "SlurmctldParameters", extra),
                "cloud_reg_addrs: a CLOUD node's NodeAddr/NodeHostname are set from its slurmd's registration "
                "(node_mgr.c validate_node_specs), so a replacement instance rejoins under its new address",
            )
        )
    out += [
        Setting(
            "TreeWidth",
            "65533",
            "slurmds cannot resolve each other's cloud names: slurmctld must message every node directly "
            "(elastic_computing/power_save docs; 65533 is the maximum)",
        ),
        Setting(
            "SuspendTime",
            "NONE",
            "no power saving: the ASG owns the instances. With a ResumeProgram slurmctld waits for a boot "
            "newer than the resume request ('Still waiting for boot of node'), which an always-on instance "
            "never gives, and downs the node at ResumeTimeout",
        ),
    ]
    if not has(m.version, "cloud_nodes_shown"):
        out.append(
            Setting(
                "PrivateData",
                _merged("cloud", "PrivateData", extra),
                "before 23.02 sinfo hides powered-down (not yet registered) CLOUD nodes without it",
            )
        )
    return tuple(out)


def _pairs(fields: list[tuple[str, str]]) -> dict[str, Any]:
    """One config line as data (``params``, the manifest's record) and as printed (``fields``)."""
    return {"params": fields, "fields": [f"{k}={v}" for k, v in fields]}


def _source_lines(facts: tuple[tuple[str, str], ...]) -> list[str]:
    """Comment lines naming where each fact came from; facts sharing a source share a line."""
    by_source: dict[str, list[str]] = {}
    for what, source in facts:
        by_source.setdefault(source, []).append(what)
    return [f"  {' and '.join(whats)} from {source}" for source, whats in by_source.items()]


def node_fields(n: NodeSet) -> list[dict[str, Any]]:
    """The ``NodeName`` lines of a node set: ``fields`` to print, ``params`` (in order) for the record."""

    def one(names: str, addrs: str | None) -> list[tuple[str, str]]:
        f = [("NodeName", names)]
        if addrs:
            f.append(("NodeAddr", addrs))
        f.append(("CPUs", str(n.cpus)))
        if n.sockets is not None:
            f += [
                ("Boards", str(n.boards)),
                ("SocketsPerBoard", str(n.sockets)),
                ("CoresPerSocket", str(n.cores_per_socket)),
                ("ThreadsPerCore", str(n.threads_per_core)),
            ]
        elif n.threads_per_core is not None:
            # Sockets unknown, cores and threads known (EC2 DefaultCores/DefaultThreadsPerCore):
            # no socket count is invented. slurm.conf(5) read_config infers the missing Sockets
            # as CPUs / (CoresPerSocket x ThreadsPerCore) = one core per "socket", so Slurm
            # still counts the right cores and SMT siblings (S:C:T 96:1:2 for 192 = 96 x 2).
            f.append(("ThreadsPerCore", str(n.threads_per_core)))
        f.append(("RealMemory", str(n.real_memory)))
        if n.gres:
            f.append(("Gres", n.gres))
        if n.features:
            f.append(("Features", ",".join(n.features)))
        if n.weight is not None:
            f.append(("Weight", str(n.weight)))
        # CLOUD: no address in the config; slurmctld takes it from the registration (cloud_reg_addrs)
        f.append(("State", "CLOUD" if n.cloud else "UNKNOWN"))
        return f

    if n.sockets is not None:
        layout = f"{n.sockets}x{n.cores_per_socket}x{n.threads_per_core}"
    elif n.threads_per_core is not None:
        layout = f"{n.cpus // n.threads_per_core} cores x {n.threads_per_core} threads, sockets unknown"
    else:
        layout = "socket layout unknown (CPUs only)"
    p = n.profile
    comments = [
        f"{n.group}: {n.count} x {p.name}, {layout}, RealMemory = OS-visible memory "
        "less slurm.os_memory_reserve_mib",
        *_source_lines((("CPU layout", p.source_of("cpu_layout")), ("memory", p.source_of("memory")))),
    ]
    if n.addressed and n.addr_hostlist is None:
        return [
            {"comments": comments if i == 0 else [], "group": n.group, **_pairs(one(name, addr))}
            for i, (name, addr) in enumerate(zip(n.names, n.addresses or (), strict=True))
        ]
    return [{"comments": comments, "group": n.group, **_pairs(one(n.hostlist, n.addr_hostlist))}]


def partition_fields(m: ClusterModel) -> list[dict[str, Any]]:
    out = []
    for p in m.partitions:
        f = [
            ("PartitionName", p.name),
            ("Nodes", p.nodes),
            ("Default", "YES" if p.default else "NO"),
            ("MaxTime", p.max_time),
            ("DefMemPerCPU", str(p.def_mem_per_cpu)),
        ]
        if p.exclusive:
            # 26.05 documents whole-node partitions as Exclusive=NODE; OverSubscribe=EXCLUSIVE stays
            # parsed only for compatibility (versions.py partition_exclusive)
            f.append(("Exclusive", "NODE") if has(m.version, "partition_exclusive") else ("OverSubscribe", "EXCLUSIVE"))
        f.append(("State", "UP"))
        out.append(_pairs(f))
    return out


def gres_groups(m: ClusterModel) -> list[dict[str, Any]]:
    """Per GPU node set its gres.conf lines: ``lines`` to print, ``records`` (keys but NodeName)."""
    groups = []
    for n in m.compute:
        g = n.gpus
        if g is None:
            continue
        flags = [("Flags", "amd_gpu_env")] if g.vendor == "amd" and has(m.version, "gres_env_flags") else []
        per_device = any(link is not None for link in g.links)
        lines: list[list[tuple[str, str]]] = []
        if per_device:
            # Links= describes one device's connections, so each GPU gets its own line.
            for i, dev in enumerate(g.device_paths):
                line = [("Name", "gpu"), ("Type", g.type), ("File", dev)]
                if g.cores[i] is not None:
                    line.append(("Cores", str(g.cores[i])))
                line.append(("Links", str(g.links[i])))
                lines.append(line + flags)
        else:
            # Group consecutive GPUs sharing the same core set into one File= range.
            i = 0
            while i < g.count:
                j = i
                while j + 1 < g.count and g.cores[j + 1] == g.cores[i]:
                    j += 1
                file_ = hostlist.compress(g.device_paths[i : j + 1])
                line = [("Name", "gpu"), ("Type", g.type), ("File", file_)]
                if g.cores[i] is not None:
                    line.append(("Cores", str(g.cores[i])))
                lines.append(line + flags)
                i = j + 1
        p = n.profile
        facts: list[tuple[str, str]] = []
        if any(c is not None for c in g.cores):
            facts.append(("Cores=", p.source_of("affinity")))
        if per_device:
            facts.append(("Links=", p.source_of("links")))
        comments = [f"{n.group}: {g.count} x {g.type} on {p.name}", *_source_lines(tuple(facts))]
        if all(c is None for c in g.cores):
            comments.append("  core affinity unknown (no Cores=): run playbooks/discover.yml and render with --facts")
        if not per_device and "links" in p.discovered_from:
            comments.append(f"  no Links=: {p.source_of('links')}")
        groups.append(
            {
                "comments": comments,
                "group": n.group,
                "names": n.hostlist,
                "lines": [[f"NodeName={n.hostlist}"] + [f"{k}={v}" for k, v in line] for line in lines],
                "records": [dict(line) for line in lines],
            }
        )
    return groups


def cgroup_settings(m: ClusterModel) -> list[Setting]:
    out = [
        Setting(
            "CgroupPlugin",
            "autodetect",
            "cgroup v2 where the host runs it, else v1 (deprecated since 25.05: slurmd warns on a v1 host)"
            if has(m.version, "cgroup_v1_deprecated")
            else "cgroup v2 where the host runs it, else v1",
        ),
    ]
    if not has(m.version, "no_cgroup_automount"):
        out.append(Setting("CgroupAutomount", "yes", "mount missing v1 controllers (removed in 23.11)"))
    out += [
        Setting("ConstrainCores", "yes", "a job runs only on the cores it was given"),
        Setting("ConstrainDevices", "yes", "a job can open only the GPUs it was given (/dev/nvidia* by GRES)"),
        Setting("ConstrainRAMSpace", "yes", "a job is OOM-killed at its memory request instead of the node"),
    ]
    return out


def mariadb_datadir(c: Cluster) -> str | None:
    """MariaDB's datadir on the state volume, when accounting keeps its database on the controller
    and the controller's state is on a retained EBS volume: the job history then outlives the
    instance too. None elsewhere (the package's /var/lib/mysql; a database on NFS/Lustre is not
    something MariaDB supports well, so ``shared`` state leaves it where it is)."""
    a = c.accounting
    ctl = {h for g in c.groups_with_role("controller") for h in g.hostnames}
    on_controller = a.storage_host == "localhost" or a.storage_host in ctl
    if a.enabled and on_controller and isinstance(c.slurm.state_storage, EbsStateStorage):
        return f"{STATE_VOLUME_MOUNT}/mysql"
    return None


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
