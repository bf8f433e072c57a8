"""Rules on the topology: switches form one tree, placements name real hosts and leaf switches."""

from __future__ import annotations

from collections.abc import Iterator

from clusterforge import hostlist
from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, _gi, rule


@rule
def topology_references(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    t = c.topology
    switches = {s.name: s for s in t.switches}
    for i, s in enumerate(t.switches):
        if s.parent is not None and s.parent not in switches:
            yield Finding(
                Level.ERROR, "unknown-parent-switch", f"topology.switches[{i}].parent", s.parent,
                "names no switch in topology.switches.", "declare the parent switch or fix the name.",
            )
    # cycles: follow parents; a path longer than the switch count loops
    for i, s in enumerate(t.switches):
        seen: set[str] = set()
        cur: str | None = s.name
        while cur is not None and cur in switches:
            if cur in seen:
                yield Finding(
                    Level.ERROR, "switch-cycle", f"topology.switches[{i}]", s.name,
                    "the parent chain loops; topology/tree needs a tree.", "break the loop in 'parent'.",
                )
                break
            seen.add(cur)
            cur = switches[cur].parent
    roots = [s.name for s in t.switches if s.parent is None]
    if t.switches and len(roots) != 1:
        yield Finding(
            Level.ERROR, "topology-roots", "topology.switches", roots,
            "a topology tree needs exactly one root; without a common parent no job spans the subtrees.",
            "add one top switch and set it as 'parent' of the others.",
        )
    parents = {s.parent for s in t.switches if s.parent}
    placed: dict[str, str] = {}
    for g in c.node_groups:
        if g.onprem is None:
            continue
        ghosts = set(g.hostnames) if g.onprem.placement else set()
        for k, pl in enumerate(g.onprem.placement):
            path = f"{_gi(c, g)}.onprem.placement[{k}]"
            if pl.switch not in switches:
                yield Finding(
                    Level.ERROR, "unknown-switch", f"{path}.switch", pl.switch,
                    "names no switch in topology.switches.", "declare it under topology.switches.",
                )
            elif pl.switch in parents:
                yield Finding(
                    Level.ERROR, "hosts-on-inner-switch", f"{path}.switch", pl.switch,
                    "has child switches; Slurm forbids a switch with both nodes and switches.",
                    "attach hosts to leaf switches only.",
                )
            for h in hostlist.expand(pl.hosts):
                if h not in ghosts:
                    yield Finding(
                        Level.ERROR, "placement-unknown-host", f"{path}.hosts", h,
                        f"is not a host of node group {g.name!r}.", "list only the group's own hosts.",
                    )
                elif h in placed:
                    yield Finding(
                        Level.ERROR, "host-placed-twice", f"{path}.hosts", h,
                        f"is already placed in rack {placed[h]!r}.", "place each host once.",
                    )
                placed[h] = pl.rack
        if t.switches and g.role == "compute":
            missing = [h for h in g.hostnames if h not in placed]
            if missing:
                yield Finding(
                    Level.WARNING, "unplaced-hosts", f"{_gi(c, g)}.onprem.placement", hostlist.compress(missing),
                    "these hosts have no switch; they are put under a switch 'unplaced' below the root, "
                    "so topology-aware scheduling cannot see where they really are.",
                    "add placement entries (rack, switch, hosts) for them.",
                )
    # topology/tree: every declared switch needs compute hosts or child switches (slurmctld rejects
    # an empty one); the renderer places only compute hosts
    tree = t.plugin == "tree" or (t.plugin == "auto" and not (t.blocks and not t.switches))
    with_hosts = {
        pl.switch for g in c.node_groups if g.onprem is not None and g.role == "compute" for pl in g.onprem.placement
    }
    for i, s in enumerate(t.switches):
        if tree and s.name not in parents and s.name not in with_hosts:
            yield Finding(
                Level.ERROR, "empty-switch", f"topology.switches[{i}]", s.name,
                "has neither compute hosts nor child switches; slurmctld rejects such a switch in topology.conf.",
                "place compute hosts under it (onprem.placement) or remove it.",
            )
    # every unplaced compute host, only when the root has hosts of its own
    unplaced = [
        h for g in c.node_groups if g.onprem is not None and g.role == "compute" for h in g.hostnames if h not in placed
    ] if tree and len(roots) == 1 and roots[0] in with_hosts else []
    if unplaced:
        yield Finding(
            Level.ERROR, "unplaced-below-leaf-root", "topology.switches", roots[0],
            f"hosts {hostlist.compress(unplaced)} have no placement, so they go under a switch 'unplaced' below "
            "the root; but the root has hosts itself, and Slurm forbids a switch with both hosts and switches.",
            "place every compute host, or add a top switch above the root.",
        )
    # every node's name, only when there are blocks to check against them
    all_hosts = {h for g in c.node_groups for h in g.hostnames} if t.blocks else set()
    for i, b in enumerate(t.blocks):
        for h in hostlist.expand(b.hosts):
            if h not in all_hosts:
                yield Finding(
                    Level.ERROR, "block-unknown-host", f"topology.blocks[{i}].hosts", h,
                    "is not a host of any node group.", "list existing hosts only.",
                )
    if t.ec2_instance_topology is not None and not (ctx.base / t.ec2_instance_topology).is_file():
        yield Finding(
            Level.ERROR, "missing-ec2-topology", "topology.ec2_instance_topology", t.ec2_instance_topology,
            "file not found (paths are relative to the spec file).",
            "give the JSON written from `aws ec2 describe-instance-topology`, or remove the key.",
        )
    if t.ec2_instances is not None and not (ctx.base / t.ec2_instances).is_file():
        yield Finding(
            Level.ERROR, "missing-ec2-instances", "topology.ec2_instances", t.ec2_instances,
            "file not found (paths are relative to the spec file).",
            "give the JSON written by `aws ec2 describe-instances`, or remove the key.",
        )
    if t.ec2_instances is not None and t.ec2_instance_topology is None:
        yield Finding(
            Level.ERROR, "ec2-instances-alone", "topology.ec2_instances", t.ec2_instances,
            "names instances of a DescribeInstanceTopology response, but topology.ec2_instance_topology is not set.",
            "set topology.ec2_instance_topology to the saved `aws ec2 describe-instance-topology` output.",
        )


