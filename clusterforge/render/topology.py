"""Network topology: spec switches, rack placements and EC2 instance topology -> one tree.

Slurm's topology/tree needs a single root for jobs to span subtrees, leaves that hold nodes and
inner switches that hold switches (never both, slurmctld fatals). Blocks (NVLink domains) use
topology/block from 23.11. A plugin is only configured when the file it reads is populated.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from clusterforge import hostlist
from clusterforge.clusterspec.models import Cluster
from clusterforge.errors import RenderError
from clusterforge.render.model import BlockModel, NodeSet, SwitchModel, TopologyModel
from clusterforge.render.yamlfile import dump_yaml

UNPLACED = "unplaced"
EC2_ROOT = "ec2-root"


def _ec2_paths(path: Path) -> dict[str, list[str]]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RenderError(f"topology.ec2_instance_topology {str(path)!r}: cannot read JSON ({exc})") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and v and all(isinstance(x, str) for x in v) for v in raw.values()
    ):
        raise RenderError(
            f"topology.ec2_instance_topology {str(path)!r}: expected an object mapping node name to its "
            'NetworkNodes list (top layer first), e.g. {"gpu-001": ["nn-1", "nn-2", "nn-3"]}'
        )
    return {str(k): [str(x) for x in v] for k, v in raw.items()}


def _switch_name(network_node: str) -> str:
    # EC2 network-node ids (nn-0123abcd...) are valid Slurm switch names; keep them as they are so
    # the file can be compared with `aws ec2 describe-instance-topology` output.
    return network_node


def build_topology(cluster: Cluster, nodesets: tuple[NodeSet, ...], base_dir: Path) -> TopologyModel:
    t = cluster.topology
    compute = [n for n in nodesets if n.role == "compute"]
    if t.plugin == "none":
        return TopologyModel(plugin=None)
    want_block = t.plugin == "block" or (t.plugin == "auto" and bool(t.blocks) and not t.switches)
    if want_block:
        blocks = tuple(BlockModel(b.name, hostlist.compress(hostlist.expand(b.hosts))) for b in t.blocks)
        return TopologyModel(plugin="topology/block", blocks=blocks, block_sizes=tuple(t.block_sizes))

    parent: dict[str, str | None] = {s.name: s.parent for s in t.switches}
    leaf_nodes: dict[str, set[str]] = {}
    comments: dict[str, str] = {}
    for g in cluster.node_groups:
        if g.onprem is None or g.role != "compute":
            continue
        for pl in g.onprem.placement:
            leaf_nodes.setdefault(pl.switch, set()).update(hostlist.expand(pl.hosts))
            comments.setdefault(pl.switch, f"rack {pl.rack}")

    ec2: dict[str, list[str]] = {}
    if t.ec2_instance_topology:
        ec2 = _ec2_paths(base_dir / t.ec2_instance_topology)
        for node, path in sorted(ec2.items()):
            names = [_switch_name(x) for x in path]
            for upper, lower in itertools.pairwise(names):
                parent.setdefault(lower, upper)
            parent.setdefault(names[0], None)
            leaf_nodes.setdefault(names[-1], set()).add(node)
            comments.setdefault(names[-1], "EC2 network node (bottom layer)")

    if not parent:
        return TopologyModel(plugin=None)

    placed = {h for hosts in leaf_nodes.values() for h in hosts}
    roots = sorted(n for n, p in parent.items() if p is None)
    if len(roots) != 1:
        # Several EC2 top-layer nodes (or an EC2 forest beside spec switches): add one root so jobs
        # can span them; AWS's own converter leaves a forest and Slurm only warns about it.
        root = EC2_ROOT
        for r in roots:
            parent[r] = root
        parent[root] = None
        comments[root] = "synthetic root above the spec/EC2 top-layer switches"
    else:
        root = roots[0]
    unplaced: list[str] = []
    for ns in compute:
        if ns.group in {g.name for g in cluster.node_groups if g.is_cloud} and not ec2:
            # EC2 placement is unknown until instances run; one leaf per cloud group keeps the
            # group together (it shares a placement group or capacity block).
            leaf = f"aws-{ns.group}"
            parent[leaf] = root
            leaf_nodes[leaf] = set(ns.names)
            comments[leaf] = "EC2 topology not known yet: one leaf per cloud group"
            continue
        unplaced.extend(h for h in ns.names if h not in placed)
    if unplaced:
        parent[UNPLACED] = root
        leaf_nodes[UNPLACED] = set(unplaced)
        comments[UNPLACED] = "hosts without a rack placement in the spec"

    children: dict[str, list[str]] = {}
    for name, p in parent.items():
        if p is not None:
            children.setdefault(p, []).append(name)
    for name in parent:
        if name in children and name in leaf_nodes:
            raise RenderError(f"switch {name!r} has both hosts and child switches; attach hosts to leaf switches")
        if name not in children and name not in leaf_nodes:
            raise RenderError(
                f"switch {name!r} has neither hosts nor child switches (slurmctld 22.05 rejects it); "
                "place hosts under it or remove it"
            )

    def depth(n: str) -> int:
        d = 0
        cur = parent[n]
        while cur is not None:
            d += 1
            cur = parent[cur]
        return d

    # Leaves first (deepest first), then their parents: each switch line names only switches
    # already defined above it, which is how people read the file.
    order = sorted(parent, key=lambda n: (-depth(n), n))
    switches = tuple(
        SwitchModel(
            name=n,
            nodes=hostlist.compress(leaf_nodes[n]) if n in leaf_nodes else None,
            switches=",".join(sorted(children[n])) if n in children else None,
            comment=comments.get(n, ""),
        )
        for n in order
    )
    return TopologyModel(plugin="topology/tree", switches=switches)


def topology_yaml(cluster: str, version: str, t: TopologyModel) -> str:
    """``topology.yaml`` (Slurm 25.05+, topology.yaml(5)): one default topology of ``t``'s plugin."""
    header = [
        f"topology.yaml for cluster {cluster} (Slurm {version})",
        "Rendered by clusterforge. Slurm 25.05 reads this file instead of topology.conf.",
    ]
    entry: dict[str, Any] = {"topology": "default", "cluster_default": True}
    if t.plugin == "topology/block":
        block: dict[str, Any] = {}
        if t.block_sizes:
            block["block_sizes"] = list(t.block_sizes)
        block["blocks"] = [{"block": b.name, "nodes": b.nodes} for b in t.blocks]
        entry["block"] = block
    else:
        # a switch holds nodes (a leaf) or switches, never both (slurmctld refuses it)
        entry["tree"] = {
            "switches": [
                {"switch": s.name, "nodes": s.nodes} if s.nodes else {"switch": s.name, "children": s.switches}
                for s in t.switches
            ]
        }
    return dump_yaml(header, [entry])
