"""IAM policy documents for the instance roles, as plain dicts (least privilege, tested).

Two roles, because the nodes need different rights:

* ``controller``: topology discovery (``ec2:DescribeInstances`` and ``ec2:DescribeInstanceTopology``,
  which the controller calls to render topology.conf from EC2's network nodes) and read access to
  the cluster's own secrets in SSM Parameter Store (the slurmdbd password);
* ``node`` (compute and login): nothing beyond the managed policies.

Both get SSM Session Manager (``AmazonSSMManagedInstanceCore``: shell access and Ansible over SSM
without opening SSH), the CloudWatch agent policy, and read-only access to the spec's S3 bucket
when it names one. ``Describe*`` calls do not support resource-level permissions, hence ``*``.
"""

from __future__ import annotations

from typing import Any

PolicyDocument = dict[str, Any]

MANAGED_POLICIES = ("AmazonSSMManagedInstanceCore", "CloudWatchAgentServerPolicy")
TOPOLOGY_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeInstanceTopology")
S3_READ_ACTIONS = ("s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation")


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
