"""Scale-in and scale-out of cloud compute groups: which nodes go, and the operator's steps.

A cloud group's nodes are ``<group>-001 .. <group>-<count>`` (NodeGroup.hostnames), so lowering
``count`` removes the highest names: those are the nodes slurm.conf loses, the nodes the diff
drains, and the nodes ``retire.py`` (clusterforge/aws/retire.py, on the controller) must take.
The Auto Scaling group itself must not choose (its instances are protected from scale-in), so the
retire step comes before ``pulumi up``, which then only lowers the group's sizes.
"""

from __future__ import annotations

from clusterforge import hostlist
from clusterforge.clusterspec.models import NodeGroup
from clusterforge.resolve import ResolvedCluster

#: where the agents are installed on the controller (contract: /usr/local/lib/clusterforge-agents/)
#: the deploy-side command (playbooks/retire.yml runs clusterforge-retire on the controller)
RETIRE = "clusterforge retire SPEC"


def _cloud_compute(rc: ResolvedCluster | None) -> dict[str, NodeGroup]:
    if rc is None:
        return {}
    return {g.name: g for g in rc.spec.node_groups if g.cloud is not None and g.role == "compute"}


def _names(groups: dict[str, NodeGroup]) -> set[str]:
    return {n for g in groups.values() for n in g.hostnames}


def retired_nodes(base: ResolvedCluster | None, head: ResolvedCluster | None) -> str:
    """Hostlist of the cloud compute nodes the base has and the head does not ('' when none)."""
    gone = sorted(_names(_cloud_compute(base)) - _names(_cloud_compute(head)))
    return hostlist.compress(gone) if gone else ""


def added_nodes(base: ResolvedCluster | None, head: ResolvedCluster | None) -> str:
    """Hostlist of the cloud compute nodes the head adds ('' when none)."""
    new = sorted(_names(_cloud_compute(head)) - _names(_cloud_compute(base)))
    return hostlist.compress(new) if new else ""


def first_steps(base: ResolvedCluster | None, head: ResolvedCluster | None) -> list[str]:
    """The steps before configure: retire the removed cloud nodes, then ``pulumi up``."""
    retired, added = retired_nodes(base, head), added_nodes(base, head)
    steps = []
    if retired:
        steps.append(
            f"{RETIRE} '{retired}' (on the controller: drains them, waits for their jobs, terminates "
            "exactly their instances without replacement, releases their names)"
        )
    if retired or added:
        what = [f"lowers the groups' sizes; {retired} are already gone"] * bool(retired) + [
            f"launches {added}, which claim their names at boot"
        ] * bool(added)
        steps.append(f"pulumi up ({'; '.join(what)})")
    return steps
