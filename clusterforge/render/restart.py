"""The one restart policy: what a change of a rendered file, or of one key in it, requires on a
*running* cluster.

It lives beside the renderer and is used three ways, so the PR comment and the hosts never disagree:

* the renderer stamps each manifest entry with its file-level rule (``on_change_for``);
* ``clusterforge diff`` compares the two sides' manifests (``impacts``) and prints the impacts and
  the operator's steps (``summarise``);
* the Slurm role's filter plugin calls ``impacts`` on the manifest installed on the host and the new
  one, and ``host_actions`` turns the result into the handlers that host runs.

``slurm.conf`` and ``gres.conf`` are compared key by key from the manifest's structured ``config``
records (globals, ``NodeName`` lines per node, ``PartitionName`` lines, GRES lines per node), never
from config text; every difference is classified by the tables below: no action, ``scontrol
reconfigure``, a restart of slurmdbd, of slurmd on which nodes, of slurmctld, or of all daemons,
and whether nodes must be drained first.

The policy is the target release's (the manifest's ``slurm_version``; the installed side's when
both are given, since its daemons run the reconfigure). What ``scontrol reconfigure`` applies
changed twice (gates in ``versions.py``, each with its source):

* up to 23.02 it makes the running daemons re-read slurm.conf: plugins, ports, authentication and
  the node set need the daemons restarted (the tables below as they are);
* from 23.11 it starts new slurmctld and slurmd processes (``reconfigure_restarts_daemons``), so it
  also applies plugin and accounting settings (``REEXEC_APPLIES``), gres.conf and cgroup.conf; TCP
  listening ports, authentication, SlurmUser, ClusterName, SlurmctldHost and the state and spool
  directories still need restarts; a changed SlurmctldHost no longer needs the cluster drained;
* from 24.11 it also applies node additions, removals and node changes
  (``reconfigure_applies_node_changes``); removed or changed nodes are still drained first.

About 680 lines in one module on purpose: the classification tables, the release gates applied
to them and the three consumers' entry points are one policy, and the PR comment and the role
must read the same tables; split, a table and its reader could drift apart, and a reviewer
checking a class against its source should find both on one page.

A change of the release itself (a package upgrade) restarts every daemon, slurmdbd first.

Sources (the tables cite them by these names):

* slurm.conf(5) <https://slurm.schedmd.com/slurm.conf.html>, DESCRIPTION: "Changes to the
  configuration file take effect upon restart of Slurm daemons, daemon receipt of the SIGHUP
  signal, or execution of the command 'scontrol reconfigure' unless otherwise noted. Changes to
  TCP listening settings will require a daemon restart." — hence reconfigure is the default and
  the exceptions are listed.
* Slurm FAQ, "How can I add nodes to / remove nodes from my cluster?"
  <https://slurm.schedmd.com/faq.html#add_nodes>: stop slurmctld, update slurm.conf everywhere,
  restart slurmd on all nodes, start slurmctld (newer releases relax this; the conservative
  procedure is reported).
* stackhpc/ansible-role-openhpc#199 and #200: changing a node's CPU layout (``CpuSpecList``)
  while slurmd kept running left nodes INVALID ("CoreSpec differ") after slurmctld restarted;
  stop slurmd while slurmctld restarts. Node hardware changes therefore drain + restart both.
* gres.conf(5) <https://slurm.schedmd.com/gres.conf.html>: slurmd reads its devices at start;
  a node whose GRES count shrinks under running jobs is drained first.
* cgroup.conf(5) <https://slurm.schedmd.com/cgroup.conf.html>: read by slurmd (and the
  slurmstepd it starts) — restart slurmd on the nodes.
* topology.conf(5) <https://slurm.schedmd.com/topology.conf.html> (and topology.yaml, 25.05):
  read by slurmctld; ``scontrol reconfigure`` applies it (GoogleCloudPlatform/cluster-toolkit#6236:
  a topology-only change should not restart daemons).
* slurmdbd.conf(5) <https://slurm.schedmd.com/slurmdbd.conf.html>: read by slurmdbd at start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import NamedTuple

from clusterforge import hostlist
from clusterforge.clusterspec.types import version_tuple
from clusterforge.render.manifest import ConfigRecords, Manifest, OnChange
from clusterforge.render.versions import FEATURES, has, release


class ImpactClass(StrEnum):
    """Ordered from harmless to disruptive (``SEVERITY``)."""

    NONE = "none"
    RECONFIGURE = "reconfigure"
    RESTART_SLURMDBD = "restart-slurmdbd"
    RESTART_SLURMD = "restart-slurmd"
    RESTART_SLURMCTLD = "restart-slurmctld"
    RESTART_ALL = "restart-all"


SEVERITY = {c: i for i, c in enumerate(ImpactClass)}

SLURM_CONF = "slurm.conf(5) https://slurm.schedmd.com/slurm.conf.html"
FAQ_NODES = "Slurm FAQ https://slurm.schedmd.com/faq.html#add_nodes"
STACKHPC = "stackhpc/ansible-role-openhpc#199/#200"
GRES_CONF = "gres.conf(5) https://slurm.schedmd.com/gres.conf.html"
UPGRADES = "Slurm upgrade guide https://slurm.schedmd.com/upgrades.html"
REEXEC = "reconfigure_restarts_daemons"  # 23.11: reconfigure starts new daemons
NODE_CHANGES = "reconfigure_applies_node_changes"  # 24.11: ... which take node changes
STEPD_CTLD = "stepd_follows_controller"  # 23.11: running steps learn a new SlurmctldHost

#: slurm.conf parameters that a reconfigure does not apply (the "unless otherwise noted" of
#: slurm.conf(5), plus the TCP listening settings). Anything not listed: ``scontrol reconfigure``.
GLOBAL_KEYS: dict[str, tuple[ImpactClass, str]] = {
    # every daemon and client must agree on these; mixed values cut communication
    "AuthType": (ImpactClass.RESTART_ALL, "authentication plugin: all daemons must change together"),
    "CredType": (ImpactClass.RESTART_ALL, "job credential plugin: all daemons must change together"),
    "AuthAltTypes": (ImpactClass.RESTART_ALL, "authentication plugin: all daemons must change together"),
    "AuthInfo": (
        ImpactClass.RESTART_ALL,
        "read once when the daemons load the credential plugin (slurm_cred.c); all must agree on the lifetime",
    ),
    "SlurmctldHost": (ImpactClass.RESTART_ALL, "slurmd and clients locate the controller by it"),
    "SlurmctldPort": (ImpactClass.RESTART_ALL, "a TCP listening setting: needs a daemon restart"),
    "SlurmdPort": (ImpactClass.RESTART_ALL, "a TCP listening setting: needs a daemon restart"),
    "SlurmUser": (ImpactClass.RESTART_ALL, "daemons drop privileges to it at start"),
    "ClusterName": (
        ImpactClass.RESTART_ALL,
        "slurmctld refuses state saved under another cluster name, and accounting keys on it",
    ),
    # plugins: loaded once when a daemon starts
    "SelectType": (ImpactClass.RESTART_ALL, "the select plugin is loaded at start; running jobs may be lost"),
    "SelectTypeParameters": (ImpactClass.RESTART_ALL, "consumable resources are fixed when the select plugin loads"),
    "SwitchType": (ImpactClass.RESTART_ALL, "the switch plugin is loaded at start by every daemon"),
    "GresTypes": (ImpactClass.RESTART_ALL, "GRES plugins are loaded at start by slurmctld and slurmd"),
    "ProctrackType": (ImpactClass.RESTART_ALL, "process tracking is fixed when the daemons start"),
    "TaskPlugin": (ImpactClass.RESTART_ALL, "task plugins are loaded by slurmd at start"),
    "JobAcctGatherType": (ImpactClass.RESTART_ALL, "the gather plugin is loaded at start"),
    "TopologyPlugin": (ImpactClass.RESTART_ALL, "the topology plugin is loaded at start"),
    "PluginDir": (ImpactClass.RESTART_ALL, "plugins are loaded at start"),
    "PrologFlags": (ImpactClass.RESTART_ALL, "how steps are launched (extern step, x11) is fixed at start"),
    # slurmctld only
    "StateSaveLocation": (
        ImpactClass.RESTART_SLURMCTLD, "read at start; move the state files first or slurmctld starts without jobs",
    ),
    "AccountingStorageType": (ImpactClass.RESTART_SLURMCTLD, "the accounting plugin is loaded at start"),
    "AccountingStorageHost": (ImpactClass.RESTART_SLURMCTLD, "slurmctld connects to slurmdbd at start"),
    "AccountingStoragePort": (ImpactClass.RESTART_SLURMCTLD, "slurmctld connects to slurmdbd at start"),
    "SlurmctldPidFile": (ImpactClass.RESTART_SLURMCTLD, "written at start"),
    # it follows the node set (render.slurm.node_table_setting); an in-process reconfigure (up to
    # 23.02) stops slurmctld: src/slurmctld/read_config.c @ slurm-22-05-8-1, fatal("MaxNodeCount has
    # changed (%u->%u) during reconfig, slurmctld must be restarted")
    "MaxNodeCount": (
        ImpactClass.RESTART_SLURMCTLD, "slurmctld sizes its node table at start and stops if a reconfigure changes it",
    ),
    # slurmd only
    "SlurmdSpoolDir": (ImpactClass.RESTART_SLURMD, "slurmd keeps its state there; read at start"),
    "SlurmdPidFile": (ImpactClass.RESTART_SLURMD, "written at start"),
    "SlurmdUser": (ImpactClass.RESTART_SLURMD, "slurmd runs as it"),
    # cloud-node settings (render.slurm.cloud_settings): not in slurm.conf(5)'s restart list, stated
    # so that the classification is reviewed, not defaulted. power_save.c (22.05 .. 25.05) re-reads
    # SlurmctldParameters=cloud_reg_addrs and SuspendTime in its config load on every reconfigure.
    "SlurmctldParameters": (ImpactClass.RECONFIGURE, "slurmctld re-reads it (cloud_reg_addrs) on reconfigure"),
    "TreeWidth": (ImpactClass.RECONFIGURE, "reconfigure makes slurmctld and every slurmd re-read the fan-out"),
    "SuspendTime": (ImpactClass.RECONFIGURE, "power_save re-reads it on reconfigure"),
    "PrivateData": (ImpactClass.RECONFIGURE, "slurmctld applies it per request after reconfigure"),
}

#: From 23.11 (``reconfigure_restarts_daemons``) these keys of GLOBAL_KEYS are applied by ``scontrol
#: reconfigure``: its new daemons load their plugins and connect anew, and slurm.conf(5)@slurm-24-05-0-1
#: dropped their "a restart is required" notes (commit ae1f5ed071, "update scontrol reconfigure docs").
#: Not here, so still restarted: TCP ports and authentication (scontrol(1) says reconfigure cannot
#: change them), SlurmUser (the new processes start from the old, already unprivileged ones),
#: ClusterName (state saved under another name is refused), StateSaveLocation and SlurmdSpoolDir
#: (the new process would read a new, empty directory while running steps' sockets stay in the old
#: one), the PID files (the service units name them) and SlurmdUser.
REEXEC_APPLIES: dict[str, str] = {
    "SelectType": "the new slurmctld loads the select plugin (job state saved by another select plugin is lost)",
    "SelectTypeParameters": "the new slurmctld loads the select plugin with them",
    "SwitchType": "the new daemons load the switch plugin (slurm.conf(5): 'restarted or reconfigured')",
    "GresTypes": "the new slurmctld and slurmds load the GRES plugins",
    "ProctrackType": "the new slurmds load it; running steps keep the one they started with",
    "TaskPlugin": "the new slurmds load it; running steps keep the one they started with",
    "JobAcctGatherType": "the new daemons load the gather plugin",
    "TopologyPlugin": "the new slurmctld loads the topology plugin",
    "PluginDir": "the new daemons load their plugins from it",
    "PrologFlags": "the new daemons read it; running jobs keep how they were launched",
    "AccountingStorageType": "the new slurmctld loads the accounting plugin",
    "AccountingStorageHost": "the new slurmctld connects to slurmdbd anew",
    "AccountingStoragePort": "the new slurmctld connects to slurmdbd anew",
    "MaxNodeCount": "the new slurmctld sizes its node table from it",
}


def _src(gate: str) -> str:
    return FEATURES[gate].source


def global_rule(key: str, v: tuple[int, ...]) -> tuple[ImpactClass, str, str]:
    """(class, why, source) of a changed slurm.conf global ``key`` on release ``v``."""
    if key in REEXEC_APPLIES and has(v, REEXEC):
        return (ImpactClass.RECONFIGURE, f"Slurm {release(v)}: reconfigure starts new daemons; {REEXEC_APPLIES[key]}",
                _src(REEXEC))
    cls, why = GLOBAL_KEYS.get(key, (ImpactClass.RECONFIGURE, "applied by scontrol reconfigure"))
    if key in ("SlurmctldPort", "SlurmdPort", "AuthType", "AuthAltTypes", "AuthInfo") and has(v, REEXEC):
        return cls, f"{why}; Slurm {release(v)}'s reconfigure cannot change it", f"{SLURM_CONF}; {_src(REEXEC)}"
    return cls, why, SLURM_CONF


#: NodeName parameters that describe hardware: slurmctld and the node's slurmd must agree, or the
#: node registers INVALID; running jobs were placed on the old layout, so drain first.
NODE_HARDWARE = frozenset(
    {
        "CPUs", "Boards", "Sockets", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory",
        "Gres", "TmpDisk", "CoreSpecCount", "CpuSpecList", "MemSpecLimit",
    }
)
#: NodeName parameters every daemon uses to reach the node.
NODE_ADDRESS = frozenset({"NodeAddr", "NodeHostname", "Port"})
# Other node parameters (Features, Weight, State, Reason, ...): scontrol reconfigure.


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Impact(NamedTuple):
    """One classified difference. ``slurmd_nodes`` and ``drain_nodes`` are Slurm hostlists."""

    file: str
    subject: str
    change: str
    cls: ImpactClass
    why: str
    source: str
    slurmd_nodes: str = ""
    drain_nodes: str = ""

    @property
    def actions(self) -> list[str]:
        out = []
        if self.drain_nodes:
            out.append(f"drain {self.drain_nodes}")
        if self.cls is ImpactClass.RESTART_ALL:
            out.append("restart slurmctld" + (", slurmdbd" if "slurmdbd" in self.why else ""))
            out.append(f"restart slurmd on {self.slurmd_nodes or 'all nodes'}")
        elif self.cls is ImpactClass.RESTART_SLURMCTLD:
            out.append("restart slurmctld")
            if self.slurmd_nodes:
                out.append(f"restart slurmd on {self.slurmd_nodes}")
        elif self.cls is ImpactClass.RESTART_SLURMD:
            out.append(f"restart slurmd on {self.slurmd_nodes or 'all nodes'}")
        elif self.cls is ImpactClass.RESTART_SLURMDBD:
            out.append("restart slurmdbd")
        elif self.cls is ImpactClass.RECONFIGURE:
            out.append("scontrol reconfigure")
        else:
            out.append("no action")
        return out


# ----------------------------------------------------------------------------- file-level rules

#: Files compared key by key from the manifest's ``config`` records; the rule here is the most
#: disruptive a change of them can need (what an unknown change must assume).
BY_KEY: dict[str, tuple[ImpactClass, str, str]] = {
    "slurm.conf": (ImpactClass.RESTART_ALL, "read by every daemon; classified key by key", SLURM_CONF),
    "gres.conf": (ImpactClass.RESTART_SLURMD, "slurmd reads its devices at start",
                  "gres.conf(5) https://slurm.schedmd.com/gres.conf.html"),
}

#: Files without key-level rules, by name or folder: (class, why, source).
FILE_RULES: dict[str, tuple[ImpactClass, str, str]] = {
    "slurm/cgroup.conf": (ImpactClass.RESTART_SLURMD, "read by slurmd and the slurmstepd it starts",
                          "cgroup.conf(5) https://slurm.schedmd.com/cgroup.conf.html"),
    "slurm/topology.conf": (ImpactClass.RECONFIGURE, "read by slurmctld; scontrol reconfigure applies it",
                            "topology.conf(5) https://slurm.schedmd.com/topology.conf.html; cluster-toolkit#6236"),
    "slurm/topology.yaml": (ImpactClass.RECONFIGURE, "read by slurmctld; scontrol reconfigure applies it",
                            "topology.yaml(5) https://slurm.schedmd.com/topology.yaml.html"),
    "slurm/slurmdbd.conf": (ImpactClass.RESTART_SLURMDBD, "read by slurmdbd at start",
                            "slurmdbd.conf(5) https://slurm.schedmd.com/slurmdbd.conf.html"),
    "slurm/prolog.d/dcgm-job-map.sh": (ImpactClass.NONE, "slurmd runs the prolog folder anew for each job",
                                       "slurm.conf(5) Prolog"),
    "slurm/epilog.d/dcgm-job-map.sh": (ImpactClass.NONE, "slurmd runs the epilog folder anew for each job",
                                       "slurm.conf(5) Epilog"),
    "dcgm/": (ImpactClass.NONE, "dcgm-exporter's counters: the dcgm role restarts dcgm-exporter on GPU nodes; no "
              "Slurm daemon or job is touched", "dcgm-exporter README (-f, counters file)"),
    "alertmanager/": (ImpactClass.NONE, "the monitoring role reloads Alertmanager on the monitoring server; no Slurm "
                      "daemon or job is touched", "Alertmanager docs, Configuration (reload)"),
    "grafana/": (ImpactClass.NONE, "dashboards: Grafana's file provider rescans its folder (updateIntervalSeconds); "
                 "no restart, no Slurm daemon or job is touched", "Grafana docs, Provisioning (dashboards)"),
    "nccl/": (ImpactClass.NONE, "NCCL reads /etc/nccl.conf when a job initialises it: new jobs get the change, "
              "running jobs keep theirs", "NCCL docs, Environment Variables (nccl.conf)"),
    "env/": (ImpactClass.NONE, "sourced by login shells and job environments: new jobs and sessions get it",
             "clusterforge render (profile.d)"),
    "jobs/": (ImpactClass.NONE, "sourced by login shells and batch scripts: new jobs and sessions get it",
              "clusterforge render (profile.d)"),
    "health/": (ImpactClass.NONE, "run anew by slurmd every HealthCheckInterval and around each job (its "
                "prolog and epilog); no restart", "slurm.conf(5) HealthCheckProgram, Prolog, Epilog"),
    "cloud/": (ImpactClass.NONE, "read by clusterforge's cloud agents each tick; no Slurm daemon or job is touched",
               "clusterforge render (render/agents.py)"),
    "prometheus/": (ImpactClass.NONE, "alerting rules: the monitoring role restarts Prometheus on the monitoring "
                    "server; no Slurm daemon or job is touched", "Prometheus docs, Alerting rules (rule_files)"),
}

#: The daemons each class restarts, in restart order (the role's handler order).
RESTARTS: dict[ImpactClass, tuple[str, ...]] = {
    ImpactClass.NONE: (),
    ImpactClass.RECONFIGURE: (),
    ImpactClass.RESTART_SLURMDBD: ("slurmdbd",),
    ImpactClass.RESTART_SLURMD: ("slurmd",),
    ImpactClass.RESTART_SLURMCTLD: ("slurmctld",),
    ImpactClass.RESTART_ALL: ("slurmctld", "slurmd"),
}


def file_rule(name: str, daemons: Iterable[str] = ()) -> tuple[ImpactClass, str, str]:
    """The file-level rule of a rendered file (``name`` as in the manifest)."""
    leaf = name.rsplit("/", 1)[-1]
    if leaf in BY_KEY:
        return BY_KEY[leaf]
    if name in FILE_RULES:
        return FILE_RULES[name]
    folder = name.split("/", 1)[0] + "/"
    if folder in FILE_RULES:
        return FILE_RULES[folder]
    ds = tuple(daemons)  # a file kind without a rule: restart what reads it
    if "slurmctld" in ds:
        return ImpactClass.RESTART_SLURMCTLD, f"read by {', '.join(ds)}", "render manifest"
    if "slurmd" in ds:
        return ImpactClass.RESTART_SLURMD, "read by slurmd", "render manifest"
    return ImpactClass.NONE, "no daemon reads it", "render manifest"


def on_change_for(name: str, daemons: Iterable[str] = (), where: Mapping[str, str] | None = None) -> OnChange:
    """The manifest's ``on_change`` of one file.

    ``where``: daemon -> the hosts (hostlist) that run it for this file; ``reconfigure`` runs where
    slurmctld does. The renderer passes it, so the manifest says which hosts a change touches."""
    cls, why, source = file_rule(name, daemons)
    action = "none" if cls is ImpactClass.NONE else "reconfigure" if cls is ImpactClass.RECONFIGURE else "restart"
    leaf = name.rsplit("/", 1)[-1]
    wanted = RESTARTS[cls] + (("slurmctld",) if cls is ImpactClass.RECONFIGURE else ())
    hosts = {
        ("reconfigure" if cls is ImpactClass.RECONFIGURE else d): where[d] for d in wanted if where and where.get(d)
    }
    return OnChange(action=action, restart=RESTARTS[cls], hosts=hosts, by_key=leaf in BY_KEY, why=why, source=source)


# ----------------------------------------------------------------------------- key by key


def _expand(expr: str) -> list[str]:
    return hostlist.expand(expr) if expr else []


def _compress(names: Iterable[str]) -> str:
    s = sorted(set(names))
    return hostlist.compress(s) if s else ""


def _kv_change(before: Mapping[str, str], after: Mapping[str, str], keys: Iterable[str]) -> str:
    return "; ".join(f"{k} {before.get(k, '(unset)')} -> {after.get(k, '(unset)')}" for k in sorted(keys))


def _per_node(records: ConfigRecords | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for r in records.nodes if records else ():
        for n in _expand(r.names):
            out[n] = r.params
    return out


def _gres_per_node(records: ConfigRecords | None) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for r in records.gres if records else ():
        for n in _expand(r.names):
            out.setdefault(n, []).extend(r.lines)
    return out


def all_slurmd_nodes(*sides: ConfigRecords | None) -> str:
    return _compress(n for s in sides if s for r in s.nodes for n in _expand(r.names))


def slurm_conf_impacts(
    name: str, a: ConfigRecords | None, b: ConfigRecords | None, v: tuple[int, ...] = (22, 5)
) -> list[Impact]:
    all_slurmd = all_slurmd_nodes(a, b)
    ga = {k: ",".join(vals) for k, vals in (a.slurm_globals if a else {}).items()}
    gb = {k: ",".join(vals) for k, vals in (b.slurm_globals if b else {}).items()}
    out: list[Impact] = []
    for key in sorted(set(ga) | set(gb)):
        va, vb = ga.get(key), gb.get(key)
        if va == vb:
            continue
        cls, why, source = global_rule(key, v)
        slurmd = all_slurmd if cls in (ImpactClass.RESTART_ALL, ImpactClass.RESTART_SLURMD) else ""
        drain = ""
        if key == "SlurmctldHost" and va is not None and not has(v, STEPD_CTLD):
            # up to 23.02 running steps keep reporting to the old controller
            why, source, drain = f"{why}; before 23.11 running jobs must be drained first", _src(STEPD_CTLD), slurmd
        out.append(Impact(name, key, f"{va or '(unset)'} -> {vb or '(unset)'}", cls, why, source, slurmd, drain))
    na, nb = _per_node(a), _per_node(b)
    added, removed = sorted(set(nb) - set(na)), sorted(set(na) - set(nb))
    nodes_by_reconf = has(v, NODE_CHANGES)
    if added or removed:
        change = "; ".join(
            [f"added {_compress(added)}"] * bool(added) + [f"removed {_compress(removed)}"] * bool(removed)
        )
        gone = " (drain the removed nodes first: their jobs are lost)" if removed else ""
        if nodes_by_reconf:
            out.append(
                Impact(
                    name, "NodeName (node set)", change, ImpactClass.RECONFIGURE,
                    f"Slurm {release(v)}: scontrol reconfigure applies node additions and removals{gone}",
                    _src(NODE_CHANGES), "", _compress(removed),
                )
            )
        else:
            out.append(
                Impact(
                    name, "NodeName (node set)", change, ImpactClass.RESTART_ALL,
                    f"Slurm {release(v)}: every daemon holds the node table: the FAQ's procedure restarts slurmctld "
                    f"and slurmd everywhere{gone}",
                    FAQ_NODES, all_slurmd, _compress(removed),
                )
            )
    # nodes on both sides, grouped by what changed so one line covers a whole node group
    groups: dict[tuple[str, frozenset[str]], list[str]] = {}
    for n in sorted(set(na) & set(nb)):
        pa, pb = na[n], nb[n]
        keys = frozenset(k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k))
        if keys:
            groups.setdefault((_kv_change(pa, pb, keys), keys), []).append(n)
    for (change, keys), nodes in sorted(groups.items()):
        hl = _compress(nodes)
        if nodes_by_reconf and keys & (NODE_ADDRESS | NODE_HARDWARE):
            hardware = bool(keys & NODE_HARDWARE)
            out.append(
                Impact(
                    name, f"NodeName={hl}", change, ImpactClass.RECONFIGURE,
                    f"Slurm {release(v)}: scontrol reconfigure applies node changes"
                    + ("; drain first: running jobs were placed on the old layout" if hardware else ""),
                    _src(NODE_CHANGES), "", hl if hardware else "",
                )
            )
        elif keys & NODE_ADDRESS:
            out.append(Impact(name, f"NodeName={hl}", change, ImpactClass.RESTART_ALL,
                              "every daemon reaches the node by its address", SLURM_CONF, all_slurmd))
        elif keys & NODE_HARDWARE:
            out.append(
                Impact(
                    name, f"NodeName={hl}", change, ImpactClass.RESTART_SLURMCTLD,
                    "hardware layout: slurmctld and the nodes' slurmd must change together or the nodes register "
                    "INVALID; running jobs were placed on the old layout",
                    f"{SLURM_CONF}; {STACKHPC}", hl, hl,
                )
            )
        else:
            out.append(Impact(name, f"NodeName={hl}", change, ImpactClass.RECONFIGURE,
                              "node attributes such as Features and Weight are applied by a reconfigure", SLURM_CONF))
    pa_all = a.partitions if a else {}
    pb_all = b.partitions if b else {}
    for part in sorted(set(pa_all) | set(pb_all)):
        qa, qb = pa_all.get(part), pb_all.get(part)
        if qa == qb:
            continue
        if qa is None:
            change = "added"
        elif qb is None:
            change = "removed (check `squeue -p " + part + "` is empty first)"
        else:
            change = _kv_change(qa, qb, [k for k in set(qa) | set(qb) if qa.get(k) != qb.get(k)])
        out.append(Impact(name, f"PartitionName={part}", change, ImpactClass.RECONFIGURE,
                          "partitions are applied by scontrol reconfigure", SLURM_CONF))
    return out


def _gres_keys(la: list[dict[str, str]], lb: list[dict[str, str]]) -> set[str]:
    """The keys whose values differ between two nodes' GRES lines (a value set per key)."""
    keys = {k for line in [*la, *lb] for k in line}
    return {k for k in keys if sorted(x.get(k, "") for x in la) != sorted(x.get(k, "") for x in lb)}


def _gres_rule(keys: set[str], v: tuple[int, ...]) -> tuple[ImpactClass, str, str]:
    """(class, why, source) of a node's changed GRES lines on release ``v``."""
    if "Cores" in keys:  # the same sentence in gres.conf(5) from 22.05 through 26.05
        return (ImpactClass.RESTART_SLURMCTLD, "gres.conf(5): a restart of slurmctld is needed for changes to Cores",
                f"{GRES_CONF} (Cores)")
    if "Type" in keys and not has(v, REEXEC):
        return (ImpactClass.RESTART_SLURMCTLD, "gres.conf(5) before 23.11: Type changes need slurmctld and slurmd "
                "restarted", f"{GRES_CONF} (Type) @slurm-22-05-0-1")
    if has(v, REEXEC):
        return (ImpactClass.RECONFIGURE, f"Slurm {release(v)}: reconfigure starts new slurmds, which read their "
                "devices", f"{_src(REEXEC)}; {GRES_CONF} (Type) @slurm-23-11-0-1")
    return ImpactClass.RESTART_SLURMD, "slurmd reads its devices at start", GRES_CONF


def gres_conf_impacts(
    name: str, a: ConfigRecords | None, b: ConfigRecords | None, v: tuple[int, ...] = (22, 5)
) -> list[Impact]:
    all_slurmd = all_slurmd_nodes(a, b)
    ga = a.gres_globals if a else {}
    gb = b.gres_globals if b else {}
    out: list[Impact] = []
    if ga != gb:
        keys = [k for k in set(ga) | set(gb) if ga.get(k) != gb.get(k)]
        if has(v, REEXEC):
            out.append(Impact(name, "global lines", _kv_change(ga, gb, keys), ImpactClass.RECONFIGURE,
                              f"Slurm {release(v)}: reconfigure starts new slurmds, which read gres.conf",
                              _src(REEXEC)))
        else:
            out.append(Impact(name, "global lines", _kv_change(ga, gb, keys), ImpactClass.RESTART_SLURMD,
                              "slurmd reads its GRES configuration at start", GRES_CONF, all_slurmd))
    na, nb = _gres_per_node(a), _gres_per_node(b)
    changed = [n for n in sorted(set(na) | set(nb)) if na.get(n) != nb.get(n)]
    # one line per rule, so a Cores change on some nodes does not restart slurmctld for the others
    by_rule: dict[tuple[ImpactClass, str, str], list[str]] = {}
    for n in changed:
        # only a node with as many devices as before has a changed Cores or Type; a new count (or an
        # added or removed node) is the count's rule: drain, and slurm.conf's Gres= carries slurmctld's side
        same = n in na and n in nb and len(na[n]) == len(nb[n])
        node_keys = _gres_keys(na[n], nb[n]) if same else set()
        by_rule.setdefault(_gres_rule(node_keys, v), []).append(n)
    for (cls, why, source), nodes in sorted(by_rule.items(), key=lambda kv: SEVERITY[kv[0][0]]):
        hl = _compress(nodes)
        recount = [n for n in nodes if len(na.get(n, [])) != len(nb.get(n, []))]
        drain = [n for n in recount if n in na]  # an added node runs no job to drain
        counts = sorted({f"{len(na.get(n, []))} -> {len(nb.get(n, []))} devices" for n in recount})
        out.append(
            Impact(
                name, f"NodeName={hl}", ("; ".join(counts) if counts else "device lines changed (same count)"),
                cls, why + ("; the GRES count changes, so drain first" if drain else ""),
                source, "" if cls is ImpactClass.RECONFIGURE else hl, _compress(drain),
            )
        )
    return out


def impacts(old: Manifest | None, new: Manifest | None, names: Iterable[str] | None = None) -> list[Impact]:
    """Every classified difference between two renders (``None``: nothing installed / removed).

    ``names`` limits the comparison to these files (the role passes the files it changed on a host).
    """
    of = {f.name: f for f in old.files} if old else {}
    nf = {f.name: f for f in new.files} if new else {}
    oc, nc = (old.config if old else None), (new.config if new else None)
    slurmd_all = all_slurmd_nodes(oc, nc)
    wanted = set(names) if names is not None else set(of) | set(nf)
    v = policy_version(old, new)
    out: list[Impact] = []
    if old is not None and new is not None and old.slurm_version != new.slurm_version:
        out.append(
            Impact(
                "(Slurm release)", "slurm_version", f"{old.slurm_version} -> {new.slurm_version}",
                ImpactClass.RESTART_ALL,
                "new daemons: upgrade slurmdbd first, then slurmctld, then the slurmds; no reconfigure switches "
                "binaries", UPGRADES, slurmd_all,
            )
        )
    for name in sorted(wanted):
        a, b = of.get(name), nf.get(name)
        if a is None and b is None:
            continue
        if a is not None and b is not None and a.sha256 == b.sha256:
            continue
        leaf = name.rsplit("/", 1)[-1]
        f = b or a
        assert f is not None
        if leaf in BY_KEY and (old is None or new is None):
            # first install or removal: no running daemon to spare, the file-level rule holds
            cls, why, source = BY_KEY[leaf]
            what = "added" if a is None else "removed"
            out.append(Impact(name, "whole file", what, cls, why, source, slurmd_all))
            continue
        if leaf == "slurm.conf":
            found = slurm_conf_impacts(name, oc, nc, v)
        elif leaf == "gres.conf":
            found = gres_conf_impacts(name, oc, nc, v)
        else:
            cls, why, source = file_rule(name, f.daemons)
            if name == "slurm/cgroup.conf" and has(v, REEXEC):
                cls, why, source = (ImpactClass.RECONFIGURE, f"Slurm {release(v)}: reconfigure starts new slurmds, "
                                    "which read cgroup.conf; running steps keep the limits they started with",
                                    f"{_src(REEXEC)}; {source}")
            what = "added" if a is None else "removed" if b is None else "changed"
            file_nodes = _compress(
                n for s in (oc, nc) if s for r in s.nodes if r.group in f.node_groups for n in _expand(r.names)
            )
            slurmd = (file_nodes or slurmd_all) if cls is ImpactClass.RESTART_SLURMD else ""
            found = [Impact(name, "whole file", what, cls, why, source, slurmd)]
        if not found:  # the bytes changed, no record did: comments or ordering only
            found = [Impact(name, "comments", "comments only", ImpactClass.NONE, "daemons ignore comments", "-")]
        out += found
    return out


def policy_version(old: Manifest | None, new: Manifest | None) -> tuple[int, ...]:
    """The release whose rules classify a change: the installed side's (its daemons run the
    reconfigure), else the new render's; 22.05 when neither is given."""
    side = old or new
    return version_tuple(side.slurm_version) if side else (22, 5)


def release_rule(v: tuple[int, ...]) -> str:
    """One sentence for the PR comment: what ``scontrol reconfigure`` applies on release ``v``."""
    r = release(v)
    if has(v, NODE_CHANGES):
        return (f"Slurm {r}: scontrol reconfigure starts new slurmctld and slurmd processes and applies plugin, "
                "GRES, cgroup and node changes, node additions and removals included; TCP ports, authentication, "
                f"SlurmUser, ClusterName, SlurmctldHost and the state directories need restarts ({_src(NODE_CHANGES)})")
    if has(v, REEXEC):
        return (f"Slurm {r}: scontrol reconfigure starts new slurmctld and slurmd processes and applies plugin, GRES "
                "and cgroup changes; adding, removing or changing nodes still restarts slurmctld and all slurmd "
                f"(the FAQ's procedure up to 24.05), as do TCP ports and authentication ({_src(REEXEC)})")
    return (f"Slurm {r}: scontrol reconfigure makes the running daemons re-read slurm.conf; plugins, TCP ports, "
            "authentication and adding or removing nodes restart slurmctld and all slurmd (scontrol(1) reconfigure "
            "@slurm-22-05-0-1; FAQ add_nodes)")


def host_actions(found: Iterable[Impact], *, host: str, controller: bool, compute: bool, dbd: bool) -> list[str]:
    """The daemon actions one host runs for these impacts, in handler order.

    ``restart slurmdbd``, ``restart slurmctld``, ``reconfigure``, ``restart slurmd``: the Slurm role's
    handlers of the same names. A restart of slurmctld makes a reconfigure redundant.
    """
    acts: set[str] = set()
    for i in found:
        if i.cls is ImpactClass.RESTART_SLURMDBD and dbd:
            acts.add("restart slurmdbd")
        if i.cls in (ImpactClass.RESTART_ALL, ImpactClass.RESTART_SLURMCTLD) and controller:
            acts.add("restart slurmctld")
        if i.cls is ImpactClass.RECONFIGURE and controller:
            acts.add("reconfigure")
        if compute and i.cls in (ImpactClass.RESTART_ALL, ImpactClass.RESTART_SLURMD, ImpactClass.RESTART_SLURMCTLD):
            nodes = set(_expand(i.slurmd_nodes)) if i.slurmd_nodes else None
            if i.cls is ImpactClass.RESTART_SLURMCTLD and nodes is None:
                continue  # a controller-only change
            if nodes is None or host in nodes:
                acts.add("restart slurmd")
    if "restart slurmctld" in acts:
        acts.discard("reconfigure")
    order = ["restart slurmdbd", "restart slurmctld", "reconfigure", "restart slurmd"]
    return [a for a in order if a in acts]


# ----------------------------------------------------------------------------- summary


class Operations(NamedTuple):
    """What the whole change asks of the operator, in the order to do it."""

    cls: ImpactClass
    steps: tuple[str, ...]
    rule: str = ""
    """What reconfigure applies on the release the impacts were classified for (``release_rule``)."""


def summarise(impacts: list[Impact], *, retired: str = "", version: tuple[int, ...] | None = None) -> Operations:
    """``retired``: cloud nodes retire.py drains and terminates before configure (neither drained
    nor given slurmd actions here: their instances are gone). ``version``: the release the impacts
    were classified for (``policy_version``); it names the rule in ``Operations.rule``."""
    rule = release_rule(version) if version else ""
    if not impacts:
        return Operations(ImpactClass.NONE, (), rule)
    top = max((i.cls for i in impacts), key=SEVERITY.__getitem__)
    gone = set(_expand(retired))
    drain = _compress(n for i in impacts if i.drain_nodes for n in _expand(i.drain_nodes) if n not in gone)
    slurmd = _compress(
        n for i in impacts if i.slurmd_nodes and i.cls is not ImpactClass.RECONFIGURE for n in _expand(i.slurmd_nodes)
        if n not in gone
    )
    ctld = any(i.cls in (ImpactClass.RESTART_ALL, ImpactClass.RESTART_SLURMCTLD) for i in impacts)
    dbd = any(i.cls is ImpactClass.RESTART_SLURMDBD for i in impacts)
    reconf = any(i.cls is ImpactClass.RECONFIGURE for i in impacts)
    # Stopped before slurmctld restarts: only drained nodes, once their jobs ended. A node that still
    # runs jobs is never stopped (a slurmd down longer than SlurmdTimeout marks it DOWN, which kills
    # them); its slurmd restarts after slurmctld instead. The Slurm role does the same
    # (roles/slurm/tasks/prepare.yml, from slurm_rollout).
    stop = _compress(set(_expand(slurmd)) & set(_expand(drain))) if ctld else ""
    rest = _compress(set(_expand(slurmd)) - set(_expand(stop)))
    steps: list[str] = []
    if drain:
        steps.append(f'scontrol update NodeName={drain} State=DRAIN Reason="config change" and wait for their jobs')
    if stop:
        steps.append(f"stop slurmd on {stop} (a node must not re-register while slurmctld restarts: {STACKHPC})")
    steps.append("install the new configs (ansible-playbook playbooks/site.yml)")
    if dbd:
        steps.append("restart slurmdbd")
    if ctld:
        steps.append("restart slurmctld")
    if stop:
        steps.append(f"start slurmd on {stop}")
    if rest:
        steps.append(f"restart slurmd on {rest}")
    if reconf and not ctld:
        steps.append("scontrol reconfigure")
    if drain:
        steps.append(f"scontrol update NodeName={drain} State=RESUME (nodes that still exist)")
    if top is ImpactClass.NONE:
        steps = ["install the new configs; no daemon action (new jobs pick the change up)"]
    return Operations(top, tuple(steps), rule)
