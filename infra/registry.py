"""The node-name registry: one DynamoDB table per cluster that the boot-time claim writes.

Instances of an Auto Scaling group all boot from one launch template, so none knows its Slurm
name; each claims one of its group's names at first boot with a conditional write to this table
(``clusterforge/aws/nodename.py``). One table for the whole cluster keeps the plan O(groups).
"""

from __future__ import annotations

import pulumi

from clusterforge.aws.outputs import names_table
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags


class NodeNames(pulumi.ComponentResource):
    table: aws.dynamodb.Table

    def __init__(self, cluster: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN_PREFIX}:NodeNames", f"{cluster}-node-names", None, opts)
        self.table = aws.dynamodb.Table(
            f"{cluster}-node-names",
            # A fixed physical name, not Pulumi's auto-name: user data finds the table by
            # clusterforge.aws.outputs.names_table(cluster) without reading the stack.
            name=names_table(cluster),
            # A few writes per instance boot: on-demand costs nothing while idle and never throttles
            # a whole group booting at once the way a small provisioned capacity would.
            billing_mode="PAY_PER_REQUEST",
            hash_key="name",
            attributes=[aws.dynamodb.TableAttributeArgs(name="name", type="S")],
            # No deletion protection and no point-in-time recovery: the table holds no data of its
            # own, only which live instance holds which name, and it lives and dies with the
            # instances. Protection would make `pulumi destroy` fail after the instances are gone;
            # a lost table is rebuilt by the instances' claims (each re-claims the name it holds).
            deletion_protection_enabled=False,
            tags=cluster_tags(cluster, {"Name": names_table(cluster)}),
            opts=child_opts(self),
        )
        self.register_outputs({"table_name": self.table.name, "table_arn": self.table.arn})
