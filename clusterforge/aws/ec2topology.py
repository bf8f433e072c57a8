"""EC2 instance topology: ``DescribeInstanceTopology`` client and parser, instance -> Slurm name from tags.

Stdlib only (a boto3 EC2 client is passed in): the controller's cloud agent ships this file
verbatim (``clusterforge/render/agents.py``), and ``clusterforge render`` parses saved
``aws ec2 describe-instance-topology`` / ``describe-instances`` responses with the same functions.

AWS facts used (DescribeInstanceTopology API reference,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTopology.html):

* ``InstanceIds``: at most 100 explicitly specified ids per request, so ids go in chunks of 100.
* ``MaxResults`` (1-100, default 20) "can't be specified with the instance IDs parameter in the
  same request", so the client never sends it; it follows ``NextToken`` until there is none.
* each ``Instances[]`` entry has ``InstanceId``, ``InstanceType``, ``GroupName``,
  ``NetworkNodes`` (top layer first: 3 levels on p5/p4d/trn1, 4 on some newer types; any depth is
  taken), ``AvailabilityZone``, ``ZoneId`` and ``CapacityBlockId``.
* only supported instance types are reported, and freshly launched instances may be missing or
  have no ``NetworkNodes`` yet (eventual consistency): such ids come back as ``pending``; their
  nodes stay under the group's fallback leaf ``aws-<group>`` (``render/tree.py``) until reported.

Names: ``clusterforge:hostname`` is the tag the boot-time claim (``aws/nodename.py``) sets;
``clusterforge:cluster`` scopes the lookup to one cluster (constants in ``aws/outputs.py``,
repeated here because this module runs without the package).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

TAG_CLUSTER = "clusterforge:cluster"
TAG_HOSTNAME = "clusterforge:hostname"
#: AWS's limit on explicitly specified InstanceIds per DescribeInstanceTopology request.
MAX_IDS = 100


class TopologyFormatError(ValueError):
    """A response (live or saved) does not have AWS's documented shape; the message says where."""


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class InstanceTopology(NamedTuple):
    instance_id: str
    instance_type: str
    network_nodes: tuple[str, ...]  # top layer first
    group_name: str | None = None
    availability_zone: str | None = None
    zone_id: str | None = None
    capacity_block_id: str | None = None


@dataclass
class Topology:
    """Reported instances by id, and the ids asked for that are not reported (yet)."""

    instances: dict[str, InstanceTopology] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)


def _opt_str(entry: dict[str, Any], key: str, where: str) -> str | None:
    v = entry.get(key)
    if v is not None and not isinstance(v, str):
        raise TopologyFormatError(f"{where}.{key}: expected a string, got {v!r}")
    return v


def parse_instances(instances: Any, where: str = "Instances") -> list[InstanceTopology]:
    """The ``Instances`` list of one DescribeInstanceTopology response; entries without
    ``NetworkNodes`` (not reported yet) are left out."""
    if not isinstance(instances, list):
        raise TopologyFormatError(f"{where}: expected a list, got {type(instances).__name__}")
    out = []
    for i, e in enumerate(instances):
        w = f"{where}[{i}]"
        if not isinstance(e, dict):
            raise TopologyFormatError(f"{w}: expected an object, got {e!r}")
        iid = e.get("InstanceId")
        if not isinstance(iid, str) or not iid:
            raise TopologyFormatError(f"{w}.InstanceId: expected an instance id string, got {iid!r}")
        nodes = e.get("NetworkNodes") or []
        if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
            raise TopologyFormatError(f"{w}.NetworkNodes: expected a list of network-node ids, got {nodes!r}")
        if not nodes:
            continue
        out.append(
            InstanceTopology(
                instance_id=iid,
                instance_type=_opt_str(e, "InstanceType", w) or "",
                network_nodes=tuple(nodes),
                group_name=_opt_str(e, "GroupName", w),
                availability_zone=_opt_str(e, "AvailabilityZone", w),
                zone_id=_opt_str(e, "ZoneId", w),
                capacity_block_id=_opt_str(e, "CapacityBlockId", w),
            )
        )
    return out


def parse_response(resp: Any, where: str = "response") -> list[InstanceTopology]:
    """A whole (saved) DescribeInstanceTopology response ``{"Instances": [...]}``."""
    if not isinstance(resp, dict) or "Instances" not in resp:
        raise TopologyFormatError(f'{where}: expected a DescribeInstanceTopology response {{"Instances": [...]}}')
    return parse_instances(resp["Instances"], f"{where}.Instances")


def _chunks(ids: list[str], n: int = MAX_IDS) -> Iterable[list[str]]:
    for i in range(0, len(ids), n):
        yield ids[i : i + n]


def _describe(ec2: Any, kw: dict[str, Any]) -> Any:
    if hasattr(ec2, "describe_instance_topology"):
        return ec2.describe_instance_topology(**kw)
    # a botocore older than the operation (Debian 12's 1.29): the same request, signed by botocore
    try:
        from clusterforge.aws import ec2query
    except ImportError:  # next to this file on the controller
        import ec2query  # type: ignore[import-not-found, no-redef]
    return ec2query.describe_instance_topology(ec2, **kw)


def describe_topology(ec2: Any, instance_ids: Iterable[str]) -> Topology:
    """DescribeInstanceTopology for ``instance_ids``: chunks of 100 ids, every NextToken page followed."""
    ids = sorted(set(instance_ids))
    topo = Topology()
    for chunk in _chunks(ids):
        token: str | None = None
        while True:
            kw: dict[str, Any] = {"InstanceIds": chunk}
            if token:
                kw["NextToken"] = token
            resp = _describe(ec2, kw)
            for it in parse_instances(resp.get("Instances", []), "DescribeInstanceTopology.Instances"):
                topo.instances[it.instance_id] = it
            token = resp.get("NextToken") or None
            if token is None:
                break
    topo.pending = {i for i in ids if i not in topo.instances}
    return topo


def names_from_reservations(resp: Any, cluster: str | None = None, where: str = "response") -> dict[str, str]:
    """instance id -> ``clusterforge:hostname`` from a DescribeInstances response
    (``Reservations[].Instances[].Tags``); instances without the tag (not named yet) are left out,
    and with ``cluster`` only that cluster's instances are taken."""
    if not isinstance(resp, dict) or not isinstance(resp.get("Reservations"), list):
        raise TopologyFormatError(f'{where}: expected a DescribeInstances response {{"Reservations": [...]}}')
    out: dict[str, str] = {}
    for r, res in enumerate(resp["Reservations"]):
        insts = res.get("Instances") if isinstance(res, dict) else None
        if not isinstance(insts, list):
            raise TopologyFormatError(f"{where}.Reservations[{r}].Instances: expected a list")
        for i, inst in enumerate(insts):
            w = f"{where}.Reservations[{r}].Instances[{i}]"
            if not isinstance(inst, dict) or not isinstance(inst.get("InstanceId"), str):
                raise TopologyFormatError(f"{w}.InstanceId: expected an instance id string")
            tags = inst.get("Tags") or []
            if not isinstance(tags, list):
                raise TopologyFormatError(f"{w}.Tags: expected a list of {{Key, Value}}")
            kv = {t.get("Key"): t.get("Value") for t in tags if isinstance(t, dict)}
            if cluster is not None and kv.get(TAG_CLUSTER) != cluster:
                continue
            name = kv.get(TAG_HOSTNAME)
            if isinstance(name, str) and name:
                out[inst["InstanceId"]] = name
    return out


def cluster_names(ec2: Any, cluster: str) -> dict[str, str]:
    """instance id -> Slurm name for the cluster's pending/running instances (DescribeInstances)."""
    filters = [
        {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    out: dict[str, str] = {}
    token: str | None = None
    while True:
        kw: dict[str, Any] = {"Filters": filters}
        if token:
            kw["NextToken"] = token
        resp = ec2.describe_instances(**kw)
        out.update(names_from_reservations(resp, cluster, "DescribeInstances"))
        token = resp.get("NextToken") or None
        if token is None:
            return out


def node_paths(names: dict[str, str], instances: Iterable[InstanceTopology]) -> dict[str, list[str]]:
    """Slurm node -> its network nodes (top first), for the named reported instances. A name held by
    two instances (a replacement racing the old one) takes the highest instance id's path, so the
    answer does not depend on response order."""
    out: dict[str, list[str]] = {}
    for it in sorted(instances, key=lambda x: x.instance_id):
        name = names.get(it.instance_id)
        if name is not None:
            out[name] = list(it.network_nodes)
    return out


def collect(ec2: Any, cluster: str) -> tuple[dict[str, list[str]], dict[str, str], Topology]:
    """One sync: (node -> path, instance id -> name, the topology with its pending ids)."""
    names = cluster_names(ec2, cluster)
    topo = describe_topology(ec2, names)
    return node_paths(names, topo.instances.values()), names, topo
