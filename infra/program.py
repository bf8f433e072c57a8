"""The whole AWS stack of one cluster, built from its validated spec.

``deploy`` is the program: ``__main__.py`` calls it under ``pulumi up``/``preview`` and
``clusterforge plan`` calls it under the engine's mock mode. It reads nothing but its arguments
(no ``pulumi.Config`` here: the entry point reads config, so mocks need not fake it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from clusterforge import hostlist
from clusterforge.aws import layout
from clusterforge.aws import outputs as out
from clusterforge.clusterspec.models import Cluster
from clusterforge.resolve import ResolvedCluster
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts
from infra.head import HeadNodes, HeadNodesArgs
from infra.iam import Iam, IamArgs
from infra.network import Network, NetworkArgs
from infra.node_group import ComputeGroup, NodeGroupArgs
from infra.registry import NodeNames
from infra.secrets import ClusterSecrets, SecretsArgs
from infra.security import Security, SecurityArgs
from infra.storage import Storage, StorageArgs


def required_secrets(cluster: Cluster) -> tuple[str, ...]:
    """Pulumi config secrets (``clusterforge:<name>``) the program needs for this spec.

    The slurmdbd password is needed only when accounting runs on a cloud controller; an on-prem
    controller gets it from Ansible Vault instead.
    """
    cloud_controller = any(g.role == "controller" and g.cloud is not None for g in cluster.node_groups)
    if cluster.accounting.enabled and cloud_controller:
        return (cluster.accounting.password_secret,)
    return ()


class AwsCluster(pulumi.ComponentResource):
    """Root of the tree: every concern's component hangs below it, with the spec's region."""

    outputs: dict[str, Any]

    def __init__(
        self,
        rc: ResolvedCluster,
        secrets: Mapping[str, pulumi.Input[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        cluster = rc.spec
        super().__init__(f"{TOKEN_PREFIX}:Cluster", cluster.name, None, opts)
        name = cluster.name
        spec = layout.aws_section(cluster)
        missing = [s for s in required_secrets(cluster) if s not in secrets]
        if missing:
            raise ValueError(
                f"missing Pulumi secret(s) {', '.join(missing)}: run "
                + "; ".join(f"pulumi config set --secret clusterforge:{s}" for s in missing)
            )

        network = Network(name, NetworkArgs.from_cluster(cluster), opts=child_opts(self))
        security = Security(name, SecurityArgs.from_cluster(cluster), vpc_id=network.vpc.id, opts=child_opts(self))

        # One name registry per cluster, only when some Auto Scaling group needs names claimed.
        cloud_compute = any(g.role == "compute" and g.cloud is not None for g in cluster.node_groups)
        node_names = NodeNames(cluster.name, opts=child_opts(self)) if cloud_compute else None
        iam = Iam(
            name,
            IamArgs.from_cluster(cluster),
            names_table_arn=node_names.table.arn if node_names else None,
            opts=child_opts(self),
        )
        # Secrets exist only with a cloud controller (required_secrets), whose role reads them.
        secret_names = required_secrets(cluster)
        cluster_secrets = None
        if secret_names:
            assert iam.controller_role is not None
            cluster_secrets = ClusterSecrets(
                name,
                SecretsArgs(cluster.name, spec.region, secret_names),
                secrets,
                reader_role=iam.controller_role,
                opts=child_opts(self),
            )
        storage = Storage(
            name,
            StorageArgs.from_cluster(cluster),
            subnet_ids={k: v.id for k, v in network.subnets.items()},
            fsx_security_group_id=security.fsx.id if security.fsx else None,
            efs_security_group_id=security.efs.id if security.efs else None,
            opts=child_opts(self),
        )

        controller_address: pulumi.Input[str] | None = None
        login_addresses: dict[str, pulumi.Output[str]] = {}
        groups_out: dict[str, Any] = {}
        for group in cluster.node_groups:
            if group.cloud is None:
                if group.role == "controller" and controller_address is None:
                    assert group.onprem is not None
                    addrs = hostlist.expand(group.onprem.addresses) if group.onprem.addresses else group.hostnames
                    controller_address = addrs[0]
                continue
            subnet_id = network.subnets[layout.subnet_for(cluster, group).name].id
            gname = f"{name}-{group.name}"
            common: dict[str, Any] = {
                "role": group.role,
                "instance_type": group.cloud.instance_type,
                "count": group.cloud.count,
                "hostlist": group.node_hostlist,
                "tag_filters": out.group_tag_filters(cluster.name, group.name),
            }
            if group.role in ("controller", "login"):
                sgs = [security.cluster.id]
                # the controller's own ingress group leaves slurmdbd and MariaDB closed
                if group.role == "controller":
                    assert security.controller is not None
                    sgs.append(security.controller.id)
                else:
                    sgs.append(security.nodes.id)
                if group.role == "login" and security.login is not None:
                    sgs.append(security.login.id)
                profile = iam.controller_profile if group.role == "controller" else iam.node_profile
                assert profile is not None
                head = HeadNodes(
                    gname,
                    HeadNodesArgs.from_group(cluster, group),
                    subnet_id=subnet_id,
                    security_group_ids=sgs,
                    instance_profile_name=profile.name,
                    state_volume_id=storage.state_volume.id
                    if group.role == "controller" and storage.state_volume is not None
                    else None,
                    opts=child_opts(self),
                )
                groups_out[group.name] = out.output_fields(
                    out.HeadGroupOutputs,
                    **common,
                    instance_ids={h: i.id for h, i in head.instances.items()},
                    addresses=dict(head.addresses),
                )
                if group.role == "controller" and controller_address is None:
                    controller_address = next(iter(head.addresses.values()))
                if group.role == "login":
                    login_addresses.update(head.addresses)
            else:
                args = NodeGroupArgs.from_group(rc, group)
                sgs = [security.cluster.id, security.nodes.id]
                if args.efa:
                    assert security.efa is not None
                    sgs.append(security.efa.id)
                assert iam.node_profile is not None
                compute = ComputeGroup(
                    gname,
                    args,
                    subnet_id=subnet_id,
                    security_group_ids=sgs,
                    instance_profile_arn=iam.node_profile.arn,
                    opts=child_opts(self),
                )
                # No addresses: the group's instances are replaced by the ASG and name themselves
                # at boot; the inventory finds them by tags.
                groups_out[group.name] = out.output_fields(
                    out.ComputeGroupOutputs, **common, asg_name=compute.auto_scaling_group.name
                )

        # The keys are StackOutputs' fields (output_fields refuses any other set); the contract
        # test validates the resolved values with StackOutputs.model_validate.
        self.outputs = out.output_fields(
            out.StackOutputs,
            **{
                out.CLUSTER_NAME: cluster.name,
                out.REGION: spec.region,
                out.VPC_ID: network.vpc.id,
                out.SUBNET_IDS: {k: v.id for k, v in network.subnets.items()},
                out.CONTROLLER_ADDRESS: controller_address,
                out.LOGIN_ADDRESSES: login_addresses,
                out.NODE_GROUPS: groups_out,
                out.STORAGE: storage.mounts,
                out.SECRET_PARAMETERS: {k: p.name for k, p in cluster_secrets.parameters.items()}
                if cluster_secrets
                else {},
                out.NODE_NAMES_TABLE: node_names.table.name if node_names else None,
            },
        )
        self.register_outputs(self.outputs)


def deploy(rc: ResolvedCluster, *, secrets: Mapping[str, pulumi.Input[str]] | None = None) -> dict[str, Any]:
    """Build the stack for a resolved cluster; returns the stack outputs (keys: ``clusterforge.aws.outputs``).

    The caller resolved the spec once (``clusterforge.resolve``): profiles, hosts and findings
    come from there, never from a second lookup here.

    The AWS provider is explicit and takes its region from the spec, so the spec stays the one
    source of truth (a stray ``aws:region`` in the stack config has no effect).
    """
    spec = layout.aws_section(rc.spec)
    provider = aws.Provider(f"{rc.spec.name}-aws", region=spec.region)
    root = AwsCluster(rc, secrets or {}, opts=pulumi.ResourceOptions(providers=[provider]))
    return root.outputs
