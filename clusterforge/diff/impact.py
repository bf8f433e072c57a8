"""What a change to the rendered configs does to a *running* cluster.

Each changed file is compared key by key (``slurm.conf`` globals, ``NodeName`` lines per node,
``PartitionName`` lines; ``gres.conf`` lines per node) and every difference is classified by the
tables below: no action, ``scontrol reconfigure``, a restart of slurmdbd, of slurmd on which
nodes, of slurmctld, or of all daemons, and whether nodes must be drained first.

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

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from clusterforge import hostlist
from clusterforge.errors import ClusterforgeError


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

#: slurm.conf parameters that a reconfigure does not apply (the "unless otherwise noted" of
#: slurm.conf(5), plus the TCP listening settings). Anything not listed: ``scontrol reconfigure``.
GLOBAL_KEYS: dict[str, tuple[ImpactClass, str]] = {
    # every daemon and client must agree on these; mixed values cut communication
    "AuthType": (ImpactClass.RESTART_ALL, "authentication plugin: all daemons must change together"),
    "CredType": (ImpactClass.RESTART_ALL, "job credential plugin: all daemons must change together"),
    "AuthAltTypes": (ImpactClass.RESTART_ALL, "authentication plugin: all daemons must change together"),
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
    # slurmd only
    "SlurmdSpoolDir": (ImpactClass.RESTART_SLURMD, "slurmd keeps its state there; read at start"),
    "SlurmdPidFile": (ImpactClass.RESTART_SLURMD, "written at start"),
    "SlurmdUser": (ImpactClass.RESTART_SLURMD, "slurmd runs as it"),
}

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


@dataclass(frozen=True)
class Impact:
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


# ----------------------------------------------------------------------------- parsing

_COMMENT = re.compile(r"(^|\s)#.*$")


def _lines(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        line = _COMMENT.sub("", raw).strip()
        if line:
            out.append(line)
    return out


def _params(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in line.split():
        k, _, v = tok.partition("=")
        out[k] = v
    return out


def _expand(expr: str) -> list[str]:
    try:
        return hostlist.expand(expr)
    except (ClusterforgeError, ValueError):
        return [expr]


@dataclass
class SlurmConf:
    globals: dict[str, str]
    nodes: dict[str, dict[str, str]]
    partitions: dict[str, dict[str, str]]


def parse_slurm_conf(text: str) -> SlurmConf:
    conf = SlurmConf({}, {}, {})
    for line in _lines(text):
        key = line.split("=", 1)[0]
        if key.lower() == "nodename":
            p = _params(line)
            names = p.pop(key)
            for n in _expand(names):
                conf.nodes[n] = p
        elif key.lower() == "partitionname":
            p = _params(line)
            conf.partitions[p.pop(key)] = p
        else:
            k, _, v = line.partition("=")
            conf.globals[k.strip()] = v.strip()
    return conf


def _gres_by_node(text: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``gres.conf``: per node the GRES lines (without ``NodeName=``), and the global lines."""
    nodes: dict[str, list[str]] = {}
    glob: dict[str, str] = {}
    for line in _lines(text):
        p = _params(line)
        names = next((v for k, v in p.items() if k.lower() == "nodename"), None)
        if names is None:
            k, _, v = line.partition("=")
            glob[k] = v
            continue
        rest = " ".join(t for t in line.split() if not t.lower().startswith("nodename="))
        for n in _expand(names):
            nodes.setdefault(n, []).append(rest)
    return nodes, glob


def _compress(names: Iterable[str]) -> str:
    names = sorted(set(names))
    if not names:
        return ""
    try:
        return hostlist.compress(names)
    except (ClusterforgeError, ValueError):
        return ",".join(names)


def _kv_change(before: Mapping[str, str], after: Mapping[str, str], keys: Iterable[str]) -> str:
    return "; ".join(
        f"{k} {before.get(k, '(unset)')} -> {after.get(k, '(unset)')}" for k in sorted(keys)
    )


# ----------------------------------------------------------------------------- per file


def _slurm_conf(name: str, before: str, after: str, all_slurmd: str) -> list[Impact]:
    a, b = parse_slurm_conf(before), parse_slurm_conf(after)
    out: list[Impact] = []
    for key in sorted(set(a.globals) | set(b.globals)):
        va, vb = a.globals.get(key), b.globals.get(key)
        if va == vb:
            continue
        cls, why = GLOBAL_KEYS.get(key, (ImpactClass.RECONFIGURE, "applied by scontrol reconfigure"))
        slurmd = all_slurmd if cls in (ImpactClass.RESTART_ALL, ImpactClass.RESTART_SLURMD) else ""
        out.append(Impact(name, key, f"{va or '(unset)'} -> {vb or '(unset)'}", cls, why, SLURM_CONF, slurmd))
    added = sorted(set(b.nodes) - set(a.nodes))
    removed = sorted(set(a.nodes) - set(b.nodes))
    if added or removed:
        change = "; ".join(
            [f"added {_compress(added)}"] * bool(added) + [f"removed {_compress(removed)}"] * bool(removed)
        )
        out.append(
            Impact(
                name, "NodeName (node set)", change, ImpactClass.RESTART_ALL,
                "every daemon holds the node table: the FAQ's procedure restarts slurmctld and slurmd everywhere"
                + (" (drain the removed nodes first: their jobs are lost)" if removed else ""),
                FAQ_NODES, all_slurmd, _compress(removed),
            )
        )
    # nodes on both sides, grouped by what changed so one line covers a whole node group
    groups: dict[tuple[str, frozenset[str]], list[str]] = {}
    for n in sorted(set(a.nodes) & set(b.nodes)):
        pa, pb = a.nodes[n], b.nodes[n]
        keys = frozenset(k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k))
        if keys:
            groups.setdefault((_kv_change(pa, pb, keys), keys), []).append(n)
    for (change, keys), nodes in sorted(groups.items()):
        hl = _compress(nodes)
        if keys & NODE_ADDRESS:
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
    for part in sorted(set(a.partitions) | set(b.partitions)):
        qa, qb = a.partitions.get(part), b.partitions.get(part)
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


def _gres_conf(name: str, before: str, after: str, all_slurmd: str) -> list[Impact]:
    (na, ga), (nb, gb) = _gres_by_node(before), _gres_by_node(after)
    out: list[Impact] = []
    if ga != gb:
        keys = [k for k in set(ga) | set(gb) if ga.get(k) != gb.get(k)]
        out.append(Impact(name, "global lines", _kv_change(ga, gb, keys),
                          ImpactClass.RESTART_SLURMD, "slurmd reads its GRES configuration at start",
                          "gres.conf(5) https://slurm.schedmd.com/gres.conf.html", all_slurmd))
    changed = [n for n in sorted(set(na) | set(nb)) if na.get(n) != nb.get(n)]
    recount = [n for n in changed if len(na.get(n, [])) != len(nb.get(n, []))]
    if changed:
        hl = _compress(changed)
        counts = sorted({f"{len(na.get(n, []))} -> {len(nb.get(n, []))} devices" for n in recount})
        out.append(
            Impact(
                name, f"NodeName={hl}",
                ("; ".join(counts) if counts else "device lines changed (same count)"),
                ImpactClass.RESTART_SLURMD,
                "slurmd reads its devices at start" + ("; the GRES count changes, so drain first" if recount else ""),
                "gres.conf(5) https://slurm.schedmd.com/gres.conf.html", hl, _compress(recount),
            )
        )
    return out


#: Files without key-level rules, by folder or name: (class, why, source).
FILE_RULES: dict[str, tuple[ImpactClass, str, str]] = {
    "slurm/cgroup.conf": (ImpactClass.RESTART_SLURMD, "read by slurmd and the slurmstepd it starts",
                          "cgroup.conf(5) https://slurm.schedmd.com/cgroup.conf.html"),
    "slurm/topology.conf": (ImpactClass.RECONFIGURE, "read by slurmctld; scontrol reconfigure applies it",
                            "topology.conf(5) https://slurm.schedmd.com/topology.conf.html; cluster-toolkit#6236"),
    "slurm/topology.yaml": (ImpactClass.RECONFIGURE, "read by slurmctld; scontrol reconfigure applies it",
                            "topology.yaml(5) https://slurm.schedmd.com/topology.yaml.html"),
    "slurm/slurmdbd.conf": (ImpactClass.RESTART_SLURMDBD, "read by slurmdbd at start",
                            "slurmdbd.conf(5) https://slurm.schedmd.com/slurmdbd.conf.html"),
    "nccl/": (ImpactClass.NONE, "NCCL reads /etc/nccl.conf when a job initialises it: new jobs get the change, "
              "running jobs keep theirs", "NCCL docs, Environment Variables (nccl.conf)"),
    "env/": (ImpactClass.NONE, "sourced by login shells and job environments: new jobs and sessions get it",
             "clusterforge render (profile.d)"),
    "health/": (ImpactClass.NONE, "run anew by slurmd every HealthCheckInterval; no restart",
                "slurm.conf(5) HealthCheckProgram"),
    "prometheus/": (ImpactClass.NONE, "alerting rules: the monitoring role restarts Prometheus on the monitoring "
                    "server; no Slurm daemon or job is touched", "Prometheus docs, Alerting rules (rule_files)"),
}


def _rule_for(name: str) -> tuple[ImpactClass, str, str] | None:
    if name in FILE_RULES:
        return FILE_RULES[name]
    folder = name.split("/", 1)[0] + "/"
    return FILE_RULES.get(folder)


def classify_file(
    name: str,
    before: str | None,
    after: str | None,
    *,
    slurmd_nodes: str,
    file_nodes: str,
    daemons: tuple[str, ...] = (),
) -> list[Impact]:
    """Impacts of one rendered file changing from ``before`` to ``after`` (``None``: absent).

    ``slurmd_nodes``: every node running slurmd (hostlist); ``file_nodes``: the nodes that get this
    file; ``daemons``: the services that read it (from the render manifest, for files without rules).
    """
    if before == after:
        return []
    b, a = before or "", after or ""
    if before is not None and after is not None and _lines(b) == _lines(a):
        return [Impact(name, "comments", "comments only", ImpactClass.NONE, "daemons ignore comments", "-")]
    leaf = name.rsplit("/", 1)[-1]
    if leaf == "slurm.conf":
        return _slurm_conf(name, b, a, slurmd_nodes)
    if leaf == "gres.conf":
        return _gres_conf(name, b, a, file_nodes or slurmd_nodes)
    what = "added" if before is None else "removed" if after is None else "changed"
    rule = _rule_for(name)
    if rule is None:  # a file type without rules: restart what the manifest says reads it
        if "slurmctld" in daemons:
            rule = (ImpactClass.RESTART_SLURMCTLD, f"read by {', '.join(daemons)}", "render manifest")
        elif "slurmd" in daemons:
            rule = (ImpactClass.RESTART_SLURMD, "read by slurmd", "render manifest")
        else:
            rule = (ImpactClass.NONE, "no daemon reads it", "render manifest")
    cls, why, source = rule
    slurmd = (file_nodes or slurmd_nodes) if cls is ImpactClass.RESTART_SLURMD else ""
    return [Impact(name, "whole file", what, cls, why, source, slurmd)]


# ----------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class Operations:
    """What the whole change asks of the operator, in the order to do it."""

    cls: ImpactClass
    steps: tuple[str, ...]


def summarise(impacts: list[Impact]) -> Operations:
    if not impacts:
        return Operations(ImpactClass.NONE, ())
    top = max((i.cls for i in impacts), key=SEVERITY.__getitem__)
    drain = _compress(n for i in impacts if i.drain_nodes for n in _expand(i.drain_nodes))
    slurmd = _compress(
        n for i in impacts if i.slurmd_nodes and i.cls is not ImpactClass.RECONFIGURE for n in _expand(i.slurmd_nodes)
    )
    ctld = any(i.cls in (ImpactClass.RESTART_ALL, ImpactClass.RESTART_SLURMCTLD) for i in impacts)
    dbd = any(i.cls is ImpactClass.RESTART_SLURMDBD for i in impacts)
    reconf = any(i.cls is ImpactClass.RECONFIGURE for i in impacts)
    steps: list[str] = []
    if drain:
        steps.append(f'scontrol update NodeName={drain} State=DRAIN Reason="config change" and wait for their jobs')
    if ctld and slurmd:
        steps.append(f"stop slurmd on {slurmd} (a node must not re-register while slurmctld restarts: {STACKHPC})")
    steps.append("install the new configs (ansible-playbook playbooks/site.yml)")
    if dbd:
        steps.append("restart slurmdbd")
    if ctld:
        steps.append("restart slurmctld")
    if slurmd:
        steps.append(f"{'start' if ctld else 'restart'} slurmd on {slurmd}")
    if reconf and not ctld:
        steps.append("scontrol reconfigure")
    if drain:
        steps.append(f"scontrol update NodeName={drain} State=RESUME (nodes that still exist)")
    if top is ImpactClass.NONE:
        steps = ["install the new configs; no daemon action (new jobs pick the change up)"]
    return Operations(top, tuple(steps))
