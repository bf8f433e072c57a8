"""Where things go in the VPC, decided from the spec alone (no provider lookups).

Fan-out (subnets, NAT gateways, mount targets) is computed here from the spec and never from
provider outputs, so a preview shows exactly what ``up`` creates.
"""

from __future__ import annotations

import ipaddress

from clusterforge import hostlist
from clusterforge.clusterspec.models import Aws, Cluster, NodeGroup, OsName, Subnet
from clusterforge.errors import ClusterforgeError


class LayoutError(ClusterforgeError, ValueError):
    """The spec names something the AWS layout cannot place (unknown subnet, no AWS section)."""


def aws_section(cluster: Cluster) -> Aws:
    if cluster.aws is None:
        raise LayoutError(
            f"cluster {cluster.name!r} has cloud node groups but no 'aws' section; add aws: "
            "{region, vpc_cidr, subnets}"
        )
    return cluster.aws


def cloud_groups(cluster: Cluster) -> list[NodeGroup]:
    return [g for g in cluster.node_groups if g.cloud is not None]


def default_subnet(aws: Aws) -> Subnet:
    """The first private subnet, else the first subnet (the spec's documented default)."""
    for s in aws.subnets:
        if not s.public:
            return s
    return aws.subnets[0]


def subnet_for(cluster: Cluster, group: NodeGroup) -> Subnet:
    aws = aws_section(cluster)
    assert group.cloud is not None
    if group.cloud.subnet is None:
        return default_subnet(aws)
    for s in aws.subnets:
        if s.name == group.cloud.subnet:
            return s
    raise LayoutError(
        f"node group {group.name!r}: subnet {group.cloud.subnet!r} is not in aws.subnets "
        f"({', '.join(s.name for s in aws.subnets)})"
    )


def used_subnets(cluster: Cluster) -> list[Subnet]:
    """Subnets that hold at least one cloud node, in spec order."""
    names = {subnet_for(cluster, g).name for g in cloud_groups(cluster)}
    return [s for s in aws_section(cluster).subnets if s.name in names]


def one_subnet_per_az(subnets: list[Subnet]) -> list[Subnet]:
    """One subnet per availability zone, private ones first: EFS allows one mount target per AZ,
    and clients in the other subnets of that AZ reach it through the VPC's local route; the
    mount target belongs next to the compute nodes, not in the public subnet."""
    chosen: dict[str, Subnet] = {}
    for s in sorted(subnets, key=lambda s: s.public):  # stable: spec order within each kind
        chosen.setdefault(s.availability_zone, s)
    return [s for s in subnets if chosen.get(s.availability_zone) is s]


def storage_subnet(cluster: Cluster) -> Subnet:
    """FSx for Lustre lives in one subnet: the one of the largest compute group, so the bulk of
    the Lustre traffic stays inside one AZ (cross-AZ traffic is slower and billed)."""
    compute = [g for g in cloud_groups(cluster) if g.role == "compute"]
    if not compute:
        return default_subnet(aws_section(cluster))
    biggest = max(compute, key=lambda g: g.cloud.count if g.cloud else 0)
    return subnet_for(cluster, biggest)


def nat_subnets(aws: Aws) -> dict[str, Subnet]:
    """AZ -> public subnet holding that AZ's NAT gateway, for every AZ with private subnets.

    One NAT gateway per AZ keeps egress alive when an AZ fails and avoids cross-AZ data charges;
    an AZ without a public subnet borrows the first public subnet (cross-AZ, but working)."""
    public = [s for s in aws.subnets if s.public]
    if not public:
        return {}
    out: dict[str, Subnet] = {}
    for s in aws.subnets:
        if s.public or s.availability_zone in out:
            continue
        same_az = [p for p in public if p.availability_zone == s.availability_zone]
        out[s.availability_zone] = (same_az or public)[0]
    return out


def private_azs(aws: Aws) -> list[str]:
    out: list[str] = []
    for s in aws.subnets:
        if not s.public and s.availability_zone not in out:
            out.append(s.availability_zone)
    return out


def root_device_name(os: OsName) -> str:
    """Root volume device of the images each OS ships (the mapping resizes the root volume only
    when the name matches; otherwise EC2 would attach a second, empty volume)."""
    return "/dev/xvda" if os.startswith("debian") else "/dev/sda1"


def s3_gateway_service(region: str) -> str:
    prefix = "cn.com.amazonaws" if region.startswith("cn-") else "com.amazonaws"
    return f"{prefix}.{region}.s3"


def onprem_cidrs(cluster: Cluster) -> list[str]:
    """Addresses of the on-prem nodes of a hybrid cluster, collapsed into CIDR blocks.

    Cloud nodes must accept Slurm traffic from them (slurmctld -> slurmd, srun from on-prem login
    nodes, slurmd message fan-out); the site-to-site VPN that carries it is outside the stack.
    Hosts without ``addresses`` cannot be listed and need a rule of their own.
    """
    v4 = [
        ipaddress.IPv4Network(a)
        for g in cluster.node_groups
        if g.onprem is not None and g.onprem.addresses
        for a in hostlist.expand(g.onprem.addresses)
        if ipaddress.ip_address(a).version == 4
    ]
    return [str(n) for n in ipaddress.collapse_addresses(v4)]
