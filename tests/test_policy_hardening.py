"""The pack's hardening and stateful rules (IAM wildcards, ingress from anywhere, public IPs,
metadata hop limit, KMS keys, backups, ``protect``), each with a resource that breaks it and one
that passes; a catalogue of bad resources the whole pack must catch; and the pack run over every
resource of the AWS examples under mocks, the way the engine would see them in preview and up.
(Over 400 lines because the cases are tables, one case a line, kept next to the harness that
runs them the way the engine does.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from clusterforge.aws.iam import SSM_AGENT_ACTIONS
from clusterforge.plan.mocks import Recording
from clusterforge.plan.model import UNKNOWN
from policy import hardening, pack, rules, stateful
from tests.pulumi_helpers import AWS_EXAMPLES, run_example, run_spec, run_variant
from tests.test_policy import NODE_TAGS, TAGS, lt, violations

ANY4, ANY6 = "0.0.0.0/0", "::/0"


def doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(action: Any, resource: Any, sid: str = "S") -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource}


def instance(role: str, **props: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tags": {**NODE_TAGS, "clusterforge:role": role},
        "rootBlockDevice": {"encrypted": True},
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
    }
    base.update(props)
    return base


# ---------------------------------------------------------------------------- IAM wildcards

TABLE = "arn:aws:dynamodb:us-east-1:111122223333:table/c-node-names"


@pytest.mark.parametrize(
    "policy_doc",
    [
        doc(allow(["dynamodb:GetItem", "dynamodb:PutItem"], TABLE)),
        # the program's own '*' statements: actions without resource-level permissions
        doc(allow(["ec2:DescribeInstances", "ec2:DescribeInstanceTopology"], "*")),
        doc(allow(["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances"], "*")),
        doc({"Effect": "Deny", "Action": "*", "Resource": "*"}),  # a Deny only takes rights away
        UNKNOWN_STRING_VALUE,  # built from an ARN unknown in preview: judged at `up`
    ],
)
def test_iam_documents_that_pass(policy_doc: str) -> None:
    assert violations(hardening.IAM_NO_WILDCARDS, hardening.IAM_ROLE_POLICY, {"policy": policy_doc}) == []


@pytest.mark.parametrize(
    ("type_", "props", "message"),
    [
        (hardening.IAM_ROLE_POLICY, {"policy": doc(allow("*", TABLE))}, "wildcard action(s) *"),
        (hardening.IAM_POLICY, {"policy": doc(allow("s3:*", "arn:aws:s3:::b/*"))}, "wildcard action(s) s3:*"),
        (hardening.IAM_POLICY, {"policy": doc(allow(["s3:GetObject"], "*"))}, "Resource '*' for s3:GetObject"),
        (
            hardening.IAM_ROLE_POLICY,
            {"policy": doc(allow(["ec2:DescribeInstances", "ec2:TerminateInstances"], ["*"]))},
            "Resource '*' for ec2:TerminateInstances",
        ),
        (
            hardening.IAM_ROLE,
            {"inlinePolicies": [{"name": "inline", "policy": doc(allow("ec2:*", TABLE))}]},
            "inlinePolicies[0] (inline) statement S: wildcard action(s) ec2:*",
        ),
        (
            hardening.IAM_POLICY,
            {"policy": doc({"Effect": "Allow", "NotAction": "iam:*", "Resource": TABLE})},
            "Allow with NotAction",
        ),
    ],
)
def test_iam_wildcards_are_refused(type_: str, props: dict[str, Any], message: str) -> None:
    found = violations(hardening.IAM_NO_WILDCARDS, type_, props)
    assert len(found) == 1 and message in found[0], found


# ------------------------------------------------------------------- ingress from anywhere


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        (rules.SG_INGRESS_RULE, {"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": ANY4}),
        (rules.SG_INGRESS_RULE, {"ipProtocol": "udp", "fromPort": 53, "toPort": 53, "cidrIpv6": ANY6}),
        (rules.SG_INGRESS_RULE, {"ipProtocol": "-1", "cidrIpv4": ANY4}),
        (rules.SG_RULE, {"type": "ingress", "protocol": "tcp", "fromPort": 988, "toPort": 988, "cidrBlocks": [ANY4]}),
        (
            rules.SECURITY_GROUP,
            {"ingress": [{"protocol": "tcp", "fromPort": 2049, "toPort": 2049, "ipv6CidrBlocks": [ANY6]}]},
        ),
    ],
)
def test_any_port_open_to_the_world_is_refused(type_: str, props: dict[str, Any]) -> None:
    found = violations(hardening.NO_INGRESS_FROM_ANYWHERE, type_, props)
    assert len(found) == 1 and "open to" in found[0], found


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        # SSH alone is the SSH rule's to report (with its own fix); not reported twice
        (rules.SG_INGRESS_RULE, {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": ANY4}),
        (rules.SG_INGRESS_RULE, {"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": "10.0.0.0/8"}),
        (rules.SG_INGRESS_RULE, {"ipProtocol": "-1", "referencedSecurityGroupId": UNKNOWN_STRING_VALUE}),
        (rules.SG_RULE, {"type": "egress", "protocol": "-1", "cidrBlocks": [ANY4]}),
    ],
)
def test_ingress_from_named_networks_passes(type_: str, props: dict[str, Any]) -> None:
    assert violations(hardening.NO_INGRESS_FROM_ANYWHERE, type_, props) == []


# ------------------------------------------------------------------------------ public IPs


def test_public_ip_only_on_login_instances() -> None:
    p = rules.NO_PUBLIC_IP_ON_COMPUTE
    assert violations(p, rules.INSTANCE, instance("login", associatePublicIpAddress=True)) == []
    assert violations(p, rules.INSTANCE, instance("controller", associatePublicIpAddress=False)) == []
    found = violations(p, rules.INSTANCE, instance("controller", associatePublicIpAddress=True))
    assert found == [
        "controller instance asks for a public IP (associatePublicIpAddress); only login nodes may have one"
    ]
    untagged = violations(p, rules.INSTANCE, {"associatePublicIpAddress": True})
    assert untagged and untagged[0].startswith("compute instance"), "no role tag counts as compute"


# ------------------------------------------------------------------------ metadata hop limit


@pytest.mark.parametrize("role", ["compute", "controller"])
def test_hop_limit_one_on_compute_and_controller(role: str) -> None:
    p = rules.IMDSV2
    assert violations(p, rules.INSTANCE, instance(role)) == []
    two = instance(role, metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 2})
    found = violations(p, rules.INSTANCE, two)
    assert len(found) == 1 and f"{role} instance metadata hop limit is 2" in found[0], found
    unset = instance(role, metadataOptions={"httpTokens": "required"})
    assert "hop limit is None" in violations(p, rules.INSTANCE, unset)[0], "unset: the AMI decides"
    lt_two = lt(metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 2})
    assert "compute instance metadata hop limit is 2" in violations(p, rules.LAUNCH_TEMPLATE, lt_two)[0]


def test_login_nodes_may_keep_a_higher_hop_limit() -> None:
    login = instance("login", metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 2})
    assert violations(rules.IMDSV2, rules.INSTANCE, login) == []


# ---------------------------------------------------------------------- customer-managed KMS


@pytest.mark.parametrize(
    ("type_", "bad", "good"),
    [
        (rules.EFS, {"encrypted": True}, {"encrypted": True, "kmsKeyId": "arn:aws:kms:us-east-1:1:key/k"}),
        (rules.FSX_LUSTRE, {"deploymentType": "PERSISTENT_2"}, {"deploymentType": "PERSISTENT_2", "kmsKeyId": "k"}),
        (rules.EBS_VOLUME, {"encrypted": True}, {"encrypted": True, "kmsKeyId": UNKNOWN_STRING_VALUE}),
        (rules.SSM_PARAMETER, {"type": "SecureString", "name": "/x"}, {"type": "SecureString", "keyId": "alias/k"}),
        (
            rules.INSTANCE,
            instance("controller"),
            instance("controller", rootBlockDevice={"encrypted": True, "kmsKeyId": "k"}),
        ),
        (
            rules.LAUNCH_TEMPLATE,
            lt(),
            lt(blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": {"encrypted": "true", "kmsKeyId": "k"}}]),
        ),
    ],
)
def test_customer_managed_kms_key_advice(type_: str, bad: dict[str, Any], good: dict[str, Any]) -> None:
    found = violations(hardening.CUSTOMER_MANAGED_KMS, type_, bad)
    assert len(found) == 1 and "AWS managed key" in found[0], found
    assert violations(hardening.CUSTOMER_MANAGED_KMS, type_, good) == []
    assert violations(hardening.CUSTOMER_MANAGED_KMS, rules.SSM_PARAMETER, {"type": "String"}) == []


# ------------------------------------------------------------- secrets: readers and key

PARAM = "arn:aws:ssm:us-east-1:111122223333:parameter/clusterforge/c/slurmdbd_storage_pass"
CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        (hardening.IAM_ROLE_POLICY, {"policy": doc(allow(["ssm:GetParameter"], [PARAM]))}),
        (hardening.IAM_ROLE_POLICY, {"policy": doc(allow(["ssm:UpdateInstanceInformation"], "*"))}),
        (hardening.IAM_ROLE_POLICY, {"policy": doc({"Effect": "Deny", "Action": "ssm:GetParameter*", "Resource": "*"})}),
        (hardening.IAM_ATTACHMENT, {"policyArn": "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"}),
        (hardening.IAM_ATTACHMENT, {"policyArn": UNKNOWN_STRING_VALUE}),
    ],
)
def test_scoped_parameter_reads_pass(type_: str, props: dict[str, Any]) -> None:
    assert violations(hardening.SSM_PARAMETER_READ_SCOPED, type_, props) == []


@pytest.mark.parametrize(
    ("type_", "props", "message"),
    [
        (hardening.IAM_ATTACHMENT, {"policyArn": CORE}, "AmazonSSMManagedInstanceCore grants ssm:GetParameter(s)"),
        (hardening.IAM_ROLE, {"managedPolicyArns": [CORE]}, "AmazonSSMManagedInstanceCore"),
        (hardening.IAM_ROLE_POLICY, {"policy": doc(allow(["ssm:GetParameters"], "*"))}, "ssm:GetParameters on *"),
        (hardening.IAM_POLICY, {"policy": doc(allow("ssm:GetParametersByPath", ["*"]))}, "GetParametersByPath on *"),
        (
            hardening.IAM_ROLE_POLICY,
            {"policy": doc(allow(["ssm:GetParameter"], "arn:aws:ssm:us-east-1:1:parameter/*"))},
            "on arn:aws:ssm:us-east-1:1:parameter/*",
        ),
        (hardening.IAM_ROLE_POLICY, {"policy": doc(allow("ssm:Get*", "*"))}, "ssm:Get* on *"),
    ],
)
def test_parameter_reads_on_star_are_refused(type_: str, props: dict[str, Any], message: str) -> None:
    found = violations(hardening.SSM_PARAMETER_READ_SCOPED, type_, props)
    assert len(found) == 1 and message in found[0], found


def test_secure_strings_need_a_customer_managed_key() -> None:
    rule = hardening.SECURE_STRING_CMK
    for bad in ({"type": "SecureString", "name": "/clusterforge/c/x"}, {"type": "SecureString", "keyId": "alias/aws/ssm"}):
        found = violations(rule, rules.SSM_PARAMETER, bad)
        assert len(found) == 1 and "aws/ssm" in found[0], found
    for good in (
        {"type": "SecureString", "keyId": "arn:aws:kms:us-east-1:1:key/k"},
        {"type": "SecureString", "keyId": UNKNOWN_STRING_VALUE},  # the cluster key's ARN in preview
        {"type": "String", "name": "/not/a/secret"},
    ):
        assert violations(rule, rules.SSM_PARAMETER, good) == []


# ------------------------------------------------------------------------ stack rules


def res(type_: str, name: str, props: dict[str, Any], *, protect: bool = False) -> PolicyResource:
    return PolicyResource(
        type_,
        unknown_checking_proxy(props),
        f"urn:pulumi:test::clusterforge::{type_}::{name}",
        name,
        PolicyResourceOptions(protect, [], None, [], PolicyCustomTimeouts(0, 0, 0), []),
        None,
        None,
        [],
        {},
    )


def depends(r: PolicyResource, prop: str, on: PolicyResource) -> PolicyResource:
    r.property_dependencies = {prop: [on]}
    r.dependencies = [on]
    return r


def stack_violations(policy: StackValidationPolicy, resources: list[PolicyResource]) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    policy.validate(StackValidationArgs(resources), lambda message, urn: found.append((message, urn)))
    return found


EFS_ID = {"fileSystemId": UNKNOWN_STRING_VALUE}


def test_efs_needs_an_enabled_backup_policy() -> None:
    efs = res(rules.EFS, "home", {"encrypted": True}, protect=True)
    on = depends(
        res(stateful.EFS_BACKUP_POLICY, "b", {**EFS_ID, "backupPolicy": {"status": "ENABLED"}}), "fileSystemId", efs
    )
    off = depends(
        res(stateful.EFS_BACKUP_POLICY, "b", {**EFS_ID, "backupPolicy": {"status": "DISABLED"}}), "fileSystemId", efs
    )
    other = res(rules.EFS, "other", {"encrypted": True}, protect=True)
    assert stack_violations(stateful.BACKUPS, [efs, on]) == []
    for stack in ([efs], [efs, off], [efs, other, depends(on, "fileSystemId", other)]):
        found = stack_violations(stateful.BACKUPS, stack)
        assert [urn for _, urn in found] == [efs.urn], found
        assert "has no aws.efs.BackupPolicy with status ENABLED" in found[0][0]


def test_fsx_backups_where_the_deployment_type_has_them() -> None:
    def fsx(**props: Any) -> PolicyResource:
        return res(rules.FSX_LUSTRE, "fsx", {"deploymentType": "PERSISTENT_2", **props}, protect=True)

    assert stack_violations(stateful.BACKUPS, [fsx(automaticBackupRetentionDays=7)]) == []
    for days in ({}, {"automaticBackupRetentionDays": 0}):
        found = stack_violations(stateful.BACKUPS, [fsx(**days)])
        assert len(found) == 1 and "keeps no backups" in found[0][0], found
    linked = fsx(automaticBackupRetentionDays=0)
    dra = depends(res(stateful.FSX_DRA, "s3", {**EFS_ID, "dataRepositoryPath": "s3://b/p"}), "fileSystemId", linked)
    assert stack_violations(stateful.BACKUPS, [linked, dra]) == [], "linked to S3: FSx supports no backups"
    scratch = res(rules.FSX_LUSTRE, "fsx", {"deploymentType": "SCRATCH_2"})
    assert stack_violations(stateful.BACKUPS, [scratch]) == [], "SCRATCH has no backups (encryption rule refuses it)"


def test_stateful_resources_are_protected() -> None:
    p = stateful.PROTECT_STATEFUL
    for type_ in (rules.FSX_LUSTRE, rules.EFS, rules.EBS_VOLUME, stateful.DYNAMODB_TABLE):
        assert stack_violations(p, [res(type_, "x", {"name": "data", "tags": TAGS}, protect=True)]) == []
        found = stack_violations(p, [res(type_, "x", {"name": "data", "tags": TAGS})])
        assert len(found) == 1 and "holds data but is not protected" in found[0][0], found
    registry = res(stateful.DYNAMODB_TABLE, "c-node-names", {"name": "c-node-names", "tags": TAGS})
    assert stack_violations(p, [registry]) == [], "the node-name registry is rebuilt by the claims"
    assert stack_violations(p, [res(rules.INSTANCE, "i", {})]) == []


# ------------------------------------------------------------- bad resources the pack catches

#: Bad resources, one flaw each (label, rule that must refuse it, type, inputs); taggable ones are
#: tagged, so no other rule catches them by accident.
T = {"tags": TAGS}
BAD: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        "ssh from anywhere",
        "clusterforge-no-ssh-from-anywhere",
        rules.SG_INGRESS_RULE,
        {**T, "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": ANY4},
    ),
    (
        "https from anywhere",
        "clusterforge-no-ingress-from-anywhere",
        rules.SG_INGRESS_RULE,
        {**T, "ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": ANY4},
    ),
    (
        "nfs from ::/0",
        "clusterforge-no-ingress-from-anywhere",
        rules.SG_RULE,
        {"type": "ingress", "protocol": "tcp", "fromPort": 2049, "toPort": 2049, "ipv6CidrBlocks": [ANY6]},
    ),
    ("admin policy", "clusterforge-iam-no-wildcards", hardening.IAM_POLICY, {"policy": doc(allow("*", "*"))}),
    (
        "s3:* on a bucket",
        "clusterforge-iam-no-wildcards",
        hardening.IAM_ROLE_POLICY,
        {"policy": doc(allow("s3:*", "arn:aws:s3:::b"))},
    ),
    (
        "terminate on *",
        "clusterforge-iam-no-wildcards",
        hardening.IAM_ROLE_POLICY,
        {"policy": doc(allow("ec2:TerminateInstances", "*"))},
    ),
    (
        "inline iam:*",
        "clusterforge-iam-no-wildcards",
        hardening.IAM_ROLE,
        {**T, "inlinePolicies": [{"name": "i", "policy": doc(allow("iam:*", "*"))}]},
    ),
    (
        "public controller",
        "clusterforge-no-public-ip-on-compute",
        rules.INSTANCE,
        instance("controller", associatePublicIpAddress=True),
    ),
    (
        "public compute template",
        "clusterforge-no-public-ip-on-compute",
        rules.LAUNCH_TEMPLATE,
        lt(networkInterfaces=[{"deviceIndex": 0, "associatePublicIpAddress": "true"}]),
    ),
    (
        "IMDSv1 controller",
        "clusterforge-imdsv2-required",
        rules.INSTANCE,
        instance("controller", metadataOptions={"httpTokens": "optional", "httpPutResponseHopLimit": 1}),
    ),
    (
        "hop limit 2 on compute",
        "clusterforge-imdsv2-required",
        rules.LAUNCH_TEMPLATE,
        lt(metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 2}),
    ),
    (
        "hop limit 3 on controller",
        "clusterforge-imdsv2-required",
        rules.INSTANCE,
        instance("controller", metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 3}),
    ),
    ("plain EBS volume", "clusterforge-encryption-at-rest", rules.EBS_VOLUME, {**T, "encrypted": False}),
    (
        "plain template volume",
        "clusterforge-encryption-at-rest",
        rules.LAUNCH_TEMPLATE,
        lt(blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": {"encrypted": "false"}}]),
    ),
    ("plain EFS", "clusterforge-encryption-at-rest", rules.EFS, {**T, "encrypted": False}),
    ("scratch FSx", "clusterforge-encryption-at-rest", rules.FSX_LUSTRE, {**T, "deploymentType": "SCRATCH_2"}),
    (
        "secret as String",
        "clusterforge-encryption-at-rest",
        rules.SSM_PARAMETER,
        {**T, "name": "/clusterforge/c/x", "type": "String"},
    ),
    ("untagged VPC", "clusterforge-required-tags", "aws:ec2/vpc:Vpc", {}),
    (
        "SSM managed core on a role",
        "clusterforge-ssm-parameter-read-scoped",
        hardening.IAM_ATTACHMENT,
        {"role": "r", "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"},
    ),
    (
        "secret under aws/ssm",
        "clusterforge-secure-string-cmk",
        rules.SSM_PARAMETER,
        {**T, "name": "/clusterforge/c/x", "type": "SecureString", "keyId": "alias/aws/ssm"},
    ),
]

#: Bad stacks (label, resources): each holds one resource the stack rules must refuse.
BAD_STACKS: list[tuple[str, list[PolicyResource]]] = [
    ("EFS without backup policy", [res(rules.EFS, "home", {"encrypted": True}, protect=True)]),
    ("unlinked FSx without backups", [res(rules.FSX_LUSTRE, "fsx", {"deploymentType": "PERSISTENT_2"}, protect=True)]),
    (
        "unprotected FSx",
        [res(rules.FSX_LUSTRE, "fsx", {"deploymentType": "PERSISTENT_2", "automaticBackupRetentionDays": 7})],
    ),
    ("unprotected DynamoDB table", [res(stateful.DYNAMODB_TABLE, "jobs", {"name": "jobs", "tags": TAGS})]),
]


def _mandatory(kind: type) -> list[Any]:
    return [p for p in pack.POLICIES if isinstance(p, kind) and p.enforcement_level == EnforcementLevel.MANDATORY]


@pytest.mark.parametrize(("label", "rule", "type_", "props"), BAD, ids=[b[0] for b in BAD])
def test_the_pack_catches_each_bad_resource(label: str, rule: str, type_: str, props: dict[str, Any]) -> None:
    caught = {p.name for p in _mandatory(ResourceValidationPolicy) if violations(p, type_, props)}
    assert caught == {rule}, f"{label}: refused by {sorted(caught)}, expected {rule} alone"


@pytest.mark.parametrize(("label", "stack"), BAD_STACKS, ids=[b[0] for b in BAD_STACKS])
def test_the_pack_catches_each_bad_stack(label: str, stack: list[PolicyResource]) -> None:
    caught = [v for p in _mandatory(StackValidationPolicy) for v in stack_violations(p, stack)]
    assert caught, f"{label}: no stack rule refused it"


# ------------------------------------------------------------------ the program passes the pack


def _engine_view(value: Any) -> Any:
    """Recorded inputs as the policy engine sees them in preview (unknowns as its sentinel)."""
    if value == UNKNOWN:
        return UNKNOWN_STRING_VALUE
    if isinstance(value, dict):
        return {k: _engine_view(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_engine_view(v) for v in value]
    return value


def _policy_resources(rec: Recording) -> list[PolicyResource]:
    """The recording as a stack validation sees it: custom resources with options and dependencies."""
    out: dict[str, PolicyResource] = {}
    for r in rec.resources:
        if r.custom and not r.type.startswith("pulumi:providers:"):
            out[r.urn] = res(r.type, r.name, _engine_view(r.inputs), protect=r.protect)
            out[r.urn].urn = r.urn
    for r in rec.resources:
        if r.urn in out:
            deps = {k: [out[u] for u in urns if u in out] for k, urns in r.property_dependencies.items()}
            out[r.urn].property_dependencies = deps
            out[r.urn].dependencies = [d for ds in deps.values() for d in ds]
    return list(out.values())


def _pack_findings(rec: Recording) -> tuple[list[str], set[tuple[str, str]]]:
    """(mandatory violations, (type, name) of resources the advisory KMS rule flags)."""
    problems: list[str] = []
    advised: set[tuple[str, str]] = set()
    resources = _policy_resources(rec)
    for r in rec.resources:
        if not r.custom or r.type.startswith("pulumi:providers:"):
            continue
        for policy in pack.POLICIES:
            if isinstance(policy, ResourceValidationPolicy):
                # UnknownValueError here would make the rule advisory in a real preview: it must not.
                for message in violations(policy, r.type, _engine_view(r.inputs), r.name):
                    if policy.enforcement_level == EnforcementLevel.ADVISORY:
                        advised.add((r.type, r.name))
                    else:
                        problems.append(f"{r.urn}: {policy.name}: {message}")
    for policy in _mandatory(StackValidationPolicy):
        problems += [f"{urn}: {policy.name}: {m}" for m, urn in stack_violations(policy, resources)]
    return problems, advised


RECORDINGS = [(ex, pv) for ex in AWS_EXAMPLES for pv in (True, False)]


@pytest.mark.parametrize(
    ("example", "preview"), RECORDINGS, ids=[f"{e}-{'preview' if p else 'up'}" for e, p in RECORDINGS]
)
def test_every_resource_of_the_examples_passes_every_rule(example: str, preview: bool) -> None:
    problems, _ = _pack_findings(run_example(example, preview=preview))
    assert problems == []


@pytest.mark.parametrize("variant", ["p5-two-az-no-ssh", "hybrid-debian-reservation"])
def test_the_example_variants_pass_too(variant: str) -> None:
    problems, _ = _pack_findings(run_variant(variant))
    assert problems == []


def test_fsx_without_s3_gets_backups_and_passes() -> None:
    from tests.pulumi_helpers import example_data

    data = example_data("p5-training")
    fsx = next(s for s in data["storage"] if s["type"] == "fsx_lustre")
    del fsx["s3_import_path"]
    rec = run_spec(data)
    problems, _ = _pack_findings(rec)
    assert problems == []
    (fs,) = rec.of_type(rules.FSX_LUSTRE)
    assert fs.inputs["automaticBackupRetentionDays"] == 7 and fs.protect


def test_kms_advice_on_the_p5_example_names_every_aws_managed_key_use() -> None:
    """What the advisory rule prints for p5-training (written from infra/): every launch template
    and instance volume, the controller's retained state volume (slurm.state_storage: ebs), FSx,
    EFS; not the slurmdbd SecureString, which the cluster's own key encrypts (infra/secrets.py)."""
    _, advised = _pack_findings(run_example("p5-training", preview=True))
    assert {t for t, _ in advised} == {
        rules.LAUNCH_TEMPLATE,
        rules.INSTANCE,
        "aws:ebs/volume:Volume",
        rules.FSX_LUSTRE,
        rules.EFS,
    }
    assert ("aws:fsx/lustreFileSystem:LustreFileSystem", "p5-training-fsx") in advised


def test_the_pack_allows_on_star_exactly_the_ssm_agent_actions_the_program_grants() -> None:
    """The pack is standalone (policy/rules.py: it imports no clusterforge), so it keeps its own
    copy of the SSM agent's actions; this keeps the copy and the program's list in step."""
    allowed = {a for a, why in hardening.STAR_RESOURCE_ACTIONS.items() if why.startswith("the SSM agent")}
    assert allowed == set(SSM_AGENT_ACTIONS)
