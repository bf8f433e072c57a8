"""The whole program under mocks: resource counts per example, tree shape, outputs, entry point."""

from __future__ import annotations

import runpy

import pulumi
import pytest

from clusterforge.aws import outputs as out
from clusterforge.aws.efa import EfaLayoutError
from clusterforge.aws.layout import LayoutError
from clusterforge.resolve import resolve
from tests.pulumi_helpers import (
    EXAMPLES,
    ROOT,
    counts,
    example_data,
    expect,
    mocks_runtime,
    run_example,
    run_spec,
    spec,
)

COMPONENTS = {
    "clusterforge:aws:Cluster",
    "clusterforge:aws:Network",
    "clusterforge:aws:Security",
    "clusterforge:aws:Iam",
    "clusterforge:aws:Secrets",
    "clusterforge:aws:Storage",
    "clusterforge:aws:NodeGroup",
    "clusterforge:aws:HeadNodes",
    "clusterforge:aws:NodeNames",
}

EXPECTED_COUNTS = {
    "p5-training": {
        "aws:autoscaling/group:Group": 2,
        "aws:autoscaling/schedule:Schedule": 2,
        "aws:dynamodb/table:Table": 1,
        "aws:ebs/volume:Volume": 1,  # the controller's state volume (slurm.state_storage ebs)
        "aws:ec2/eip:Eip": 1,
        "aws:ec2/instance:Instance": 2,
        "aws:ec2/internetGateway:InternetGateway": 1,
        "aws:ec2/launchTemplate:LaunchTemplate": 2,
        "aws:ec2/natGateway:NatGateway": 1,
        "aws:ec2/route:Route": 2,
        "aws:ec2/routeTable:RouteTable": 2,
        "aws:ec2/routeTableAssociation:RouteTableAssociation": 2,
        # cluster (identity + egress), nodes, controller, login, EFA, FSx, EFS
        "aws:ec2/securityGroup:SecurityGroup": 7,
        "aws:ec2/subnet:Subnet": 2,
        "aws:ec2/vpc:Vpc": 1,
        "aws:ec2/volumeAttachment:VolumeAttachment": 1,
        "aws:ec2/vpcEndpoint:VpcEndpoint": 1,
        "aws:efs/backupPolicy:BackupPolicy": 1,  # automatic backups of home (policy pack: clusterforge-backups)
        "aws:efs/fileSystem:FileSystem": 1,
        "aws:efs/mountTarget:MountTarget": 1,
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": 1,
        "aws:fsx/lustreFileSystem:LustreFileSystem": 1,
        "aws:iam/instanceProfile:InstanceProfile": 2,
        "aws:iam/role:Role": 2,
        # controller: ssm-agent, topology, secrets, s3, scale-in (retire.py); node: ssm-agent, s3,
        # node-names claim
        "aws:iam/rolePolicy:RolePolicy": 8,
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment": 2,  # CloudWatchAgentServerPolicy per role
        "aws:kms/alias:Alias": 1,
        "aws:kms/key:Key": 1,  # the cluster's secrets key
        "aws:ssm/parameter:Parameter": 1,
        "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": 6,
        # nodes from cluster, 5 controller ranges (all but 3306/6819), SSH, EFA, 2+2 FSx, EFS
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": 13,
        "clusterforge:aws:Cluster": 1,
        "clusterforge:aws:HeadNodes": 2,
        "clusterforge:aws:Iam": 1,
        "clusterforge:aws:Network": 1,
        "clusterforge:aws:NodeGroup": 2,
        "clusterforge:aws:NodeNames": 1,
        "clusterforge:aws:Secrets": 1,
        "clusterforge:aws:Security": 1,
        "clusterforge:aws:Storage": 1,
        "pulumi:providers:aws": 1,
    },
    "hybrid": {
        "aws:autoscaling/group:Group": 1,
        "aws:dynamodb/table:Table": 1,
        "aws:ec2/eip:Eip": 1,
        "aws:ec2/internetGateway:InternetGateway": 1,
        "aws:ec2/launchTemplate:LaunchTemplate": 1,
        "aws:ec2/natGateway:NatGateway": 1,
        "aws:ec2/placementGroup:PlacementGroup": 1,
        "aws:ec2/route:Route": 2,
        "aws:ec2/routeTable:RouteTable": 2,
        "aws:ec2/routeTableAssociation:RouteTableAssociation": 2,
        "aws:ec2/securityGroup:SecurityGroup": 3,  # cluster, nodes, EFA (no cloud controller)
        "aws:ec2/subnet:Subnet": 2,
        "aws:ec2/vpc:Vpc": 1,
        "aws:ec2/vpcEndpoint:VpcEndpoint": 1,
        "aws:iam/instanceProfile:InstanceProfile": 1,
        "aws:iam/role:Role": 1,
        "aws:iam/rolePolicy:RolePolicy": 2,  # ssm-agent, the node-names claim
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment": 1,
        "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": 2,
        # nodes from cluster + EFA self + 5 blocks of on-prem node addresses (10.40.0.10, 10.40.1.[1-8])
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": 7,
        "clusterforge:aws:Cluster": 1,
        "clusterforge:aws:Iam": 1,
        "clusterforge:aws:Network": 1,
        "clusterforge:aws:NodeGroup": 1,
        "clusterforge:aws:NodeNames": 1,
        "clusterforge:aws:Security": 1,
        "clusterforge:aws:Storage": 1,
        "pulumi:providers:aws": 1,
    },
}


@pytest.mark.parametrize("example", sorted(EXPECTED_COUNTS))
def test_resource_counts_per_example(example: str) -> None:
    assert counts(run_example(example)) == EXPECTED_COUNTS[example]


def test_resources_grow_with_groups_not_nodes() -> None:
    data = example_data("p5-training")
    for g in data["node_groups"]:
        if g["name"] in ("gpu", "cpu"):
            g["cloud"]["count"] *= 64  # 1,024 p5 + 256 c7i
    assert counts(run_spec(data)) == EXPECTED_COUNTS["p5-training"]


@pytest.mark.parametrize("example", sorted(EXPECTED_COUNTS))
def test_every_resource_hangs_below_a_component(example: str) -> None:
    rec = run_example(example)
    by_urn = rec.by_urn()
    for r in rec.resources:
        if r.type == "pulumi:providers:aws" or r.type == "clusterforge:aws:Cluster":
            expect(
                r,
                r.parent_urn is not None and r.parent_urn.endswith(f"::clusterforge-{example}"),
                "must be a child of the stack",
            )
            continue
        parent = by_urn.get(r.parent_urn or "")
        expect(r, parent is not None and parent.type in COMPONENTS, f"parent {r.parent_urn} is not a component")
        if r.type in COMPONENTS:
            assert parent is not None
            expect(r, parent.type == "clusterforge:aws:Cluster", "components hang below the Cluster component")


@pytest.mark.parametrize("example", sorted(EXPECTED_COUNTS))
def test_resource_names_are_unique_per_type(example: str) -> None:
    keys = [r.key for r in run_example(example).resources]
    assert len(keys) == len(set(keys))


def test_outputs_p5_training() -> None:
    o = run_example("p5-training").outputs
    assert set(o) == set(out.ALL_OUTPUTS)
    assert o[out.CLUSTER_NAME] == "p5-training" and o[out.REGION] == "us-east-1"
    assert o[out.VPC_ID] == "p5-training-vpc-id"
    assert o[out.SUBNET_IDS] == {
        "public-a": "p5-training-public-a-id",
        "private-a": "p5-training-private-a-id",
    }
    assert o[out.CONTROLLER_ADDRESS] == "10.0.0.10"  # the controller's private IP (mocked)
    assert o[out.LOGIN_ADDRESSES] == {"login-001": "198.51.100.10"}  # public: SSH is open to a CIDR
    groups = o[out.NODE_GROUPS]
    assert sorted(groups) == ["cpu", "gpu", "head", "login"]
    for name, info in groups.items():
        assert info["tag_filters"] == out.group_tag_filters("p5-training", name)
    assert groups["gpu"] == {
        "role": "compute",
        "instance_type": "p5.48xlarge",
        "count": 16,
        "hostlist": "gpu-[001-016]",
        "tag_filters": {
            "tag:clusterforge:cluster": ["p5-training"],
            "tag:clusterforge:group": ["gpu"],
            "instance-state-name": ["pending", "running"],
        },
        "asg_name": "p5-training-gpu-asg",
    }
    assert "addresses" not in groups["cpu"], "an Auto Scaling group has no static addresses"
    assert groups["head"] == {
        "role": "controller",
        "instance_type": "m7i.4xlarge",
        "count": 1,
        "hostlist": "head-001",
        "tag_filters": out.group_tag_filters("p5-training", "head"),
        "instance_ids": {"head-001": "p5-training-head-head-001-id"},
        "addresses": {"head-001": "10.0.0.10"},
    }
    assert groups["login"]["addresses"] == {"login-001": "198.51.100.10"}
    assert o[out.NODE_NAMES_TABLE] == "p5-training-node-names"
    assert o[out.STORAGE] == {
        "fsx": {
            "type": "fsx_lustre",
            "mount": "/fsx",
            "dns_name": "p5-training-fsx.fsx.example.internal",
            "mount_name": "abcdefgh",
        },
        "home": {
            "type": "efs",
            "mount": "/home",
            "dns_name": "p5-training-home.efs.example.internal",
            "mount_name": None,
        },
    }
    assert o[out.SECRET_PARAMETERS] == {"slurmdbd_storage_pass": "/clusterforge/p5-training/slurmdbd_storage_pass"}


def test_outputs_hybrid_controller_is_on_prem() -> None:
    o = run_example("hybrid").outputs
    assert o[out.CONTROLLER_ADDRESS] == "10.40.0.10"  # from the spec's on-prem addresses
    assert o[out.LOGIN_ADDRESSES] == {}
    assert sorted(o[out.NODE_GROUPS]) == ["burst"]  # on-prem groups come from the spec, not the stack
    assert o[out.STORAGE] == {} and o[out.SECRET_PARAMETERS] == {}
    assert o[out.NODE_NAMES_TABLE] == "hybrid-node-names"


def test_model_fields_are_the_output_keys() -> None:
    assert tuple(out.StackOutputs.model_fields) == out.ALL_OUTPUTS


@pytest.mark.parametrize("example", sorted(EXPECTED_COUNTS))
def test_outputs_validate_against_the_stack_outputs_model(example: str) -> None:
    """The contract test: what the program exports (resolved under mocks) is what readers parse."""
    parsed = out.StackOutputs.model_validate(run_example(example).outputs)
    assert parsed.cluster_name == example
    compute = sorted(n for n, g in parsed.node_groups.items() if isinstance(g, out.ComputeGroupOutputs))
    assert compute == (["cpu", "gpu"] if example == "p5-training" else ["burst"])


def test_a_cluster_without_cloud_compute_has_no_names_table() -> None:
    data = example_data("p5-training")
    data["node_groups"] = [g for g in data["node_groups"] if g["name"] in ("head", "login")]
    rec = run_spec(data)
    assert "aws:dynamodb/table:Table" not in counts(rec)
    assert out.StackOutputs.model_validate(rec.outputs).node_names_table is None


def test_efa_on_a_type_without_efa_names_the_fix() -> None:
    data = example_data("p5-training")
    cpu = next(g for g in data["node_groups"] if g["name"] == "cpu")
    cpu["cloud"]["instance_type"] = "m7i.8xlarge"
    cpu["cloud"]["efa"] = True
    with pytest.raises(EfaLayoutError, match=r"m7i.8xlarge does not support EFA"):
        run_spec(data)


def test_unknown_subnet_is_a_layout_error() -> None:
    data = example_data("p5-training")
    data["node_groups"][2]["cloud"]["subnet"] = "private-z"
    with pytest.raises(LayoutError, match=r"subnet 'private-z' is not in aws.subnets \(public-a, private-a\)"):
        run_spec(data)


def test_missing_secret_names_the_config_key() -> None:
    cluster = spec(example_data("p5-training"))
    with mocks_runtime():
        from infra.program import deploy

        @pulumi.runtime.test
        def build() -> None:
            deploy(resolve(cluster, base_dir=EXAMPLES), secrets={})

        with pytest.raises(ValueError, match=r"pulumi config set --secret clusterforge:slurmdbd_storage_pass"):
            build()


def test_entry_point_reads_spec_and_secret_from_config() -> None:
    """infra/__main__.py as `pulumi up` runs it: config -> spec -> deploy -> exports."""
    with mocks_runtime() as monitor:
        pulumi.runtime.set_all_config(
            {
                "clusterforge:spec": "examples/p5-training.yaml",
                "clusterforge:slurmdbd_storage_pass": "not-a-secret",
            },
            secret_keys=["clusterforge:slurmdbd_storage_pass"],
        )
        try:

            @pulumi.runtime.test
            def main() -> None:
                runpy.run_path(str(ROOT / "infra" / "__main__.py"), run_name="__main__")

            main()
        finally:
            pulumi.runtime.set_all_config({})
    got = {}
    for r in monitor.recorded:
        got[r.type] = got.get(r.type, 0) + 1
    assert dict(sorted(got.items())) == EXPECTED_COUNTS["p5-training"]
    param = next(r for r in monitor.recorded if r.type == "aws:ssm/parameter:Parameter")
    expect(param, param.inputs["value"] == "(secret)", "the slurmdbd password must stay a Pulumi secret")
