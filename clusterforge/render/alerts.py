"""Prometheus alerting rules from the spec: the failures a GPU cluster otherwise shows silently.

Every rule is derived from what the spec promises, so a node that quietly delivers less pages
someone instead of slowing jobs for days:

* a node whose exporter stops answering (the node, or its network, is gone);
* a GPU node that reports fewer GPUs than its profile has (a GPU fell off the bus; Slurm keeps
  scheduling 8 GPUs onto it until the health check catches the missing device file);
* a shared file system of the spec that is not mounted on a node that should have it;
* the GPU errors DCGM counts by default (facts.md §5): Xid codes with the action each needs, row
  remap failures and pending remaps;
* a root file system nearly full (the Slurm spool and logs live there: slurmd fails when it is).

The rules only read series the rendered Prometheus configuration produces: job ``node`` (node
exporter, :9100) and job ``dcgm`` (dcgm-exporter, :9400), each target labelled with ``instance``
(the host name) and ``node_group`` by the monitoring role.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterforge.render.model import ClusterModel
from clusterforge.render.yamlfile import dump_yaml

#: Where the rules go on the monitoring server; the role installs them there and lists them in
#: prometheus.yml's rule_files (both read this path from the manifest).
RULES_PATH = "/etc/prometheus/rules/clusterforge.yml"

#: Xid codes whose action is known (aws-samples health-check suite, facts.md §5).
XID_ACTIONS: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("GpuXidFellOffBus", (79,), "the GPU fell off the bus: drain the node and reboot it"),
    ("GpuXidNeedsReset", (48, 64, 95), "uncorrectable GPU memory error: drain the node and reset the GPU or reboot"),
    ("GpuXidNvlink", (74,), "NVLink error: drain the node and check its NVLink/NVSwitch fabric"),
)


@dataclass(frozen=True)
class AlertRule:
    alert: str
    expr: str
    for_s: int
    severity: str  # critical: drain or fix now; warning: look at it today
    summary: str  # Prometheus template text ({{ $labels.instance }} etc.)
    action: str
    labels: tuple[tuple[str, str], ...] = ()  # beyond severity and cluster: what tells two alerts apart


@dataclass(frozen=True)
class RuleGroup:
    name: str
    rules: tuple[AlertRule, ...]


def _missed(m: ClusterModel) -> int:
    """How long a target may fail before it alerts: three missed scrapes, at least two minutes."""
    return max(120, 3 * m.cluster.monitoring.scrape_interval_s)


def _node_rules(m: ClusterModel) -> list[AlertRule]:
    rules = [
        AlertRule(
            "NodeExporterDown",
            'up{job="node"} == 0',
            _missed(m),
            "critical",
            "{{ $labels.instance }} ({{ $labels.node_group }}): node exporter has not answered for three scrapes",
            "check that the node is up and reachable; sinfo shows whether Slurm lost it too",
        ),
        AlertRule(
            "NodeRootFilesystemFull",
            'node_filesystem_avail_bytes{job="node",mountpoint="/"}'
            ' / node_filesystem_size_bytes{job="node",mountpoint="/"} < 0.10',
            600,
            "warning",
            "{{ $labels.instance }}: less than 10% of / is free",
            "the Slurm spool and logs are on /: free space before slurmd fails to write job state",
        ),
    ]
    compute = sorted(n.group for n in m.compute)
    if compute and m.cluster.storage:
        groups = "|".join(compute)
        for s in sorted(m.cluster.storage, key=lambda s: s.mount):
            rules.append(
                AlertRule(
                    "SharedStorageNotMounted",
                    f'up{{job="node",node_group=~"{groups}"}} == 1'
                    f' unless on (instance) node_filesystem_size_bytes{{job="node",mountpoint="{s.mount}"}}',
                    _missed(m),
                    "critical",
                    f"{{{{ $labels.instance }}}}: {s.mount} ({s.type} {s.name}) is not mounted",
                    f"jobs on this node cannot read {s.mount}: drain it and mount {s.name} (storage role)",
                    (("mountpoint", s.mount),),
                )
            )
    return rules


def _gpu_rules(m: ClusterModel) -> list[AlertRule]:
    nvidia = [n for n in m.compute if n.gpus is not None and n.gpus.vendor == "nvidia"]
    if not nvidia or not m.cluster.monitoring.dcgm_exporter:
        return []
    rules = [
        AlertRule(
            "DcgmExporterDown",
            'up{job="dcgm"} == 0',
            _missed(m),
            "critical",
            "{{ $labels.instance }}: dcgm-exporter has not answered for three scrapes",
            "GPU errors on this node are invisible until it answers: restart nvidia-dcgm and dcgm-exporter",
        )
    ]
    for n in sorted(nvidia, key=lambda n: n.group):
        assert n.gpus is not None
        rules.append(
            AlertRule(
                "GpuMissing",
                f'count by (instance, node_group) (DCGM_FI_DEV_GPU_TEMP{{job="dcgm",node_group="{n.group}"}})'
                f" < {n.gpus.count}",
                _missed(m),
                "critical",
                f"{{{{ $labels.instance }}}}: {{{{ $value }}}} of {n.gpus.count} {n.gpus.type} GPUs report",
                "a GPU fell off the bus or its driver failed: drain the node (Slurm still counts "
                f"{n.gpus.count} GPUs) and reboot it",
                (("node_group", n.group),),
            )
        )
    for name, codes, action in XID_ACTIONS:
        rules.append(
            AlertRule(
                name,
                " or ".join(f'DCGM_FI_DEV_XID_ERRORS{{job="dcgm"}} == {c}' for c in codes),
                0,
                "critical",
                "{{ $labels.instance }} GPU {{ $labels.gpu }}: Xid {{ $value }}",
                action,
            )
        )
    known = " and ".join(f"DCGM_FI_DEV_XID_ERRORS != {c}" for _, codes, _ in XID_ACTIONS for c in codes)
    rules += [
        AlertRule(
            "GpuXidOther",
            f'DCGM_FI_DEV_XID_ERRORS{{job="dcgm"}} > 0 and {known}',
            0,
            "warning",
            "{{ $labels.instance }} GPU {{ $labels.gpu }}: Xid {{ $value }}",
            "look the code up in NVIDIA's Xid catalogue; run dcgmi diag -r 2 on the drained node if it repeats",
        ),
        AlertRule(
            "GpuRowRemapFailure",
            'DCGM_FI_DEV_ROW_REMAP_FAILURE{job="dcgm"} > 0',
            0,
            "critical",
            "{{ $labels.instance }} GPU {{ $labels.gpu }}: memory row remapping failed",
            "the GPU has no spare rows left: drain the node and have the GPU replaced",
        ),
        AlertRule(
            "GpuUncorrectableRemappedRows",
            'increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{job="dcgm"}[1h]) > 0',
            0,
            "warning",
            "{{ $labels.instance }} GPU {{ $labels.gpu }}: a memory row was remapped after an uncorrectable error",
            "the remap takes effect at the next GPU reset: drain the node and reset the GPU when it is idle",
        ),
    ]
    return rules


def alert_groups(m: ClusterModel) -> tuple[RuleGroup, ...]:
    """The rule groups for ``m``; empty when the spec has no Prometheus or no exporter it scrapes."""
    mon = m.cluster.monitoring
    if not mon.prometheus:
        return ()
    groups = [RuleGroup("clusterforge-nodes", tuple(_node_rules(m)))] if mon.node_exporter else []
    gpu = _gpu_rules(m)
    if gpu:
        groups.append(RuleGroup("clusterforge-gpus", tuple(gpu)))
    return tuple(groups)


def alerts_yaml(m: ClusterModel, groups: tuple[RuleGroup, ...]) -> str:
    """The rule file Prometheus loads (``promtool check rules`` format), with its header comment."""
    header = [
        f"Prometheus alerting rules for cluster {m.cluster.name}, rendered by clusterforge from the spec.",
        f"The monitoring role installs it as {RULES_PATH}",
        "(promtool check rules validates it first); edit the spec, not the node.",
        "Severity critical: drain or fix the node now; warning: look at it today.",
    ]
    data = {"groups": [{"name": g.name, "rules": [_rule(m, r) for r in g.rules]} for g in groups]}
    return dump_yaml(header, data)


def _rule(m: ClusterModel, r: AlertRule) -> dict[str, Any]:
    out: dict[str, Any] = {"alert": r.alert, "expr": r.expr}
    if r.for_s:
        out["for"] = f"{r.for_s}s"
    out["labels"] = {"severity": r.severity, "cluster": m.cluster.name, **dict(r.labels)}
    out["annotations"] = {"summary": r.summary, "action": r.action}
    return out
