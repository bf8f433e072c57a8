"""Node groups, controller/login instances, IAM and storage as the program registers them."""

from __future__ import annotations

import base64
import json

import pytest

from clusterforge.aws.efa import efa_interfaces
from clusterforge.aws.iam import TOPOLOGY_ACTIONS
from clusterforge.aws.layout import LayoutError
from clusterforge.catalog import get_profile
from tests.pulumi_helpers import (
    ASG,
    DRA,
    EFS,
    FSX,
    INSTANCE,
    LT,
    MOUNT_TARGET,
    PARAMETER,
    PG,
    ROLE,
    ROLE_POLICY,
    SUBNET,
    example_data,
    expect,
    of_type,
    one,
    run_example,
    run_spec,
    run_variant,
)

EXAMPLES = ("p5-training", "hybrid")


# --------------------------------------------------------------------------- IMDSv2, encryption


@pytest.mark.parametrize("example", EXAMPLES)
def test_imdsv2_required_everywhere(example: str) -> None:
    rec = run_example(example)
    nodes = of_type(rec, LT) + of_type(rec, INSTANCE)
    assert nodes
    for r in nodes:
        md = r.inputs.get("metadataOptions", {})
        expect(r, md.get("httpTokens") == "required", "IMDSv2 must be required (httpTokens: required)")
        expect(r, md.get("httpEndpoint") == "enabled", "metadata endpoint stays on (SSM agent, credentials)")


@pytest.mark.parametrize("example", EXAMPLES)
def test_encryption_everywhere(example: str) -> None:
    rec = run_example(example)
    for lt in of_type(rec, LT):
        mappings = lt.inputs.get("blockDeviceMappings", [])
        expect(lt, len(mappings) == 1, "exactly the root volume is mapped")
        for m in mappings:
            expect(lt, m["ebs"]["encrypted"] == "true" and m["ebs"]["volumeType"] == "gp3", "encrypted gp3 root")
    for inst in of_type(rec, INSTANCE):
        root = inst.inputs.get("rootBlockDevice", {})
        expect(inst, root.get("encrypted") is True and root.get("volumeType") == "gp3", "encrypted gp3 root")
        expect(inst, "ebsBlockDevices" not in inst.inputs, "no unencrypted extra volumes")
    for fs in of_type(rec, EFS):
        expect(fs, fs.inputs.get("encrypted") is True, "EFS encrypted at rest")
    for fs in of_type(rec, FSX):
        expect(fs, fs.inputs.get("deploymentType") == "PERSISTENT_2", "PERSISTENT_2 (KMS-encrypted at rest)")
    for p in of_type(rec, PARAMETER):
        expect(p, p.inputs.get("type") == "SecureString", "secrets are SecureString parameters")


# --------------------------------------------------------------------------- public addresses


@pytest.mark.parametrize("example", EXAMPLES)
def test_no_public_ip_on_compute(example: str) -> None:
    rec = run_example(example)
    for lt in of_type(rec, LT):
        for ni in lt.inputs["networkInterfaces"]:
            expect(
                lt,
                ni.get("associatePublicIpAddress") is False,
                f"compute interface asks for a public IP: {ni}",
            )
    for subnet in of_type(rec, SUBNET):
        expect(subnet, subnet.inputs.get("mapPublicIpOnLaunch") is False, "subnets never auto-assign public IPs")
    for inst in of_type(rec, INSTANCE):
        is_login = inst.inputs["tags"]["clusterforge:role"] == "login"
        expect(
            inst,
            inst.inputs["associatePublicIpAddress"] is is_login,
            "only the reachable login node is public",
        )


# ------------------------------------------------------------------------ EFA, placement, capacity


@pytest.mark.parametrize(
    ("example", "lt_name", "instance_type"),
    [
        ("p5-training", "p5-training-gpu-lt", "p5.48xlarge"),
        ("hybrid", "hybrid-burst-lt", "p5.48xlarge"),
    ],
)
def test_launch_template_interfaces_follow_the_catalog(example: str, lt_name: str, instance_type: str) -> None:
    lt = one(run_example(example), LT, lt_name)
    profile = get_profile(instance_type)
    assert profile is not None
    want = [(s.network_card_index, s.device_index, s.interface_type) for s in efa_interfaces(profile)]
    got = [(ni["networkCardIndex"], ni["deviceIndex"], ni["interfaceType"]) for ni in lt.inputs["networkInterfaces"]]
    expect(lt, got == want, f"interfaces {got[:3]}... differ from the EFA layout {want[:3]}...")
    expect(lt, len(got) == 33, "p5: 1 ENA + 32 EFA-only")


def test_non_efa_group_has_only_the_primary_interface() -> None:
    lt = one(run_example("p5-training"), LT, "p5-training-cpu-lt")
    got = [(ni["networkCardIndex"], ni["deviceIndex"], ni["interfaceType"]) for ni in lt.inputs["networkInterfaces"]]
    expect(lt, got == [(0, 0, "interface")], "non-EFA group: ENA primary only")


def test_capacity_block_market_options_and_reservation_targeting() -> None:
    rec = run_example("p5-training")
    lt = one(rec, LT, "p5-training-gpu-lt")
    expect(
        lt,
        lt.inputs.get("instanceMarketOptions") == {"marketType": "capacity-block"},
        "capacity-block market",
    )
    target = lt.inputs.get("capacityReservationSpecification", {}).get("capacityReservationTarget", {})
    expect(lt, target.get("capacityReservationId") == "cr-0a1b2c3d4e5f67890", "targets the spec's block")
    expect(lt, "placement" not in lt.inputs, "no placement group on top of a capacity block")
    assert of_type(rec, PG) == []
    cpu = one(rec, LT, "p5-training-cpu-lt")
    expect(
        cpu,
        "instanceMarketOptions" not in cpu.inputs and "capacityReservationSpecification" not in cpu.inputs,
        "on-demand group: no market options, no reservation",
    )


def test_placement_group_for_on_demand_efa_group() -> None:
    rec = run_example("hybrid")
    pg = one(rec, PG, "hybrid-burst-pg")
    expect(pg, pg.inputs["strategy"] == "cluster", "cluster placement strategy")
    lt = one(rec, LT, "hybrid-burst-lt")
    expect(lt, lt.inputs.get("placement") == {"groupName": "hybrid-burst-pg"}, "launch template uses the group")
    expect(lt, "instanceMarketOptions" not in lt.inputs, "on-demand: no market options")


def test_spot_group_uses_a_mixed_instances_policy() -> None:
    data = example_data("hybrid")
    burst = next(g for g in data["node_groups"] if g["name"] == "burst")
    burst["cloud"]["capacity"] = {"type": "spot"}
    rec = run_spec(data)
    asg = one(rec, ASG, "hybrid-burst-asg")
    mixed = asg.inputs.get("mixedInstancesPolicy", {})
    dist = mixed.get("instancesDistribution", {})
    expect(asg, "launchTemplate" not in asg.inputs, "spot groups take the template through the mixed policy")
    expect(
        asg,
        dist.get("onDemandPercentageAboveBaseCapacity") == 0 and dist.get("onDemandBaseCapacity") == 0,
        "0 % on-demand",
    )
    expect(asg, dist.get("spotAllocationStrategy") == "price-capacity-optimized", "allocation strategy")
    template = mixed["launchTemplate"]["launchTemplateSpecification"]
    expect(asg, template["launchTemplateId"] == "hybrid-burst-lt-id", "uses the group's launch template")
    expect(asg, mixed["launchTemplate"]["overrides"] == [{"instanceType": "p5.48xlarge"}], "instance type")
    lt = one(rec, LT, "hybrid-burst-lt")
    expect(lt, "instanceMarketOptions" not in lt.inputs, "ASG rejects spot market options in the template")


def test_reservation_group_targets_the_reservation() -> None:
    lt = one(run_variant("hybrid-debian-reservation"), LT, "hybrid-burst-lt")
    target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    expect(lt, target == {"capacityReservationId": "cr-0123456789abcdef0"}, "targets the reservation")
    expect(lt, "instanceMarketOptions" not in lt.inputs, "an ODCR needs no market type")
    expect(lt, lt.inputs["placement"] == {"groupName": "hybrid-burst-pg"}, "placement group kept")


@pytest.mark.parametrize(
    ("example", "group", "count"),
    [
        ("p5-training", "cpu", 4),
        ("hybrid", "burst", 4),
    ],
)
def test_group_is_one_fixed_size_auto_scaling_group(example: str, group: str, count: int) -> None:
    rec = run_example(example)
    asg = one(rec, ASG, f"{example}-{group}-asg")
    i = asg.inputs
    expect(
        asg,
        (i["minSize"], i["maxSize"], i["desiredCapacity"]) == (count, count, count),
        "min = max = desired",
    )
    expect(
        asg,
        i["launchTemplate"] == {"id": f"{example}-{group}-lt-id", "version": "1"},
        "latest template version",
    )
    private = "private-a" if example == "p5-training" else "private-b"
    expect(asg, i["vpcZoneIdentifiers"] == [f"{example}-{private}-id"], "private subnet")
    expect(asg, i["waitForCapacityTimeout"] == "0", "up does not block on capacity")


SCHEDULE = "aws:autoscaling/schedule:Schedule"


def _block_run(start: str, end: str) -> object:
    data = example_data("p5-training")
    gpu = next(g for g in data["node_groups"] if g["name"] == "gpu")
    gpu["cloud"]["capacity"].update(start=start, end=end)
    return run_spec(data)


def test_capacity_block_group_follows_the_window() -> None:
    # conftest pins "now" to 2026-12-01T12:00Z; the example's block is 2027-01-04 .. 2027-01-18 11:30Z
    rec = run_example("p5-training")
    asg = one(rec, ASG, "p5-training-gpu-asg")
    i = asg.inputs
    expect(asg, (i["minSize"], i["desiredCapacity"], i["maxSize"]) == (0, 0, 16), "0 until the block starts")
    tags = {t["key"]: t["value"] for t in i["tags"]}
    expect(asg, tags["clusterforge:capacity-window"] == "2027-01-04T11:30:00Z..2027-01-18T11:30:00Z "
           "scale-to-0 2027-01-18T10:55:00Z drain 2027-01-18T10:30:00Z", "window tag for the plan")
    got = sorted((s.inputs["scheduledActionName"], s.inputs["startTime"], s.inputs["minSize"],
                  s.inputs["desiredCapacity"], s.inputs["maxSize"], s.inputs["autoscalingGroupName"])
                 for s in of_type(rec, SCHEDULE))
    assert got == [
        ("clusterforge-block-start", "2027-01-04T11:30:00Z", 16, 16, 16, "p5-training-gpu-asg"),
        ("clusterforge-scale-to-0", "2027-01-18T10:55:00Z", 0, 0, 16, "p5-training-gpu-asg"),
    ]
    assert all(s.parent_urn == asg.parent_urn for s in of_type(rec, SCHEDULE)), "schedules hang below the group"


def test_capacity_block_already_started_starts_full_without_a_past_schedule() -> None:
    rec = _block_run("2026-11-30T11:30:00Z", "2026-12-02T11:30:00Z")
    asg = one(rec, ASG, "p5-training-gpu-asg")
    expect(asg, (asg.inputs["minSize"], asg.inputs["desiredCapacity"]) == (16, 16), "running block: full")
    assert [s.inputs["startTime"] for s in of_type(rec, SCHEDULE)] == ["2026-12-02T10:55:00Z"]


def test_capacity_block_over_has_no_schedules() -> None:
    rec = _block_run("2026-11-20T11:30:00Z", "2026-12-01T12:20:00Z")  # scale-to-0 time 11:45 passed
    asg = one(rec, ASG, "p5-training-gpu-asg")
    expect(asg, (asg.inputs["minSize"], asg.inputs["desiredCapacity"]) == (0, 0), "block over: 0")
    assert of_type(rec, SCHEDULE) == []


def test_inventory_tags_on_instances_and_templates() -> None:
    rec = run_example("p5-training")
    lt = one(rec, LT, "p5-training-gpu-lt")
    specs = {s["resourceType"]: s["tags"] for s in lt.inputs["tagSpecifications"]}
    expect(lt, set(specs) == {"instance", "volume", "network-interface"}, "tags every launched resource")
    want = {
        "clusterforge:cluster": "p5-training",
        "clusterforge:group": "gpu",
        "clusterforge:role": "compute",
    }
    expect(lt, want.items() <= specs["instance"].items(), "instance tags the inventory filters on")
    head = one(rec, INSTANCE, "p5-training-head-head-001")
    expect(
        head,
        head.inputs["tags"]
        == {
            "clusterforge:cluster": "p5-training",
            "clusterforge:group": "head",
            "clusterforge:role": "controller",
            "clusterforge:hostname": "head-001",
            "Name": "head-001",
        },
        "controller tags (the hostname tag is the inventory's host name)",
    )
    expect(lt, "clusterforge:hostname" not in specs["instance"], "ASG instances claim their name at boot")


def test_user_data_prepares_the_host_for_ansible() -> None:
    rec = run_example("p5-training")
    lt = one(rec, LT, "p5-training-gpu-lt")
    script = base64.b64decode(lt.inputs["userData"]).decode()
    expect(lt, script.startswith("#!/bin/bash") and "python3" in script, "installs Python for Ansible")
    node_json = (
        '{"cluster": "p5-training", "group": "gpu", "hostlist": "gpu-[001-016]", "region": "us-east-1", '
        '"role": "compute", "table": "p5-training-node-names"}'
    )
    expect(lt, node_json in script, "writes node.json")
    expect(lt, "timeout 300 /usr/local/sbin/clusterforge-claim-name" in script, "claims the node name, bounded")
    head = one(rec, INSTANCE, "p5-training-head-head-001")
    expect(head, '"hostname": "head-001"' in head.inputs["userData"], "head nodes carry their fixed name")
    expect(head, '"role": "controller"' in head.inputs["userData"], "instances take plain user data")


def test_debian_images_map_their_own_root_device() -> None:
    lt = one(run_variant("hybrid-debian-reservation"), LT, "hybrid-burst-lt")
    expect(lt, lt.inputs["blockDeviceMappings"][0]["deviceName"] == "/dev/xvda", "Debian AMI root device")


def test_controller_on_spot_is_refused() -> None:
    data = example_data("p5-training")
    data["node_groups"][0]["cloud"]["capacity"] = {"type": "spot"}
    with pytest.raises(LayoutError, match="controller and login nodes must be on_demand or reservation"):
        run_spec(data)


# ---------------------------------------------------------------------------------------- IAM


def _policy(rec_role_policy: dict) -> dict:  # type: ignore[type-arg]
    return json.loads(rec_role_policy["policy"])


def test_topology_discovery_only_for_the_controller() -> None:
    rec = run_example("p5-training")
    topo = [
        r
        for r in of_type(rec, ROLE_POLICY)
        if any(set(TOPOLOGY_ACTIONS) <= set(s["Action"]) for s in _policy(r.inputs)["Statement"])
    ]
    assert [r.name for r in topo] == ["p5-training-controller-topology"]
    expect(topo[0], topo[0].inputs["role"] == "p5-training-controller-id", "attached to the controller role")
    for r in of_type(rec, ROLE):
        doc = json.loads(r.inputs["assumeRolePolicy"])
        expect(r, doc["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}, "EC2 assumes the role")


def test_s3_read_and_secret_read_policies() -> None:
    rec = run_example("p5-training")
    s3 = [r for r in of_type(rec, ROLE_POLICY) if r.name.endswith("-s3-read")]
    assert sorted(r.name for r in s3) == ["p5-training-controller-s3-read", "p5-training-node-s3-read"]
    for r in s3:
        st = _policy(r.inputs)["Statement"][0]
        expect(
            r,
            st["Resource"] == ["arn:aws:s3:::p5-training-datasets", "arn:aws:s3:::p5-training-datasets/*"],
            "only the spec's bucket",
        )
        expect(r, not any(a.startswith("s3:Put") or a.startswith("s3:Delete") for a in st["Action"]), "read only")
    # the secret-read grant: tests/test_infra_secrets.py
    hybrid = run_example("hybrid")
    assert sorted(r.name for r in of_type(hybrid, ROLE_POLICY)) == ["hybrid-node-names", "hybrid-node-ssm-agent"], (
        "no bucket, no controller: the SSM agent and the name claim only"
    )


def test_node_role_may_claim_names_and_nothing_more() -> None:
    rec = run_example("p5-training")
    claim = one(rec, ROLE_POLICY, "p5-training-node-names")
    expect(claim, claim.inputs["role"] == "p5-training-node-id", "attached to the node role")
    st = {s["Sid"]: s for s in _policy(claim.inputs)["Statement"]}
    assert st["NodeNameTable"] == {
        "Sid": "NodeNameTable",
        "Effect": "Allow",
        "Action": ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Scan"],
        "Resource": "arn:aws:dynamodb:::table/p5-training-node-names",  # the table's ARN (mocked), not table/*
    }
    assert st["NodeNameHolders"]["Action"] == ["ec2:DescribeInstances"]
    assert st["NodeNameHolders"]["Resource"] == "*"
    assert st["NodeNameTags"] == {
        "Sid": "NodeNameTags",
        "Effect": "Allow",
        "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
        "Resource": "arn:aws:ec2:us-east-1:*:instance/*",
        "Condition": {
            "StringEquals": {"aws:ResourceTag/clusterforge:cluster": "p5-training"},
            "ForAllValues:StringEquals": {"aws:TagKeys": ["clusterforge:hostname", "clusterforge:claim-error", "Name"]},
            "Null": {"aws:TagKeys": "false"},
        },
    }
    table = one(rec, "aws:dynamodb/table:Table", "p5-training-node-names")
    expect(
        table,
        {k: table.inputs.get(k) for k in ("name", "billingMode", "hashKey", "attributes", "tags")}
        == {
            "name": "p5-training-node-names",
            "billingMode": "PAY_PER_REQUEST",
            "hashKey": "name",
            "attributes": [{"name": "name", "type": "S"}],
            "tags": {"clusterforge:cluster": "p5-training", "Name": "p5-training-node-names"},
        },
        "one on-demand table keyed by the node name",
    )
    controller_policies = [r for r in of_type(rec, ROLE_POLICY) if r.inputs["role"] == "p5-training-controller-id"]
    # the controller touches the table only to retire names (scale-in), never to claim them
    assert [r.name for r in controller_policies if "dynamodb" in r.inputs["policy"]] == [
        "p5-training-controller-scale-in"
    ]


@pytest.mark.parametrize("example,group", [("p5-training", "gpu"), ("p5-training", "cpu"), ("hybrid", "burst")])
def test_compute_instances_are_protected_from_scale_in(example: str, group: str) -> None:
    asg = one(run_example(example), ASG, f"{example}-{group}-asg")
    expect(asg, asg.inputs.get("protectFromScaleIn") is True, "a lowered count must not pick instances itself")


def test_controller_may_retire_the_clusters_nodes_only() -> None:
    rec = run_example("p5-training")
    pol = one(rec, ROLE_POLICY, "p5-training-controller-scale-in")
    expect(pol, pol.inputs["role"] == "p5-training-controller-id", "attached to the controller role")
    assert _policy(pol.inputs)["Statement"] == [
        {
            "Sid": "ScaleInGroups",
            "Effect": "Allow",
            "Action": [
                "autoscaling:SetInstanceProtection",
                "autoscaling:TerminateInstanceInAutoScalingGroup",
                "autoscaling:UpdateAutoScalingGroup",
            ],
            "Resource": "arn:aws:autoscaling:us-east-1:*:autoScalingGroup:*:autoScalingGroupName/*",
            "Condition": {"StringEquals": {"aws:ResourceTag/clusterforge:cluster": "p5-training"}},
        },
        {
            "Sid": "ScaleInDescribe",
            "Effect": "Allow",
            "Action": ["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances"],
            "Resource": "*",
        },
        {
            "Sid": "ScaleInNames",
            "Effect": "Allow",
            "Action": ["dynamodb:DeleteItem", "dynamodb:GetItem"],
            "Resource": "arn:aws:dynamodb:::table/p5-training-node-names",
        },
    ]
    node = [r for r in of_type(rec, ROLE_POLICY) if r.inputs["role"] == "p5-training-node-id"]
    assert all("autoscaling:" not in r.inputs["policy"] for r in node), "nodes never terminate instances"
    # the ASGs carry the tag the condition names (else the controller could retire nothing)
    for asg in of_type(rec, ASG):
        tags = {t["key"]: t["value"] for t in asg.inputs["tags"]}
        expect(asg, tags.get("clusterforge:cluster") == "p5-training", "tagged with the cluster")


# ------------------------------------------------------------------------------------ storage


def test_fsx_lustre_from_the_spec() -> None:
    rec = run_example("p5-training")
    fs = one(rec, FSX, "p5-training-fsx")
    i = fs.inputs
    expect(fs, (i["storageCapacity"], i["perUnitStorageThroughput"]) == (24000, 250), "capacity and throughput")
    expect(fs, i["subnetIds"] == "p5-training-private-a-id", "in the GPU nodes' subnet")
    expect(fs, i["securityGroupIds"] == ["p5-training-fsx-id"], "FSx group only")
    dra = one(rec, DRA, "p5-training-fsx-s3")
    expect(dra, dra.inputs["dataRepositoryPath"] == "s3://p5-training-datasets/corpus", "the spec's S3 path")
    expect(dra, dra.inputs["fileSystemPath"] == "/corpus", "appears as /fsx/corpus")
    expect(dra, dra.inputs["fileSystemId"] == "p5-training-fsx-id", "on the file system")


def test_efs_mount_target_per_used_az_in_private_subnets() -> None:
    rec = run_example("p5-training")
    mts = of_type(rec, MOUNT_TARGET)
    assert [m.inputs["subnetId"] for m in mts] == ["p5-training-private-a-id"]
    mts = of_type(run_variant("p5-two-az-no-ssh"), MOUNT_TARGET)  # CPU group in us-east-1b
    assert sorted(m.inputs["subnetId"] for m in mts) == [
        "p5-training-private-a-id",
        "p5-training-private-b-id",
    ]
    for m in mts:
        expect(m, m.inputs["securityGroups"] == ["p5-training-efs-id"], "EFS group")
