"""Policy pack rules, each called directly with ``policy.validate(args, report)``. The newer rules,
the bad-resource catalogue and the pack run over every resource of the examples are in
tests/test_policy_hardening.py (which reuses ``violations`` and ``lt`` from here)."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from clusterforge.aws import outputs as out
from policy import pack, rules

TAGS = {"clusterforge:cluster": "c"}
NODE_TAGS = {"clusterforge:cluster": "c", "clusterforge:group": "gpu", "clusterforge:role": "compute"}


def violations(policy: ResourceValidationPolicy, type_: str, props: dict[str, Any], name: str = "r") -> list[str]:
    """Run one rule the way the engine does (inputs behind the unknown-checking proxy)."""
    found: list[str] = []
    args = ResourceValidationArgs(
        type_,
        unknown_checking_proxy(props),
        f"urn:pulumi:test::clusterforge::{type_}::{name}",
        name,
        PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), []),
        None,
    )
    policy.validate(args, lambda message, urn: found.append(message))
    return found


def lt(**overrides: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "instanceType": "p5.48xlarge",
        "metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1},
        "blockDeviceMappings": [{"deviceName": "/dev/sda1", "ebs": {"encrypted": "true", "volumeSize": 500}}],
        "networkInterfaces": [
            {
                "networkCardIndex": 0,
                "deviceIndex": 0,
                "interfaceType": "interface",
                "associatePublicIpAddress": False,
            },
            {
                "networkCardIndex": 0,
                "deviceIndex": 1,
                "interfaceType": "efa-only",
                "associatePublicIpAddress": False,
            },
        ],
        "placement": {"groupName": UNKNOWN_STRING_VALUE},  # auto-named group: unknown in preview
        "tags": TAGS,
        "tagSpecifications": [{"resourceType": "instance", "tags": NODE_TAGS}],
    }
    props.update(overrides)
    return props


def test_pack_lists_every_rule_as_mandatory_but_the_kms_key_advice() -> None:
    assert [p.name for p in pack.POLICIES] == [
        "clusterforge-encryption-at-rest",
        "clusterforge-imdsv2-required",
        "clusterforge-no-ssh-from-anywhere",
        "clusterforge-efa-placement",
        "clusterforge-no-public-ip-on-compute",
        "clusterforge-required-tags",
        "clusterforge-iam-no-wildcards",
        "clusterforge-no-ingress-from-anywhere",
        "clusterforge-customer-managed-kms-key",
        "clusterforge-ssm-parameter-read-scoped",
        "clusterforge-secure-string-cmk",
        "clusterforge-backups",
        "clusterforge-protect-stateful",
    ]
    levels = {p.name: p.enforcement_level for p in pack.POLICIES}
    assert levels.pop("clusterforge-customer-managed-kms-key") == EnforcementLevel.ADVISORY
    assert set(levels.values()) == {EnforcementLevel.MANDATORY}


def test_tag_keys_match_the_shared_constants() -> None:
    assert rules.REQUIRED_TAGS == out.REQUIRED_TAGS
    assert rules.INSTANCE_TAGS == out.INSTANCE_TAGS


# ----------------------------------------------------------------------------- encryption


def test_encryption_passes_for_encrypted_resources() -> None:
    p = rules.ENCRYPTION
    assert violations(p, rules.LAUNCH_TEMPLATE, lt()) == []
    assert violations(p, rules.EFS, {"encrypted": True}) == []
    assert violations(p, rules.EBS_VOLUME, {"encrypted": True}) == []
    assert violations(p, rules.FSX_LUSTRE, {"deploymentType": "PERSISTENT_2"}) == []
    assert violations(p, rules.INSTANCE, {"rootBlockDevice": {"encrypted": True}}) == []
    assert violations(p, rules.SSM_PARAMETER, {"name": "/clusterforge/c/x", "type": "SecureString"}) == []


@pytest.mark.parametrize(
    ("type_", "props", "message"),
    [
        (rules.EFS, {}, "encrypted: true"),
        (rules.EFS, {"encrypted": False}, "encrypted: true"),
        (rules.EBS_VOLUME, {"encrypted": False}, "encrypted: true"),
        (rules.FSX_LUSTRE, {"deploymentType": "SCRATCH_2"}, "use PERSISTENT_2"),
        (rules.INSTANCE, {}, "rootBlockDevice.encrypted"),
        (
            rules.INSTANCE,
            {"rootBlockDevice": {"encrypted": True}, "ebsBlockDevices": [{"deviceName": "/dev/sdf"}]},
            "'/dev/sdf' must be encrypted",
        ),
        (rules.LAUNCH_TEMPLATE, lt(blockDeviceMappings=[]), "no blockDeviceMappings"),
        (
            rules.LAUNCH_TEMPLATE,
            lt(blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": {"encrypted": "false"}}]),
            "must set ebs.encrypted",
        ),
        (rules.SSM_PARAMETER, {"name": "/clusterforge/c/x", "type": "String"}, "must be a SecureString"),
    ],
)
def test_encryption_violations(type_: str, props: dict[str, Any], message: str) -> None:
    found = violations(rules.ENCRYPTION, type_, props)
    assert len(found) == 1 and message in found[0], found


# -------------------------------------------------------------------------------- IMDSv2


@pytest.mark.parametrize("type_", [rules.INSTANCE, rules.LAUNCH_TEMPLATE])
def test_imdsv2(type_: str) -> None:
    p = rules.IMDSV2
    one_hop = {"httpTokens": "required", "httpPutResponseHopLimit": 1}
    assert violations(p, type_, {"metadataOptions": one_hop}) == []
    assert violations(p, type_, {"metadataOptions": {"httpEndpoint": "disabled"}}) == []
    optional = violations(p, type_, {"metadataOptions": {**one_hop, "httpTokens": "optional"}})
    assert len(optional) == 1 and "httpTokens: required" in optional[0]
    assert len(violations(p, type_, {"metadataOptions": {"httpPutResponseHopLimit": 1}})) == 1
    assert violations(p, rules.EFS, {}) == []


# --------------------------------------------------------------------------- SSH exposure


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        (rules.SG_INGRESS_RULE, {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0"}),
        (rules.SG_INGRESS_RULE, {"ipProtocol": "-1", "cidrIpv4": "0.0.0.0/0"}),
        (rules.SG_INGRESS_RULE, {"ipProtocol": "tcp", "fromPort": 0, "toPort": 65535, "cidrIpv6": "::/0"}),
        (
            rules.SG_RULE,
            {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]},
        ),
        (
            rules.SECURITY_GROUP,
            {"ingress": [{"protocol": "tcp", "fromPort": 20, "toPort": 30, "cidrBlocks": ["0.0.0.0/0"]}]},
        ),
    ],
)
def test_ssh_from_anywhere_is_refused(type_: str, props: dict[str, Any]) -> None:
    found = violations(rules.NO_SSH_FROM_ANYWHERE, type_, props)
    assert len(found) == 1 and "SSH (port 22) open to" in found[0], found


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        (
            rules.SG_INGRESS_RULE,
            {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "203.0.113.0/24"},
        ),
        (
            rules.SG_INGRESS_RULE,
            {"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": "0.0.0.0/0"},
        ),
        (rules.SG_INGRESS_RULE, {"ipProtocol": "-1", "referencedSecurityGroupId": UNKNOWN_STRING_VALUE}),
        (rules.SG_RULE, {"type": "egress", "protocol": "-1", "cidrBlocks": ["0.0.0.0/0"]}),
        (
            rules.SECURITY_GROUP,
            {"ingress": [{"protocol": "udp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]},
        ),
    ],
)
def test_other_ingress_is_allowed(type_: str, props: dict[str, Any]) -> None:
    assert violations(rules.NO_SSH_FROM_ANYWHERE, type_, props) == []


# ---------------------------------------------------------------------------- EFA placement


def test_efa_template_in_placement_group_or_capacity_block() -> None:
    p = rules.EFA_PLACEMENT
    assert violations(p, rules.LAUNCH_TEMPLATE, lt()) == [], "unknown group name counts as set"
    block = lt(
        placement=None,
        instanceMarketOptions={"marketType": "capacity-block"},
        capacityReservationSpecification={"capacityReservationTarget": {"capacityReservationId": "cr-1"}},
    )
    del block["placement"]
    assert violations(p, rules.LAUNCH_TEMPLATE, block) == []
    loose = lt()
    del loose["placement"]
    found = violations(p, rules.LAUNCH_TEMPLATE, loose)
    assert len(found) == 1 and "neither a cluster placement group" in found[0]
    no_target = dict(block)
    del no_target["capacityReservationSpecification"]
    assert "without capacityReservationTarget" in violations(p, rules.LAUNCH_TEMPLATE, no_target)[0]
    plain = lt(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}])
    del plain["placement"]
    assert violations(p, rules.LAUNCH_TEMPLATE, plain) == [], "no EFA, no placement needed"


def test_no_public_ip_on_compute() -> None:
    p = rules.NO_PUBLIC_IP_ON_COMPUTE
    assert violations(p, rules.LAUNCH_TEMPLATE, lt()) == []
    public = lt(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 0, "associatePublicIpAddress": "true"}])
    assert "(card 0, device 0) asks for a public IP" in violations(p, rules.LAUNCH_TEMPLATE, public)[0]


# ------------------------------------------------------------------------------------ tags


def test_required_tags() -> None:
    p = rules.REQUIRED_TAGS_POLICY
    assert violations(p, "aws:ec2/vpc:Vpc", {"tags": TAGS}) == []
    assert violations(p, "aws:ec2/vpc:Vpc", {}) == ["missing tag(s) clusterforge:cluster"]
    assert violations(p, "aws:ec2/vpc:Vpc", {"tags": {"clusterforge:cluster": ""}}) == [
        "missing tag(s) clusterforge:cluster"
    ]
    assert violations(p, rules.INSTANCE, {"tags": NODE_TAGS}) == []
    assert violations(p, rules.INSTANCE, {"tags": TAGS}) == ["missing tag(s) clusterforge:group, clusterforge:role"]
    assert violations(p, rules.ASG, {"tags": [{"key": "clusterforge:cluster", "value": "c"}]}) == []
    assert violations(p, rules.ASG, {"tags": []}) == ["missing tag(s) clusterforge:cluster"]
    assert violations(p, rules.LAUNCH_TEMPLATE, lt()) == []
    untagged = violations(p, rules.LAUNCH_TEMPLATE, lt(tagSpecifications=[{"resourceType": "volume", "tags": TAGS}]))
    assert len(untagged) == 1 and "must tag its instances" in untagged[0]
    assert violations(p, "aws:iam/rolePolicy:RolePolicy", {}) == [], "untaggable types are not checked"
