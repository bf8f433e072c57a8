"""Cluster secrets handed to the controller through SSM Parameter Store (SecureString).

The value comes from the stack's Pulumi secret (``pulumi config set --secret``), stays encrypted
in the state, and lands in a SecureString parameter encrypted with the cluster's own customer
managed KMS key. Who can read it is decided here, in one place:

* the key policy (``clusterforge.aws.iam.secret_key_policy``) names the controller role as the
  one principal that may decrypt through Parameter Store (the account keeps administration, and
  the deployer's Encrypt/Decrypt through Parameter Store that ``pulumi up`` needs);
* the controller role's inline policy (``secret_read_policy``) allows ``ssm:GetParameter`` on
  these parameters' ARNs and ``kms:Decrypt`` on this key for them;
* the node role has neither (no ``AmazonSSMManagedInstanceCore``, whose ``ssm:GetParameter*``
  on ``"*"`` would let any job read them).

Ansible fetches the value on the controller, so the secret never travels through an inventory file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from clusterforge.aws import iam as docs
from clusterforge.aws.outputs import secret_parameter_name
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags

#: Days a scheduled deletion of the key waits (KMS allows 7..30): the longest, so a mistaken
#: `pulumi destroy` of the key can be cancelled before the parameters become unreadable.
KEY_DELETION_WINDOW_DAYS = 30


@dataclass(frozen=True)
class SecretsArgs:
    cluster: str
    region: str
    names: tuple[str, ...]


def key_alias(cluster: str) -> str:
    return f"alias/clusterforge/{cluster}/secrets"


class ClusterSecrets(pulumi.ComponentResource):
    """The cluster's KMS key (+ alias), its SecureString parameters, and the reader's grant."""

    key: aws.kms.Key
    parameters: dict[str, aws.ssm.Parameter]

    def __init__(
        self,
        name: str,
        args: SecretsArgs,
        values: Mapping[str, pulumi.Input[str]],
        *,
        reader_role: aws.iam.Role,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Secrets", name, None, opts)
        tags = cluster_tags(args.cluster)
        # The key policy waits for the role's ARN: an Output of the document, the key itself is
        # created here, outside any apply (Pulumi orders role -> key -> parameters -> grant).
        self.key = aws.kms.Key(
            f"{name}-secrets",
            description=f"clusterforge {args.cluster}: SecureString parameters (controller reads)",
            enable_key_rotation=True,
            deletion_window_in_days=KEY_DELETION_WINDOW_DAYS,
            policy=reader_role.arn.apply(
                lambda arn: json.dumps(docs.secret_key_policy(args.region, args.cluster, arn), sort_keys=True)
            ),
            tags=tags,
            opts=child_opts(self),
        )
        aws.kms.Alias(
            f"{name}-secrets",
            name=key_alias(args.cluster),
            target_key_id=self.key.key_id,
            opts=child_opts(self),
        )
        self.parameters = {}
        for secret in args.names:
            self.parameters[secret] = aws.ssm.Parameter(
                f"{name}-{secret}",
                # A fixed, documented name: the Ansible role looks it up by this path.
                name=secret_parameter_name(args.cluster, secret),
                type="SecureString",
                key_id=self.key.arn,
                value=pulumi.Output.secret(values[secret]),
                description=f"clusterforge {args.cluster}: {secret}",
                tags=tags,
                opts=child_opts(self),
            )
        if self.parameters:
            arns = [p.arn for p in self.parameters.values()]
            aws.iam.RolePolicy(
                f"{name}-controller-secrets",
                role=reader_role.id,
                policy=pulumi.Output.all(self.key.arn, *arns).apply(
                    lambda v: json.dumps(docs.secret_read_policy(list(v[1:]), v[0], args.region), sort_keys=True)
                ),
                opts=child_opts(self),
            )
        self.register_outputs({"key_arn": self.key.arn, **{k: v.name for k, v in self.parameters.items()}})
