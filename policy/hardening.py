"""Resource rules on what a node may do and reach: IAM wildcards, ingress from anywhere, and
customer-managed KMS keys (advisory). Written like ``rules`` (inputs, unknown-safe reads)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs

try:  # imported as part of the `policy` package (tests) ...
    from .rules import (
        _PRESENT,
        EBS_VOLUME,
        EFS,
        FSX_LUSTRE,
        INSTANCE,
        LAUNCH_TEMPLATE,
        SSH_PORT,
        SSM_PARAMETER,
        Props,
        _get,
        _is_anywhere,
        _items,
        _policy,
        ingress_rules,
    )
except ImportError:  # ... or as a top-level module by the CLI (__main__.py puts policy/ on the path)
    from rules import (  # type: ignore[no-redef]
        _PRESENT,
        EBS_VOLUME,
        EFS,
        FSX_LUSTRE,
        INSTANCE,
        LAUNCH_TEMPLATE,
        SSH_PORT,
        SSM_PARAMETER,
        Props,
        _get,
        _is_anywhere,
        _items,
        _policy,
        ingress_rules,
    )

IAM_POLICY = "aws:iam/policy:Policy"
IAM_ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
IAM_ROLE = "aws:iam/role:Role"

#: The only actions an Allow statement may grant on ``"Resource": "*"``, each because IAM offers
#: nothing narrower. The Service Authorization Reference lists no resource type for them, so a
#: statement naming any ARN would never match and the call would be denied:
#: EC2 ("Actions, resources, and condition keys for Amazon EC2",
#: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html; the EC2
#: API Reference, "Granting required permissions for Amazon EC2 resources", says EC2 supports
#: resource-level permissions only partially) and EC2 Auto Scaling
#: (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html).
STAR_RESOURCE_ACTIONS: Mapping[str, str] = {
    "ec2:DescribeInstances": "controller topology discovery and the node-name claim (is a holder alive?)",
    "ec2:DescribeInstanceTopology": "controller topology discovery (topology.conf from EC2's network nodes)",
    "autoscaling:DescribeAutoScalingGroups": "the controller's scale-in (retire.py) finds the cluster's groups",
    "autoscaling:DescribeAutoScalingInstances": "the controller's scale-in (retire.py) maps instances to groups",
    # The SSM agent (Session Manager, Run Command): the ssmmessages and ec2messages operations name
    # no resource type; UpdateInstanceInformation is granted on '*' by AWS's own instance policies
    # (AmazonSSMManagedInstanceCore, the Session Manager minimal instance policy). The pack imports
    # no clusterforge (rules.py), so this copies clusterforge/aws/iam.py's SSM_AGENT_ACTIONS; a test
    # keeps the two equal.
    **{
        a: "the SSM agent (Session Manager, Run Command)"
        for a in (
            "ec2messages:AcknowledgeMessage",
            "ec2messages:DeleteMessage",
            "ec2messages:FailMessage",
            "ec2messages:GetEndpoint",
            "ec2messages:GetMessages",
            "ec2messages:SendReply",
            "ssm:UpdateInstanceInformation",
            "ssmmessages:CreateControlChannel",
            "ssmmessages:CreateDataChannel",
            "ssmmessages:OpenControlChannel",
            "ssmmessages:OpenDataChannel",
        )
    },
}
#: AWS managed policies that grant ssm:GetParameter/GetParameters on "*" (AmazonSSMManagedInstanceCore
#: v2; its predecessor AmazonEC2RoleforSSM too): attached to an instance role, every process on the
#: node that reaches the metadata service can read every parameter of the account.
PARAMETER_READING_MANAGED_POLICIES = ("AmazonSSMManagedInstanceCore", "AmazonEC2RoleforSSM")
IAM_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
#: The AWS managed key of Parameter Store: its key policy lets every principal of the account decrypt.
AWS_MANAGED_SSM_KEY = "alias/aws/ssm"

#: Ports that may be open to 0.0.0.0/0 or ::/0: none. The program opens nothing to the world: SSH
#: to login nodes only from aws.login_allowed_cidrs (and the SSH rule refuses a world CIDR there),
#: everything else only from cluster security groups and on-prem CIDRs (infra/security.py).
WORLD_OPEN_PORTS: frozenset[int] = frozenset()


# ---------------------------------------------------------------------------- IAM wildcards


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in _items(value) if isinstance(v, str)]


def _documents(t: str, p: Props) -> Iterator[tuple[str, Any]]:
    """(where, policy document) of every IAM policy document the resource carries."""
    if t in (IAM_POLICY, IAM_ROLE_POLICY):
        yield "policy", _get(p, "policy")
    elif t == IAM_ROLE:
        for i, inline in enumerate(_items(_get(p, "inlinePolicies"))):
            yield f"inlinePolicies[{i}] ({_get(inline, 'name')})", _get(inline, "policy")


def _parse(doc: Any) -> Mapping[str, Any] | None:
    if isinstance(doc, str):
        try:
            parsed = json.loads(doc)
        except ValueError:
            return None  # not JSON: AWS rejects it; nothing to judge here
        return parsed if isinstance(parsed, Mapping) else None
    return doc if isinstance(doc, Mapping) else None  # unknown in preview: judged at `up`


def _iam_wildcards(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for where, raw in _documents(args.resource_type, args.props):
        doc = _parse(raw)
        if doc is None:
            continue
        statements = _get(doc, "Statement")
        for i, st in enumerate([statements] if isinstance(statements, Mapping) else list(_items(statements))):
            if not isinstance(st, Mapping) or _get(st, "Effect") != "Allow":
                continue  # a Deny with wildcards only takes rights away
            sid = _get(st, "Sid") or f"#{i}"
            for key in ("NotAction", "NotResource"):
                if _get(st, key) is not None:
                    report(f"{where} statement {sid}: Allow with {key} grants everything not listed", None)
            actions = _strings(_get(st, "Action"))
            wild = [a for a in actions if a == "*" or a.endswith(":*")]
            if wild:
                report(f"{where} statement {sid}: wildcard action(s) {', '.join(wild)}: name the actions", None)
            if "*" in _strings(_get(st, "Resource")):
                loose = [a for a in actions if a not in STAR_RESOURCE_ACTIONS]
                if loose:
                    report(
                        f"{where} statement {sid}: Resource '*' for {', '.join(loose)}: name the ARNs "
                        "(only actions without resource-level permissions may use '*': "
                        f"{', '.join(sorted(STAR_RESOURCE_ACTIONS))})",
                        None,
                    )


# ------------------------------------------------------------------- ingress from anywhere


def _port_range(protocol: Any, lo: Any, hi: Any) -> str:
    proto = str(protocol).lower() if protocol is not None else "?"
    if proto in ("-1", "all"):
        return "all traffic"
    if isinstance(lo, int | float) and isinstance(hi, int | float):
        return f"{proto} {int(lo)}" if lo == hi else f"{proto} {int(lo)}-{int(hi)}"
    return f"{proto} (ports unknown)"


def _ingress_from_anywhere(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for protocol, lo, hi, cidrs in ingress_rules(args.resource_type, args.props):
        anywhere = [c for c in cidrs if _is_anywhere(c)]
        if not anywhere:
            continue
        proto = str(protocol).lower() if protocol is not None else ""
        single = isinstance(lo, int | float) and lo == hi and proto in ("tcp", "6", "udp", "17")
        if single and int(lo) in WORLD_OPEN_PORTS:
            continue
        if single and int(lo) == SSH_PORT and proto in ("tcp", "6"):
            continue  # SSH alone: clusterforge-no-ssh-from-anywhere reports it with its own fix
        report(
            f"{_port_range(protocol, lo, hi)} open to {', '.join(anywhere)}: nothing in a clusterforge "
            "stack is served to the internet; open it to the cluster's security groups or named CIDRs",
            None,
        )


# ------------------------------------------------------------------ customer-managed KMS keys


def _kms_keys(args: ResourceValidationArgs, report: ReportViolation) -> None:
    t, p = args.resource_type, args.props

    def need(props: Any, key: str, what: str) -> None:
        if _get(props, key) in (None, ""):
            report(f"{what} is encrypted with the AWS managed key: set {key} to a customer managed KMS key", None)

    if t in (EBS_VOLUME, FSX_LUSTRE, EFS):
        need(p, "kmsKeyId", t)
    elif t == SSM_PARAMETER and _get(p, "type") == "SecureString":
        need(p, "keyId", f"SecureString {_get(p, 'name')}")
    elif t == INSTANCE:
        root = _get(p, "rootBlockDevice")
        if root is not None and root is not _PRESENT:
            need(root, "kmsKeyId", "instance root volume")
        for dev in _items(_get(p, "ebsBlockDevices")):
            need(dev, "kmsKeyId", f"instance volume {_get(dev, 'deviceName')!r}")
    elif t == LAUNCH_TEMPLATE:
        for m in _items(_get(p, "blockDeviceMappings")):
            ebs = _get(m, "ebs")
            if ebs is not None and ebs is not _PRESENT:
                need(ebs, "kmsKeyId", f"launch template volume {_get(m, 'deviceName')!r}")


# --------------------------------------------------------------- secrets: who reads, which key


def _reads_parameters(action: str) -> bool:
    # "*" and "ssm:*" are clusterforge-iam-no-wildcards' to refuse (one finding per mistake).
    a = action.lower()
    return a in ("ssm:get*", "ssm:getparameter*") or a.startswith("ssm:getparameter")


def _ssm_parameter_read_scoped(args: ResourceValidationArgs, report: ReportViolation) -> None:
    t, p = args.resource_type, args.props
    arns: list[Any] = []
    if t == IAM_ATTACHMENT:
        arns = [_get(p, "policyArn")]
    elif t == IAM_ROLE:
        arns = _strings(_get(p, "managedPolicyArns"))
    for arn in arns:
        if isinstance(arn, str) and arn.rsplit("/", 1)[-1] in PARAMETER_READING_MANAGED_POLICIES:
            report(
                f"{arn} grants ssm:GetParameter(s) on '*': any job on the node could read every parameter; "
                "grant the SSM agent's actions alone (clusterforge.aws.iam.ssm_agent_policy)",
                None,
            )
    for where, raw in _documents(t, p):
        doc = _parse(raw)
        if doc is None:
            continue
        statements = _get(doc, "Statement")
        for i, st in enumerate([statements] if isinstance(statements, Mapping) else list(_items(statements))):
            if not isinstance(st, Mapping) or _get(st, "Effect") != "Allow":
                continue
            resources = _strings(_get(st, "Resource"))
            broad = [r for r in resources if r == "*" or r.endswith(":parameter/*") or r.endswith(":parameter*")]
            reads = [a for a in _strings(_get(st, "Action")) if _reads_parameters(a)]
            if broad and reads:
                report(
                    f"{where} statement {_get(st, 'Sid') or f'#{i}'}: {', '.join(reads)} on {', '.join(broad)}: "
                    "name the parameter ARNs the role reads (clusterforge.aws.iam.secret_read_policy)",
                    None,
                )


def _secure_string_cmk(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != SSM_PARAMETER or _get(args.props, "type") != "SecureString":
        return
    name = _get(args.props, "name")
    key = _get(args.props, "keyId")  # _PRESENT (a key's ARN unknown in preview) passes
    if key in (None, "") or (isinstance(key, str) and key.lower() in (AWS_MANAGED_SSM_KEY, "aws/ssm")):
        report(
            f"SecureString {name} uses the AWS managed key aws/ssm, whose key policy lets every principal of "
            "the account decrypt: set keyId to the cluster's customer managed key (infra/secrets.py)",
            None,
        )


IAM_NO_WILDCARDS = _policy(
    "clusterforge-iam-no-wildcards",
    "IAM policy documents name their actions and resources; '*' only for actions AWS offers no resource for.",
    _iam_wildcards,
)
NO_INGRESS_FROM_ANYWHERE = _policy(
    "clusterforge-no-ingress-from-anywhere",
    "No security group opens any port to 0.0.0.0/0 or ::/0.",
    _ingress_from_anywhere,
)
# Advisory: encryption itself is mandatory (clusterforge-encryption-at-rest) and the AWS managed
# keys are KMS keys too. A customer managed key adds key-policy control and audit, but Auto
# Scaling can launch instances with CMK-encrypted volumes only once the key policy grants its
# service-linked role (EC2 Auto Scaling User Guide, "Required AWS KMS key policy for use with
# encrypted volumes": https://docs.aws.amazon.com/autoscaling/ec2/userguide/key-policy-requirements-EBS-encryption.html),
# which the program does not manage yet; until then the pack warns rather than blocks.
CUSTOMER_MANAGED_KMS = _policy(
    "clusterforge-customer-managed-kms-key",
    "Volumes, file systems and SecureString parameters name a customer managed KMS key (advisory).",
    _kms_keys,
    EnforcementLevel.ADVISORY,
)

SSM_PARAMETER_READ_SCOPED = _policy(
    "clusterforge-ssm-parameter-read-scoped",
    "No IAM policy or attachment grants ssm:GetParameter* on '*' (nor attaches AmazonSSMManagedInstanceCore).",
    _ssm_parameter_read_scoped,
)
SECURE_STRING_CMK = _policy(
    "clusterforge-secure-string-cmk",
    "SecureString parameters are encrypted with a customer managed KMS key, not aws/ssm.",
    _secure_string_cmk,
)

POLICIES = (
    IAM_NO_WILDCARDS,
    NO_INGRESS_FROM_ANYWHERE,
    CUSTOMER_MANAGED_KMS,
    SSM_PARAMETER_READ_SCOPED,
    SECURE_STRING_CMK,
)
