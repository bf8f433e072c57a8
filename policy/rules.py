"""The rules, written against resource *inputs* (what the program asks for), not outputs.

Inputs are known during ``pulumi preview`` as long as they are literals in the program, so the
rules stay mandatory in preview. A rule that must read an unknown value (an id computed by the
cloud) would be downgraded to advisory by the policy engine; the rules below avoid that by
checking that a reference is *present* rather than reading its value.

Each validator has the signature ``(args: ResourceValidationArgs, report_violation) -> None`` and
is unit-tested by calling ``policy.validate(args, report)`` directly (tests/test_policy.py).
This module holds the shared helpers and the first rules; ``hardening`` (IAM, ingress, KMS keys)
and ``stateful`` (backups, ``protect``) hold the others, and ``pack.POLICIES`` lists them all.

The pack is standalone (it does not import clusterforge, so it runs in its own virtualenv); the
tag keys below are pinned to ``clusterforge.aws.outputs`` by a test.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

TAG_CLUSTER = "clusterforge:cluster"
TAG_GROUP = "clusterforge:group"
TAG_ROLE = "clusterforge:role"
REQUIRED_TAGS = (TAG_CLUSTER,)
INSTANCE_TAGS = (TAG_CLUSTER, TAG_GROUP, TAG_ROLE)

INSTANCE = "aws:ec2/instance:Instance"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EBS_VOLUME = "aws:ebs/volume:Volume"
EFS = "aws:efs/fileSystem:FileSystem"
FSX_LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
SSM_PARAMETER = "aws:ssm/parameter:Parameter"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
ASG = "aws:autoscaling/group:Group"

#: Types that take a ``tags`` map (the ones a clusterforge stack creates, plus the EBS volume).
TAGGABLE = frozenset(
    {
        "aws:ec2/vpc:Vpc",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/internetGateway:InternetGateway",
        "aws:ec2/eip:Eip",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/routeTable:RouteTable",
        "aws:ec2/vpcEndpoint:VpcEndpoint",
        "aws:ec2/placementGroup:PlacementGroup",
        SECURITY_GROUP,
        SG_INGRESS_RULE,
        "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
        LAUNCH_TEMPLATE,
        INSTANCE,
        EBS_VOLUME,
        "aws:iam/role:Role",
        "aws:iam/instanceProfile:InstanceProfile",
        FSX_LUSTRE,
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        EFS,
        SSM_PARAMETER,
        "aws:dynamodb/table:Table",
    }
)

SSH_PORT = 22
#: Roles whose metadata hop limit must be 1 (the brief of the rule: compute and controller nodes).
HOP_LIMIT_ROLES = ("compute", "controller")
EFA_TYPES = ("efa", "efa-only")

Props = Mapping[str, Any]

_PRESENT = object()
"""Stands for a value that is set but unknown during preview (a reference to another resource)."""


def _get(props: Any, key: str, default: Any = None) -> Any:
    """``props[key]`` without tripping the unknown-value proxy: a set-but-unknown value comes back
    as ``_PRESENT`` (the rule can tell "set" from "missing" without its value)."""
    if not isinstance(props, Mapping) or not any(k == key for k in props):  # None, _PRESENT, a scalar
        return default
    try:
        return props[key]
    except UnknownValueError:
        return _PRESENT


def _items(value: Any) -> Iterable[Any]:
    if value is None or value is _PRESENT or isinstance(value, str | bytes):
        return ()
    if isinstance(value, Sequence):
        return [v for i in range(len(value)) for v in [_get_index(value, i)]]
    return ()


def _get_index(seq: Sequence[Any], i: int) -> Any:
    try:
        return seq[i]
    except UnknownValueError:
        return _PRESENT


def _truthy(value: Any) -> bool:
    """Launch templates spell booleans as strings ("true"); instances use real booleans."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _covers_port(protocol: Any, from_port: Any, to_port: Any, port: int) -> bool:
    proto = str(protocol).lower() if protocol is not None else ""
    if proto in ("-1", "all"):
        return True
    if proto not in ("tcp", "6"):
        return False
    if not isinstance(from_port, int | float) or not isinstance(to_port, int | float):
        return True  # unknown range on a TCP rule: assume the worst
    return int(from_port) <= port <= int(to_port)


def _is_anywhere(cidr: Any) -> bool:
    if not isinstance(cidr, str):
        return False
    try:
        return ipaddress.ip_network(cidr, strict=False).prefixlen == 0
    except ValueError:
        return False


# ----------------------------------------------------------------------------- encryption


def _encryption(args: ResourceValidationArgs, report: ReportViolation) -> None:
    t, p = args.resource_type, args.props
    if t in (EBS_VOLUME, EFS):
        if not _truthy(_get(p, "encrypted")):
            report(f"{t} must set encrypted: true", None)
    elif t == FSX_LUSTRE:
        deployment = _get(p, "deploymentType")
        if not (isinstance(deployment, str) and deployment.startswith("PERSISTENT")):
            report(
                f"FSx for Lustre deploymentType {deployment!r}: use PERSISTENT_2 (KMS encryption at rest; "
                "SCRATCH file systems are not KMS-encrypted and lose data on server failure)",
                None,
            )
    elif t == INSTANCE:
        root = _get(p, "rootBlockDevice")
        if root is None or not _truthy(_get(root, "encrypted")):
            report("instance root volume must set rootBlockDevice.encrypted: true", None)
        for dev in _items(_get(p, "ebsBlockDevices")):
            if not _truthy(_get(dev, "encrypted")):
                report(f"instance EBS volume {_get(dev, 'deviceName')!r} must be encrypted", None)
    elif t == LAUNCH_TEMPLATE:
        mappings = list(_items(_get(p, "blockDeviceMappings")))
        if not mappings:
            report(
                "launch template has no blockDeviceMappings: root volume encryption would depend on the "
                "AMI's snapshot; map the root device with ebs.encrypted: 'true'",
                None,
            )
        for m in mappings:
            ebs = _get(m, "ebs")
            if ebs is not None and not _truthy(_get(ebs, "encrypted")):
                report(f"launch template volume {_get(m, 'deviceName')!r} must set ebs.encrypted: 'true'", None)
    elif t == SSM_PARAMETER:
        name = _get(p, "name")
        if isinstance(name, str) and name.startswith("/clusterforge/") and _get(p, "type") != "SecureString":
            report(f"cluster secret parameter {name} must be a SecureString", None)


# -------------------------------------------------------------------------------- IMDSv2


def _imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (INSTANCE, LAUNCH_TEMPLATE):
        return
    md = _get(args.props, "metadataOptions")
    if _get(md, "httpEndpoint") == "disabled":
        return
    if _get(md, "httpTokens") != "required":
        report("instance metadata must require IMDSv2 session tokens: metadataOptions.httpTokens: required", None)
    role = node_role(args.resource_type, args.props)
    hops = _get(md, "httpPutResponseHopLimit")
    if role in HOP_LIMIT_ROLES and hops is not _PRESENT and hops != 1:
        # Hop limit 1: the token reply dies at the first hop, so a container or anything else
        # behind a bridge/NAT on the node cannot fetch the instance role's credentials. Unset is
        # refused too: an AMI registered with ImdsSupport v2.0 sets it to 2 (EC2 API reference, Image.ImdsSupport).
        report(
            f"{role} instance metadata hop limit is {hops!r}: set metadataOptions.httpPutResponseHopLimit: 1 "
            "(nothing behind another network hop on the node may reach the instance role's credentials)",
            None,
        )


# --------------------------------------------------------------------------- SSH exposure


def ingress_rules(t: str, p: Props) -> list[tuple[Any, Any, Any, list[Any]]]:
    """Every ingress rule of a security group, standalone rule or ingress rule resource, as
    (protocol, from port, to port, CIDRs)."""
    rules: list[tuple[Any, Any, Any, list[Any]]] = []
    if t == SG_INGRESS_RULE:
        rules.append(
            (
                _get(p, "ipProtocol"),
                _get(p, "fromPort"),
                _get(p, "toPort"),
                [_get(p, "cidrIpv4"), _get(p, "cidrIpv6")],
            )
        )
    elif t == SG_RULE and _get(p, "type") == "ingress":
        cidrs = list(_items(_get(p, "cidrBlocks"))) + list(_items(_get(p, "ipv6CidrBlocks")))
        rules.append((_get(p, "protocol"), _get(p, "fromPort"), _get(p, "toPort"), cidrs))
    elif t == SECURITY_GROUP:
        for rule in _items(_get(p, "ingress")):
            cidrs = list(_items(_get(rule, "cidrBlocks"))) + list(_items(_get(rule, "ipv6CidrBlocks")))
            rules.append((_get(rule, "protocol"), _get(rule, "fromPort"), _get(rule, "toPort"), cidrs))
    return rules


def _ssh_from_anywhere(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for protocol, lo, hi, cidrs in ingress_rules(args.resource_type, args.props):
        anywhere = [c for c in cidrs if _is_anywhere(c)]
        if anywhere and _covers_port(protocol, lo, hi, SSH_PORT):
            report(
                f"SSH (port 22) open to {', '.join(anywhere)}: list the networks that may log in "
                "(aws.login_allowed_cidrs) or leave it empty and use SSM Session Manager",
                None,
            )


# ---------------------------------------------------------------------------- EFA placement


def _efa_placement(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    p = args.props
    efa = [ni for ni in _items(_get(p, "networkInterfaces")) if _get(ni, "interfaceType") in EFA_TYPES]
    if not efa:
        return
    placement = _get(p, "placement")
    in_group = _get(placement, "groupName") is not None or _get(placement, "groupId") is not None
    market = _get(_get(p, "instanceMarketOptions"), "marketType")
    in_block = market == "capacity-block"
    if not (in_group or in_block):
        report(
            f"launch template with {len(efa)} EFA interface(s) has neither a cluster placement group "
            "(placement.groupName) nor capacity-block market options: EFA peers may land far apart "
            "in the network and lose bandwidth and latency",
            None,
        )
    if in_block:
        target = _get(_get(p, "capacityReservationSpecification"), "capacityReservationTarget")
        if _get(target, "capacityReservationId") is None:
            report("capacity-block market type without capacityReservationTarget.capacityReservationId", None)


# ---------------------------------------------------------------------- public IP on compute


def node_role(t: str, p: Props) -> str:
    """The node role an instance or launch template is for (its ``clusterforge:role`` tag; for a
    launch template the tag it puts on its instances). Untagged or unknown counts as ``compute``,
    the strictest role, so a missing tag never loosens a rule."""
    if t == INSTANCE:
        tags = _get(p, "tags")
    elif t == LAUNCH_TEMPLATE:
        specs = {_get(s, "resourceType"): _get(s, "tags") for s in _items(_get(p, "tagSpecifications"))}
        tags = specs.get("instance")
    else:
        return ""
    role = _get(tags, TAG_ROLE) if isinstance(tags, Mapping) else None
    return role if isinstance(role, str) and role else "compute"


def _no_public_ip_on_compute(args: ResourceValidationArgs, report: ReportViolation) -> None:
    # Compute nodes (launch templates of Auto Scaling groups) and controllers stay private; only a
    # login node may carry a public address (infra/head.py gives it one only with SSH CIDRs).
    t, p = args.resource_type, args.props
    role = node_role(t, p)
    if role in ("", "login"):
        return
    if t == INSTANCE and _truthy(_get(p, "associatePublicIpAddress")):
        report(f"{role} instance asks for a public IP (associatePublicIpAddress); only login nodes may have one", None)
    for ni in _items(_get(p, "networkInterfaces")) if t == LAUNCH_TEMPLATE else ():
        if _truthy(_get(ni, "associatePublicIpAddress")):
            report(
                f"{role} launch template interface (card {_get(ni, 'networkCardIndex')}, device "
                f"{_get(ni, 'deviceIndex')}) asks for a public IP; compute nodes stay private",
                None,
            )


# ------------------------------------------------------------------------------------ tags


def _tags_missing(tags: Any, keys: Sequence[str]) -> list[str]:
    if tags is _PRESENT:
        return []  # computed tags: cannot judge during preview
    if not isinstance(tags, Mapping):
        return list(keys)
    return [k for k in keys if not _get(tags, k)]


def _required_tags(args: ResourceValidationArgs, report: ReportViolation) -> None:
    t, p = args.resource_type, args.props
    if t == ASG:
        asg_tags = {_get(tag, "key"): _get(tag, "value") for tag in _items(_get(p, "tags")) if isinstance(tag, Mapping)}
        missing = _tags_missing(asg_tags, REQUIRED_TAGS)
    elif t in TAGGABLE:
        missing = _tags_missing(_get(p, "tags"), INSTANCE_TAGS if t == INSTANCE else REQUIRED_TAGS)
    else:
        return
    if missing:
        report(f"missing tag(s) {', '.join(missing)}", None)
    if t == LAUNCH_TEMPLATE:
        specs = {_get(s, "resourceType"): _get(s, "tags") for s in _items(_get(p, "tagSpecifications"))}
        gone = _tags_missing(specs.get("instance"), INSTANCE_TAGS)
        if gone:
            report(
                f"launch template must tag its instances with {', '.join(gone)} "
                "(tagSpecifications resourceType 'instance'): the inventory finds nodes by these tags",
                None,
            )


def _policy(
    name: str,
    description: str,
    fn: Callable[[ResourceValidationArgs, ReportViolation], None],
    level: EnforcementLevel = EnforcementLevel.MANDATORY,
) -> ResourceValidationPolicy:
    return ResourceValidationPolicy(name=name, description=description, validate=fn, enforcement_level=level)


ENCRYPTION = _policy(
    "clusterforge-encryption-at-rest",
    "EBS, launch-template and instance volumes, EFS, FSx for Lustre and cluster secrets are encrypted.",
    _encryption,
)
IMDSV2 = _policy(
    "clusterforge-imdsv2-required",
    "Instances and launch templates require IMDSv2; compute and controller nodes with hop limit 1.",
    _imdsv2,
)
NO_SSH_FROM_ANYWHERE = _policy(
    "clusterforge-no-ssh-from-anywhere",
    "No security group opens SSH to 0.0.0.0/0 or ::/0.",
    _ssh_from_anywhere,
)
EFA_PLACEMENT = _policy(
    "clusterforge-efa-placement",
    "Launch templates with EFA interfaces use a cluster placement group or a capacity block.",
    _efa_placement,
)
NO_PUBLIC_IP_ON_COMPUTE = _policy(
    "clusterforge-no-public-ip-on-compute",
    "Compute and controller nodes (launch templates, instances) never request a public IP; login may.",
    _no_public_ip_on_compute,
)
REQUIRED_TAGS_POLICY = _policy(
    "clusterforge-required-tags",
    "Taggable resources carry the cluster tag; instances also their group and role tags.",
    _required_tags,
)

POLICIES: tuple[ResourceValidationPolicy, ...] = (
    ENCRYPTION,
    IMDSV2,
    NO_SSH_FROM_ANYWHERE,
    EFA_PLACEMENT,
    NO_PUBLIC_IP_ON_COMPUTE,
    REQUIRED_TAGS_POLICY,
)
