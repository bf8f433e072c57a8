"""Prometheus alerting rules from the spec: the failures a GPU cluster otherwise shows silently.

Every rule is derived from what the spec promises, so a node that quietly delivers less pages
someone instead of slowing jobs for days:

* a node whose exporter stops answering (the node, or its network, is gone);
* a GPU node that reports fewer GPUs than its profile has (a GPU fell off the bus; Slurm keeps
  scheduling 8 GPUs onto it until the health check catches the missing device file);
* a shared file system of the spec that is not mounted on a node that should have it;
* the GPU errors DCGM counts by default (facts.md §5): Xid codes with the action each needs, row
  remap failures and pending remaps;
* a root file system nearly full (the Slurm spool and logs live there: slurmd fails when it is);
* the three the field guides name: GPUs of a running job below 70 % utilisation for 15 minutes
  (the job is starved), thermal or hardware clock slowdown (one slow GPU holds back a synchronous
  job), and degraded links (NVLink CRC/replay/recovery errors, InfiniBand ports not active, below
  their rate or going down, EFA ports not active or counting drops and RDMA errors).

The job a GPU runs comes from dcgm-exporter's HPC job mapping: the Slurm prolog writes the job id
into ``<mapping dir>/<GPU index>`` (templates/dcgm-job-map.sh.j2) and dcgm-exporter gives that GPU's
series an ``hpc_job`` label, so only GPUs allocated to a job carry one. The DCGM fields the rules
read beyond dcgm-exporter's defaults are enabled by the counters file of render/dcgm_exporter.py.

The rules only read series the rendered Prometheus configuration produces: job ``node`` (node
exporter, :9100) and job ``dcgm`` (dcgm-exporter, :9400), each target labelled with ``instance``
(the host name) and ``node_group`` by the monitoring role.
"""

from __future__ import annotations

from typing import Any, NamedTuple

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


#: The field guides' figure: a GPU of a running job below this utilisation for LOW_UTIL_FOR_S is starved.
LOW_UTIL_PCT = 70
LOW_UTIL_FOR_S = 900

#: DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits (dcgm_fields.h DCGM_CLOCKS_EVENT_REASON_*, quoted by
#: dcgm-exporter's clock_events_collector.go). SW_POWER_CAP (0x4) is left out on purpose: a GPU at
#: its power limit under full load is normal.
THERMAL_BITS = (0x20, 0x40)  # SW_THERMAL, HW_THERMAL
HW_SLOWDOWN_BITS = (0x08, 0x80)  # HW_SLOWDOWN, HW_POWER_BRAKE (clocks cut by half or more)

#: NVLink error counters (enabled by render/dcgm_exporter.py): label value, field, severity.
NVLINK_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("crc_flit", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "warning"),
    ("crc_data", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "warning"),
    ("replay", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "warning"),
    ("recovery", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "critical"),
)

#: EFA error counters (node_amazonefa_<hw_counter>{device, port}, written for node exporter's textfile
#: collector by the monitoring role's clusterforge-efa-counters: node exporter cannot read EFA's
#: hw_counters, prometheus/node_exporter#3670): label value, hw_counter (the efa driver's
#: EFA_DEFINE_PORT_STATS names, drivers/infiniband/hw/efa/efa_verbs.c).
EFA_ERROR_COUNTERS: tuple[tuple[str, str], ...] = (
    ("rx_drops", "received packets the device dropped"),
    ("rdma_read_wr_err", "RDMA reads completed with an error"),
    ("rdma_write_wr_err", "RDMA writes completed with an error"),
)

#: node_infiniband_state_id of an ACTIVE port (node_exporter infiniband collector: 4 = active).
IB_ACTIVE = 4
#: node_infiniband_rate_bytes_per_second per Gb/s: the collector turns "400 Gb/sec (4X NDR)" into
#: bytes per second (its fixture: 40 Gb/sec -> 5e9).
BYTES_PER_GBIT = 125_000_000


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class AlertRule(NamedTuple):
    alert: str
    expr: str
    for_s: int
    severity: str  # critical: drain or fix now; warning: look at it today
    summary: str  # Prometheus template text ({{ $labels.instance }} etc.)
    action: str
    labels: tuple[tuple[str, str], ...] = ()  # beyond severity and cluster: what tells two alerts apart


class RuleGroup(NamedTuple):
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


def _bits(metric: str, bits: tuple[int, ...]) -> str:
    """PromQL that keeps ``metric``'s samples (the mask as the value) with any of ``bits`` set.
    PromQL has no bitwise operators: bit b of x is floor(x / b) % 2."""
    test = " or ".join(f"floor({metric} / {b}) % 2 == 1" for b in bits)
    return f"{metric} and ({test})"


def _gpu_fault_rules() -> list[AlertRule]:
    """The guides' GPU alerts: a starved GPU of a running job, clock slowdown, NVLink errors."""
    util = 'DCGM_FI_DEV_GPU_UTIL{job="dcgm",hpc_job!=""}'
    reasons = 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{job="dcgm"}'
    rules = [
        AlertRule(
            "GpuLowUtilisation",
            # averaged over 5 minutes so that one busy sample (a checkpoint, an evaluation step)
            # does not restart the 15 minutes
            f"avg_over_time({util}[5m]) < {LOW_UTIL_PCT}",
            LOW_UTIL_FOR_S,
            "warning",
            "{{ $labels.instance }} GPU {{ $labels.gpu }}: job {{ $labels.hpc_job }} keeps it at "
            '{{ $value | printf "%.0f" }}% (under 70%) for 15 minutes',
            "the job is starved: look at its input pipeline (data loader workers, storage throughput) and "
            "its network (NCCL, a slow or throttled peer GPU shows as its own alert)",
        ),
        AlertRule(
            "GpuThermalThrottling",
            _bits(reasons, THERMAL_BITS),
            300,
            "warning",
            "{{ $labels.instance }} GPU {{ $labels.gpu }}: clocks held back by thermal slowdown "
            "(clock-event reasons {{ $value }})",
            "one slow GPU holds back every synchronous job it is part of: check the node's cooling "
            "(fans, inlet temperature, DCGM_FI_DEV_GPU_TEMP); drain the node if it persists",
        ),
        AlertRule(
            "GpuHardwareSlowdown",
            _bits(reasons, HW_SLOWDOWN_BITS),
            300,
            "critical",
            "{{ $labels.instance }} GPU {{ $labels.gpu }}: hardware slowdown or power brake "
            "(clock-event reasons {{ $value }})",
            "the clocks are cut by half or more: drain the node and check its power supplies and "
            "cooling (nvidia-smi -q -d PERFORMANCE)",
        ),
    ]
    for kind, field, severity in NVLINK_COUNTERS:
        what = kind.replace("_", " ")
        rules.append(
            AlertRule(
                "GpuNvlinkErrors",
                f'increase({field}{{job="dcgm"}}[15m]) > 0',
                0,
                severity,
                "{{ $labels.instance }} GPU {{ $labels.gpu }}: {{ $value }} NVLink " + what + " errors in 15 minutes",
                "a degraded NVLink slows every collective across it: drain the node when its jobs end and "
                "check the link (nvidia-smi nvlink -e, dcgmi diag -r 2)",
                (("counter", kind),),
            )
        )
    return rules


def _fabric_rules(m: ClusterModel) -> list[AlertRule]:
    """Degraded links of the node groups' fabrics, from node exporter's infiniband collector
    (/sys/class/infiniband: InfiniBand and RoCE HCAs, and EFA devices, which register there too)."""
    rules: list[AlertRule] = []
    spec_groups = {g.name: g for g in m.cluster.node_groups}
    for n in sorted(m.compute, key=lambda n: n.group):
        sel = f'job="node",node_group="{n.group}"'
        if n.fabric == "efa":
            rules.append(
                AlertRule(
                    "EfaPortNotActive",
                    f"node_infiniband_state_id{{{sel}}} != {IB_ACTIVE}",
                    _missed(m),
                    "critical",
                    "{{ $labels.instance }}: EFA device {{ $labels.device }} port {{ $labels.port }} is in state "
                    "{{ $value }}, not ACTIVE (4)",
                    "NCCL loses that EFA path (or falls back to TCP): drain the node and check the device "
                    "(fi_info -p efa, the efa driver's dmesg lines); stop/start the instance if it stays down",
                    (("node_group", n.group),),
                )
            )
            for counter, what in EFA_ERROR_COUNTERS:
                rules.append(
                    AlertRule(
                        "EfaErrors",
                        f"increase(node_amazonefa_{counter}{{{sel}}}[15m]) > 0",
                        0,
                        "warning",
                        "{{ $labels.instance }}: EFA device {{ $labels.device }} port {{ $labels.port }}: "
                        "{{ $value }} " + what + " in 15 minutes",
                        "a degraded EFA path slows every collective through it: drain the node when its jobs end, "
                        "check the device (rdma statistic show, the efa driver's dmesg lines) and stop/start the "
                        "instance if the errors go on",
                        (("node_group", n.group), ("counter", counter)),
                    )
                )
            continue
        if n.fabric not in ("infiniband", "roce"):
            continue
        fabric = spec_groups[n.group].fabric
        rated = dict(n.profile.network.hcas or [])
        hcas = list(fabric.hcas) if fabric and fabric.hcas else sorted(rated)
        if not hcas:
            continue
        dev = f'{sel},device=~"{"|".join(hcas)}"'
        rules += [
            AlertRule(
                "IbPortNotActive",
                f"node_infiniband_state_id{{{dev}}} != {IB_ACTIVE}",
                _missed(m),
                "critical",
                "{{ $labels.instance }}: {{ $labels.device }} port {{ $labels.port }} is in state {{ $value }}, "
                "not ACTIVE (4)",
                "NCCL loses that rail: drain the node and check the cable and the switch port (ibstat, "
                "ibdiagnet)",
                (("node_group", n.group),),
            ),
            AlertRule(
                "IbLinkDowned",
                f"increase(node_infiniband_link_downed_total{{{dev}}}[15m]) > 0",
                0,
                "warning",
                "{{ $labels.instance }}: {{ $labels.device }} port {{ $labels.port }} went down "
                "{{ $value }} time(s) in 15 minutes",
                "a flapping link stalls collectives each time it retrains: check the cable and the switch "
                "port's error counters (ibdiagnet, perfquery)",
                (("node_group", n.group),),
            ),
        ]
        by_rate: dict[int, list[str]] = {}
        for h in hcas:
            if h in rated:
                by_rate.setdefault(rated[h], []).append(h)
        for gbps, devs in sorted(by_rate.items()):
            rules.append(
                AlertRule(
                    "IbPortRateLow",
                    f'node_infiniband_rate_bytes_per_second{{{sel},device=~"{"|".join(devs)}"}}'
                    f" < {gbps * BYTES_PER_GBIT}",
                    _missed(m),
                    "warning",
                    f"{{{{ $labels.instance }}}}: {{{{ $labels.device }}}} port {{{{ $labels.port }}}} runs at "
                    f"{{{{ $value | humanize }}}}B/s, below the fabric's {gbps} Gb/s",
                    "the link trained at a lower rate (a bad cable, transceiver or switch port): every "
                    "collective through it runs at that rate; drain the node and reseat or replace the cable",
                    (("node_group", n.group),),
                )
            )
    return rules


def alert_groups(m: ClusterModel) -> tuple[RuleGroup, ...]:
    """The rule groups for ``m``; empty when the spec has no Prometheus or no exporter it scrapes."""
    mon = m.cluster.monitoring
    if not mon.prometheus:
        return ()
    groups = [RuleGroup("clusterforge-nodes", tuple(_node_rules(m)))] if mon.node_exporter else []
    gpu = _gpu_rules(m)
    if gpu:
        groups.append(RuleGroup("clusterforge-gpus", tuple(gpu + _gpu_fault_rules())))
    fabric = _fabric_rules(m) if mon.node_exporter else []
    if fabric:
        groups.append(RuleGroup("clusterforge-fabric", tuple(fabric)))
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
