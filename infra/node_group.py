"""A compute node group: launch template + fixed-size Auto Scaling group (+ placement group).

One group is one Auto Scaling group with min = max = desired = ``count``: the number of Pulumi
resources grows with groups, not with nodes (a 2,048-node cluster is a few dozen resources), and
AWS replaces a failed instance by itself. Exception: a capacity-block group starts at
min = desired = 0 and two scheduled actions follow the block's window (see ``block_schedule``).
Slurm node names are not baked into instances: each instance claims a free name of its group's
hostlist at first boot (clusterforge/aws/nodename.py, run by the launch template's user data).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import pulumi

from clusterforge.aws import layout
from clusterforge.aws.efa import NetworkInterfaceSlot, efa_interfaces, primary_interface
from clusterforge.aws.userdata import base64_text, group_user_data
from clusterforge.clusterspec.models import NodeGroup
from clusterforge.resolve import ResolvedCluster
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags, instance_tags

CapacityType = Literal["on_demand", "spot", "capacity_block", "reservation"]

# AWS: scale a capacity-block group to 0 more than 30 minutes before the block ends (EC2 starts
# terminating its instances then; facts.md 1.4 and 8.2). 35 leaves the ASG five minutes to act.
SCALE_DOWN_BEFORE_END = timedelta(minutes=35)


def utcnow() -> datetime:
    """The time schedules are compared with (tests pin it)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class BlockSchedule:
    """How an ASG follows a capacity block: its initial min = desired, and the scheduled actions
    (UTC time, min = desired) still in the future; AWS rejects a scheduled action in the past."""

    initial: int
    actions: tuple[tuple[str, datetime, int], ...]  # (name, time, size)


def block_schedule(count: int, start: datetime, end: datetime, now: datetime) -> BlockSchedule:
    down = end - SCALE_DOWN_BEFORE_END
    if now >= down:  # the block is over (or nearly): nothing can launch any more
        return BlockSchedule(0, ())
    if now >= start:  # already running: start full, only the scale-down left
        return BlockSchedule(count, (("scale-to-0", down, 0),))
    return BlockSchedule(0, (("block-start", start, count), ("scale-to-0", down, 0)))


def clock_inputs(rc: ResolvedCluster) -> list[tuple[str, BlockSchedule]]:
    """All the program reads from the clock: each capacity-block group's schedule now (the one
    ``utcnow()`` call, in ``ComputeGroup``). The plan cache (``clusterforge.plan.cache``) keys a
    plan by it, so a plan made before a block started is not reused once the block runs; a new
    read of the clock in the program must be added here."""
    out = []
    for group in layout.cloud_groups(rc.spec):
        assert group.cloud is not None
        cap = group.cloud.capacity
        if cap.type == "capacity_block" and cap.start and cap.end:
            out.append((group.name, block_schedule(group.cloud.count, cap.start, cap.end, utcnow())))
    return out


@dataclass(frozen=True)
class NodeGroupArgs:
    cluster: str
    group: str
    role: str
    instance_type: str
    count: int
    subnet: str
    ami: str
    key_name: str | None
    root_volume_gib: int
    root_device_name: str
    efa: bool
    interfaces: tuple[NetworkInterfaceSlot, ...]
    placement_group: bool
    capacity_type: CapacityType
    reservation_id: str | None
    user_data_b64: str
    block_start: datetime | None = None
    block_end: datetime | None = None
    drain_at: datetime | None = None

    @classmethod
    def from_group(cls, rc: ResolvedCluster, group: NodeGroup) -> NodeGroupArgs:
        cluster = rc.spec
        spec = layout.aws_section(cluster)
        cloud = group.cloud
        assert cloud is not None, f"{group.name} is not a cloud group"
        profile = rc.group(group.name).profile  # resolved once: catalog (and facts) in clusterforge.resolve
        if profile is None:
            raise layout.LayoutError(
                f"node group {group.name!r}: instance type {cloud.instance_type!r} is not in the catalog "
                "(clusterforge/catalog/profiles.yaml); add it there first"
            )
        # The EFA layout comes from the catalog through a pure function (clusterforge.aws.efa);
        # non-EFA groups get the primary ENA interface only.
        interfaces = efa_interfaces(profile) if cloud.efa else primary_interface()
        return cls(
            cluster=cluster.name,
            group=group.name,
            role=group.role,
            instance_type=cloud.instance_type,
            count=cloud.count,
            subnet=layout.subnet_for(cluster, group).name,
            ami=cloud.ami or spec.ami,
            key_name=spec.key_name,
            root_volume_gib=cloud.root_volume_gib,
            root_device_name=layout.root_device_name(cluster.os),
            efa=cloud.efa,
            interfaces=tuple(interfaces),
            placement_group=cloud.placement_group,
            capacity_type=cloud.capacity.type,
            reservation_id=cloud.capacity.reservation_id,
            user_data_b64=base64_text(group_user_data(cluster, group)),
            block_start=cloud.capacity.start,
            block_end=cloud.capacity.end,
            drain_at=cloud.capacity.end - timedelta(minutes=cloud.capacity.drain_minutes_before_end)
            if cloud.capacity.end
            else None,
        )


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ComputeGroup(pulumi.ComponentResource):
    launch_template: aws.ec2.LaunchTemplate
    auto_scaling_group: aws.autoscaling.Group
    placement_group: aws.ec2.PlacementGroup | None

    def __init__(
        self,
        name: str,
        args: NodeGroupArgs,
        *,
        subnet_id: pulumi.Input[str],
        security_group_ids: list[pulumi.Input[str]],
        instance_profile_arn: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:NodeGroup", name, None, opts)
        tags = cluster_tags(args.cluster, {"clusterforge:group": args.group})
        node_tags = instance_tags(args.cluster, args.group, args.role, f"{args.cluster}-{args.group}")

        self.placement_group = None
        if args.placement_group:
            # "cluster" packs the instances onto nearby racks: lowest latency between EFA peers.
            self.placement_group = aws.ec2.PlacementGroup(
                f"{name}-pg", strategy="cluster", tags=tags, opts=child_opts(self)
            )

        interfaces = [
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=slot.network_card_index,
                device_index=slot.device_index,
                interface_type=slot.interface_type,
                # Compute nodes never get a public IP: they sit in a private subnet behind NAT.
                associate_public_ip_address=False,
                delete_on_termination=True,
                security_groups=security_group_ids,
                description=f"{args.cluster}/{args.group} card {slot.network_card_index} "
                f"dev {slot.device_index} {slot.interface_type}",
            )
            for slot in args.interfaces
        ]

        market: aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None = None
        reservation: aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs | None = None
        if args.capacity_type == "capacity_block":
            # A Capacity Block is consumed only by launches that say so (market type) AND name the
            # block's reservation id; either alone fails with InsufficientInstanceCapacity.
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
        if args.capacity_type in ("capacity_block", "reservation"):
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=args.reservation_id,
                ),
            )

        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"clusterforge {args.cluster}/{args.group}: {args.count} x {args.instance_type}",
            image_id=args.ami,
            instance_type=args.instance_type,
            key_name=args.key_name,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=instance_profile_arn),
            # IMDSv2 only: a session token defeats SSRF-style credential theft. Hop limit 1: the
            # token's reply dies one hop out, so nothing behind a bridge or NAT on the node (a
            # container in its own network namespace) can fetch the role's credentials. The roles
            # install no container runtime, and enroot/pyxis containers share the host's network
            # namespace, so they still reach the metadata service at hop 1.
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=1,
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=args.root_device_name,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=args.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            network_interfaces=interfaces,
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=self.placement_group.name)
            if self.placement_group
            else None,
            instance_market_options=market,
            capacity_reservation_specification=reservation,
            user_data=args.user_data_b64,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=node_tags)
                for kind in ("instance", "volume", "network-interface")
            ],
            update_default_version=True,
            tags=tags,
            opts=child_opts(self),
        )

        lt_version = self.launch_template.latest_version.apply(str)
        mixed: aws.autoscaling.GroupMixedInstancesPolicyArgs | None = None
        launch_template: aws.autoscaling.GroupLaunchTemplateArgs | None = None
        if args.capacity_type == "spot":
            # capacity_rebalance stays off: on a rebalance recommendation the ASG would launch a
            # replacement and then terminate the at-risk instance itself (EC2 Auto Scaling User
            # Guide, "Capacity Rebalancing"), i.e. a node Slurm did not drain, while the new
            # instance finds every name of the group still held. The node agent acts on the
            # two-minute interruption notice instead, and the ASG replaces the reclaimed instance.
            # Spot through a mixed-instances policy (0 % on-demand), the supported way for an ASG;
            # price-capacity-optimized picks the pools least likely to be interrupted.
            mixed = aws.autoscaling.GroupMixedInstancesPolicyArgs(
                instances_distribution=aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
                    on_demand_base_capacity=0,
                    on_demand_percentage_above_base_capacity=0,
                    spot_allocation_strategy="price-capacity-optimized",
                ),
                launch_template=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
                    launch_template_specification=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                        launch_template_id=self.launch_template.id,
                        version=lt_version,
                    ),
                    overrides=[
                        aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs(
                            instance_type=args.instance_type
                        )
                    ],
                ),
            )
        else:
            launch_template = aws.autoscaling.GroupLaunchTemplateArgs(id=self.launch_template.id, version=lt_version)

        size = args.count
        schedule: BlockSchedule | None = None
        asg_tags = dict(tags)
        if args.capacity_type == "capacity_block" and args.block_start and args.block_end:
            # AWS (EKS guide for self-managed nodes on Capacity Blocks, facts 8.2): desired 0 until
            # the block is active, 0 again more than 30 min before its end; a fixed-size group
            # would fail to launch before the start.
            schedule = block_schedule(args.count, args.block_start, args.block_end, utcnow())
            size = schedule.initial
            asg_tags["clusterforge:capacity-window"] = (
                f"{iso(args.block_start)}..{iso(args.block_end)} "
                f"scale-to-0 {iso(args.block_end - SCALE_DOWN_BEFORE_END)}"
                + (f" drain {iso(args.drain_at)}" if args.drain_at else "")
            )
        self.auto_scaling_group = aws.autoscaling.Group(
            f"{name}-asg",
            # Fixed size: Slurm, not the ASG, decides what runs where; the ASG only keeps the
            # group whole by replacing instances that fail EC2 health checks.
            min_size=size,
            max_size=args.count,
            desired_capacity=size,
            vpc_zone_identifiers=[subnet_id],
            launch_template=launch_template,
            mixed_instances_policy=mixed,
            health_check_type="EC2",
            # Scale-in protection on every instance the group launches: a lowered desired capacity
            # (`pulumi up` with a smaller count before `retire.py`) then terminates nothing, because
            # "If all instances in an Auto Scaling group are protected from scale in, and a scale-in
            # event occurs, its desired capacity is decremented. However, the Auto Scaling group can't
            # terminate the required number of instances until their instance scale-in protection
            # settings are disabled" (EC2 Auto Scaling User Guide, "Use instance scale-in protection":
            # https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-instance-protection.html).
            # Only clusterforge/aws/retire.py picks which instances go: the drained ones. Health-check
            # replacement and spot interruptions are not blocked by it (same page).
            protect_from_scale_in=True,
            # Do not block `pulumi up` until every GPU node is InService: a capacity block may
            # start hours later and large groups fill gradually; the Ansible stage waits instead.
            wait_for_capacity_timeout="0",
            tags=[
                aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=False)
                for k, v in sorted(asg_tags.items())
            ],
            # The scheduled actions change min/desired over the block's life; a later `pulumi up`
            # must not put them back.
            opts=child_opts(
                self, pulumi.ResourceOptions(ignore_changes=["desiredCapacity", "minSize"]) if schedule else None
            ),
        )
        self.schedules: list[aws.autoscaling.Schedule] = []
        for action, when, n in schedule.actions if schedule else ():
            self.schedules.append(
                aws.autoscaling.Schedule(
                    f"{name}-{action}",
                    scheduled_action_name=f"clusterforge-{action}",
                    autoscaling_group_name=self.auto_scaling_group.name,
                    start_time=iso(when),
                    min_size=n,
                    desired_capacity=n,
                    max_size=args.count,
                    opts=child_opts(self),
                )
            )

        self.register_outputs(
            {
                "asg_name": self.auto_scaling_group.name,
                "launch_template_id": self.launch_template.id,
            }
        )
