"""The network component: subnets, gateways and routes per AZ, the S3 endpoint."""

from __future__ import annotations

from tests.pulumi_helpers import (
    NAT,
    ROUTE,
    ROUTE_TABLE,
    SUBNET,
    VPC,
    VPC_ENDPOINT,
    example_data,
    expect,
    of_type,
    one,
    run_example,
    run_spec,
)


def test_p5_training_network() -> None:
    rec = run_example("p5-training")
    vpc = one(rec, VPC)
    expect(vpc, vpc.inputs["cidrBlock"] == "10.20.0.0/16", "spec CIDR")
    expect(vpc, vpc.inputs["enableDnsHostnames"] is True and vpc.inputs["enableDnsSupport"] is True, "VPC DNS")
    subnets = {s.name: s.inputs for s in of_type(rec, SUBNET)}
    assert subnets["p5-training-private-a"]["cidrBlock"] == "10.20.16.0/20"
    assert subnets["p5-training-private-a"]["availabilityZone"] == "us-east-1a"
    nat = one(rec, NAT)
    expect(nat, nat.inputs["subnetId"] == "p5-training-public-a-id", "NAT gateway in the public subnet")
    routes = {r.name: r.inputs for r in of_type(rec, ROUTE)}
    assert routes["p5-training-public-default"]["gatewayId"] == "p5-training-igw-id"
    assert routes["p5-training-private-us-east-1a-default"]["natGatewayId"] == "p5-training-nat-us-east-1a-id"
    s3 = one(rec, VPC_ENDPOINT)
    expect(s3, s3.inputs["serviceName"] == "com.amazonaws.us-east-1.s3", "S3 in the spec's region")
    expect(s3, s3.inputs["vpcEndpointType"] == "Gateway", "free gateway endpoint")
    want = sorted(f"{r.name}-id" for r in of_type(rec, ROUTE_TABLE))
    expect(s3, sorted(s3.inputs["routeTableIds"]) == want, "on every route table")


def test_one_nat_gateway_per_az_with_private_subnets() -> None:
    data = example_data("hybrid")
    data["aws"]["subnets"] = [
        {"name": "public-a", "cidr": "10.30.0.0/24", "availability_zone": "us-west-2a", "public": True},
        {"name": "public-b", "cidr": "10.30.1.0/24", "availability_zone": "us-west-2b", "public": True},
        {"name": "private-a", "cidr": "10.30.16.0/20", "availability_zone": "us-west-2a"},
        {"name": "private-b", "cidr": "10.30.32.0/20", "availability_zone": "us-west-2b"},
    ]
    rec = run_spec(data)
    nats = {n.name: n.inputs["subnetId"] for n in of_type(rec, NAT)}
    assert nats == {
        "hybrid-nat-us-west-2a": "hybrid-public-a-id",
        "hybrid-nat-us-west-2b": "hybrid-public-b-id",
    }
    assert sorted(r.name for r in of_type(rec, ROUTE_TABLE)) == [
        "hybrid-private-us-west-2a",
        "hybrid-private-us-west-2b",
        "hybrid-public",
    ]
    routes = {r.name: r.inputs.get("natGatewayId") for r in of_type(rec, ROUTE)}
    assert routes["hybrid-private-us-west-2b-default"] == "hybrid-nat-us-west-2b-id", "each AZ uses its own NAT"


def test_private_only_vpc_has_no_internet_path() -> None:
    data = example_data("hybrid")
    data["aws"]["subnets"] = [s for s in data["aws"]["subnets"] if not s.get("public")]
    rec = run_spec(data)
    assert of_type(rec, NAT) == [] and of_type(rec, ROUTE) == []
    assert not [r for r in rec.resources if r.type == "aws:ec2/internetGateway:InternetGateway"]
    s3 = one(rec, VPC_ENDPOINT)
    expect(s3, s3.inputs["routeTableIds"] == ["hybrid-private-us-west-2b-id"], "S3 still reachable")
