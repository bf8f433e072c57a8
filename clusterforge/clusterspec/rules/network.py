"""Rules on the AWS network: subnets nest in the VPC and do not overlap."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule


@rule
def cidrs_nest(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    if c.aws is None:
        return
    vpc = ipaddress.ip_network(c.aws.vpc_cidr)
    nets: list[tuple[int, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for i, s in enumerate(c.aws.subnets):
        net = ipaddress.ip_network(s.cidr)
        if net.version != vpc.version or not net.subnet_of(vpc):  # type: ignore[arg-type]
            yield Finding(
                Level.ERROR, "subnet-outside-vpc", f"aws.subnets[{i}].cidr", s.cidr,
                f"is not inside the VPC {c.aws.vpc_cidr}.", "pick a subnet CIDR inside aws.vpc_cidr.",
            )
        for j, other in nets:
            if net.overlaps(other):
                yield Finding(
                    Level.ERROR, "subnets-overlap", f"aws.subnets[{i}].cidr", s.cidr,
                    f"overlaps aws.subnets[{j}].cidr {other}.", "make subnet CIDRs disjoint.",
                )
        nets.append((i, net))
    if not any(not s.public for s in c.aws.subnets) and any(g.is_cloud for g in c.node_groups):
        yield Finding(
            Level.ERROR, "no-private-subnet", "aws.subnets", len(c.aws.subnets),
            "compute nodes must not have public addresses, so they need a private subnet.",
            "add a subnet with public: false.",
        )
    for i, cidr in enumerate(c.aws.login_allowed_cidrs):
        if ipaddress.ip_network(cidr).prefixlen == 0:
            yield Finding(
                Level.WARNING, "ssh-open-to-world", f"aws.login_allowed_cidrs[{i}]", cidr,
                "opens SSH on login nodes to the whole internet.",
                "list your office/VPN CIDRs, or leave the list empty and use SSM.",
            )


