"""Security groups: cluster membership, node and controller ingress, login, EFA, FSx for Lustre and EFS.

Every rule is its own ``aws.vpc.SecurityGroupIngressRule``/``EgressRule`` (one rule per resource,
as AWS models them), so a rule change replaces that rule alone, and the tests and the policy pack
can look at each rule's inputs. The groups themselves carry no inline rules; note that the
provider then removes AWS's default allow-all egress rule, so egress is granted explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from clusterforge import hostlist
from clusterforge.aws.layout import aws_section, cloud_groups, onprem_cidrs
from clusterforge.clusterspec.models import Cluster, Efs, FsxLustre
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags

#: Lustre: LNet on TCP 988, plus 1018-1023 for the FSx servers (FSx for Lustre user guide,
#: "File system access control with Amazon VPC").
LUSTRE_PORTS = ((988, 988), (1018, 1023))
NFS_PORT = 2049
SSH_PORT = 22
#: Served on the controller to the controller alone: MariaDB (slurmdbd's storage, holding the
#: accounting password's database) and slurmdbd itself. Nothing but slurmctld, on the same host,
#: talks to them; traffic an instance sends to itself never crosses its security groups.
CONTROLLER_ONLY_PORTS = {3306: "MariaDB", 6819: "slurmdbd"}


def open_tcp_ranges(closed: frozenset[int] | set[int]) -> list[tuple[int, int]]:
    """TCP 0..65535 without the ``closed`` ports, as (from, to) ranges (security group rules can
    only allow, so a port is closed by leaving it out of every range)."""
    ranges, lo = [], 0
    for port in sorted(closed):
        if port > lo:
            ranges.append((lo, port - 1))
        lo = port + 1
    if lo <= 65535:
        ranges.append((lo, 65535))
    return ranges


@dataclass(frozen=True)
class SecurityArgs:
    cluster: str
    login_allowed_cidrs: tuple[str, ...]
    onprem_cidrs: tuple[str, ...]
    """on-prem node addresses of a hybrid cluster (they reach the cloud nodes over a VPN)"""
    login: bool
    controller: bool
    """a cloud controller exists (it gets its own ingress group)"""
    efa: bool
    fsx: bool
    efs: bool

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> SecurityArgs:
        groups = cloud_groups(cluster)
        return cls(
            cluster=cluster.name,
            login_allowed_cidrs=tuple(aws_section(cluster).login_allowed_cidrs),
            onprem_cidrs=tuple(onprem_cidrs(cluster)),
            login=any(g.role == "login" for g in groups),
            controller=any(g.role == "controller" for g in groups),
            efa=any(g.cloud is not None and g.cloud.efa for g in groups),
            fsx=any(isinstance(s, FsxLustre) for s in cluster.storage),
            efs=any(isinstance(s, Efs) for s in cluster.storage),
        )


class Security(pulumi.ComponentResource):
    """``cluster``: every node carries it; it is the members' identity (the source the other
    groups name) and their egress (through NAT), with no ingress of its own. ``nodes`` (compute and
    login): all traffic from members (slurmd, MPI bootstrap, NCCL's TCP side channel).
    ``controller``: from members every TCP port but :data:`CONTROLLER_ONLY_PORTS`, all UDP and ICMP,
    so slurmdbd and MariaDB answer the controller alone. ``login``: SSH from the spec's CIDRs only;
    no group at all when the list is empty (use SSM Session Manager). ``efa``: the rule EFA demands:
    all traffic to and from the group itself, ingress **and** egress, or the EFA device cannot talk
    to peers. ``fsx``/``efs``: the file systems' interfaces, opening only their ports to members."""

    cluster: aws.ec2.SecurityGroup
    nodes: aws.ec2.SecurityGroup
    controller: aws.ec2.SecurityGroup | None
    login: aws.ec2.SecurityGroup | None
    efa: aws.ec2.SecurityGroup | None
    fsx: aws.ec2.SecurityGroup | None
    efs: aws.ec2.SecurityGroup | None

    def __init__(
        self,
        name: str,
        args: SecurityArgs,
        vpc_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Security", name, None, opts)
        self._name = name
        self._tags = cluster_tags(args.cluster)

        def group(suffix: str, description: str) -> aws.ec2.SecurityGroup:
            return aws.ec2.SecurityGroup(
                f"{name}-{suffix}",
                vpc_id=vpc_id,
                description=description,
                # Rules live in separate resources; revoke them before deleting a group that other
                # groups reference, or the delete would hang on the dependency.
                revoke_rules_on_delete=True,
                tags=cluster_tags(args.cluster, {"Name": f"{args.cluster}-{suffix}"}),
                opts=child_opts(self),
            )

        # The description is unchanged from when this group also carried the all-traffic ingress:
        # a new description would replace the group (and touch every instance).
        self.cluster = group("cluster", f"clusterforge {args.cluster}: cluster-internal traffic")
        self._egress(
            "cluster-out-all",
            self.cluster,
            "-1",
            None,
            cidr="0.0.0.0/0",
            description="egress through the NAT gateway (packages, containers, S3)",
        )
        self.nodes = group("nodes", f"clusterforge {args.cluster}: compute and login nodes")
        self._ingress(
            "nodes-in-cluster",
            self.nodes,
            "-1",
            None,
            source_group=self.cluster,
            description="all traffic from cluster nodes",
        )
        # Hybrid clusters: the on-prem members of the same Slurm cluster (controller, login and
        # compute hosts) must reach slurmd and job steps on the cloud nodes.
        for i, cidr in enumerate(args.onprem_cidrs):
            self._ingress(
                f"nodes-in-onprem-{i}",
                self.nodes,
                "-1",
                None,
                cidr=cidr,
                description=f"all traffic from on-prem cluster nodes {cidr}",
            )

        self.controller = None
        if args.controller:
            self.controller = group("controller", f"clusterforge {args.cluster}: Slurm controller")
            closed = ", ".join(f"{port} ({what})" for port, what in sorted(CONTROLLER_ONLY_PORTS.items()))
            sources: list[tuple[str, aws.ec2.SecurityGroup | None, str | None]] = [("cluster", self.cluster, None)]
            sources += [(f"onprem-{i}", None, cidr) for i, cidr in enumerate(args.onprem_cidrs)]
            for tag, source_group, cidr in sources:
                for lo, hi in open_tcp_ranges(set(CONTROLLER_ONLY_PORTS)):
                    self._ingress(
                        f"controller-in-{tag}-tcp-{lo}-{hi}",
                        self.controller,
                        "tcp",
                        (lo, hi),
                        description=f"TCP from {tag} nodes, all ports but {closed}",
                        source_group=source_group,
                        cidr=cidr,
                    )
                for proto, ports, description in (
                    ("udp", (0, 65535), f"UDP from {tag} nodes"),
                    ("icmp", (-1, -1), f"ICMP from {tag} nodes (path MTU discovery, ping)"),
                ):
                    self._ingress(
                        f"controller-in-{tag}-{proto}",
                        self.controller,
                        proto,
                        ports,
                        description=description,
                        source_group=source_group,
                        cidr=cidr,
                    )

        self.login = None
        if args.login and args.login_allowed_cidrs:
            self.login = group("login", f"clusterforge {args.cluster}: SSH to login nodes")
            for i, cidr in enumerate(args.login_allowed_cidrs):
                self._ingress(
                    f"login-ssh-{i}",
                    self.login,
                    "tcp",
                    (SSH_PORT, SSH_PORT),
                    cidr=cidr,
                    description=f"SSH from allowed CIDR {cidr}",
                )

        self.efa = None
        if args.efa:
            self.efa = group("efa", f"clusterforge {args.cluster}: EFA (all traffic within the group)")
            self._ingress(
                "efa-in-self",
                self.efa,
                "-1",
                None,
                source_group=self.efa,
                description="EFA: all traffic from the group itself",
            )
            self._egress(
                "efa-out-self",
                self.efa,
                "-1",
                None,
                dest_group=self.efa,
                description="EFA: all traffic to the group itself",
            )

        self.fsx = None
        if args.fsx:
            self.fsx = group("fsx", f"clusterforge {args.cluster}: FSx for Lustre")
            for lo, hi in LUSTRE_PORTS:
                tag = hostlist.compress_ints(range(lo, hi + 1))
                # The file servers talk to each other and to clients on these ports, both ways.
                self._ingress(
                    f"fsx-in-self-{tag}",
                    self.fsx,
                    "tcp",
                    (lo, hi),
                    source_group=self.fsx,
                    description="Lustre among the file servers",
                )
                self._ingress(
                    f"fsx-in-cluster-{tag}",
                    self.fsx,
                    "tcp",
                    (lo, hi),
                    source_group=self.cluster,
                    description="Lustre from cluster nodes",
                )
                self._egress(
                    f"fsx-out-self-{tag}",
                    self.fsx,
                    "tcp",
                    (lo, hi),
                    dest_group=self.fsx,
                    description="Lustre among the file servers",
                )
                self._egress(
                    f"fsx-out-cluster-{tag}",
                    self.fsx,
                    "tcp",
                    (lo, hi),
                    dest_group=self.cluster,
                    description="Lustre to cluster nodes",
                )

        self.efs = None
        if args.efs:
            self.efs = group("efs", f"clusterforge {args.cluster}: EFS mount targets")
            self._ingress(
                f"efs-in-cluster-{NFS_PORT}",
                self.efs,
                "tcp",
                (NFS_PORT, NFS_PORT),
                source_group=self.cluster,
                description="NFS from cluster nodes",
            )

        self.register_outputs(
            {
                "cluster_sg_id": self.cluster.id,
                "nodes_sg_id": self.nodes.id,
                "controller_sg_id": self.controller.id if self.controller else None,
                "efa_sg_id": self.efa.id if self.efa else None,
            }
        )

    def _ingress(
        self,
        suffix: str,
        sg: aws.ec2.SecurityGroup,
        protocol: str,
        ports: tuple[int, int] | None,
        *,
        source_group: aws.ec2.SecurityGroup | None = None,
        cidr: str | None = None,
        description: str,
    ) -> aws.vpc.SecurityGroupIngressRule:
        return aws.vpc.SecurityGroupIngressRule(
            f"{self._name}-{suffix}",
            security_group_id=sg.id,
            ip_protocol=protocol,
            from_port=ports[0] if ports else None,
            to_port=ports[1] if ports else None,
            referenced_security_group_id=source_group.id if source_group else None,
            cidr_ipv4=cidr,
            description=description,
            tags=self._tags,
            opts=child_opts(self),
        )

    def _egress(
        self,
        suffix: str,
        sg: aws.ec2.SecurityGroup,
        protocol: str,
        ports: tuple[int, int] | None,
        *,
        dest_group: aws.ec2.SecurityGroup | None = None,
        cidr: str | None = None,
        description: str,
    ) -> aws.vpc.SecurityGroupEgressRule:
        return aws.vpc.SecurityGroupEgressRule(
            f"{self._name}-{suffix}",
            security_group_id=sg.id,
            ip_protocol=protocol,
            from_port=ports[0] if ports else None,
            to_port=ports[1] if ports else None,
            referenced_security_group_id=dest_group.id if dest_group else None,
            cidr_ipv4=cidr,
            description=description,
            tags=self._tags,
            opts=child_opts(self),
        )
