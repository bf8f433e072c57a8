"""The emulated EC2 / Auto Scaling / DynamoDB API of the local AWS flavour: moto in server mode.

* :func:`start_moto` runs moto's server wrapped by ``clusterforge.local.aws.ec2server`` (which adds
  DescribeInstanceTopology; optionally in a network namespace) through :mod:`clusterforge.proc`
  and waits, bounded, until it answers.
* :func:`populate` creates in moto what the Pulumi plan creates, from the offline plan's
  recording (``run_program(rc, preview=True)``): the launch templates with the plan's real user
  data, instance type and tag specifications, the Auto Scaling groups with the plan's sizes, the
  head instances (RunInstances with their user data and tags) and the node-name table. What the
  local flavour changes is returned as ``Populated.overrides`` (one VPC and subnet = the local
  /24, a moto image for the plan's AMI, no EFA interfaces / IAM profile / volumes ...).
* :func:`instances` is what the local "hypervisor" polls: every instance of the cluster with its
  state, address, group, role, tags and decoded user data.

Observed with moto 5.2.1 in server mode (tests/test_local_aws_emulator.py keeps these true):

* An ASG launches its instances at once, inside CreateAutoScalingGroup: each carries the launch
  template's ``instance`` tag specification plus ``aws:ec2launchtemplate:id``/``version`` and
  ``aws:autoscaling:groupName``; ASG tags with ``PropagateAtLaunch=false`` (the plan's) are not
  copied, as on AWS. DescribeInstanceAttribute(userData) returns the template's user data.
* Private addresses come from the subnet in order from .4 (moto, like AWS, reserves .1-.3); the
  address of a terminated instance is not handed out again (moto keeps it on the terminated record).
* ``terminate_instance_in_auto_scaling_group(ShouldDecrementDesiredCapacity=False)`` launches
  the replacement synchronously (before the call returns), with a new id and the next address;
  the terminated instance loses its ``aws:autoscaling:groupName`` tag (so the group of a gone
  instance is read from ``clusterforge:group``). A plain ``TerminateInstances`` on an ASG member
  is also replaced at once (AWS would do it after its next health check).
* Image ids are not validated unless MOTO_ENABLE_AMI_VALIDATION is set; ``populate`` still
  registers an image so the id is one DescribeImages knows.
"""

from __future__ import annotations

import base64
import ipaddress
import shlex
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from clusterforge.aws.outputs import TAG_CLUSTER, TAG_GROUP, TAG_ROLE
from clusterforge.errors import ClusterforgeError
from clusterforge.plan.mocks import RecordedResource, Recording
from clusterforge.plan.model import SECRET, UNKNOWN
from clusterforge.proc import Daemon, start
from clusterforge.resolve import ResolvedCluster

__all__ = [
    "EmulatedInstance",
    "EmulatorError",
    "MotoServer",
    "Populated",
    "instances",
    "node_names_table",
    "populate",
    "start_moto",
]

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
INSTANCE = "aws:ec2/instance:Instance"
TABLE = "aws:dynamodb/table:Table"

MOTO_READY_S = 30.0  # moto imports every service's models at start: ~2 s here, generous bound
#: moto accepts any keys; these can authenticate nowhere else (the one spelling of them)
FAKE_CREDENTIALS = {"aws_access_key_id": "emulated", "aws_secret_access_key": "emulated"}


class EmulatorError(ClusterforgeError):
    """The emulated AWS could not be started or filled."""


def node_names_table(cluster: str) -> str:
    """The registry of claimed node names (issue 12 contract): one DynamoDB table per cluster."""
    return f"{cluster}-node-names"


# ------------------------------------------------------------------------------------ the server


@dataclass
class MotoServer:
    daemon: Daemon
    endpoint: str  # http://ADDR:PORT, what boto3's endpoint_url takes
    log: Path

    @property
    def pid(self) -> int:
        return self.daemon.pid

    def stop(self, grace: float = 5.0) -> None:
        self.daemon.stop(grace)


def start_moto(
    bind: str, port: int, log: Path, *, netns: str | None = None, timeout: float = MOTO_READY_S,
    placements: Path | None = None,
) -> MotoServer:
    """Start moto's server on ``bind:port`` (in network namespace ``netns`` if given), its output
    appended to ``log``, and wait up to ``timeout`` s until ``GET /moto-api/`` answers.

    moto runs inside ``clusterforge.local.aws.ec2server``, which adds DescribeInstanceTopology
    (placements from ``placements``, else its default rule).

    The readiness probe runs in the caller's namespace: with ``netns``, ``bind`` must be an
    address the caller reaches (the bridge address). Raises :class:`EmulatorError` naming the log.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    extra = ["--placements", str(placements)] if placements is not None else []
    cmd = shlex.join([sys.executable, "-m", "clusterforge.local.aws.ec2server", "-H", bind, "-p", str(port), *extra])
    # The shell only redirects and execs: moto is the group leader's image, its log a plain file.
    argv = ["sh", "-c", f"exec {cmd} >>{shlex.quote(str(log))} 2>&1"]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    daemon = start(argv)
    host = "127.0.0.1" if bind in ("0.0.0.0", "") else bind
    endpoint = f"http://{host}:{port}"
    try:
        wait_ready(endpoint, timeout=timeout, log=log, alive=daemon.alive)
    except EmulatorError:
        daemon.stop(2.0)
        raise
    return MotoServer(daemon, endpoint, log)


def wait_ready(endpoint: str, *, timeout: float, log: Path, alive: Callable[[], bool] | None = None) -> None:
    """Bounded wait until moto's server answers ``GET /moto-api/`` at ``endpoint``; an
    :class:`EmulatorError` naming the log when it exits (``alive`` says so) or stays silent."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None and not alive():
            raise EmulatorError(f"moto server exited during start; see {log}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise EmulatorError(f"moto server did not answer on {endpoint} within {timeout:.0f} s; see {log}")
        time.sleep(0.2)


def client(service: str, endpoint: str, region: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=30, retries={"mode": "standard", "max_attempts": 3})
    return boto3.client(service, endpoint_url=endpoint, region_name=region, config=config, **FAKE_CREDENTIALS)


# ------------------------------------------------------------------------------------- populate


@dataclass(frozen=True)
class Populated:
    """What :func:`populate` created, keyed the way the plan names things."""

    region: str
    vpc_id: str
    subnet_id: str
    image_id: str
    table: str
    asg_names: dict[str, str]  # node group -> Auto Scaling group name
    launch_template_ids: dict[str, str]  # node group -> launch template id
    head_instance_ids: dict[str, str]  # head hostname -> instance id
    overrides: list[str] = field(default_factory=list)


def _known(r: RecordedResource, key: str) -> Any:
    value = r.inputs.get(key)
    if value is None or value in (UNKNOWN, SECRET):
        raise EmulatorError(
            f"{r.type} {r.name}: input {key!r} is {value!r} in the offline plan; the emulator needs its value"
        )
    return value


def _tag_list(tags: dict[str, Any]) -> list[dict[str, str]]:
    return [{"Key": str(k), "Value": str(v)} for k, v in sorted(tags.items())]


def _metadata_options(r: RecordedResource) -> dict[str, Any]:
    mo = r.inputs.get("metadataOptions") or {}
    names = {"httpTokens": "HttpTokens", "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
             "httpEndpoint": "HttpEndpoint", "instanceMetadataTags": "InstanceMetadataTags"}
    return {names[k]: v for k, v in mo.items() if k in names and v not in (UNKNOWN, SECRET)}


def _group_of(r: RecordedResource, tags: dict[str, Any]) -> str:
    group = tags.get(TAG_GROUP)
    if not isinstance(group, str):
        raise EmulatorError(f"{r.type} {r.name}: no {TAG_GROUP} tag in the offline plan; cannot tell its node group")
    return group


def _net(net: str) -> ipaddress.IPv4Network:
    """``10.79.0`` (LocalLayout.net) or ``10.79.0.0/24``."""
    text = net if "/" in net else f"{net}.0/24"
    try:
        return ipaddress.IPv4Network(text, strict=True)
    except ValueError as exc:
        raise EmulatorError(f"net {net!r} is not a /24 network ({exc}); give e.g. 10.79.0") from None


def _image(ec2: Any, cluster: str) -> str:
    # A registered image, so DescribeImages knows the id the templates and instances use.
    reply = ec2.register_image(
        Name=f"clusterforge-local-{cluster}",
        Description="clusterforge local flavour: the node rootfs stands for the plan's AMI",
        Architecture="x86_64",
        RootDeviceName="/dev/sda1",
        VirtualizationType="hvm",
    )
    return str(reply["ImageId"])


def populate(endpoint: str, rc: ResolvedCluster, recording: Recording, *, net: str) -> Populated:
    """Create in moto at ``endpoint`` what ``recording`` (the offline plan of ``rc``) creates.

    Head instances first, in spec order (so the controller gets NET.4, like a fixed address on a
    rack), then each Auto Scaling group in spec order, which moto fills at once.
    """
    cluster = rc.spec
    if cluster.aws is None:
        raise EmulatorError(f"cluster {cluster.name!r} has no 'aws' section: the AWS flavour needs an AWS spec")
    region = cluster.aws.region
    nw = _net(net)
    ec2 = client("ec2", endpoint, region)
    ddb = client("dynamodb", endpoint, region)
    autoscaling = client("autoscaling", endpoint, region)
    az = cluster.aws.subnets[0].availability_zone if cluster.aws.subnets else f"{region}a"
    overrides = [
        f"aws: one VPC and one subnet {nw} in {az} instead of vpc_cidr {cluster.aws.vpc_cidr} and "
        f"{len(cluster.aws.subnets)} subnet(s): the local bridge network; moto hands out addresses from .4",
        "aws: launch templates and head instances without network interfaces (EFA), security groups, "
        "block devices, IAM instance profile or placement: a local node has one veth; credentials come "
        "from the metadata stand-in",
        "aws: no NAT/internet gateways, routes, VPC endpoints, FSx, EFS, SSM parameters or IAM in moto: "
        "the nodes reach only the local bridge",
    ]

    name_tag = {"Key": TAG_CLUSTER, "Value": cluster.name}
    vpc_id = ec2.create_vpc(
        CidrBlock=str(nw), TagSpecifications=[{"ResourceType": "vpc", "Tags": [name_tag]}]
    )["Vpc"]["VpcId"]
    subnet_id = ec2.create_subnet(
        VpcId=vpc_id, CidrBlock=str(nw), AvailabilityZone=az,
        TagSpecifications=[{"ResourceType": "subnet", "Tags": [name_tag]}],
    )["Subnet"]["SubnetId"]
    image_id = _image(ec2, cluster.name)
    amis = sorted({str(r.inputs.get(k)) for r in recording.of_type(LT) + recording.of_type(INSTANCE)
                   for k in ("imageId", "ami") if r.inputs.get(k)})
    overrides.append(f"aws: image {image_id} (registered in moto) stands for {', '.join(amis) or 'the plan AMI'}")

    table = node_names_table(cluster.name)
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        Tags=[name_tag],
    )
    if not recording.of_type(TABLE):
        overrides.append(f"aws: DynamoDB table {table} created although the plan does not have it yet")

    # Pulumi registers resources concurrently, so the recording's order varies from run to run:
    # create in spec order (group, then name) so that addresses are the same on every `up`.
    order = {g.name: n for n, g in enumerate(cluster.node_groups)}

    def spec_order(r: RecordedResource) -> tuple[int, str]:
        tags = r.inputs.get("tags")
        group = next((t["value"] for t in tags if t.get("key") == TAG_GROUP), None) if isinstance(tags, list) else (
            tags.get(TAG_GROUP) if isinstance(tags, dict) else None)
        return order.get(str(group), len(order)), r.name

    heads: dict[str, str] = {}
    for r in sorted(recording.of_type(INSTANCE), key=spec_order):
        tags: dict[str, Any] = _known(r, "tags")
        user_data = r.inputs.get("userData")
        if user_data is None and r.inputs.get("userDataBase64") not in (None, UNKNOWN, SECRET):
            user_data = base64.b64decode(r.inputs["userDataBase64"]).decode()
        if user_data in (None, UNKNOWN, SECRET):
            raise EmulatorError(f"{r.type} {r.name}: user data is {user_data!r} in the offline plan")
        reply = ec2.run_instances(
            ImageId=image_id, InstanceType=str(_known(r, "instanceType")), MinCount=1, MaxCount=1,
            SubnetId=subnet_id, UserData=user_data,  # boto3 base64-encodes RunInstances user data
            MetadataOptions=_metadata_options(r),
            TagSpecifications=[{"ResourceType": "instance", "Tags": _tag_list(tags)}],
        )
        hostname = str(tags.get("clusterforge:hostname") or tags.get("Name") or r.name)
        heads[hostname] = reply["Instances"][0]["InstanceId"]

    lts: dict[str, str] = {}
    for r in sorted(recording.of_type(LT), key=spec_order):
        specs = _known(r, "tagSpecifications")
        instance_tags: dict[str, Any] = next((s["tags"] for s in specs if s.get("resourceType") == "instance"), {})
        group = _group_of(r, r.inputs.get("tags") or instance_tags)
        data = {
            "ImageId": image_id,
            "InstanceType": str(_known(r, "instanceType")),
            "UserData": str(_known(r, "userData")),  # already base64, as CreateLaunchTemplate wants it
            "MetadataOptions": _metadata_options(r),
            "TagSpecifications": [
                {"ResourceType": s["resourceType"], "Tags": _tag_list(s.get("tags") or {})} for s in specs
            ],
        }
        lt = ec2.create_launch_template(
            LaunchTemplateName=r.name, LaunchTemplateData=data,
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": _tag_list(r.inputs.get("tags") or {})}],
        )["LaunchTemplate"]
        lts[group] = lt["LaunchTemplateId"]

    asgs: dict[str, str] = {}
    for r in sorted(recording.of_type(ASG), key=spec_order):
        tags_in: list[dict[str, Any]] = r.inputs.get("tags") or []
        group = _group_of(r, {t["key"]: t["value"] for t in tags_in})
        if group not in lts:
            raise EmulatorError(f"{r.type} {r.name}: no launch template of group {group!r} in the offline plan")
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=r.name,
            MinSize=int(_known(r, "minSize")), MaxSize=int(_known(r, "maxSize")),
            DesiredCapacity=int(r.inputs.get("desiredCapacity", _known(r, "minSize"))),
            LaunchTemplate={"LaunchTemplateId": lts[group], "Version": "$Latest"},
            VPCZoneIdentifier=subnet_id,
            HealthCheckType=str(r.inputs.get("healthCheckType", "EC2")),
            # the plan's scale-in protection: a lowered size cannot pick instances (retire can)
            NewInstancesProtectedFromScaleIn=bool(r.inputs.get("protectFromScaleIn", False)),
            Tags=[{"ResourceId": r.name, "ResourceType": "auto-scaling-group", "Key": t["key"],
                   "Value": str(t["value"]), "PropagateAtLaunch": bool(t.get("propagateAtLaunch", False))}
                  for t in tags_in],
        )
        asgs[group] = r.name
    return Populated(region, vpc_id, subnet_id, image_id, table, asgs, lts, heads, overrides)


# ------------------------------------------------------------------------------------ instances


@dataclass(frozen=True)
class EmulatedInstance:
    """One instance of the cluster as the emulated EC2 reports it."""

    instance_id: str
    state: str  # pending | running | shutting-down | terminated | stopping | stopped
    private_ip: str | None
    group: str | None  # clusterforge:group (kept after termination, unlike the ASG's tag)
    role: str | None  # clusterforge:role
    asg_name: str | None  # aws:autoscaling:groupName (None for head nodes and gone instances)
    instance_type: str
    tags: dict[str, str]
    user_data: str  # decoded
    launch_time: datetime


def instances(endpoint: str, cluster: str, *, region: str) -> list[EmulatedInstance]:
    """Every instance tagged ``clusterforge:cluster=<cluster>`` in ``region`` (moto keeps one
    inventory per region), oldest launch first, then by address."""
    ec2 = client("ec2", endpoint, region)
    found: list[EmulatedInstance] = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}]
    )
    for page in pages:
        for reservation in page["Reservations"]:
            for i in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
                attr = ec2.describe_instance_attribute(InstanceId=i["InstanceId"], Attribute="userData")
                raw = attr.get("UserData", {}).get("Value", "")
                found.append(EmulatedInstance(
                    instance_id=i["InstanceId"],
                    state=i["State"]["Name"],
                    private_ip=i.get("PrivateIpAddress"),
                    group=tags.get(TAG_GROUP),
                    role=tags.get(TAG_ROLE),
                    asg_name=tags.get("aws:autoscaling:groupName"),
                    instance_type=i["InstanceType"],
                    tags=tags,
                    user_data=base64.b64decode(raw).decode(errors="replace") if raw else "",
                    launch_time=i["LaunchTime"],
                ))
    found.sort(key=lambda x: (x.launch_time, ipaddress.IPv4Address(x.private_ip or "0.0.0.0")))
    return found


# --------------------------------------------------------------------------------- stack outputs


def stack_outputs(endpoint: str, rc: ResolvedCluster, populated: Populated) -> dict[str, Any]:
    """The stack outputs of the emulated stack, in the program's :class:`StackOutputs` shape
    (validated by it): what ``pulumi stack output --json`` prints after a real ``up``, with the ids
    and addresses moto assigned."""
    from clusterforge.aws import outputs as out

    cluster = rc.spec
    live = {i.instance_id: i for i in instances(endpoint, cluster.name, region=populated.region)}
    groups: dict[str, Any] = {}
    controller = ""
    logins: dict[str, str] = {}
    for g in cluster.node_groups:
        if g.cloud is None:
            continue
        info: dict[str, Any] = {
            "role": g.role, "instance_type": g.cloud.instance_type, "count": g.cloud.count,
            "hostlist": g.node_hostlist, "tag_filters": out.group_tag_filters(cluster.name, g.name),
        }
        if g.role in ("controller", "login"):
            ids = {h: populated.head_instance_ids[h] for h in g.hostnames}
            addrs = {h: live[i].private_ip or "" for h, i in ids.items()}
            info.update(instance_ids=ids, addresses=addrs)
            if g.role == "controller" and not controller:
                controller = next(iter(addrs.values()))
            if g.role == "login":
                logins.update(addrs)
        else:
            info["asg_name"] = populated.asg_names[g.name]
        groups[g.name] = info
    data = {
        out.CLUSTER_NAME: cluster.name, out.REGION: populated.region, out.VPC_ID: populated.vpc_id,
        out.SUBNET_IDS: {sn.name: populated.subnet_id for sn in (cluster.aws.subnets if cluster.aws else [])},
        out.CONTROLLER_ADDRESS: controller, out.LOGIN_ADDRESSES: logins, out.NODE_GROUPS: groups,
        out.STORAGE: {}, out.SECRET_PARAMETERS: {}, out.NODE_NAMES_TABLE: populated.table,
    }
    return out.StackOutputs.model_validate(data).model_dump(mode="json")
