"""Controller and login nodes: plain EC2 instances, one per host name of the group.

These are long-lived, individually addressed hosts (the controller's address goes into
slurm.conf), so they are instances rather than an Auto Scaling group that could replace them
with a new address.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from clusterforge.aws import layout
from clusterforge.aws.userdata import group_user_data
from clusterforge.clusterspec.models import Cluster, NodeGroup
from infra.common import TOKEN_PREFIX, child_opts, instance_tags


@dataclass(frozen=True)
class HeadNodesArgs:
    cluster: str
    group: str
    role: str
    hostnames: tuple[str, ...]
    instance_type: str
    subnet: str
    ami: str
    key_name: str | None
    root_volume_gib: int
    root_device_name: str
    public_ip: bool
    reservation_id: str | None
    user_data: dict[str, str]
    """host name -> that instance's user data (each carries its own fixed name)"""

    @classmethod
    def from_group(cls, cluster: Cluster, group: NodeGroup) -> HeadNodesArgs:
        spec = layout.aws_section(cluster)
        cloud = group.cloud
        assert cloud is not None
        if cloud.capacity.type in ("spot", "capacity_block"):
            raise layout.LayoutError(
                f"node group {group.name!r} ({group.role}): capacity type {cloud.capacity.type!r} "
                "can take the instance away; controller and login nodes must be on_demand or reservation"
            )
        subnet = layout.subnet_for(cluster, group)
        return cls(
            cluster=cluster.name,
            group=group.name,
            role=group.role,
            hostnames=tuple(group.hostnames),
            instance_type=cloud.instance_type,
            subnet=subnet.name,
            ami=cloud.ami or spec.ami,
            key_name=spec.key_name,
            root_volume_gib=cloud.root_volume_gib,
            root_device_name=layout.root_device_name(cluster.os),
            # A public address only where it can be used: a login node in a public subnet with
            # SSH open to some CIDRs. Otherwise SSM Session Manager is the way in.
            public_ip=group.role == "login" and subnet.public and bool(spec.login_allowed_cidrs),
            reservation_id=cloud.capacity.reservation_id,
            user_data={host: group_user_data(cluster, group, hostname=host) for host in group.hostnames},
        )


class HeadNodes(pulumi.ComponentResource):
    instances: dict[str, aws.ec2.Instance]
    addresses: dict[str, pulumi.Output[str]]

    def __init__(
        self,
        name: str,
        args: HeadNodesArgs,
        *,
        subnet_id: pulumi.Input[str],
        security_group_ids: list[pulumi.Input[str]],
        instance_profile_name: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:HeadNodes", name, None, opts)
        self.instances, self.addresses = {}, {}
        for host in args.hostnames:
            inst = aws.ec2.Instance(
                f"{name}-{host}",
                ami=args.ami,
                instance_type=args.instance_type,
                subnet_id=subnet_id,
                vpc_security_group_ids=security_group_ids,
                associate_public_ip_address=args.public_ip,
                iam_instance_profile=instance_profile_name,
                key_name=args.key_name,
                # IMDSv2, hop limit 1: as on compute nodes (infra/node_group.py); nothing on a
                # controller or login node needs the metadata service from behind another hop.
                metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                    http_endpoint="enabled",
                    http_tokens="required",
                    http_put_response_hop_limit=1,
                ),
                root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                    volume_size=args.root_volume_gib,
                    volume_type="gp3",
                    encrypted=True,
                    delete_on_termination=True,
                ),
                capacity_reservation_specification=aws.ec2.InstanceCapacityReservationSpecificationArgs(
                    capacity_reservation_target=aws.ec2.InstanceCapacityReservationSpecificationCapacityReservationTargetArgs(
                        capacity_reservation_id=args.reservation_id,
                    ),
                )
                if args.reservation_id
                else None,
                user_data=args.user_data[host],
                # Rebooting the controller for a user-data edit is fine; replacing it is not.
                user_data_replace_on_change=False,
                tags=instance_tags(args.cluster, args.group, args.role, host, hostname=host),
                volume_tags=instance_tags(args.cluster, args.group, args.role, host, hostname=host),
                opts=child_opts(self),
            )
            self.instances[host] = inst
            self.addresses[host] = inst.public_ip if args.public_ip else inst.private_ip
        self.register_outputs({"addresses": self.addresses})
