"""Who can read the cluster secrets, as the program registers it under mocks: no role gets
``ssm:GetParameter*`` on ``*`` or AmazonSSMManagedInstanceCore, only the controller role may read
the parameters, which are encrypted with the cluster's own KMS key whose policy names the
controller as the only role that may decrypt."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.pulumi_helpers import (
    ATTACHMENT,
    PARAMETER,
    ROLE,
    ROLE_POLICY,
    expect,
    of_type,
    one,
    run_example,
)

KEY = "aws:kms/key:Key"
ALIAS = "aws:kms/alias:Alias"
EXAMPLES = ("p5-training", "hybrid")
#: The mocks' fake ARNs (clusterforge/plan/mocks.py COMPUTED), written out, not computed.
CONTROLLER_ROLE_ARN = "arn:aws:iam::123456789012:role/p5-training-controller"
ACCOUNT_ROOT = "arn:aws:iam::123456789012:root"
KEY_ARN = "arn:aws:kms:::key/p5-training-secrets"
PARAMETER_ARN = "arn:aws:ssm:::parameter/p5-training-slurmdbd_storage_pass"
PARAMETER_READS = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath", "ssm:GetParameterHistory")


def _statements(doc: str) -> list[dict[str, Any]]:
    st = json.loads(doc)["Statement"]
    return [st] if isinstance(st, dict) else list(st)


def _list(v: Any) -> list[str]:
    return [v] if isinstance(v, str) else list(v)


def _grants(action_prefix: str, st: dict[str, Any]) -> bool:
    acts = _list(st.get("Action", []))
    return any(a == "*" or a == "ssm:*" or a.startswith(action_prefix) or a == action_prefix for a in acts)


@pytest.mark.parametrize("example", EXAMPLES)
def test_no_role_reads_parameters_on_star_nor_carries_ssm_managed_instance_core(example: str) -> None:
    rec = run_example(example)
    for att in of_type(rec, ATTACHMENT):
        expect(att, not att.inputs["policyArn"].endswith("/AmazonSSMManagedInstanceCore"), "managed core attached")
        expect(att, att.inputs["policyArn"].endswith("/CloudWatchAgentServerPolicy"), "only the CloudWatch agent's")
    for pol in of_type(rec, ROLE_POLICY):
        for st in _statements(pol.inputs["policy"]):
            if st["Effect"] == "Allow" and "*" in _list(st["Resource"]):
                reads = [a for a in _list(st["Action"]) if a.startswith("ssm:GetParameter") or a in ("*", "ssm:*")]
                expect(pol, reads == [], f"parameter reads on '*': {reads}")
    for role in of_type(rec, ROLE):
        expect(role, "managedPolicyArns" not in role.inputs and "inlinePolicies" not in role.inputs, "no inline")


@pytest.mark.parametrize("example", EXAMPLES)
def test_both_roles_keep_the_ssm_agent(example: str) -> None:
    rec = run_example(example)
    kinds = ["controller", "node"] if example == "p5-training" else ["node"]
    for kind in kinds:
        pol = one(rec, ROLE_POLICY, f"{example}-{kind}-ssm-agent")
        expect(pol, pol.inputs["role"] == f"{example}-{kind}-id", "on its role")
        actions = set(_list(_statements(pol.inputs["policy"])[0]["Action"]))
        assert {"ssm:UpdateInstanceInformation", "ssmmessages:OpenDataChannel", "ec2messages:GetMessages"} <= actions
        assert not any(a.startswith("ssm:GetParameter") for a in actions)


def test_only_the_controller_role_reads_the_secret_parameters() -> None:
    rec = run_example("p5-training")
    readers = []
    for pol in of_type(rec, ROLE_POLICY):
        for st in _statements(pol.inputs["policy"]):
            if st["Effect"] == "Allow" and any(a in PARAMETER_READS for a in _list(st["Action"])):
                readers.append((pol.inputs["role"], _list(st["Resource"])))
    assert readers == [("p5-training-controller-id", [PARAMETER_ARN])]
    grant = one(rec, ROLE_POLICY, "p5-training-controller-secrets")
    by_sid = {st["Sid"]: st for st in _statements(grant.inputs["policy"])}
    assert by_sid["ReadClusterSecrets"]["Action"] == ["ssm:GetParameter"], "read, not list or write"
    assert by_sid["DecryptClusterSecrets"] == {
        "Sid": "DecryptClusterSecrets",
        "Effect": "Allow",
        "Action": ["kms:Decrypt"],
        "Resource": KEY_ARN,
        "Condition": {
            "StringEquals": {
                "kms:EncryptionContext:PARAMETER_ARN": [PARAMETER_ARN],
                "kms:ViaService": "ssm.us-east-1.amazonaws.com",
            }
        },
    }
    # no other role holds any KMS right
    for pol in of_type(rec, ROLE_POLICY):
        if pol.inputs["role"] != "p5-training-controller-id":
            expect(pol, "kms:" not in pol.inputs["policy"], "KMS rights outside the controller role")


def test_parameter_is_encrypted_with_the_cluster_key() -> None:
    rec = run_example("p5-training")
    param = one(rec, PARAMETER)
    expect(param, param.inputs["type"] == "SecureString", "SecureString")
    expect(param, param.inputs.get("keyId") == KEY_ARN, "the cluster's customer managed key, not aws/ssm")
    key = one(rec, KEY, "p5-training-secrets")
    expect(key, key.inputs["enableKeyRotation"] is True, "yearly rotation on")
    expect(key, key.inputs["deletionWindowInDays"] == 30, "longest deletion window")
    expect(key, key.inputs["tags"]["clusterforge:cluster"] == "p5-training", "tagged")
    alias = one(rec, ALIAS, "p5-training-secrets")
    expect(alias, alias.inputs["name"] == "alias/clusterforge/p5-training/secrets", "alias name")
    expect(alias, alias.inputs["targetKeyId"] == "p5-training-secrets-key-id", "points at the key")
    assert of_type(run_example("hybrid"), KEY) == [], "no cloud controller, no secret, no key"


def test_key_policy_lets_only_the_controller_role_decrypt() -> None:
    key = one(run_example("p5-training"), KEY, "p5-training-secrets")
    statements = {st["Sid"]: st for st in _statements(key.inputs["policy"])}
    assert set(statements) == {"KeyAdministration", "ControllerDecryptsClusterSecrets", "DeployerWritesClusterSecrets"}
    via_ssm = {
        "StringEquals": {"kms:ViaService": "ssm.us-east-1.amazonaws.com"},
        "StringLike": {"kms:EncryptionContext:PARAMETER_ARN": "arn:aws:ssm:us-east-1:*:parameter/clusterforge/p5-training/*"},
    }
    admin = statements["KeyAdministration"]
    assert admin["Principal"] == {"AWS": ACCOUNT_ROOT}
    crypto = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncrypt", "kms:CreateGrant", "kms:*")
    assert not [a for a in admin["Action"] if a.startswith(crypto)], "administration without cryptographic use"
    controller = statements["ControllerDecryptsClusterSecrets"]
    assert controller["Principal"] == {"AWS": CONTROLLER_ROLE_ARN}
    assert controller["Action"] == ["kms:Decrypt"] and controller["Condition"] == via_ssm
    # The one role the key policy names for decryption is the controller's: the account statement
    # (the deployer's write and read-back through SSM) names no role and is held to SSM and this
    # cluster's parameters as well.
    named_roles = {
        st["Principal"]["AWS"]
        for st in statements.values()
        if "kms:Decrypt" in st["Action"] and ":role/" in st["Principal"]["AWS"]
    }
    assert named_roles == {CONTROLLER_ROLE_ARN}
    deployer = statements["DeployerWritesClusterSecrets"]
    assert deployer["Principal"] == {"AWS": ACCOUNT_ROOT} and deployer["Condition"] == via_ssm
    for st in statements.values():
        assert st["Effect"] == "Allow" and "NotPrincipal" not in st and "NotAction" not in st
