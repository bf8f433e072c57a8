"""Estimated hourly cost of a cluster's AWS side, from the spec and the price table.

Computed from the spec (instances x price), not from the Pulumi resources, because a group is
one Auto Scaling group however many instances it holds.
"""

from __future__ import annotations

from clusterforge.aws import layout
from clusterforge.catalog.prices import PriceTable, load_prices
from clusterforge.clusterspec.models import Efs, FsxLustre
from clusterforge.plan.model import CostEstimate, CostLine
from clusterforge.resolve import ResolvedCluster


def estimate_cost(rc: ResolvedCluster, prices: PriceTable | None = None) -> CostEstimate:
    cluster = rc.spec
    table = prices or load_prices()
    lines: list[CostLine] = []
    notes: list[str] = [
        f"Prices: {table.region} list prices as of {table.as_of}, marked estimates in "
        "clusterforge/catalog/prices.yaml; the cluster's own region may differ.",
    ]
    gp3_hour = table.per_hour(table.ebs_gp3_gib_month)
    root_gib = 0
    for g in layout.cloud_groups(cluster):
        cloud = g.cloud
        assert cloud is not None
        root_gib += cloud.count * cloud.root_volume_gib
        price = table.instance(cloud.instance_type)
        cap = cloud.capacity.type
        item = f"{g.name}: {cloud.count} x {cloud.instance_type}"
        if price is None:
            lines.append(CostLine(item, cloud.count, "instance", None, 0.0, "no price in prices.yaml"))
            notes.append(f"{cloud.instance_type} has no row in prices.yaml; its cost is not in the total.")
            continue
        unit = price.on_demand
        basis = "on-demand"
        if cap == "spot":
            if price.spot is not None:
                unit, basis = price.spot, "spot (typical, varies hourly)"
            else:
                basis = "on-demand (no spot market for this type)"
        elif cap == "capacity_block":
            basis = "capacity block, priced at the on-demand rate (blocks are priced at purchase)"
        elif cap == "reservation":
            basis = "capacity reservation, billed at the on-demand rate whether used or not"
        lines.append(CostLine(item, cloud.count, "instance", unit, unit * cloud.count, basis, price.estimate))
    if root_gib:
        lines.append(
            CostLine("EBS gp3 root volumes", root_gib, "GiB", gp3_hour, gp3_hour * root_gib, "per GiB-month / 730")
        )
    if cluster.aws is not None:
        nats = len(layout.nat_subnets(cluster.aws))
        if nats:
            lines.append(
                CostLine(
                    "NAT gateways",
                    nats,
                    "gateway",
                    table.nat_gateway_hour,
                    table.nat_gateway_hour * nats,
                    "per hour; data processing per GB not included",
                )
            )
    for s in cluster.storage:
        if isinstance(s, FsxLustre):
            month = table.fsx_lustre_persistent_2_gib_month[s.throughput_per_tib]
            unit = table.per_hour(month)
            lines.append(
                CostLine(
                    f"FSx for Lustre {s.name}: {s.capacity_gib} GiB PERSISTENT_2 {s.throughput_per_tib} MB/s/TiB",
                    s.capacity_gib,
                    "GiB",
                    unit,
                    unit * s.capacity_gib,
                    f"${month}/GiB-month / {table.hours_per_month}",
                )
            )
        elif isinstance(s, Efs):
            unit = table.per_hour(table.efs_standard_gib_month)
            lines.append(
                CostLine(
                    f"EFS {s.name}",
                    0,
                    "GiB",
                    unit,
                    0.0,
                    f"${table.efs_standard_gib_month}/GiB-month stored; size unknown at plan time, not in total",
                )
            )
    return CostEstimate(
        currency=table.currency,
        region=table.region,
        as_of=table.as_of,
        hours_per_month=table.hours_per_month,
        lines=tuple(lines),
        notes=tuple(notes),
    )
