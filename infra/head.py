"""Controller and login nodes: plain EC2 instances, one per host name of the group.

These are long-lived, individually addressed hosts (the controller's address goes into
slurm.conf), so they are instances rather than an Auto Scaling group that could replace them
with a new address.

A controller whose state lives on a retained EBS volume (``slurm.state_storage: {type: ebs}``,
created in infra/storage.py) gets it attached here. The attachment depends on the instance, so a
replaced controller gets a new attachment of the same volume: the old one goes first
(``delete_before_replace``: a volume is attached to one instance at a time), after the old instance
is stopped (``stop_instance_before_detaching``: its file system is unmounted cleanly, not torn away).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from clusterforge.aws import layout
from clusterforge.aws.userdata import group_user_data
from clusterforge.clusterspec.models import Cluster, EbsStateStorage, NodeGroup
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, instance_tags

#: Where the state volume is attached (Xen types show it as /dev/xvdf; Nitro types as an NVMe disk).
STATE_DEVICE_NAME = "/dev/sdf"


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
    state_volume: bool = False
    """the controller's state volume is attached to the (one) instance"""

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
            state_volume=group.role == "controller" and isinstance(cluster.slurm.state_storage, EbsStateStorage),
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
        state_volume_id: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:HeadNodes", name, None, opts)
        if args.state_volume and (state_volume_id is None or len(args.hostnames) != 1):
            raise ValueError(f"{name}: the state volume attaches to exactly one controller, with its volume id")
        self.instances, self.addresses = {}, {}
        self.state_attachment: aws.ec2.VolumeAttachment | None = None
        for host in args.hostnames:
            tags = instance_tags(args.cluster, args.group, args.role, host, hostname=host)
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
                    # with an attached volume of its own tags, volume_tags may not be used (pulumi-aws
                    # ec2.Instance: "Do not use volume_tags if you plan to manage block device tags
                    # outside the ec2.Instance configuration ... resource cycling"): the root's here
                    tags=tags if args.state_volume else None,
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
                tags=tags,
                volume_tags=None if args.state_volume else tags,
                opts=child_opts(self),
            )
            self.instances[host] = inst
            if args.state_volume:
                assert state_volume_id is not None
                self.state_attachment = aws.ec2.VolumeAttachment(
                    f"{name}-{host}-state",
                    # any free name: the user data finds the volume as the one EBS disk that is not
                    # the root disk (clusterforge/aws/userdata.py, state_volume_lines)
                    device_name=STATE_DEVICE_NAME,
                    instance_id=inst.id,
                    volume_id=state_volume_id,
                    stop_instance_before_detaching=True,
                    opts=child_opts(self, pulumi.ResourceOptions(delete_before_replace=True)),
                )
            self.addresses[host] = inst.public_ip if args.public_ip else inst.private_ip
        self.register_outputs({"addresses": self.addresses})
