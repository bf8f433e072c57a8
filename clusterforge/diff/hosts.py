"""Host settings: the two sides' inventory variables compared, each change classified by
:mod:`clusterforge.inventory.settings_impact` (roles, hosts, action, drain), and the operator's
steps for them.

The variables are the ones ``clusterforge inventory`` writes (``build_inventory``). A diff runs
before anything is deployed, so a cloud spec's stack outputs do not exist yet: the inventory is
built with placeholder outputs (:data:`UNKNOWN` addresses, both sides alike), which leaves every
variable the spec decides intact and makes the deploy-time ones compare equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from clusterforge import hostlist
from clusterforge.aws import outputs as out
from clusterforge.inventory.generate import Inventory, build_inventory
from clusterforge.inventory.settings_impact import (
    HOST_SEVERITY,
    IGNORED,
    HostAction,
    flatten,
    role_groups,
    rule_for,
)
from clusterforge.resolve import ResolvedCluster

UNKNOWN = "(known after apply)"


@dataclass(frozen=True)
class HostSetting:
    """One changed inventory variable. ``scope``: ``all`` (group_vars/all), a node group, or
    ``hosts`` (per-host variables); ``hosts``/``drain_nodes`` are hostlists."""

    variable: str
    scope: str
    before: str
    after: str
    roles: tuple[str, ...]
    hosts: str
    action: HostAction
    drain_nodes: str
    why: str
    source: str


def _placeholder_outputs(rc: ResolvedCluster) -> out.StackOutputs:
    """Stack outputs of the shape the program writes, every cloud-assigned value unknown."""
    c = rc.spec
    login = {h: UNKNOWN for g in rc.with_role("login") if g.spec.is_cloud for h in g.hosts}
    groups: dict[str, out.ComputeGroupOutputs | out.HeadGroupOutputs] = {}
    for g in rc.groups:
        if g.spec.cloud is None:
            continue
        common: dict[str, Any] = {
            "role": g.spec.role,
            "instance_type": g.spec.cloud.instance_type,
            "count": g.spec.cloud.count,
            "hostlist": g.spec.node_hostlist,
            "tag_filters": out.group_tag_filters(c.name, g.name),
        }
        if g.spec.role == "compute":
            groups[g.name] = out.ComputeGroupOutputs(**common, asg_name=UNKNOWN)
        else:
            groups[g.name] = out.HeadGroupOutputs(
                **common, instance_ids={h: UNKNOWN for h in g.hosts}, addresses={h: UNKNOWN for h in g.hosts}
            )
    return out.StackOutputs(
        cluster_name=c.name,
        region=c.aws.region if c.aws is not None else UNKNOWN,
        vpc_id=UNKNOWN,
        subnet_ids={},
        controller_address=UNKNOWN,
        login_addresses=login,
        node_groups=groups,
        storage={
            s.name: out.StorageMount(type=s.type, mount=s.mount, dns_name=UNKNOWN, mount_name=UNKNOWN)
            for s in c.storage
            if s.type in ("fsx_lustre", "efs")
        },
        secret_parameters={},
        node_names_table=out.names_table(c.name),
    )


def inventory_of(rc: ResolvedCluster) -> Inventory:
    """The inventory ``clusterforge inventory`` would write for ``rc`` (placeholders for the stack)."""
    cloud = any(g.spec.is_cloud for g in rc.groups)
    return build_inventory(rc, stack_outputs=_placeholder_outputs(rc) if cloud else None)


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _compress(names: Iterable[str]) -> str:
    s = sorted(set(names))
    return hostlist.compress(s) if s else ""


class _Sides:
    """What both sides say about groups and hosts (a group known on either side counts)."""

    def __init__(self, pairs: list[tuple[ResolvedCluster, Inventory]]) -> None:
        self.hosts: dict[str, set[str]] = {}
        self.compute: set[str] = set()
        self.members: dict[str, set[str]] = {}  # inventory group -> node-group names
        for rc, inv in pairs:
            gname_to_ng = {gn: str(gv["clusterforge_node_group"]) for gn, gv in inv.group_vars.items()}
            for g in rc.groups:
                self.hosts.setdefault(g.name, set()).update(g.hosts)
                if g.role == "compute":
                    self.compute.update(g.hosts)
            for feat, body in inv.hosts_yml["all"]["children"].items():
                for gn in (body or {}).get("children", {}) or {}:
                    if gn in gname_to_ng:
                        self.members.setdefault(feat, set()).add(gname_to_ng[gn])
        self.members["all"] = set(self.hosts)

    def groups_in(self, inv_groups: Iterable[str]) -> set[str]:
        return {ng for ig in inv_groups for ng in self.members.get(ig, set())}


def _setting(path: str, scope: str, before: Any, after: Any, sides: _Sides, within: set[str] | None) -> HostSetting:
    rule = rule_for(path)
    targets = sides.groups_in(rule.groups if rule.groups is not None else role_groups(rule.roles))
    if within is not None:  # a node group's variable: only that group's hosts
        targets = (targets & within) if rule.roles else within
    elif not rule.roles:
        targets = set()
    roles = rule.roles
    if within is not None and rule.groups is None:  # only the roles whose plays reach this group
        roles = tuple(r for r in roles if within & sides.groups_in(role_groups((r,))))
    hosts = {h for g in targets for h in sides.hosts.get(g, ())}
    drain = hosts & sides.compute if rule.drain else set()
    return HostSetting(path, scope, _show(before), _show(after), roles, _compress(hosts), rule.action,
                       _compress(drain), rule.why, rule.source)


def _flat(vars_: dict[str, Any]) -> dict[str, Any]:
    return flatten({k: v for k, v in vars_.items() if k not in IGNORED})


def _compare(
    before: dict[str, Any], after: dict[str, Any], scope: str, sides: _Sides, within: set[str] | None,
) -> list[HostSetting]:
    fa, fb = _flat(before), _flat(after)
    out: list[HostSetting] = []
    for path in sorted(set(fa) | set(fb)):
        va, vb = fa.get(path), fb.get(path)
        if va == vb:
            continue
        if (va == [] and path not in fb) or (vb == [] and path not in fa):
            continue  # `x: []` on one side, its named items `x[...]` on the other: those are the change
        out.append(_setting(path, scope, va, vb, sides, within))
    return out


Side = tuple[ResolvedCluster, Inventory]


def host_settings(base: Side, head: Side) -> list[HostSetting]:
    """Every changed inventory variable between the two sides, classified."""
    sides = _Sides([base, head])
    (_brc, binv), (_hrc, hinv) = base, head
    found = _compare(binv.all_vars, hinv.all_vars, "all", sides, None)
    bg = {str(v["clusterforge_node_group"]): v for v in binv.group_vars.values()}
    hg = {str(v["clusterforge_node_group"]): v for v in hinv.group_vars.values()}
    for name in sorted(set(bg) | set(hg)):
        hosts = _compress(sides.hosts.get(name, ()))
        if name not in bg:
            found.append(HostSetting(
                "(node group)", name, "absent", "added", ("site.yml",), hosts, HostAction.REINSTALL, "",
                "new hosts: the whole playbook runs on them", "playbooks/site.yml",
            ))
        elif name not in hg:
            found.append(HostSetting(
                "(node group)", name, "present", "removed", (), hosts, HostAction.NONE, "",
                "removed hosts: nothing runs on them (the node set change and its drain show under slurm.conf)",
                "playbooks/site.yml",
            ))
        else:
            found += _compare(bg[name], hg[name], name, sides, {name})
    bh, hh = _host_vars(binv), _host_vars(hinv)
    per_var: dict[str, list[str]] = {}
    for host in sorted(set(bh) & set(hh)):
        fa, fb = flatten(bh[host]), flatten(hh[host])
        for path in set(fa) | set(fb):
            if fa.get(path) != fb.get(path):
                per_var.setdefault(path, []).append(host)
    for path, hosts_ in sorted(per_var.items()):
        s = _setting(path, "hosts", None, None, sides, None)
        found.append(HostSetting(
            path, "hosts", "per host", f"changed on {len(hosts_)} host(s)", s.roles, _compress(hosts_), s.action,
            _compress(set(hosts_) & sides.compute) if rule_for(path).drain else "",
            s.why, s.source,
        ))
    return found


def _host_vars(inv: Inventory) -> dict[str, dict[str, Any]]:
    groups = inv.hosts_yml["all"]["children"][inv.cluster_group]["children"]
    return {h: dict(v or {}) for g in groups.values() for h, v in ((g or {}).get("hosts") or {}).items()}


def top_action(settings: Iterable[HostSetting]) -> HostAction:
    return max((s.action for s in settings), key=HOST_SEVERITY.__getitem__, default=HostAction.NONE)


def host_steps(settings: Iterable[HostSetting], already_drained: str = "") -> tuple[list[str], list[str], list[str]]:
    """The operator's steps for the host settings: (drain first, run and reboot, resume last).

    ``already_drained``: nodes the Slurm steps drain anyway (not drained twice)."""
    items = [s for s in settings if s.action is not HostAction.NONE and s.roles and s.hosts]
    skip = set(hostlist.expand(already_drained)) if already_drained else set()
    drain_all = {n for s in items if s.drain_nodes for n in hostlist.expand(s.drain_nodes)}
    drain = _compress(drain_all - skip)
    first = [f'scontrol update NodeName={drain} State=DRAIN Reason="host settings change" and wait for their jobs'
             ] if drain else []
    runs: dict[tuple[str, ...], tuple[set[str], list[str]]] = {}
    for s in items:  # one playbook run per set of roles, on every host any of its variables touches
        hosts, names = runs.setdefault(s.roles, (set(), []))
        hosts.update(hostlist.expand(s.hosts))
        names.append(s.variable)
    middle = [
        f"ansible-playbook playbooks/site.yml --tags {','.join(roles)} --limit '{_compress(hosts)}' ({', '.join(vs)})"
        for roles, (hosts, vs) in runs.items()
    ]
    reboot = _compress(n for s in items if s.action is HostAction.REBOOT for n in hostlist.expand(s.hosts))
    if reboot:
        middle.append(f"reboot {reboot} (a new kernel driver loads at boot)")
    last = [f"scontrol update NodeName={drain} State=RESUME once they are back"] if drain else []
    return first, middle, last
