"""Cluster secrets handed to the controller through SSM Parameter Store (SecureString).

The value comes from the stack's Pulumi secret (``pulumi config set --secret``), stays encrypted
in the state, and lands in a SecureString parameter the controller's role alone may read; Ansible
fetches it on the controller, so the secret never travels through an inventory file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from clusterforge.aws.outputs import secret_parameter_name
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags


@dataclass(frozen=True)
class SecretsArgs:
    cluster: str
    names: tuple[str, ...]


class ClusterSecrets(pulumi.ComponentResource):
    parameters: dict[str, aws.ssm.Parameter]

    def __init__(
        self,
        name: str,
        args: SecretsArgs,
        values: Mapping[str, pulumi.Input[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Secrets", name, None, opts)
        self.parameters = {}
        for secret in args.names:
            self.parameters[secret] = aws.ssm.Parameter(
                f"{name}-{secret}",
                # A fixed, documented name: the Ansible role looks it up by this path.
                name=secret_parameter_name(args.cluster, secret),
                type="SecureString",
                value=pulumi.Output.secret(values[secret]),
                description=f"clusterforge {args.cluster}: {secret}",
                tags=cluster_tags(args.cluster),
                opts=child_opts(self),
            )
        self.register_outputs({k: v.name for k, v in self.parameters.items()})
