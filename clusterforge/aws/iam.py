"""IAM policy documents for the instance roles, as plain dicts (least privilege, tested).

Two roles, because the nodes need different rights:

* ``controller``: topology discovery (``ec2:DescribeInstances`` and ``ec2:DescribeInstanceTopology``,
  which the controller calls to render topology.conf from EC2's network nodes) and read access to
  the cluster's own secrets in SSM Parameter Store (the slurmdbd password);
  and the scale-in of ``clusterforge/aws/retire.py`` (:func:`scale_in_policy`: terminate exactly
  the drained nodes' instances in the cluster's Auto Scaling groups, release their names);
* ``node`` (compute and login): the boot-time name claim (``clusterforge/aws/nodename.py``):
  read and write the cluster's node-name table only, ``ec2:DescribeInstances`` (is a name's holder
  still alive?) and tagging instances of its own cluster with the claim's tag keys only
  (:func:`node_name_claim_policy`).

Both get what the SSM agent needs for Session Manager and Run Command (:func:`ssm_agent_policy`:
shell access and Ansible over SSM without opening SSH), the CloudWatch agent policy, and read-only
access to the spec's S3 bucket when it names one. ``Describe*`` calls do not support
resource-level permissions, hence ``*``.

Not ``AmazonSSMManagedInstanceCore``: its first statement grants ``ssm:GetParameter`` and
``ssm:GetParameters`` on ``"*"`` (AWS managed policy reference, AmazonSSMManagedInstanceCore v2),
so every job on a compute node could read any parameter of the account through the instance
role's metadata credentials. Secrets are read by the controller alone, by ARN
(:func:`secret_read_policy`), and decrypted with the cluster's own KMS key (:func:`secret_key_policy`).
"""

from __future__ import annotations

from typing import Any

from clusterforge.aws.outputs import TAG_CLAIM_ERROR, TAG_CLUSTER, TAG_HOSTNAME

PolicyDocument = dict[str, Any]

MANAGED_POLICIES = ("CloudWatchAgentServerPolicy",)
#: AWS managed policies no role may carry (the policy pack refuses their attachment too).
FORBIDDEN_MANAGED_POLICIES = ("AmazonSSMManagedInstanceCore", "AmazonEC2RoleforSSM")
#: The SSM agent's own calls, from AmazonSSMManagedInstanceCore v2 without the parameter reads and
#: without State Manager, Patch Manager and Inventory (clusterforge uses none of them):
#: registration (UpdateInstanceInformation), Session Manager's channels (ssmmessages, "Reference:
#: ec2messages, ssmmessages, and other API operations" in the Systems Manager User Guide) and Run
#: Command's message queue (ec2messages). None of them reads a parameter or a secret.
SSM_AGENT_ACTIONS = (
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
#: What an account administrator may do to a cluster key: manage it, never use it to decrypt
#: (no kms:Decrypt/Encrypt/GenerateDataKey/ReEncrypt, no kms:CreateGrant, which could hand those out).
KEY_ADMIN_ACTIONS = (
    "kms:CancelKeyDeletion",
    "kms:CreateAlias",
    "kms:DeleteAlias",
    "kms:DescribeKey",
    "kms:DisableKey",
    "kms:DisableKeyRotation",
    "kms:EnableKey",
    "kms:EnableKeyRotation",
    "kms:GetKeyPolicy",
    "kms:GetKeyRotationStatus",
    "kms:ListAliases",
    "kms:ListGrants",
    "kms:ListKeyPolicies",
    "kms:ListKeyRotations",
    "kms:ListResourceTags",
    "kms:PutKeyPolicy",
    "kms:RevokeGrant",
    "kms:RotateKeyOnDemand",
    "kms:ScheduleKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:UpdateAlias",
    "kms:UpdateKeyDescription",
)
TOPOLOGY_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeInstanceTopology")
S3_READ_ACTIONS = ("s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation")
#: What the claim does with the table: one Scan, conditional PutItem (claim, take-over) and
#: DeleteItem (release), GetItem to read a claim back.
NAME_TABLE_ACTIONS = ("dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Scan")
#: What retire.py does to the cluster's Auto Scaling groups: lower MinSize (UpdateAutoScalingGroup),
#: lift one instance's scale-in protection, terminate one instance.
SCALE_IN_GROUP_ACTIONS = (
    "autoscaling:SetInstanceProtection",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    "autoscaling:UpdateAutoScalingGroup",
)
SCALE_IN_DESCRIBE_ACTIONS = ("autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances")
#: retire.py reads one name's holder (GetItem) and releases it with a conditional DeleteItem.
SCALE_IN_TABLE_ACTIONS = ("dynamodb:DeleteItem", "dynamodb:GetItem")
#: The only tag keys a node may set or remove: the claimed name, the failure reason, and Name.
CLAIM_TAG_KEYS = (TAG_HOSTNAME, TAG_CLAIM_ERROR, "Name")


def partition(region: str) -> str:
    """ARN partition of a region: ``aws``, ``aws-cn`` or ``aws-us-gov``."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def managed_policy_arn(region: str, name: str) -> str:
    return f"arn:{partition(region)}:iam::aws:policy/{name}"


def assume_role_policy(region: str) -> PolicyDocument:
    """Trust policy: only EC2 may assume the instance roles."""
    service = "ec2.amazonaws.com.cn" if partition(region) == "aws-cn" else "ec2.amazonaws.com"
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }


def topology_discovery_policy() -> PolicyDocument:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "TopologyDiscovery", "Effect": "Allow", "Action": list(TOPOLOGY_ACTIONS), "Resource": "*"}
        ],
    }


def s3_read_policy(region: str, bucket: str) -> PolicyDocument:
    arn = f"arn:{partition(region)}:s3:::{bucket}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadClusterBucket",
                "Effect": "Allow",
                "Action": list(S3_READ_ACTIONS),
                "Resource": [arn, f"{arn}/*"],
            }
        ],
    }


def ssm_agent_policy() -> PolicyDocument:
    """The SSM agent's registration, Session Manager and Run Command calls (:data:`SSM_AGENT_ACTIONS`).
    ``"*"``: the ssmmessages and ec2messages operations name no resource type, and AWS's documented
    minimal instance policy for Session Manager grants UpdateInstanceInformation on ``"*"`` too."""
    return {
        "Version": "2012-10-17",
        "Statement": [{"Sid": "SsmAgent", "Effect": "Allow", "Action": list(SSM_AGENT_ACTIONS), "Resource": "*"}],
    }


def ssm_service(region: str) -> str:
    """The ``kms:ViaService`` value of calls Parameter Store makes to KMS on a caller's behalf."""
    suffix = "amazonaws.com.cn" if partition(region) == "aws-cn" else "amazonaws.com"
    return f"ssm.{region}.{suffix}"


def secret_parameter_arn_pattern(region: str, cluster: str) -> str:
    """Every parameter of the cluster (``/clusterforge/<cluster>/...``, ``outputs.secret_parameter_name``),
    as Parameter Store writes it into the encryption context (``PARAMETER_ARN``)."""
    return f"arn:{partition(region)}:ssm:{region}:*:parameter/clusterforge/{cluster}/*"


def secret_read_policy(parameter_arns: list[str], key_arn: str, region: str) -> PolicyDocument:
    """Read the named SecureString parameters and decrypt them with the cluster key only.

    ``kms:Decrypt`` is limited to calls Parameter Store makes (``kms:ViaService``) for exactly these
    parameters: Parameter Store puts the parameter's ARN into the encryption context under
    ``PARAMETER_ARN`` (AWS KMS Developer Guide, "How AWS Systems Manager Parameter Store uses AWS
    KMS"), so the grant cannot decrypt anything else the key might ever encrypt."""
    arns = sorted(parameter_arns)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadClusterSecrets", "Effect": "Allow", "Action": ["ssm:GetParameter"], "Resource": arns},
            {
                "Sid": "DecryptClusterSecrets",
                "Effect": "Allow",
                "Action": ["kms:Decrypt"],
                "Resource": key_arn,
                "Condition": {
                    "StringEquals": {"kms:ViaService": ssm_service(region), "kms:EncryptionContext:PARAMETER_ARN": arns}
                },
            },
        ],
    }


def account_root(role_arn: str) -> str:
    """``arn:<partition>:iam::<account>:root`` of the account a role ARN belongs to (no API call)."""
    parts = role_arn.split(":")
    if len(parts) < 6 or parts[2] != "iam":
        raise ValueError(f"not an IAM role ARN: {role_arn!r}")
    return f"arn:{parts[1]}:iam::{parts[4]}:root"


def secret_key_policy(region: str, cluster: str, controller_role_arn: str) -> PolicyDocument:
    """Key policy of the cluster's secrets key (a customer managed key: the AWS managed ``aws/ssm``
    key "grants Decrypt permission to all IAM principals in the AWS account", Systems Manager User
    Guide, "Restricting decryption of SecureString parameter values").

    * ``KeyAdministration``: the account (its IAM policies decide who) manages the key,
      :data:`KEY_ADMIN_ACTIONS`, no cryptographic use;
    * ``ControllerDecryptsClusterSecrets``: the controller role, the only principal named, may
      decrypt through Parameter Store, for this cluster's parameters;
    * ``DeployerWritesClusterSecrets``: whoever runs ``pulumi up`` writes the parameter
      (PutParameter encrypts) and the provider reads it back decrypted on create and refresh, so
      the account keeps Encrypt/Decrypt through Parameter Store for this cluster's parameters,
      for principals whose own IAM policy allows it (administrators; no instance role has
      ``kms:*`` in its IAM policies, the node role nothing of KMS at all).
    """
    root = account_root(controller_role_arn)
    via_ssm = {
        "StringEquals": {"kms:ViaService": ssm_service(region)},
        "StringLike": {"kms:EncryptionContext:PARAMETER_ARN": secret_parameter_arn_pattern(region, cluster)},
    }
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "KeyAdministration",
                "Effect": "Allow",
                "Principal": {"AWS": root},
                "Action": list(KEY_ADMIN_ACTIONS),
                "Resource": "*",
            },
            {
                "Sid": "ControllerDecryptsClusterSecrets",
                "Effect": "Allow",
                "Principal": {"AWS": controller_role_arn},
                "Action": ["kms:Decrypt"],
                "Resource": "*",
                "Condition": via_ssm,
            },
            {
                "Sid": "DeployerWritesClusterSecrets",
                "Effect": "Allow",
                "Principal": {"AWS": root},
                "Action": ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"],
                "Resource": "*",
                "Condition": via_ssm,
            },
        ],
    }


def node_name_claim_policy(region: str, cluster: str, table_arn: str) -> PolicyDocument:
    """Rights of the boot-time name claim, as narrow as IAM allows.

    * the cluster's table only (its ARN, not ``table/*``);
    * ``ec2:DescribeInstances`` on ``*``: the ``ec2:Describe*`` actions support no resource-level
      permissions (Service Authorization Reference, "Actions, resources, and condition keys for
      Amazon EC2": DescribeInstances lists no resource type;
      https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html);
    * ``ec2:CreateTags``/``ec2:DeleteTags`` on instances that carry this cluster's tag
      (``aws:ResourceTag``) and only for :data:`CLAIM_TAG_KEYS` (``ForAllValues`` over
      ``aws:TagKeys``). ``ForAllValues`` is also true when the request has no tag keys at all, and
      ``DeleteTags`` without tags deletes every tag of the instance, so ``Null: aws:TagKeys=false``
      requires the keys to be named (IAM User Guide, "Multivalued context keys":
      https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html).
    """
    instances = f"arn:{partition(region)}:ec2:{region}:*:instance/*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "NodeNameTable", "Effect": "Allow", "Action": list(NAME_TABLE_ACTIONS), "Resource": table_arn},
            {"Sid": "NodeNameHolders", "Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"},
            {
                "Sid": "NodeNameTags",
                "Effect": "Allow",
                "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
                "Resource": instances,
                "Condition": {
                    "StringEquals": {f"aws:ResourceTag/{TAG_CLUSTER}": cluster},
                    "ForAllValues:StringEquals": {"aws:TagKeys": list(CLAIM_TAG_KEYS)},
                    "Null": {"aws:TagKeys": "false"},
                },
            },
        ],
    }


def scale_in_policy(region: str, cluster: str, table_arn: str) -> PolicyDocument:
    """Rights of the controller's scale-in (``clusterforge/aws/retire.py``), as narrow as IAM allows.

    * :data:`SCALE_IN_GROUP_ACTIONS` on Auto Scaling groups that carry this cluster's tag: all three
      take resource type ``autoScalingGroup*`` with condition keys ``aws:ResourceTag/${TagKey}`` and
      ``autoscaling:ResourceTag/${TagKey}`` (Service Authorization Reference, "Actions, resources, and
      condition keys for Amazon EC2 Auto Scaling":
      https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html);
      the plan tags every group ``clusterforge:cluster`` (infra/node_group.py).
    * :data:`SCALE_IN_DESCRIBE_ACTIONS` on ``*``: the same table lists no resource type for the
      ``Describe*`` actions, so no tag condition can apply to them.
    * GetItem/DeleteItem on the cluster's name table only (its ARN).
    """
    groups = f"arn:{partition(region)}:autoscaling:{region}:*:autoScalingGroup:*:autoScalingGroupName/*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ScaleInGroups",
                "Effect": "Allow",
                "Action": list(SCALE_IN_GROUP_ACTIONS),
                "Resource": groups,
                "Condition": {"StringEquals": {f"aws:ResourceTag/{TAG_CLUSTER}": cluster}},
            },
            {"Sid": "ScaleInDescribe", "Effect": "Allow", "Action": list(SCALE_IN_DESCRIBE_ACTIONS), "Resource": "*"},
            {"Sid": "ScaleInNames", "Effect": "Allow", "Action": list(SCALE_IN_TABLE_ACTIONS), "Resource": table_arn},
        ],
    }
