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

Both get SSM Session Manager (``AmazonSSMManagedInstanceCore``: shell access and Ansible over SSM
without opening SSH), the CloudWatch agent policy, and read-only access to the spec's S3 bucket
when it names one. ``Describe*`` calls do not support resource-level permissions, hence ``*``.
"""

from __future__ import annotations

from typing import Any

from clusterforge.aws.outputs import TAG_CLAIM_ERROR, TAG_CLUSTER, TAG_HOSTNAME

PolicyDocument = dict[str, Any]

MANAGED_POLICIES = ("AmazonSSMManagedInstanceCore", "CloudWatchAgentServerPolicy")
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


def secret_read_policy(parameter_arns: list[str]) -> PolicyDocument:
    """Read the named SecureString parameters (encrypted with the AWS-managed ``aws/ssm`` key, whose
    key policy already lets the account's principals decrypt through SSM: no ``kms:Decrypt``)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadClusterSecrets",
                "Effect": "Allow",
                "Action": ["ssm:GetParameter"],
                "Resource": sorted(parameter_arns),
            }
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
