"""What the real daemons reported against what the render meant: parsing ``scontrol show …``
output into records, and comparing them with the manifest's typed ``expect``
(``clusterforge.render.manifest.Expect``). Pure functions: no processes, no config text."""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from clusterforge import hostlist
from clusterforge.check.report import CheckReport, ProblemKind
from clusterforge.render.manifest import Expect, ExpectNode

__all__ = [
    "bad_hostlists",
    "compare_config",
    "compare_nodes",
    "compare_partitions",
    "compare_topology",
    "names",
    "norm_gres",
    "parse_config",
    "parse_kv",
    "records",
    "slurm_seconds",
    "topoconf_plugin",
]


def names(expr: str | None) -> list[str]:
    """A hostlist from ``expect`` (checked by ``bad_hostlists`` first) or from scontrol, expanded;
    scontrol's ``(null)`` and an empty field are no names."""
    if not expr or expr == "(null)":
        return []
    return hostlist.expand(expr)


def bad_hostlists(expect: Expect) -> list[str]:
    """Every hostlist of ``expect`` that does not expand, as "where: why"."""
    fields: list[tuple[str, str | None]] = []
    for n in expect.nodes:
        fields += [(f"expect.nodes {n.names}", n.names), (f"gpu_files of {n.names}", n.gpu_files)]
    fields += [(f"nodes of partition {p.name}", p.nodes) for p in expect.partitions]
    for s in expect.topology.switches:
        fields += [(f"nodes of switch {s.name}", s.nodes), (f"switches of switch {s.name}", s.switches)]
    fields += [(f"nodes of block {b.name}", b.nodes) for b in expect.topology.blocks]
    out: list[str] = []
    for where, expr in fields:
        try:
            names(expr)
        except hostlist.HostlistError as exc:
            out.append(f"{where}: {exc}")
    return out


_KV_START = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/]*)=")


def parse_kv(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces`` (scontrol -o) → dict; a value runs to the next key.

    One ``split`` on the keys: ``[before, key, value, key, value, …]`` (65,536 node records in
    about a second; the last of a repeated key wins)."""
    parts = _KV_START.split(line)
    return dict(zip(parts[1::2], [v.strip() for v in parts[2::2]], strict=True))


def records(text: str, first_key: str) -> dict[str, dict[str, str]]:
    """``scontrol show node -o``-style output: one record per line, keyed by ``first_key``."""
    recs: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(first_key + "="):
            kv = parse_kv(line)
            recs[kv[first_key]] = kv
    return recs


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key   = value`` lines (the daemon's view, not the file's)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def slurm_seconds(v: str | None) -> int | None:
    """Slurm time limits (``3-00:00:00``, ``72:00:00``, ``90``, ``UNLIMITED``) → seconds; None=∞."""
    if v is None:
        return None
    v = v.strip()
    if v.upper() in ("", "INFINITE", "UNLIMITED", "NONE", "-1"):
        return None
    days = 0
    if "-" in v:
        d, v = v.split("-", 1)
        days = int(d)
        parts = [int(p) for p in v.split(":")]  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [int(p) for p in v.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0  # minutes
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]  # minutes:seconds
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def norm_gres(v: str | None) -> list[str]:
    """``gpu:h100:8(S:0-1),nic:1`` → sorted entries without the socket-affinity suffix."""
    if not v or v == "(null)":
        return []
    return sorted(re.sub(r"\(S:[^)]*\)", "", e).strip() for e in v.split(",") if e.strip())


def _features(v: str | None) -> set[str]:
    if not v or v == "(null)":
        return set()
    return {f.strip() for f in v.split(",") if f.strip()}


def _hostset(expr: str | None) -> set[str]:
    try:
        return set(names(expr))
    except hostlist.HostlistError:
        return {expr or ""}


_HOST = re.compile(r"([^()\s]+)(?:\(([^)]*)\))?")
# topology/default was renamed topology/flat ("topology/flat (no topology)": Slurm 26.05
# RELEASE_NOTES.md); 25.05+ prints it for a slurm.conf without TopologyPlugin
_NO_TOPOLOGY = (None, "", "(null)", "topology/none", "topology/default", "topology/flat")
# the plugin keys of a topology.yaml entry (slurm 25.05+ topology.yaml(5))
_TOPOCONF_PLUGINS = ("block", "tree", "ring", "torus3d", "flat")


def topoconf_plugin(text: str) -> str | None:
    """The plugin of the cluster's default topology from ``scontrol show topoconf`` (25.05+),
    which prints the topologies slurmctld loaded as YAML, every plugin key of an entry with the
    unused ones as ``{}`` (so the plugin is the key with content; none = ``topology/flat``).
    None when no entry is the cluster default: slurmctld read slurm.conf's TopologyPlugin and
    topology.conf, and shows them as ``- topology: default / cluster_default: false`` with every
    key empty (seen with 26.05.5), so ``show config``'s TopologyPlugin holds."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    default = next((e for e in entries if e.get("cluster_default") is True), None)
    if default is None:
        return None
    used = [k for k in _TOPOCONF_PLUGINS if default.get(k)]
    return f"topology/{used[0]}" if used else "topology/flat"


def compare_config(report: CheckReport, config: dict[str, str], expect: Expect) -> None:
    """What slurmctld runs with (``scontrol show config``): its controllers, in order, and the
    topology plugin."""
    for i, want in enumerate(expect.controllers):
        got = config.get(f"SlurmctldHost[{i}]")
        m = _HOST.fullmatch(got or "")
        if m is None:
            report.add(ProblemKind.CONTROLLER_MISMATCH, f"slurmctld has no SlurmctldHost[{i}] (expected {want.name})")
            continue
        name, addr = m.group(1), m.group(2) or None
        if name != want.name:
            report.add(ProblemKind.CONTROLLER_MISMATCH, f"SlurmctldHost[{i}] is {name} (expected {want.name})")
        elif addr != want.address:
            report.add(
                ProblemKind.CONTROLLER_MISMATCH,
                f"SlurmctldHost[{i}] address is {addr or 'not set'} (expected {want.address or 'not set'})",
            )
    extra = [v for k, v in config.items() if k.startswith("SlurmctldHost[")][len(expect.controllers) :]
    for v in extra:
        report.add(ProblemKind.CONTROLLER_MISMATCH, f"slurmctld has controller {v}, which expect does not list")
    plugin = config.get("TopologyPlugin")
    plugin = None if plugin in _NO_TOPOLOGY else plugin
    if plugin != expect.topology.plugin:
        report.add(ProblemKind.TOPOLOGY_MISMATCH, f"TopologyPlugin={plugin} (expected {expect.topology.plugin})")


def compare_nodes(report: CheckReport, expect: Expect) -> None:
    expected: set[str] = set()
    gres: dict[str | None, list[str]] = {}  # scontrol's Gres= text -> norm_gres: a few per cluster
    features: dict[str | None, set[str]] = {}
    for node in expect.nodes:
        want = _NodeWant.of(node)
        for n in names(node.names):
            expected.add(n)
            got = report.nodes.get(n)
            if got is None:
                report.add(ProblemKind.NODE_MISSING, f"slurmctld does not know node {n} (group {node.group})", n)
                continue
            g, f = got.get("Gres"), got.get("AvailableFeatures")
            if g not in gres:
                gres[g] = norm_gres(g)
            if f not in features:
                features[f] = _features(f)
            _compare_node(report, node, want, n, got, gres[g], features[f])
    for n in sorted(set(report.nodes) - expected):
        report.add(ProblemKind.NODE_UNEXPECTED, f"slurmctld knows node {n}, which expect does not list", n)


@dataclass(frozen=True)
class _NodeWant:
    """What every node of an ``expect.nodes`` entry must show, worked out once per entry."""

    ints: tuple[tuple[str, str], ...]  # (scontrol key, expected text) of the numbers expect gives
    gres: list[str]
    features: set[str]

    @classmethod
    def of(cls, node: ExpectNode) -> _NodeWant:
        # expect.sockets is per board (slurm.conf SocketsPerBoard); scontrol's "Sockets" is the
        # node's total (Boards=2 SocketsPerBoard=2 prints Sockets=4).
        sockets = None if node.sockets is None else node.sockets * (node.boards or 1)
        ints = (
            ("CPUTot", node.cpus),
            ("Boards", node.boards),
            ("Sockets", sockets),
            ("CoresPerSocket", node.cores_per_socket),
            ("ThreadsPerCore", node.threads_per_core),
            ("RealMemory", node.real_memory),
            ("Weight", node.weight),
        )
        return cls(tuple((k, str(v)) for k, v in ints if v is not None), norm_gres(node.gres), set(node.features))


def _compare_node(
    report: CheckReport,
    node: ExpectNode,
    want: _NodeWant,
    n: str,
    got: dict[str, str],
    got_gres: list[str],
    got_features: set[str],
) -> None:
    diffs = [f"{k}={got.get(k)} (expected {v})" for k, v in want.ints if got.get(k) != v]
    want_gres = want.gres
    if want_gres and not got_gres:
        report.add(
            ProblemKind.GRES_DROPPED,
            f"node {n}: Gres=(null) but expected {node.gres}; slurmctld drops GRES silently when "
            "GresTypes does not name them",
            n,
        )
    elif want_gres != got_gres:
        diffs.append(f"Gres={got.get('Gres')} (expected {node.gres})")
    if got_features != want.features:
        diffs.append(f"AvailableFeatures={got.get('AvailableFeatures')} (expected {','.join(node.features)})")
    if diffs:
        report.add(ProblemKind.NODE_MISMATCH, f"node {n}: " + "; ".join(diffs), n)


def compare_partitions(report: CheckReport, expect: Expect) -> None:
    for p in expect.partitions:
        got = report.partitions.get(p.name)
        if got is None:
            report.add(ProblemKind.PARTITION_MISSING, f"slurmctld has no partition {p.name}", p.name)
            continue
        diffs: list[str] = []
        if _hostset(got.get("Nodes")) != set(names(p.nodes)):
            diffs.append(f"Nodes={got.get('Nodes')} (expected {p.nodes})")
        if (got.get("Default") == "YES") != p.default:
            diffs.append(f"Default={got.get('Default')} (expected {'YES' if p.default else 'NO'})")
        try:
            same = slurm_seconds(got.get("MaxTime")) == slurm_seconds(p.max_time)
        except ValueError:
            same = got.get("MaxTime") == p.max_time
        if not same:
            diffs.append(f"MaxTime={got.get('MaxTime')} (expected {p.max_time})")
        if diffs:
            report.add(ProblemKind.PARTITION_MISMATCH, f"partition {p.name}: " + "; ".join(diffs), p.name)
    for name in sorted(set(report.partitions) - {p.name for p in expect.partitions}):
        report.add(ProblemKind.PARTITION_MISMATCH, f"slurmctld has partition {name}, which expect does not list", name)


def compare_topology(report: CheckReport, expect: Expect, block_sizes: tuple[int, ...] = ()) -> None:
    """Switches (topology/tree) and blocks (topology/block), by name."""
    _compare_switches(report, expect)
    _compare_blocks(report, expect, block_sizes)


def _compare_switches(report: CheckReport, expect: Expect) -> None:
    """slurmctld lists under Nodes= every node below a switch, so the expected node set of an
    upper switch is the union over its subtree."""
    by_name = {s.name: s for s in expect.topology.switches}

    def subtree_nodes(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        s = by_name.get(name)
        if s is None or name in seen:
            return set()
        out = set(names(s.nodes))
        for child in names(s.switches):
            out |= subtree_nodes(child, seen | {name})
        return out

    for s in expect.topology.switches:
        got = report.topology.get(s.name)
        if got is None:
            report.add(ProblemKind.TOPOLOGY_MISMATCH, f"slurmctld has no switch {s.name}", s.name)
            continue
        diffs: list[str] = []
        want_nodes = subtree_nodes(s.name)
        if _hostset(got.get("Nodes")) != want_nodes:
            diffs.append(f"Nodes={got.get('Nodes')} (expected {hostlist.compress(want_nodes) or 'none'})")
        if _hostset(got.get("Switches")) != set(names(s.switches)):
            diffs.append(f"Switches={got.get('Switches', '(none)')} (expected {s.switches or 'none'})")
        if diffs:
            report.add(ProblemKind.TOPOLOGY_MISMATCH, f"switch {s.name}: " + "; ".join(diffs), s.name)
    for name in sorted(set(report.topology) - set(by_name)):
        report.add(ProblemKind.TOPOLOGY_MISMATCH, f"slurmctld has switch {name}, which expect does not list", name)


def _compare_blocks(report: CheckReport, expect: Expect, block_sizes: tuple[int, ...]) -> None:
    """``BlockName=b BlockIndex=0 Nodes=… BlockSize=16`` per block, then one
    ``AggregatedBlock=b1,b2 … BlockSize=32`` per group of blocks that a larger BlockSizes entry
    joins (24.11 and 26.05 print the same). The base blocks' BlockSize is the first BlockSizes
    entry, and every aggregate's is one of the larger ones."""
    want = {b.name: b for b in expect.topology.blocks}
    base = report.blocks
    for b in expect.topology.blocks:
        got = base.get(b.name)
        if got is None:
            report.add(ProblemKind.TOPOLOGY_MISMATCH, f"slurmctld has no block {b.name}", b.name)
            continue
        diffs: list[str] = []
        if _hostset(got.get("Nodes")) != set(names(b.nodes)):
            diffs.append(f"Nodes={got.get('Nodes')} (expected {b.nodes})")
        if block_sizes and got.get("BlockSize") != str(block_sizes[0]):
            diffs.append(f"BlockSize={got.get('BlockSize')} (expected {block_sizes[0]}, the first BlockSizes)")
        if diffs:
            report.add(ProblemKind.TOPOLOGY_MISMATCH, f"block {b.name}: " + "; ".join(diffs), b.name)
    for name in sorted(set(base) - set(want)):
        report.add(ProblemKind.TOPOLOGY_MISMATCH, f"slurmctld has block {name}, which expect does not list", name)
    for name, agg in sorted(report.aggregated_blocks.items()):
        members = [m for m in name.split(",") if m]
        union = set().union(*(set(names(want[m].nodes)) for m in members if m in want))
        diffs = []
        if _hostset(agg.get("Nodes")) != union:
            diffs.append(f"Nodes={agg.get('Nodes')} (expected {hostlist.compress(union) or 'none'})")
        if block_sizes and agg.get("BlockSize") not in {str(s) for s in block_sizes[1:]}:
            diffs.append(f"BlockSize={agg.get('BlockSize')} (expected one of BlockSizes {block_sizes[1:]})")
        if diffs:
            report.add(ProblemKind.TOPOLOGY_MISMATCH, f"aggregated block {name}: " + "; ".join(diffs), name)
