"""Compare the resources of two offline plans: added, changed, replaced, removed.

Input is the ``resources`` mapping of :func:`clusterforge.plan.to_dict` on each side (key
``type::name`` -> type, name, parent, kind, properties). A changed resource is *replaced* when a
property that the provider cannot update in place changed (:data:`REPLACE_ON_CHANGE`), else
*updated*; some in-place updates still interrupt the resource (:data:`INTERRUPTS_ON_UPDATE`).

Limits, stated in every report: values AWS assigns at creation read ``(known after apply)`` on
both sides and compare equal, so a replacement that cascades through an id (a new subnet moves
every instance in it) shows only at the resource whose own input changed — the real
``pulumi preview`` (the workflow runs it where credentials exist) shows the cascade.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from clusterforge.plan.model import SECRET, UNKNOWN

INSTANCE = "aws:ec2/instance:Instance"
ASG = "aws:autoscaling/group:Group"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
FSX_LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
EFS = "aws:efs/fileSystem:FileSystem"
SSM_PARAMETER = "aws:ssm/parameter:Parameter"


def _shrinks(before: Any, after: Any) -> bool:
    return isinstance(before, int | float) and isinstance(after, int | float) and after < before


#: Properties whose change makes the provider replace the resource (delete + create), per Pulumi
#: type token. A property path matches itself and everything below it (``rootBlockDevice``
#: matches ``rootBlockDevice.encrypted``); an entry with a predicate replaces only when it holds
#: for (before, after). Source: the ForceNew arguments of the Terraform AWS provider that
#: pulumi-aws bridges (the registry page of each resource marks them "forces new resource"),
#: limited to the properties this program sets. Notably *not* here: a launch template change (a
#: new template version; the Auto Scaling group keeps its instances until they are replaced),
#: ``instanceType`` of an instance (updated in place with a stop/start, see below), FSx
#: ``perUnitStorageThroughput`` and growing ``storageCapacity`` (updated in place).
REPLACE_ON_CHANGE: dict[str, dict[str, Callable[[Any, Any], bool] | None]] = {
    INSTANCE: {
        "ami": None,
        "availabilityZone": None,
        "subnetId": None,
        "placementGroup": None,
        "keyName": None,
        "privateIp": None,
        "associatePublicIpAddress": None,
        "tenancy": None,
        "cpuOptions": None,
        "networkInterfaces": None,
        "ebsBlockDevices": None,
        "rootBlockDevice.encrypted": None,
        "rootBlockDevice.kmsKeyId": None,
        "rootBlockDevice.deviceName": None,
        # user data replaces only with userDataReplaceOnChange (infra/head.py sets it False)
    },
    FSX_LUSTRE: {
        "deploymentType": None,
        "subnetIds": None,
        "securityGroupIds": None,
        "storageType": None,
        "kmsKeyId": None,
        "fileSystemTypeVersion": None,
        "driveCacheType": None,
        # AWS can grow a Lustre file system but never shrink it: a smaller capacity is a new one
        "storageCapacity": _shrinks,
    },
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": {
        "fileSystemId": None,
        "fileSystemPath": None,
        "dataRepositoryPath": None,
        "batchImportMetaDataOnCreate": None,
    },
    EFS: {
        "encrypted": None,
        "kmsKeyId": None,
        "performanceMode": None,
        "availabilityZoneName": None,
        "creationToken": None,
    },
    "aws:efs/mountTarget:MountTarget": {"fileSystemId": None, "subnetId": None, "ipAddress": None},
    "aws:ec2/vpc:Vpc": {"cidrBlock": None},
    "aws:ec2/subnet:Subnet": {"cidrBlock": None, "availabilityZone": None, "vpcId": None},
    "aws:ec2/placementGroup:PlacementGroup": {
        "name": None, "strategy": None, "partitionCount": None, "spreadLevel": None,
    },
    "aws:ec2/securityGroup:SecurityGroup": {"name": None, "namePrefix": None, "description": None, "vpcId": None},
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": {"securityGroupId": None},
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": {"securityGroupId": None},
    "aws:ec2/natGateway:NatGateway": {"subnetId": None, "allocationId": None, "connectivityType": None},
    "aws:ec2/route:Route": {"routeTableId": None, "destinationCidrBlock": None},
    "aws:ec2/routeTable:RouteTable": {"vpcId": None},
    "aws:ec2/vpcEndpoint:VpcEndpoint": {"serviceName": None, "vpcId": None, "vpcEndpointType": None},
    ASG: {"name": None, "namePrefix": None},
    LAUNCH_TEMPLATE: {"name": None, "namePrefix": None},
    SSM_PARAMETER: {"name": None},
    "aws:iam/role:Role": {"name": None, "namePrefix": None, "path": None},
    "aws:iam/instanceProfile:InstanceProfile": {"name": None, "namePrefix": None, "path": None},
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": {"role": None, "policyArn": None},
    "aws:iam/rolePolicy:RolePolicy": {"name": None, "role": None},
    "pulumi:providers:aws": {"region": None},
}

#: In-place updates that still interrupt a stateful resource (why, shown in the report).
INTERRUPTS_ON_UPDATE: dict[str, dict[str, str]] = {
    INSTANCE: {
        "instanceType": "the instance is stopped and started (running jobs on a login node, slurmctld on the "
        "controller)",
        "userData": "the instance is stopped and started to change its user data",
    },
    ASG: {
        "desiredCapacity": "scale-in terminates instances (the newest first), with their running jobs",
        "minSize": "a group resized",
        "maxSize": "a group resized",
    },
    LAUNCH_TEMPLATE: {
        "instanceType": "running nodes keep the old type; new or replaced instances get the new one",
    },
}


def is_stateful(type_: str, properties: dict[str, Any]) -> bool:
    """Resources whose loss or replacement loses state: the controller and login instances
    (slurmctld state, users' sessions), the node groups (their instances and running jobs), the file
    systems, and SSM parameters holding secrets."""
    if type_ in (INSTANCE, ASG, FSX_LUSTRE, EFS):
        return True
    return type_ == SSM_PARAMETER and properties.get("type") == "SecureString"


@dataclass(frozen=True)
class PropertyChange:
    path: str
    before: Any
    after: Any
    forces_replacement: bool = False
    interrupts: str | None = None


@dataclass(frozen=True)
class ResourceChange:
    """One resource that differs. ``action``: add, update, replace or remove."""

    key: str
    type: str
    name: str
    action: str
    stateful: bool
    properties: tuple[PropertyChange, ...] = ()

    @property
    def loud(self) -> bool:
        """A replacement or removal of a stateful resource, or an update that interrupts one."""
        if not self.stateful:
            return False
        return self.action in ("replace", "remove") or any(p.interrupts for p in self.properties)


@dataclass(frozen=True)
class ResourceDiff:
    changes: tuple[ResourceChange, ...] = ()
    same: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def by_action(self, action: str) -> list[ResourceChange]:
        return [c for c in self.changes if c.action == action]

    @property
    def counts(self) -> dict[str, int]:
        return {a: len(self.by_action(a)) for a in ("add", "update", "replace", "remove")}


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for k in sorted(value):
            yield from _flatten(value[k], f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            yield from _flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, value


_MISSING = "(not set)"


def property_changes(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Leaf paths whose values differ (``(not set)`` for a side that lacks one)."""
    a = dict(_flatten(before))
    b = dict(_flatten(after))
    out = []
    for path in sorted(set(a) | set(b)):
        va, vb = a.get(path, _MISSING), b.get(path, _MISSING)
        if va != vb:
            out.append((path, va, vb))
    return out


def _matches(path: str, entry: str) -> bool:
    return path == entry or path.startswith((entry + ".", entry + "["))


def _forces(type_: str, path: str, before: Any, after: Any) -> bool:
    for entry, pred in REPLACE_ON_CHANGE.get(type_, {}).items():
        if _matches(path, entry):
            return pred is None or pred(before, after)
    return False


def _interrupts(type_: str, path: str, before: Any, after: Any) -> str | None:
    why = INTERRUPTS_ON_UPDATE.get(type_, {}).get(path.split(".")[0].split("[")[0])
    if why and path.split("[")[0] in ("desiredCapacity", "minSize") and not _shrinks(before, after):
        return None  # growing a group interrupts nothing
    return why


def diff_resources(base: dict[str, dict[str, Any]], head: dict[str, dict[str, Any]]) -> ResourceDiff:
    """Resources of two plans (``to_dict(plan)["resources"]``; ``{}`` for a side without AWS)."""
    changes: list[ResourceChange] = []
    same = 0
    for key in sorted(set(base) | set(head)):
        b, h = base.get(key), head.get(key)
        r = h or b
        assert r is not None
        if r.get("kind") == "component":
            continue  # groupings: their children carry the change
        if b is None or h is None:
            props = r.get("properties", {})
            action = "add" if b is None else "remove"
            changes.append(ResourceChange(key, r["type"], r["name"], action, is_stateful(r["type"], props)))
            continue
        diffs = property_changes(b.get("properties", {}), h.get("properties", {}))
        if not diffs:
            same += 1
            continue
        pcs = tuple(
            PropertyChange(
                path, va, vb, _forces(r["type"], path, va, vb), _interrupts(r["type"], path, va, vb)
            )
            for path, va, vb in diffs
        )
        action = "replace" if any(p.forces_replacement for p in pcs) else "update"
        changes.append(ResourceChange(key, r["type"], r["name"], action, is_stateful(r["type"], h["properties"]), pcs))
    notes = (
        f"Values AWS assigns at creation read {UNKNOWN!r} on both sides and compare equal, and secrets read "
        f"{SECRET!r}: a replacement that cascades through an id (e.g. a new subnet moving its instances) shows "
        "only where an input itself changed; `pulumi preview` shows the cascade.",
    )
    return ResourceDiff(tuple(changes), same, notes)


def show(value: Any, limit: int = 80) -> str:
    """A property value on one line, shortened for reports."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"
