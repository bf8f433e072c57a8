"""The AWS half of the inventory: the stack outputs read as :class:`StackOutputs`, the hosts of
head groups (fixed instances), and the ``amazon.aws.aws_ec2`` config for Auto Scaling groups.

An ASG instance is a host only once it has claimed its Slurm name at boot (``TAG_HOSTNAME``):
the plugin's only hostname source is that tag, so an unclaimed instance is no host at all (never
a shared fallback name such as the group's ``Name`` tag, which made a whole group one host).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from clusterforge.aws import outputs as out
from clusterforge.clusterspec.models import Cluster, NodeGroup
from clusterforge.errors import ClusterforgeError

#: How to write a stack file this version reads; every stack-shape error names it.
STACK_FIX = "run `pulumi stack output --json > stack.json` with this clusterforge version"


class InventoryError(ClusterforgeError):
    """The spec and the stack outputs do not make a complete inventory."""


@dataclass(frozen=True)
class Ec2Access:
    """Where the aws_ec2 plugin talks to EC2. All None on AWS (the plugin's normal endpoints and
    boto3's credential chain); the emulation points it at its moto server."""

    endpoint_url: str | None = None
    aws_access_key: str | None = None
    aws_secret_key: str | None = None


def _loc(loc: tuple[int | str, ...]) -> str:
    # The node-group union adds its tag (the role) after the group name: node_groups.gpu.compute.x;
    # the reader knows the group by its name alone.
    parts = [str(p) for p in loc]
    if len(parts) >= 3 and parts[0] == out.NODE_GROUPS and parts[2] in ("compute", "controller", "login"):
        del parts[2]
    return ".".join(parts) or "(top level)"


def parse_stack(stack: Mapping[str, Any] | out.StackOutputs, source: str = "stack outputs") -> out.StackOutputs:
    """``stack`` validated as :class:`StackOutputs`; a mismatch names field, value and fix."""
    if isinstance(stack, out.StackOutputs):
        return stack
    try:
        return out.StackOutputs.model_validate(stack)
    except ValidationError as exc:
        lines = []
        for e in exc.errors()[:5]:
            value = "(missing)" if e["type"] == "missing" else repr(e.get("input"))[:120]
            lines.append(f"  {_loc(e['loc'])} = {value}: {e['msg']}")
        more = f"\n  ... and {exc.error_count() - 5} more" if exc.error_count() > 5 else ""
        raise InventoryError(
            f"{source} do not match this clusterforge version's stack outputs:\n"
            + "\n".join(lines)
            + more
            + f"\n{STACK_FIX}"
        ) from None


def check_cluster(stack: out.StackOutputs, cluster: Cluster) -> None:
    if stack.cluster_name != cluster.name:
        raise InventoryError(
            f"stack outputs are for cluster {stack.cluster_name!r}, the spec is {cluster.name!r}; pass the outputs "
            "of the stack that was deployed from this spec"
        )


def head_hosts(g: NodeGroup, stack: out.StackOutputs, extra: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Hosts of a controller or login group: one instance per host name, addresses from the stack."""
    info = stack.node_groups.get(g.name)
    if not isinstance(info, out.HeadGroupOutputs):
        raise InventoryError(
            f"stack output {out.NODE_GROUPS}.{g.name} = {info!r}: expected a {g.role} group with addresses; "
            f"was the stack updated after the spec changed? run `pulumi up`, then {STACK_FIX}"
        )
    missing = [h for h in g.hostnames if h not in info.addresses]
    if missing:
        raise InventoryError(
            f"stack output {out.NODE_GROUPS}.{g.name}.addresses has no address for host(s) {missing}; "
            f"was the stack updated after the spec changed? run `pulumi up`, then {STACK_FIX}"
        )
    return {
        h: {
            "ansible_host": info.addresses[h],
            **({"instance_id": info.instance_ids[h]} if h in info.instance_ids else {}),
            **extra,
        }
        for h in g.hostnames
    }


def check_compute_group(g: NodeGroup, stack: out.StackOutputs) -> None:
    info = stack.node_groups.get(g.name)
    if not isinstance(info, out.ComputeGroupOutputs):
        raise InventoryError(
            f"stack output {out.NODE_GROUPS}.{g.name} = {info!r}: expected a compute group (Auto Scaling "
            f"group); run `pulumi up` for this spec, then {STACK_FIX}"
        )


def aws_ec2_config(
    cluster: Cluster, groups: list[NodeGroup], stack: out.StackOutputs | None, access: Ec2Access
) -> dict[str, Any]:
    """``amazon.aws.aws_ec2`` dynamic inventory for the groups whose instances only EC2 knows.

    Instances are found by the tags ``infra/`` puts on them; each lands in the same
    ``<cluster>_<group>`` group the static hosts.yml declares, so group_vars and the role groups
    (``slurm_compute`` ..., whose children those groups are) apply unchanged.
    """
    from clusterforge.inventory.generate import group_name  # generate imports this module

    region = stack.region if stack is not None else (cluster.aws.region if cluster.aws else None)
    config: dict[str, Any] = {
        "plugin": "amazon.aws.aws_ec2",
        "regions": [region],
        "filters": {
            f"tag:{out.TAG_CLUSTER}": cluster.name,
            "instance-state-name": ["pending", "running"],
        },
        # The claimed Slurm name and nothing else: an instance without it has not claimed a name
        # (yet, or it failed: TAG_CLAIM_ERROR says why) and must not become a host.
        "hostnames": [f"tag:{out.TAG_HOSTNAME}"],
        "compose": {"ansible_host": "private_ip_address", "instance_id": "instance_id"},
        "groups": {
            group_name(cluster.name, g.name): f"tags.get('{out.TAG_GROUP}') == '{g.name}'" for g in groups
        },
        "strict": True,
    }
    if access.endpoint_url is not None:
        config["endpoint_url"] = access.endpoint_url
    if access.aws_access_key is not None:
        config["aws_access_key"] = access.aws_access_key
    if access.aws_secret_key is not None:
        config["aws_secret_key"] = access.aws_secret_key
    return config
