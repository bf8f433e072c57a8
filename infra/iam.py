"""IAM: one least-privilege instance role for the controller and one for the other nodes
(which also claim their Slurm names at boot: ``names_table_arn``; the controller retires them at
scale-in). The controller's right to read the cluster secrets is granted where the secrets and
their key are made (``infra/secrets.py``), once the parameters exist."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from clusterforge.aws import iam as docs
from clusterforge.aws.layout import aws_section, cloud_groups
from clusterforge.clusterspec.models import Cluster
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags


@dataclass(frozen=True)
class IamArgs:
    cluster: str
    region: str
    s3_bucket: str | None
    controller: bool
    """a cloud controller exists (it gets the topology-discovery and secret-read rights)"""
    nodes: bool
    """cloud compute or login nodes exist"""

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> IamArgs:
        spec = aws_section(cluster)
        roles = {g.role for g in cloud_groups(cluster)}
        return cls(
            cluster=cluster.name,
            region=spec.region,
            s3_bucket=spec.s3_bucket,
            controller="controller" in roles,
            nodes=bool(roles - {"controller"}),
        )


class Iam(pulumi.ComponentResource):
    """Instance roles and profiles. Policies are JSON built by ``clusterforge.aws.iam`` (pure,
    unit-tested); those that wait for an ARN get it through ``Output.apply`` on the document (an
    Output of a document, not a resource created inside ``apply``)."""

    controller_role: aws.iam.Role | None
    controller_profile: aws.iam.InstanceProfile | None
    node_profile: aws.iam.InstanceProfile | None

    def __init__(
        self,
        name: str,
        args: IamArgs,
        names_table_arn: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Iam", name, None, opts)
        tags = cluster_tags(args.cluster)
        self.controller_role = None
        self.controller_profile = None
        self.node_profile = None

        def role(kind: str, description: str) -> tuple[aws.iam.Role, aws.iam.InstanceProfile]:
            r = aws.iam.Role(
                f"{name}-{kind}",
                assume_role_policy=json.dumps(docs.assume_role_policy(args.region), sort_keys=True),
                description=description,
                tags=tags,
                opts=child_opts(self),
            )
            for policy in docs.MANAGED_POLICIES:
                aws.iam.RolePolicyAttachment(
                    f"{name}-{kind}-{policy}",
                    role=r.name,
                    policy_arn=docs.managed_policy_arn(args.region, policy),
                    opts=child_opts(self),
                )
            # Session Manager and Run Command without AmazonSSMManagedInstanceCore's parameter reads.
            aws.iam.RolePolicy(
                f"{name}-{kind}-ssm-agent",
                role=r.id,
                policy=json.dumps(docs.ssm_agent_policy(), sort_keys=True),
                opts=child_opts(self),
            )
            if args.s3_bucket:
                aws.iam.RolePolicy(
                    f"{name}-{kind}-s3-read",
                    role=r.id,
                    policy=json.dumps(docs.s3_read_policy(args.region, args.s3_bucket), sort_keys=True),
                    opts=child_opts(self),
                )
            profile = aws.iam.InstanceProfile(f"{name}-{kind}", role=r.name, tags=tags, opts=child_opts(self))
            return r, profile

        if args.controller:
            controller_role, self.controller_profile = role(
                "controller", f"clusterforge {args.cluster}: Slurm controller"
            )
            self.controller_role = controller_role
            aws.iam.RolePolicy(
                f"{name}-controller-topology",
                role=controller_role.id,
                policy=json.dumps(docs.topology_discovery_policy(), sort_keys=True),
                opts=child_opts(self),
            )
            if names_table_arn is not None:
                # Scale-in: terminate exactly the drained nodes' instances (clusterforge/aws/retire.py).
                aws.iam.RolePolicy(
                    f"{name}-controller-scale-in",
                    role=controller_role.id,
                    policy=pulumi.Output.from_input(names_table_arn).apply(
                        lambda arn: json.dumps(docs.scale_in_policy(args.region, args.cluster, arn), sort_keys=True)
                    ),
                    opts=child_opts(self),
                )
        if args.nodes:
            node_role, self.node_profile = role("node", f"clusterforge {args.cluster}: compute and login nodes")
            if names_table_arn is not None:
                # The boot-time name claim of Auto Scaling group instances (clusterforge/aws/nodename.py).
                aws.iam.RolePolicy(
                    f"{name}-node-names",
                    role=node_role.id,
                    policy=pulumi.Output.from_input(names_table_arn).apply(
                        lambda arn: json.dumps(
                            docs.node_name_claim_policy(args.region, args.cluster, arn), sort_keys=True
                        )
                    ),
                    opts=child_opts(self),
                )

        self.register_outputs(
            {
                "controller_profile": self.controller_profile.name if self.controller_profile else None,
                "node_profile": self.node_profile.name if self.node_profile else None,
            }
        )
