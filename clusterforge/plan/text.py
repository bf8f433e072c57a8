"""Plan output: a rich tree and tables for people, stable sorted JSON for machines (and diffs).

rich is imported by the functions that print through it, not here: ``plan --json`` and ``diff``'s
plans (``to_dict``) never load it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from clusterforge.plan.model import PLAN_FORMAT, SECRET, UNKNOWN, Plan, PlannedResource

if TYPE_CHECKING:
    from rich.table import Table
    from rich.tree import Tree


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_round(v) for v in value]
    return value


def to_dict(plan: Plan) -> dict[str, Any]:
    cost = plan.cost
    data: dict[str, Any] = _round(
        {
            "format": PLAN_FORMAT,
            "cluster": plan.cluster,
            "spec_path": plan.spec_path,
            "stack": plan.stack,
            "region": plan.region,
            "resources": {
                r.key: {
                    "type": r.type,
                    "name": r.name,
                    "parent": r.parent,
                    "kind": r.kind,
                    "properties": r.properties,
                    # only where set: the resources that hold data
                    **({"protected": True} if r.protected else {}),
                }
                for r in plan.resources
            },
            "counts": plan.counts,
            "outputs": plan.outputs,
            "files": {
                f.name: {"node_path": f.node_path, "sha256": f.sha256, "groups": list(f.groups)} for f in plan.files
            },
            "cost": {
                "currency": cost.currency,
                "region": cost.region,
                "as_of": cost.as_of,
                "lines": [asdict(line) for line in cost.lines],
                "total_hourly": cost.total_hourly,
                "total_monthly": cost.total_monthly,
                "notes": list(cost.notes),
            },
            "notes": list(plan.notes),
        }
    )
    return data


def to_json(plan: Plan) -> str:
    """Stable, sorted JSON: the same spec gives byte-identical output."""
    return json.dumps(to_dict(plan), indent=2, sort_keys=True) + "\n"


# ----------------------------------------------------------------------------- text tree


def _short_type(t: str) -> str:
    """``aws:ec2/launchTemplate:LaunchTemplate`` -> ``aws:ec2:LaunchTemplate``."""
    parts = t.split(":")
    if len(parts) == 3 and "/" in parts[1]:
        return f"{parts[0]}:{parts[1].split('/')[0]}:{parts[2]}"
    return t


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _interfaces(props: dict[str, Any]) -> str:
    nis = props.get("networkInterfaces") or []
    kinds: dict[str, int] = {}
    for ni in nis:
        t = str(ni.get("interfaceType", "interface"))
        kinds[t] = kinds.get(t, 0) + 1
    public = any(ni.get("associatePublicIpAddress") is True for ni in nis)
    detail = " + ".join(f"{n} {t}" for t, n in sorted(kinds.items()))
    return f"{len(nis)} NICs ({detail}){' PUBLIC IP' if public else ''}"


def _lt(p: dict[str, Any]) -> str:
    bits = [
        str(p.get("instanceType")),
        _interfaces(p),
        f"IMDS tokens={_get(p, 'metadataOptions', 'httpTokens')}",
    ]
    root = (p.get("blockDeviceMappings") or [{}])[0]
    bits.append(f"root {_get(root, 'ebs', 'volumeSize')} GiB encrypted={_get(root, 'ebs', 'encrypted')}")
    if _get(p, "placement", "groupName"):
        bits.append("placement group")
    market = _get(p, "instanceMarketOptions", "marketType")
    if market:
        bits.append(f"market={market}")
    cr = _get(p, "capacityReservationSpecification", "capacityReservationTarget", "capacityReservationId")
    if cr:
        bits.append(f"reservation={cr}")
    return ", ".join(bits)


def _rule(p: dict[str, Any]) -> str:
    proto = p.get("ipProtocol")
    ports = "all" if proto == "-1" else f"{proto} {p.get('fromPort')}-{p.get('toPort')}"
    peer = (
        p.get("cidrIpv4")
        or p.get("cidrIpv6")
        or ("group " + str(p.get("referencedSecurityGroupId")) if p.get("referencedSecurityGroupId") else "?")
    )
    return f"{ports} {peer}"


def _asg(p: dict[str, Any]) -> str:
    spot = " spot" if p.get("mixedInstancesPolicy") else ""
    tags = {t.get("key"): t.get("value") for t in p.get("tags") or [] if isinstance(t, dict)}
    window = tags.get("clusterforge:capacity-window")  # start..end, scale-to-0 and drain times
    block = f", capacity block {window}" if window else ""
    return f"size {p.get('minSize')}/{p.get('desiredCapacity')}/{p.get('maxSize')} (min/desired/max){spot}{block}"


SUMMARY: dict[str, Callable[[dict[str, Any]], str]] = {
    "aws:ec2/vpc:Vpc": lambda p: str(p.get("cidrBlock")),
    "aws:ec2/subnet:Subnet": lambda p: f"{p.get('cidrBlock')} {p.get('availabilityZone')}",
    "aws:ec2/route:Route": lambda p: f"{p.get('destinationCidrBlock')}",
    "aws:ec2/vpcEndpoint:VpcEndpoint": lambda p: f"{p.get('serviceName')} ({p.get('vpcEndpointType')})",
    "aws:ec2/securityGroup:SecurityGroup": lambda p: str(p.get("description")),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": lambda p: "in " + _rule(p),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": lambda p: "out " + _rule(p),
    "aws:ec2/launchTemplate:LaunchTemplate": _lt,
    "aws:autoscaling/group:Group": _asg,
    "aws:autoscaling/schedule:Schedule": lambda p: (
        f"at {p.get('startTime')}: min/desired {p.get('minSize')}/{p.get('desiredCapacity')}"
    ),
    "aws:ec2/placementGroup:PlacementGroup": lambda p: f"strategy={p.get('strategy')}",
    "aws:ec2/instance:Instance": lambda p: (
        f"{p.get('instanceType')}, public IP={p.get('associatePublicIpAddress')}, "
        f"IMDS tokens={_get(p, 'metadataOptions', 'httpTokens')}, "
        f"root {_get(p, 'rootBlockDevice', 'volumeSize')} GiB "
        f"encrypted={_get(p, 'rootBlockDevice', 'encrypted')}"
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": lambda p: (
        f"{p.get('deploymentType')} {p.get('storageCapacity')} GiB {p.get('perUnitStorageThroughput')} MB/s/TiB"
    ),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": lambda p: (
        f"{p.get('dataRepositoryPath')} -> {p.get('fileSystemPath')}"
    ),
    "aws:ebs/volume:Volume": lambda p: (
        f"{p.get('type')} {p.get('size')} GiB {p.get('availabilityZone')} encrypted={p.get('encrypted')}"
    ),
    "aws:ec2/volumeAttachment:VolumeAttachment": lambda p: f"as {p.get('deviceName')}",
    "aws:efs/fileSystem:FileSystem": lambda p: f"encrypted={p.get('encrypted')} {p.get('throughputMode')}",
    "aws:ssm/parameter:Parameter": lambda p: f"{p.get('name')} ({p.get('type')})",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": lambda p: str(p.get("policyArn", "")).rsplit("/", 1)[-1],
    "pulumi:providers:aws": lambda p: f"region={p.get('region')}",
}


def _summary(r: PlannedResource) -> str:
    fn = SUMMARY.get(r.type)
    try:
        return fn(r.properties) if fn else ""
    except (AttributeError, TypeError, IndexError):  # a malformed input still prints
        return ""


def _tree(plan: Plan) -> Tree:
    """The resource tree (component -> children), each node with its type, name and summary."""
    from rich.text import Text
    from rich.tree import Tree

    children: dict[str | None, list[PlannedResource]] = {}
    for r in plan.resources:
        children.setdefault(r.parent, []).append(r)
    keys = {r.key for r in plan.resources}
    roots = [r for r in plan.resources if r.parent is None or r.parent not in keys]
    top = Tree(f"Resources: {plan.cloud_resource_count} AWS resources in {len(plan.resources)} registrations")

    def label(r: PlannedResource) -> Text:
        summary = _summary(r)
        guard = "  [protected]" if r.protected else ""
        return Text(f"{_short_type(r.type)} {r.name}{'  ' + summary if summary else ''}{guard}", overflow="fold")

    def walk(r: PlannedResource, node: Tree) -> None:
        kids = sorted(children.get(r.key, []), key=lambda c: (c.kind != "component", c.type, c.name))
        for c in kids:
            walk(c, node.add(label(c)))

    for r in sorted(roots, key=lambda r: (r.kind != "provider", r.key)):
        walk(r, top.add(label(r)))
    return top


def _table(title: str, *cols: str) -> Table:
    from rich.table import Table

    t = Table(title=title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False, box=None)
    for c in cols:
        t.add_column(c, overflow="fold", justify="right" if c in ("count", "per hour") else "left")
    return t


def plan_renderables(plan: Plan) -> list[Any]:
    """The plan for a terminal: a resource tree and tables (counts, files, outputs, cost)."""
    from rich.text import Text
    from rich.tree import Tree

    head = Text(f"Plan for cluster {plan.cluster} (stack {plan.stack}, region {plan.region}, spec {plan.spec_path})")
    notes = [Text(f"  {n}") for n in plan.notes]
    counts = _table("Counts per type", "type", "count")
    for t, n in plan.counts.items():
        counts.add_row(t, str(n))
    files = _table(f"Rendered files ({len(plan.files)})", "sha256", "file -> node path", "node groups")
    for f in plan.files:
        files.add_row(f.sha256[:16], f"{f.name} -> {f.node_path}", ", ".join(f.groups))
    outputs = Tree("Stack outputs")
    for k in sorted(plan.outputs):
        outputs.add(Text(f"{k} = {json.dumps(plan.outputs[k], sort_keys=True)}", overflow="fold"))
    c = plan.cost
    cost = _table(f"Estimated cost ({c.currency}, {c.region} prices as of {c.as_of}; estimates)",
                  "per hour", "item", "unit price; basis")
    for line in c.lines:
        unit = f"{line.unit_price_hour:.4f}/{line.unit}-h" if line.unit_price_hour is not None else "no price"
        cost.add_row(f"{line.hourly:,.2f}/h", line.item, f"{unit}; {line.basis}")
    cost.add_row(f"{c.total_hourly:,.2f}/h", "total", f"~{c.total_monthly:,.0f}/month at {c.hours_per_month} h")
    tail = [Text(f"note: {n}") for n in c.notes]
    tail.append(Text(f"Unknown values read {UNKNOWN!r}; secrets read {SECRET!r}."))
    return [head, *notes, Text(""), _tree(plan), Text(""), counts, Text(""), files, Text(""), outputs, Text(""),
            cost, *tail]


def format_text(plan: Plan, width: int = 1000) -> str:
    """The plan as plain text (what ``clusterforge plan`` prints when not on a terminal).

    ``width`` defaults wide so that a file or a pipe gets one line per resource."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=width, no_color=True, highlight=False, soft_wrap=False)
    for part in plan_renderables(plan):
        console.print(part)
    # rich pads table cells to the column width; trailing blanks only make diffs of the text noisy
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())
