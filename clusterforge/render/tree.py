"""The topology/tree algorithm: a JSON "basis" from the spec plus EC2 network-node paths -> switch records.

Stdlib only (plus ``hostlist``): the renderer (``render/topology.py::build_topology``) and the
controller's cloud agent (``aws/cloud_agent.py``, shipped verbatim next to ``hostlist.py``) call the
same :func:`build_tree`, so a topology.conf the agent writes from live ``DescribeInstanceTopology``
answers is byte-identical to the one ``clusterforge render`` writes from the same answers saved.

The basis (what the spec fixes; the renderer writes it into ``cloud/agent.json``)::

    {"switches": {name: parent | null},       # spec switches, in spec order
     "leaves": {switch: hostlist},            # on-prem rack placements of compute hosts
     "comments": {switch: comment},           # "rack r1" for those leaves
     "compute": [[group, hostlist, is_cloud], ...],   # compute node groups, in spec order
     "tree_required": bool}                   # true: always a tree (plugin tree, or the agent's copy)

The rules (Slurm's topology/tree needs one root for a job to span subtrees, and a switch holds
nodes or switches, never both: slurmctld fatals; topology.conf(5)):

* EC2 paths (top layer first) add their network nodes as switches; the bottom one is the leaf.
* A cloud group's node without a path (not launched yet, or ``DescribeInstanceTopology`` has not
  reported it, or its instance type is not supported) goes under leaf ``aws-<group>``: the group
  shares a placement group or capacity block, so keeping it together is the best guess.
* Other compute hosts without a placement go under leaf ``unplaced``.
* Several top-layer switches get one synthetic root ``ec2-root``.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

try:
    from clusterforge import hostlist
except ImportError:  # on the controller: shipped as a top-level module next to this file
    import hostlist  # type: ignore[no-redef, import-not-found]

UNPLACED = "unplaced"
EC2_ROOT = "ec2-root"
FALLBACK_COMMENT = "EC2 topology not known yet: one leaf per cloud group"
EC2_LEAF_COMMENT = "EC2 network node (bottom layer)"


class TreeError(ValueError):
    """The switches do not form a tree Slurm accepts (the renderer reports it as a RenderError)."""


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Switch(NamedTuple):
    """One ``SwitchName=`` line: a leaf has ``nodes``, an inner switch ``switches`` (hostlists)."""

    name: str
    nodes: str | None
    switches: str | None
    comment: str = ""


def fallback_leaf(group: str) -> str:
    return f"aws-{group}"


def build_tree(basis: dict[str, Any], ec2_paths: dict[str, list[str]]) -> list[Switch]:
    """The switch lines for ``basis`` and the nodes' EC2 network-node paths; [] when there is no tree."""
    parent: dict[str, str | None] = dict(basis.get("switches", {}))
    leaf_nodes: dict[str, set[str]] = {s: set(hostlist.expand(h)) for s, h in basis.get("leaves", {}).items()}
    comments: dict[str, str] = dict(basis.get("comments", {}))
    for node, path in sorted(ec2_paths.items()):
        # EC2 network-node ids (nn-0123...) are valid Slurm switch names; kept as they are so the
        # file can be compared with `aws ec2 describe-instance-topology` output.
        for upper, lower in itertools.pairwise(path):
            parent.setdefault(lower, upper)
        parent.setdefault(path[0], None)
        leaf_nodes.setdefault(path[-1], set()).add(node)
        comments.setdefault(path[-1], EC2_LEAF_COMMENT)
    if not parent and not basis.get("tree_required"):
        return []

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
    for group, hosts, is_cloud in basis.get("compute", []):
        names = hostlist.expand(hosts) if hosts else []
        if is_cloud:
            waiting = [h for h in names if h not in ec2_paths]
            if waiting:
                leaf = fallback_leaf(group)
                parent[leaf] = root
                leaf_nodes[leaf] = set(waiting)
                comments[leaf] = FALLBACK_COMMENT
            continue
        unplaced.extend(h for h in names if h not in placed)
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
            raise TreeError(f"switch {name!r} has both hosts and child switches; attach hosts to leaf switches")
        if name not in children and name not in leaf_nodes:
            raise TreeError(
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
    return [
        Switch(
            name=n,
            nodes=hostlist.compress(leaf_nodes[n]) if n in leaf_nodes else None,
            switches=",".join(sorted(children[n])) if n in children else None,
            comment=comments.get(n, ""),
        )
        for n in order
    ]


def yaml_tree(switches: list[Switch]) -> dict[str, Any]:
    """The ``tree`` entry of topology.yaml (Slurm 25.05+, topology.yaml(5))."""
    # a switch holds nodes (a leaf) or switches, never both (slurmctld refuses it)
    return {
        "switches": [
            {"switch": s.name, "nodes": s.nodes} if s.nodes else {"switch": s.name, "children": s.switches}
            for s in switches
        ]
    }


def yaml_entry(switches: list[Switch]) -> dict[str, Any]:
    """The one default tree topology of topology.yaml (the renderer's and the agent's)."""
    return {"topology": "default", "cluster_default": True, "tree": yaml_tree(switches)}


def yaml_header(cluster: str, version: str) -> list[str]:
    return [
        f"topology.yaml for cluster {cluster} (Slurm {version})",
        "Rendered by clusterforge. Slurm 25.05 reads this file instead of topology.conf.",
    ]
