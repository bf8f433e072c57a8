"""Shared helpers for the Pulumi tests (imported as ``tests.pulumi_helpers``).

* ``run_example`` / ``run_spec`` run the real program (``infra.program.deploy``) under fresh mocks:
  each call resets the Pulumi runtime and calls ``set_mocks`` again, so runs never share state.
  Results of the two example specs are cached per (spec, mode) because a recording is plain data
  (tests must not mutate it).
* ``mocks_runtime`` gives a test its own mock runtime for building single components.
* ``one``/``expect`` raise ``AssertionError`` messages that name the resource URN.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from clusterforge.clusterspec.models import Cluster
from clusterforge.plan.mocks import (
    RecordedResource,
    Recording,
    RecordingMocks,
    RecordingMonitor,
    run_program,
)
from clusterforge.resolve import resolve, resolve_file

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
AWS_EXAMPLES = ("p5-training", "hybrid")

# Type tokens the tests look at.
VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
NAT = "aws:ec2/natGateway:NatGateway"
ROUTE = "aws:ec2/route:Route"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
PG = "aws:ec2/placementGroup:PlacementGroup"
INSTANCE = "aws:ec2/instance:Instance"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
PROFILE = "aws:iam/instanceProfile:InstanceProfile"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
EFS = "aws:efs/fileSystem:FileSystem"
MOUNT_TARGET = "aws:efs/mountTarget:MountTarget"
PARAMETER = "aws:ssm/parameter:Parameter"


def example_data(name: str) -> dict[str, Any]:
    """The example spec as a dict, to derive variants from (a fresh copy each call)."""
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    return copy.deepcopy(data)


def spec(data: dict[str, Any]) -> Cluster:
    return Cluster.model_validate(data)


@functools.cache
def run_example(name: str, *, preview: bool = False) -> Recording:
    return run_program(resolve_file(EXAMPLES / f"{name}.yaml"), preview=preview)


def run_spec(data: dict[str, Any], *, preview: bool = False) -> Recording:
    return run_program(resolve(spec(data), base_dir=EXAMPLES), preview=preview)


def _p5_two_az_no_ssh() -> dict[str, Any]:
    """p5-training spread over two AZs (the CPU group in us-east-1b) with SSH closed."""
    data = example_data("p5-training")
    data["aws"]["login_allowed_cidrs"] = []
    data["aws"]["subnets"] += [
        {"name": "public-b", "cidr": "10.20.1.0/24", "availability_zone": "us-east-1b", "public": True},
        {"name": "private-b", "cidr": "10.20.32.0/20", "availability_zone": "us-east-1b"},
    ]
    next(g for g in data["node_groups"] if g["name"] == "cpu")["cloud"]["subnet"] = "private-b"
    return data


def _hybrid_debian_reservation() -> dict[str, Any]:
    """hybrid on Debian 12 with the burst group in an on-demand capacity reservation."""
    data = example_data("hybrid")
    data["os"] = "debian-12"
    burst = next(g for g in data["node_groups"] if g["name"] == "burst")
    burst["cloud"]["capacity"] = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}
    return data


VARIANTS = {"p5-two-az-no-ssh": _p5_two_az_no_ssh, "hybrid-debian-reservation": _hybrid_debian_reservation}


@functools.cache
def run_variant(name: str) -> Recording:
    """A named variant of an example, run once per session (several tests read it)."""
    return run_spec(VARIANTS[name]())


@contextmanager
def mocks_runtime() -> Iterator[RecordingMonitor]:
    """A fresh mock runtime for one test that builds components itself (with
    ``@pulumi.runtime.test``). Yields the monitor, whose ``recorded`` list fills as resources
    register."""
    import pulumi
    from pulumi.runtime import settings

    from clusterforge.plan.mocks import _ensure_loop

    mocks = RecordingMocks(preview=False)
    monitor = RecordingMonitor(mocks)
    settings.reset_options(project="clusterforge", stack="test", preview=False)
    _ensure_loop()
    pulumi.runtime.set_mocks(mocks, project="clusterforge", stack="test", preview=False, monitor=monitor)
    yield monitor


# ------------------------------------------------------------------------ finding and asserting


def of_type(rec: Recording | list[RecordedResource], type_: str) -> list[RecordedResource]:
    resources = rec.resources if isinstance(rec, Recording) else rec
    return [r for r in resources if r.type == type_]


def one(rec: Recording, type_: str, name: str | None = None) -> RecordedResource:
    """Exactly one resource of ``type_`` (named ``name`` when given), or an error listing URNs."""
    found = [r for r in of_type(rec, type_) if name is None or r.name == name]
    if len(found) != 1:
        urns = "\n  ".join(r.urn for r in of_type(rec, type_)) or "(none)"
        raise AssertionError(f"expected one {type_} named {name!r}, found {len(found)}; registered:\n  {urns}")
    return found[0]


def expect(resource: RecordedResource, condition: bool, message: str) -> None:
    """``assert`` that names the resource: ``urn:pulumi:...::name: message (inputs ...)``."""
    if not condition:
        raise AssertionError(f"{resource.urn}: {message}\n  inputs: {resource.inputs}")


def counts(rec: Recording) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rec.resources:
        out[r.type] = out.get(r.type, 0) + 1
    return dict(sorted(out.items()))
