"""Rules on the monitoring section: Alertmanager routes name node groups that exist."""

from __future__ import annotations

from collections.abc import Iterator

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule


@rule
def alert_routes_valid(c: Cluster, _ctx: RuleContext) -> Iterator[Finding]:
    names = {g.name for g in c.node_groups}
    for i, route in enumerate(c.monitoring.alertmanager.routes):
        for j, gname in enumerate(route.node_groups):
            if gname not in names:
                yield Finding(
                    Level.ERROR, "unknown-alert-node-group", f"monitoring.alertmanager.routes[{i}].node_groups[{j}]",
                    gname, "names no node group: the route would never match an alert.",
                    f"use one of: {', '.join(sorted(names))}.",
                )
