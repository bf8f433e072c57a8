"""Network topology: spec switches, rack placements and EC2 instance topology -> one tree.

Slurm's topology/tree needs a single root for jobs to span subtrees, leaves that hold nodes and
inner switches that hold switches (never both, slurmctld fatals). Blocks (NVLink domains) use
topology/block from 23.11. A plugin is only configured when the file it reads is populated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clusterforge import hostlist
from clusterforge.aws import ec2topology
from clusterforge.clusterspec.models import Cluster, Topology
from clusterforge.errors import RenderError
from clusterforge.render import tree
from clusterforge.render.model import BlockModel, NodeSet, SwitchModel, TopologyModel
from clusterforge.render.yamlfile import dump_yaml

UNPLACED = tree.UNPLACED
EC2_ROOT = tree.EC2_ROOT
_LEGACY_HINT = (
    'an object mapping node name to its NetworkNodes list (top layer first), e.g. {"gpu-001": ["nn-1", "nn-2", '
    '"nn-3"]}, or a saved `aws ec2 describe-instance-topology` response {"Instances": [...]}'
)


def _read_json(path: Path, field: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RenderError(
            f"{field} {str(path)!r}: cannot read JSON ({exc}); point it at a JSON file: the output of "
            "`aws ec2 describe-instance-topology --output json` or a node-to-network-nodes mapping"
        ) from None


def ec2_paths(t: Topology, base_dir: Path) -> dict[str, list[str]]:
    """node -> EC2 network nodes (top first) from ``topology.ec2_instance_topology``: the node-keyed
    JSON, or a raw DescribeInstanceTopology response named through ``topology.ec2_instances``."""
    if not t.ec2_instance_topology:
        return {}
    field = "topology.ec2_instance_topology"
    path = base_dir / t.ec2_instance_topology
    raw = _read_json(path, field)
    if isinstance(raw, dict) and "Instances" in raw:
        try:
            reported = ec2topology.parse_response(raw, "the file")
        except ec2topology.TopologyFormatError as exc:
            raise RenderError(f"{field} {str(path)!r}: {exc}. Fix: save the output of "
                              "`aws ec2 describe-instance-topology --output json` unchanged.") from None
        if not t.ec2_instances:
            raise RenderError(
                f"{field} {str(path)!r} is a raw DescribeInstanceTopology response, which names instances, "
                "not nodes; topology.ec2_instances is not set. Fix: save `aws ec2 describe-instances --filters "
                "Name=tag:clusterforge:cluster,Values=<cluster> --output json` and set topology.ec2_instances "
                "to that file."
            )
        ipath = base_dir / t.ec2_instances
        try:
            names = ec2topology.names_from_reservations(_read_json(ipath, "topology.ec2_instances"), None, "the file")
        except ec2topology.TopologyFormatError as exc:
            raise RenderError(f"topology.ec2_instances {str(ipath)!r}: {exc}. Fix: save the output of "
                              "`aws ec2 describe-instances --output json` unchanged.") from None
        return ec2topology.node_paths(names, reported)
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and v and all(isinstance(x, str) for x in v) for v in raw.values()
    ):
        raise RenderError(f"{field} {str(path)!r}: expected {_LEGACY_HINT}")
    return {str(k): [str(x) for x in v] for k, v in raw.items()}


def tree_basis(cluster: Cluster, nodesets: tuple[NodeSet, ...]) -> dict[str, Any]:
    """What the spec fixes of the tree (``render/tree.py``'s basis; JSON-serialisable)."""
    t = cluster.topology
    leaves: dict[str, set[str]] = {}
    comments: dict[str, str] = {}
    for g in cluster.node_groups:
        if g.onprem is None or g.role != "compute":
            continue
        for pl in g.onprem.placement:
            leaves.setdefault(pl.switch, set()).update(hostlist.expand(pl.hosts))
            comments.setdefault(pl.switch, f"rack {pl.rack}")
    cloud = {g.name for g in cluster.node_groups if g.is_cloud}
    return {
        "switches": {s.name: s.parent for s in t.switches},
        "leaves": {k: hostlist.compress(v) for k, v in leaves.items()},
        "comments": comments,
        "compute": [
            [n.group, n.hostlist if n.count else "", n.group in cloud]
            for n in nodesets
            if n.role == "compute"
        ],
        "tree_required": t.plugin == "tree",
    }


def build_topology(cluster: Cluster, nodesets: tuple[NodeSet, ...], base_dir: Path) -> TopologyModel:
    t = cluster.topology
    if t.plugin == "none":
        return TopologyModel(plugin=None)
    want_block = t.plugin == "block" or (t.plugin == "auto" and bool(t.blocks) and not t.switches)
    if want_block:
        blocks = tuple(BlockModel(b.name, hostlist.compress(hostlist.expand(b.hosts))) for b in t.blocks)
        return TopologyModel(plugin="topology/block", blocks=blocks, block_sizes=tuple(t.block_sizes))
    paths = ec2_paths(t, base_dir)
    basis = tree_basis(cluster, nodesets)
    # a configured EC2 file means a tree even before any instance is reported in it
    basis["tree_required"] = basis["tree_required"] or bool(t.ec2_instance_topology)
    try:
        switches = tree.build_tree(basis, paths)
    except tree.TreeError as exc:
        raise RenderError(str(exc)) from None
    if not switches:
        return TopologyModel(plugin=None)
    return TopologyModel(
        plugin="topology/tree",
        switches=tuple(SwitchModel(s.name, s.nodes, s.switches, s.comment) for s in switches),
        basis=basis,
    )


def topology_yaml(cluster: str, version: str, t: TopologyModel) -> str:
    """``topology.yaml`` (Slurm 25.05+, topology.yaml(5)): one default topology of ``t``'s plugin."""
    if t.plugin == "topology/block":
        block: dict[str, Any] = {}
        if t.block_sizes:
            block["block_sizes"] = list(t.block_sizes)
        block["blocks"] = [{"block": b.name, "nodes": b.nodes} for b in t.blocks]
        entry: dict[str, Any] = {"topology": "default", "cluster_default": True, "block": block}
    else:
        entry = tree.yaml_entry([tree.Switch(s.name, s.nodes, s.switches) for s in t.switches])
    return dump_yaml(tree.yaml_header(cluster, version), [entry])
