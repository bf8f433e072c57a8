"""Grafana dashboards from the spec: the cluster, its GPUs, its fabric and the Slurm queue.

Each dashboard is data built here (a dict in the shape of Grafana's dashboard JSON model, schema
version SCHEMA_VERSION) and written as JSON by the renderer, so it is derived from the spec like
slurm.conf: one stat per node group with the host count the spec promises, the GPU count of each
group's profile, the fabric panels of the fabrics the groups have, the spec's partitions. Every
dashboard has a ``node_group`` variable (the label the monitoring role puts on every target and the
alerts carry) whose options are the spec's groups.

The queries only read series that exist:

* job ``node``: Debian's prometheus-node-exporter (its infiniband collector for IB and RoCE ports;
  EFA's counters through its textfile collector, written by the monitoring role's
  clusterforge-efa-counters, see FABRIC_NOTE);
* job ``dcgm``: dcgm-exporter with the counters file of render/dcgm_exporter.py (the defaults plus
  the clock-event and NVLink error fields these panels and the alerts read);
* job ``slurm``: rivosinc/prometheus-slurm-exporter (SLURM_EXPORTER), which no Debian release
  packages: the monitoring role scrapes it when monitoring_slurm_exporter_targets names one, and
  the Slurm panels are empty until then;
* Prometheus's own ``up`` and ``ALERTS``.

tests/test_dashboards.py validates every dashboard against Grafana's JSON schema and checks each
metric a query names against what those exporters expose (a capture of the real node exporter,
the counters file, the Slurm exporter's source).

About 600 lines in one module on purpose: the four dashboards share one panel grid, one set of
query helpers and the ``node_group`` variable, and a reviewer checks a panel against its query in
one place; split by dashboard, each file would re-import the same helpers for ~100 lines of data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from clusterforge.render import jsonfile
from clusterforge.render.alerts import EFA_ERROR_COUNTERS, HW_SLOWDOWN_BITS, IB_ACTIVE, LOW_UTIL_PCT, THERMAL_BITS
from clusterforge.render.model import ClusterModel

#: Where the role installs the JSON files; its Grafana dashboard provider reads this folder.
DASHBOARDS_DIR = "/var/lib/grafana/dashboards/clusterforge"
#: The data source the monitoring role provisions (roles/monitoring/vars/main.yml; a test compares).
DATASOURCE = {"type": "prometheus", "uid": "clusterforge-prometheus"}
#: Grafana 10.4 to 11.x write schema version 39; newer Grafanas migrate it on load.
SCHEMA_VERSION = 39

#: The Slurm exporter whose metric names the Slurm panels use (Apache-2.0; per-partition job and
#: node states, pending reasons, slurmctld diagnostics; `go install`, no Debian package).
SLURM_EXPORTER = "rivosinc/prometheus-slurm-exporter @ 529aabaa (2025-08-13)"

#: Why the IB port panels show no EFA traffic or errors (cited in the panel descriptions).
FABRIC_NOTE = (
    "EFA ports are not in these node_infiniband panels: the efa driver keeps its counters in "
    "hw_counters (rx_drops, rdma_read_wr_err, ...), which node exporter's infiniband collector does "
    "not read (prometheus/node_exporter#3670); see the EFA panels (node_amazonefa_*, written by the "
    "monitoring role's clusterforge-efa-counters)."
)

#: DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits drawn on the GPU dashboard (dcgm_fields.h
#: DCGM_CLOCKS_EVENT_REASON_*): label, bit.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("SW power cap", 0x4),
    ("HW slowdown", 0x08),
    ("SW thermal", 0x20),
    ("HW thermal", 0x40),
    ("HW power brake", 0x80),
)

#: node exporter's infiniband error counters (collector/infiniband_linux.go): metric, legend.
IB_ERROR_COUNTERS: tuple[tuple[str, str], ...] = (
    ("node_infiniband_symbol_error_total", "symbol errors"),
    ("node_infiniband_port_errors_received_total", "receive errors"),
    ("node_infiniband_link_error_recovery_total", "link error recoveries"),
    ("node_infiniband_link_downed_total", "link downed"),
    ("node_infiniband_local_link_integrity_errors_total", "local link integrity errors"),
    ("node_infiniband_port_discards_received_total", "receive discards"),
    ("node_infiniband_port_discards_transmitted_total", "transmit discards"),
)

#: dcgm-exporter's NVLink error fields (enabled by the counters file): field, legend.
NVLINK_ERRORS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "CRC flit"),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "CRC data"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "replay"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "recovery"),
)

GREEN, YELLOW, RED, BLUE = "green", "#EAB839", "red", "blue"


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Query(NamedTuple):
    expr: str
    legend: str = ""


@dataclass
class _Grid:
    """Places panels left to right, 24 columns wide, a new line when a panel does not fit."""

    x: int = 0
    y: int = 0
    line_h: int = 0

    def place(self, w: int, h: int) -> dict[str, int]:
        if self.x + w > 24:
            self.x, self.y, self.line_h = 0, self.y + self.line_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.line_h = max(self.line_h, h)
        return pos

    def row(self) -> dict[str, int]:
        if self.x:
            self.x, self.y, self.line_h = 0, self.y + self.line_h, 0
        pos = {"h": 1, "w": 24, "x": 0, "y": self.y}
        self.y += 1
        return pos


@dataclass
class _Board:
    uid: str
    title: str
    description: str
    variables: list[dict[str, Any]]
    panels: list[dict[str, Any]] = field(default_factory=list)
    grid: _Grid = field(default_factory=_Grid)

    def _id(self) -> int:
        return len(self.panels) + 1

    def row(self, title: str) -> None:
        self.panels.append({"type": "row", "title": title, "collapsed": False, "id": self._id(),
                            "gridPos": self.grid.row(), "panels": []})

    def timeseries(self, title: str, description: str, queries: list[Query], *, unit: str = "short",
                   w: int = 12, h: int = 8, min_: float | None = None, max_: float | None = None,
                   stack: bool = False, threshold: tuple[float, str] | None = None,
                   draw: str = "line") -> None:
        custom: dict[str, Any] = {
            "drawStyle": draw, "lineWidth": 1, "fillOpacity": 10 if not stack else 60,
            "showPoints": "never" if draw == "line" else "always", "spanNulls": False,
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        }
        steps = [{"value": 0, "color": GREEN}]
        if threshold is not None:
            # a dashed line at the value an alert uses: below it (utilisation) or above it is bad
            value, below = threshold
            steps = ([{"value": 0, "color": RED}, {"value": value, "color": GREEN}] if below == "below"
                     else [{"value": 0, "color": GREEN}, {"value": value, "color": RED}])
            custom["thresholdsStyle"] = {"mode": "dashed"}
        self._panel("timeseries", title, description, queries, w, h, unit, min_, max_, steps, custom, {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
            "tooltip": {"mode": "multi", "sort": "desc"},
        })

    def stat(self, title: str, description: str, query: Query, *, unit: str = "short", w: int = 4,
             h: int = 4, steps: list[tuple[float, str]] | None = None) -> None:
        thresholds = [{"value": v, "color": c} for v, c in (steps or [(0, BLUE)])]
        self._panel("stat", title, description, [query], w, h, unit, None, None, thresholds, None, {
            "graphMode": "none", "colorMode": "value", "justifyMode": "auto", "textMode": "value",
            "wideLayout": True, "showPercentChange": False, "percentChangeColorMode": "standard",
            "orientation": "auto", "reduceOptions": {"calcs": ["lastNotNull"], "values": False, "fields": ""},
        })

    def _panel(self, kind: str, title: str, description: str, queries: list[Query], w: int, h: int, unit: str,
               min_: float | None, max_: float | None, steps: list[dict[str, Any]],
               custom: dict[str, Any] | None, options: dict[str, Any]) -> None:
        defaults: dict[str, Any] = {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}}
        defaults["color"] = {"mode": "palette-classic" if kind == "timeseries" else "thresholds"}
        if min_ is not None:
            defaults["min"] = min_
        if max_ is not None:
            defaults["max"] = max_
        if custom is not None:
            defaults["custom"] = custom
        self.panels.append({
            "type": kind,
            "id": self._id(),
            "title": title,
            "description": description,
            "datasource": dict(DATASOURCE),
            "gridPos": self.grid.place(w, h),
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": dict(DATASOURCE), "editorMode": "code",
                 "expr": q.expr, "legendFormat": q.legend or "__auto", "range": True}
                for i, q in enumerate(queries)
            ],
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": options,
        })

    def to_dict(self, m: ClusterModel) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["clusterforge", m.cluster.name],
            "timezone": "browser",
            "editable": False,
            "graphTooltip": 1,  # one crosshair across panels: a throttled GPU lines up with its job
            "time": {"from": "now-6h", "to": "now"},
            "refresh": "30s",
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "links": [{"title": "clusterforge dashboards", "type": "dashboards", "tags": ["clusterforge"],
                       "asDropdown": True, "includeVars": True, "keepTime": True, "icon": "external link",
                       "tooltip": "", "targetBlank": False, "url": ""}],
            "annotations": {"list": []},
            "templating": {"list": self.variables},
            "panels": self.panels,
        }


def _custom_var(name: str, label: str, values: list[str], description: str) -> dict[str, Any]:
    """A variable whose options are values from the spec (multi-select, All = every one of them)."""
    return {
        "type": "custom",
        "name": name,
        "label": label,
        "description": description,
        "query": ",".join(values),
        "multi": True,
        "includeAll": True,
        "current": {"text": ["All"], "value": ["$__all"]},
        "options": [{"text": "All", "value": "$__all", "selected": True}]
        + [{"text": v, "value": v, "selected": False} for v in values],
    }


def _query_var(name: str, label: str, query: str) -> dict[str, Any]:
    """Hosts of the selected node groups, as Prometheus has them (refreshed on time-range change)."""
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": dict(DATASOURCE),
        # the string form: the schema's object form wants objects as values, Grafana accepts both
        "query": query,
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"text": ["All"], "value": ["$__all"]},
        "options": [],
    }


def _group_var(groups: list[str], what: str) -> dict[str, Any]:
    return _custom_var("node_group", "node group", groups,
                       f"{what} node groups of the spec (the node_group label of every target and alert)")


def _bit(metric: str, bit: int) -> str:
    """PromQL has no bitwise operators: bit b of x is floor(x / b) % 2 (render/alerts.py does the same)."""
    return f"floor({metric} / {bit}) % 2 == 1"


# ------------------------------------------------------------------------------------- overview


def _overview(m: ClusterModel) -> _Board:
    c = m.cluster
    groups = [n.group for n in m.nodesets]
    b = _Board("clusterforge-overview", f"{c.name}: cluster overview",
               f"Hosts, load and storage of cluster {c.name} by node group, and the alerts firing "
               "(rendered by clusterforge from the spec).", [_group_var(groups, "The")])
    b.row("Hosts (up: node exporter answers)")
    for n in m.nodesets:
        expected = n.count
        steps: list[tuple[float, str]] = (
            [(0, BLUE)] if n.cloud else [(0, RED), (expected, GREEN)] if expected > 1 else [(0, RED), (1, GREEN)]
        )
        what = (f"up to {expected} cloud nodes (the group scales)" if n.cloud
                else f"{expected} {'host' if expected == 1 else 'hosts'} of the spec")
        b.stat(f"{n.group}: hosts up", f"{n.role} group {n.group}, profile {n.profile.name}: {what}. "
               "Red: fewer answer than the spec has.",
               Query(f'sum(up{{job="node",node_group="{n.group}"}}) or vector(0)'), steps=steps)
    nvidia = [n for n in m.compute if n.gpus is not None and n.gpus.vendor == "nvidia"]
    if nvidia and c.monitoring.dcgm_exporter:
        for n in nvidia:
            assert n.gpus is not None
            total = n.gpus.count * n.count
            b.stat(f"{n.group}: GPUs reporting", f"{n.gpus.count} {n.gpus.type} per node x {n.count} nodes "
                   f"= {total}; fewer means a GPU fell off the bus (alert GpuMissing).",
                   Query(f'count(DCGM_FI_DEV_GPU_TEMP{{job="dcgm",node_group="{n.group}"}}) or vector(0)'),
                   steps=[(0, BLUE)] if n.cloud else [(0, RED), (total, GREEN)])
    b.stat("Alerts firing (critical)", "Alerts of the rendered rules in state firing with severity critical.",
           Query('count(ALERTS{alertstate="firing",severity="critical"}) or vector(0)'), steps=[(0, GREEN), (1, RED)])
    b.stat("Alerts firing (warning)", "Alerts of the rendered rules in state firing with severity warning.",
           Query('count(ALERTS{alertstate="firing",severity="warning"}) or vector(0)'), steps=[(0, GREEN), (1, YELLOW)])

    sel = 'job="node",node_group=~"$node_group"'
    b.row("Load")
    b.timeseries("CPU busy", "Share of CPU time not idle, averaged over each group's hosts.",
                 [Query(f'100 * (1 - avg by (node_group) (rate(node_cpu_seconds_total{{{sel},mode="idle"}}'
                        '[$__rate_interval])))', "{{node_group}}")], unit="percent", min_=0, max_=100)
    b.timeseries("Memory used", "Memory not available to new processes (MemTotal - MemAvailable), per group.",
                 [Query(f"100 * (1 - sum by (node_group) (node_memory_MemAvailable_bytes{{{sel}}})"
                        f" / sum by (node_group) (node_memory_MemTotal_bytes{{{sel}}}))", "{{node_group}}")],
                 unit="percent", min_=0, max_=100)
    b.timeseries("Network received", "Bytes per second received on every interface but loopback, per group.",
                 [Query(f'sum by (node_group) (rate(node_network_receive_bytes_total{{{sel},device!="lo"}}'
                        '[$__rate_interval]))', "{{node_group}}")], unit="Bps")
    b.timeseries("Network sent", "Bytes per second sent on every interface but loopback, per group.",
                 [Query(f'sum by (node_group) (rate(node_network_transmit_bytes_total{{{sel},device!="lo"}}'
                        '[$__rate_interval]))', "{{node_group}}")], unit="Bps")
    b.row("Storage")
    b.timeseries("Root file system free (least free host)", "The Slurm spool and logs live on /: under 10 % "
                 "alerts (NodeRootFilesystemFull).",
                 [Query(f'min by (node_group) (100 * node_filesystem_avail_bytes{{{sel},mountpoint="/"}}'
                        f' / node_filesystem_size_bytes{{{sel},mountpoint="/"}})', "{{node_group}}")],
                 unit="percent", min_=0, max_=100, threshold=(10, "below"))
    for s in sorted(c.storage, key=lambda s: s.mount):
        b.timeseries(f"{s.mount} free ({s.type} {s.name})", f"Free space of the shared file system {s.name} "
                     "as the nodes that mount it see it; a host without the mount alerts (SharedStorageNotMounted).",
                     [Query(f'min(node_filesystem_avail_bytes{{{sel},mountpoint="{s.mount}"}})', "free"),
                      Query(f'max(node_filesystem_size_bytes{{{sel},mountpoint="{s.mount}"}})', "size")],
                     unit="bytes", min_=0)
    b.row("Alerts")
    b.timeseries("Alerts firing", "Every firing alert of the rendered rules, by name and severity.",
                 [Query('count by (alertname, severity) (ALERTS{alertstate="firing"})',
                        "{{alertname}} ({{severity}})")],
                 w=24, draw="bars", stack=True)
    return b


# ----------------------------------------------------------------------------------------- GPUs


def _gpus(m: ClusterModel) -> _Board | None:
    nvidia = [n for n in m.compute if n.gpus is not None and n.gpus.vendor == "nvidia"]
    if not nvidia or not m.cluster.monitoring.dcgm_exporter:
        return None
    groups = [n.group for n in nvidia]
    b = _Board("clusterforge-gpus", f"{m.cluster.name}: GPUs",
               "Utilisation, memory, temperature, power, clock-event (throttle) reasons and errors of every "
               "NVIDIA GPU, from dcgm-exporter (job dcgm).",
               [_group_var(groups, "The NVIDIA GPU"),
                _query_var("instance", "host", 'label_values(DCGM_FI_DEV_GPU_TEMP{job="dcgm",'
                           'node_group=~"$node_group"}, instance)')])
    sel = 'job="dcgm",node_group=~"$node_group",instance=~"$instance"'
    gpu = "{{instance}} GPU {{gpu}}"
    reasons = f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{sel}}}"
    expected = " + ".join(f"{n.gpus.count} x {n.count} ({n.group})" for n in nvidia if n.gpus)
    b.row("Now")
    b.stat("GPUs reporting", f"GPUs dcgm-exporter reports; the spec has {expected}.",
           Query(f"count(DCGM_FI_DEV_GPU_TEMP{{{sel}}}) or vector(0)"))
    b.stat("Mean utilisation", "Mean GPU utilisation of the selected GPUs.",
           Query(f"avg(DCGM_FI_DEV_GPU_UTIL{{{sel}}})"), unit="percent",
           steps=[(0, RED), (LOW_UTIL_PCT, GREEN)])
    b.stat(f"Job GPUs under {LOW_UTIL_PCT} %", f"GPUs allocated to a job (hpc_job label) averaging under "
           f"{LOW_UTIL_PCT} % over 5 minutes: the job is starved (alert GpuLowUtilisation after 15 minutes).",
           Query(f'count(avg_over_time(DCGM_FI_DEV_GPU_UTIL{{{sel},hpc_job!=""}}[5m]) < {LOW_UTIL_PCT}) or vector(0)'),
           steps=[(0, GREEN), (1, YELLOW)])
    limited = " or ".join(f"({_bit(reasons, bit)})" for bit in THERMAL_BITS + HW_SLOWDOWN_BITS)
    b.stat("GPUs clock-limited", "GPUs whose clocks are held back by thermal slowdown, hardware slowdown or "
           "power brake now (alerts GpuThermalThrottling, GpuHardwareSlowdown).",
           Query(f"count({limited}) or vector(0)"), steps=[(0, GREEN), (1, RED)])
    b.stat("GPUs with an Xid", "GPUs whose last Xid error is not 0 (alerts GpuXid*).",
           Query(f"count(DCGM_FI_DEV_XID_ERRORS{{{sel}}} > 0) or vector(0)"), steps=[(0, GREEN), (1, RED)])
    b.stat("Hottest GPU", "The highest GPU temperature of the selection.",
           Query(f"max(DCGM_FI_DEV_GPU_TEMP{{{sel}}})"), unit="celsius",
           steps=[(0, GREEN), (80, YELLOW), (87, RED)])

    b.row("Utilisation and memory")
    b.timeseries("GPU utilisation", f"Per GPU; the dashed line is the {LOW_UTIL_PCT} % the field guides name "
                 "(a job's GPUs under it are starved).",
                 [Query(f"DCGM_FI_DEV_GPU_UTIL{{{sel}}}", gpu)], unit="percent", min_=0, max_=100,
                 threshold=(LOW_UTIL_PCT, "below"))
    b.timeseries("GPU memory used", "Framebuffer used / (used + free), per GPU.",
                 [Query(f"100 * DCGM_FI_DEV_FB_USED{{{sel}}} / (DCGM_FI_DEV_FB_USED{{{sel}}} + "
                        f"DCGM_FI_DEV_FB_FREE{{{sel}}})", gpu)], unit="percent", min_=0, max_=100)
    b.timeseries("Tensor core activity", "Share of cycles the tensor pipe is active (DCGM profiling field; "
                 "empty on GPUs without profiling counters).",
                 [Query(f"100 * DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{sel}}}", gpu)], unit="percent", min_=0, max_=100)
    b.timeseries("Jobs on the GPUs", "GPUs per Slurm job (dcgm-exporter's HPC job mapping: the prolog writes "
                 "the job id per GPU).",
                 [Query(f'count by (hpc_job) (DCGM_FI_DEV_GPU_UTIL{{{sel},hpc_job!=""}})', "job {{hpc_job}}")],
                 stack=True)

    b.row("Temperature and power")
    b.timeseries("GPU temperature", "Per GPU; sustained heat ends in thermal slowdown (see clock-event reasons).",
                 [Query(f"DCGM_FI_DEV_GPU_TEMP{{{sel}}}", gpu)], unit="celsius", threshold=(87, "above"))
    b.timeseries("Memory temperature", "HBM temperature per GPU.",
                 [Query(f"DCGM_FI_DEV_MEMORY_TEMP{{{sel}}}", gpu)], unit="celsius")
    b.timeseries("Power draw", "Per GPU, in watts.", [Query(f"DCGM_FI_DEV_POWER_USAGE{{{sel}}}", gpu)], unit="watt")
    b.timeseries("SM clock", "Per GPU; a drop under load with a clock-event reason set is throttling.",
                 [Query(f"DCGM_FI_DEV_SM_CLOCK{{{sel}}}", gpu)], unit="hertz")

    b.row("Throttling: clock-event reasons")
    b.timeseries("GPUs per clock-event reason", "How many GPUs have each reason bit of "
                 "DCGM_FI_DEV_CLOCKS_EVENT_REASONS set. SW power cap under full load is normal; thermal, "
                 "HW slowdown and power brake hold back every synchronous job the GPU is in.",
                 [Query(f"count({_bit(reasons, bit)}) or vector(0)", label) for label, bit in CLOCK_EVENT_REASONS],
                 draw="bars", stack=True)
    b.timeseries("Time throttled", "Share of time the clocks were held back by power or thermal limits "
                 "(DCGM's violation counters count nanoseconds).",
                 [Query(f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{sel}}}[$__rate_interval]) / 1e9", gpu + " power"),
                  Query(f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{sel}}}[$__rate_interval]) / 1e9", gpu + " thermal")],
                 unit="percentunit", min_=0)

    b.row("Errors")
    b.timeseries("Xid errors", "The last Xid each GPU reported (79: fell off the bus; 48, 64, 95: "
                 "uncorrectable memory error; 74: NVLink).",
                 [Query(f"DCGM_FI_DEV_XID_ERRORS{{{sel}}} > 0", gpu)], draw="points")
    b.timeseries("Remapped rows", "Rows remapped after uncorrectable errors (a reset applies them) and failed "
                 "remaps (the GPU has no spare rows: replace it).",
                 [Query(f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{sel}}} > 0", gpu + " remapped"),
                  Query(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{sel}}} > 0", gpu + " remap failed")])
    b.timeseries("PCIe replays", "PCIe retries per second: a rising rate points at a bad riser or slot.",
                 [Query(f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{sel}}}[$__rate_interval]) > 0", gpu)])
    b.timeseries("NVLink errors", "NVLink error counter increases (the degraded-link alert GpuNvlinkErrors).",
                 [Query(f"increase({f}{{{sel}}}[$__rate_interval]) > 0", gpu + " " + label)
                  for f, label in NVLINK_ERRORS])
    return b


# --------------------------------------------------------------------------------------- fabric


def _fabric(m: ClusterModel) -> _Board:
    compute = list(m.compute)
    by_fabric: dict[str, list[str]] = {}
    for n in compute:
        by_fabric.setdefault(n.fabric, []).append(n.group)
    kinds = ", ".join(f"{k}: {' '.join(v)}" for k, v in sorted(by_fabric.items()))
    b = _Board("clusterforge-fabric", f"{m.cluster.name}: fabric",
               f"Ports and links of the compute groups' fabrics ({kinds}): InfiniBand, RoCE and EFA ports "
               "from node exporter's infiniband collector, NVLink from dcgm-exporter, Ethernet from node exporter.",
               [_group_var([n.group for n in compute] or [n.group for n in m.nodesets], "The compute"),
                _query_var("instance", "host", 'label_values(up{job="node",node_group=~"$node_group"}, instance)')])
    sel = 'job="node",node_group=~"$node_group",instance=~"$instance"'
    port = "{{instance}} {{device}}/{{port}}"
    rdma = {k: v for k, v in by_fabric.items() if k in ("infiniband", "roce", "efa")}
    if rdma:
        note = f" {FABRIC_NOTE}" if "efa" in rdma else ""
        b.row("RDMA ports (" + ", ".join(f"{k}: {' '.join(v)}" for k, v in sorted(rdma.items())) + ")")
        b.stat("Ports not ACTIVE", f"Ports whose state is not ACTIVE ({IB_ACTIVE}): NCCL loses that rail "
               "(alerts IbPortNotActive, EfaPortNotActive).",
               Query(f"count(node_infiniband_state_id{{{sel}}} != {IB_ACTIVE}) or vector(0)"),
               steps=[(0, GREEN), (1, RED)], w=6)
        b.stat("Ports", "Ports node exporter reports.",
               Query(f"count(node_infiniband_state_id{{{sel}}}) or vector(0)"), w=6)
        b.stat("Slowest port", "The lowest signalling rate of the selected ports (alert IbPortRateLow when under "
               "the fabric's rate).", Query(f"min(node_infiniband_rate_bytes_per_second{{{sel}}}) * 8"),
               unit="bps", w=6)
        b.stat("Link downs (1 h)", "Times a port went down in the last hour (alert IbLinkDowned).",
               Query(f"sum(increase(node_infiniband_link_downed_total{{{sel}}}[1h])) or vector(0)"),
               steps=[(0, GREEN), (1, YELLOW)], w=6)
        b.timeseries("Port state", f"State id per port: 4 ACTIVE, 1 DOWN, 2 INIT, 3 ARMED.{note}",
                     [Query(f"node_infiniband_state_id{{{sel}}}", port)], min_=0, max_=5)
        b.timeseries("Port rate", "Signalling rate per port (a link that trained lower runs every collective at it).",
                     [Query(f"node_infiniband_rate_bytes_per_second{{{sel}}} * 8", port)], unit="bps", min_=0)
        b.timeseries("Port throughput received", f"Data received per port (InfiniBand and RoCE).{note}",
                     [Query(f"rate(node_infiniband_port_data_received_bytes_total{{{sel}}}[$__rate_interval])", port)],
                     unit="Bps")
        b.timeseries("Port throughput sent", f"Data sent per port (InfiniBand and RoCE).{note}",
                     [Query(f"rate(node_infiniband_port_data_transmitted_bytes_total{{{sel}}}[$__rate_interval])",
                            port)], unit="Bps")
        b.timeseries("Port errors", "Error counter increases per port and counter: symbol errors and receive "
                     "errors point at a cable or transceiver, link recoveries and downs at a flapping link.",
                     [Query(f"increase({metric}{{{sel}}}[$__rate_interval]) > 0", f"{port} {label}")
                      for metric, label in IB_ERROR_COUNTERS])
        b.timeseries("Transmit wait", "Ticks a port had data but could not send (congestion or a slow peer).",
                     [Query(f"rate(node_infiniband_port_transmit_wait_total{{{sel}}}[$__rate_interval]) > 0", port)])
        if "efa" in rdma:
            efa = "Written by the monitoring role's clusterforge-efa-counters from the efa driver's hw_counters."
            b.timeseries("EFA throughput", f"Bytes per second received and sent per EFA port. {efa}",
                         [Query(f"rate(node_amazonefa_rx_bytes{{{sel}}}[$__rate_interval])", port + " rx"),
                          Query(f"rate(node_amazonefa_tx_bytes{{{sel}}}[$__rate_interval])", port + " tx")],
                         unit="Bps")
            b.timeseries("EFA errors", f"Receive drops and RDMA read/write errors per EFA port (alert EfaErrors). "
                         f"{efa}",
                         [Query(f"increase(node_amazonefa_{c}{{{sel}}}[$__rate_interval]) > 0", f"{port} {c}")
                          for c, _ in EFA_ERROR_COUNTERS])
    nvidia = [n for n in compute if n.gpus is not None and n.gpus.vendor == "nvidia"]
    if nvidia and m.cluster.monitoring.dcgm_exporter:
        dsel = 'job="dcgm",node_group=~"$node_group",instance=~"$instance"'
        b.row("NVLink (" + " ".join(n.group for n in nvidia) + ")")
        b.timeseries("NVLink errors", "Per GPU and counter: CRC and replay errors slow every collective across "
                     "the link, recovery errors are critical (alert GpuNvlinkErrors).",
                     [Query(f"increase({f}{{{dsel}}}[$__rate_interval]) > 0", "{{instance}} GPU {{gpu}} " + label)
                      for f, label in NVLINK_ERRORS], w=24)
    b.row("Ethernet")
    eth = f'{sel},device!~"lo|veth.*|docker.*|br-.*"'
    nic = "{{instance}} {{device}}"
    b.timeseries("Received", "Bytes per second per interface.",
                 [Query(f"rate(node_network_receive_bytes_total{{{eth}}}[$__rate_interval])", nic)], unit="Bps")
    b.timeseries("Sent", "Bytes per second per interface.",
                 [Query(f"rate(node_network_transmit_bytes_total{{{eth}}}[$__rate_interval])", nic)], unit="Bps")
    b.timeseries("Errors and drops", "Receive and transmit errors and drops per interface.",
                 [Query(f"rate(node_network_receive_errs_total{{{eth}}}[$__rate_interval]) > 0", nic + " rx errors"),
                  Query(f"rate(node_network_transmit_errs_total{{{eth}}}[$__rate_interval]) > 0", nic + " tx errors"),
                  Query(f"rate(node_network_receive_drop_total{{{eth}}}[$__rate_interval]) > 0", nic + " rx drops")],
                 w=24)
    return b


# ---------------------------------------------------------------------------------------- Slurm


def _partitions(m: ClusterModel) -> list[tuple[str, list[str]]]:
    c = m.cluster
    if c.partitions:
        return [(p.name, list(p.node_groups)) for p in c.partitions]
    return [(p.name, [n.group for n in m.compute]) for p in m.partitions]


def _slurm(m: ClusterModel) -> _Board:
    parts = _partitions(m)
    compute = [n.group for n in m.compute]
    where = "; ".join(f"{p}: {' '.join(g)}" for p, g in parts)
    b = _Board("clusterforge-slurm", f"{m.cluster.name}: Slurm queue",
               f"Jobs, nodes and CPUs per partition ({where}) from the Slurm exporter "
               f"{SLURM_EXPORTER} (job slurm; the monitoring role scrapes it when monitoring_slurm_exporter_targets "
               "names one), and the GPUs jobs hold from dcgm-exporter's job mapping.",
               [_custom_var("partition", "partition", [p for p, _ in parts], "The spec's partitions"),
                _group_var(compute, "The compute")])
    sel = 'job="slurm",partition=~"$partition"'
    b.row("Queue")
    for state, color in (("PENDING", YELLOW), ("RUNNING", GREEN)):
        b.stat(f"Jobs {state.lower()}", f"Jobs in state {state} in the selected partitions.",
               Query(f'sum(slurm_partition_job_state_total{{{sel},state="{state}"}}) or vector(0)'),
               steps=[(0, color)], w=6)
    b.stat("Nodes down or drained", "Nodes of the selected partitions in a down, drained or draining state.",
           Query(f'sum(slurm_partition_node_count{{{sel},state=~"down.*|drain.*|fail.*"}}) or vector(0)'),
           steps=[(0, GREEN), (1, RED)], w=6)
    b.stat("slurmdbd agent queue", "Messages slurmctld holds for slurmdbd: growing means slurmdbd or its "
           "database is down.", Query('max(slurm_dbd_agent_queue_size{job="slurm"})'),
           steps=[(0, GREEN), (100, YELLOW), (1000, RED)], w=6)
    b.timeseries("Jobs by state", "Per partition and job state.",
                 [Query(f"sum by (partition, state) (slurm_partition_job_state_total{{{sel}}})",
                        "{{partition}} {{state}}")], stack=True)
    b.timeseries("Why jobs wait", "Pending jobs by Slurm's reason (Resources, Priority, Dependency, ...).",
                 [Query('sum by (reason) (slurm_pending_reason_total{job="slurm"})', "{{reason}}")], stack=True)
    b.row("Nodes and CPUs")
    b.timeseries("Nodes by state", "Per partition and node state (idle, mixed, allocated, drained, down).",
                 [Query(f"sum by (partition, state) (slurm_partition_node_count{{{sel}}})", "{{partition}} {{state}}")],
                 stack=True)
    b.timeseries("CPUs allocated", "Allocated CPUs / CPUs per partition.",
                 [Query(f"100 * sum by (partition) (slurm_partition_alloc_cpus{{{sel}}})"
                        f" / sum by (partition) (slurm_partition_total_cpus{{{sel}}})", "{{partition}}")],
                 unit="percent", min_=0, max_=100)
    if any(n.gpus is not None and n.gpus.vendor == "nvidia" for n in m.compute) and m.cluster.monitoring.dcgm_exporter:
        dsel = 'job="dcgm",node_group=~"$node_group",hpc_job!=""'
        b.row("GPUs of jobs (dcgm-exporter job mapping)")
        b.timeseries("GPUs allocated to jobs", "GPUs that carry a job id, per node group.",
                     [Query(f"count by (node_group) (DCGM_FI_DEV_GPU_UTIL{{{dsel}}})", "{{node_group}}")], stack=True)
        b.timeseries("GPU utilisation per job", f"Mean utilisation of each job's GPUs; under {LOW_UTIL_PCT} % the "
                     "job is starved.",
                     [Query(f"avg by (hpc_job) (DCGM_FI_DEV_GPU_UTIL{{{dsel}}})", "job {{hpc_job}}")],
                     unit="percent", min_=0, max_=100, threshold=(LOW_UTIL_PCT, "below"))
    b.row("slurmctld")
    b.timeseries("slurmctld threads", "Server threads slurmctld runs (sdiag); near its limit, RPCs queue.",
                 [Query('slurm_daemon_thread_count{job="slurm"}', "threads")])
    b.timeseries("Backfill depth", "Jobs the last backfill cycle looked at (sdiag).",
                 [Query('slurm_backfill_last_depth{job="slurm"}', "depth")])
    return b


# ------------------------------------------------------------------------------------- the files


class Dashboard(NamedTuple):
    slug: str  # file name without .json
    data: dict[str, Any]

    @property
    def node_path(self) -> str:
        return f"{DASHBOARDS_DIR}/{self.slug}.json"

    def text(self) -> str:
        """The JSON file: key order as built (the order of Grafana's own exports), two-space indent."""
        return jsonfile.dumps(self.data, ensure_ascii=False)


def dashboards(m: ClusterModel) -> tuple[Dashboard, ...]:
    """The dashboards of ``m``: none unless the spec has Grafana and the Prometheus it reads."""
    mon = m.cluster.monitoring
    if not (mon.grafana and mon.prometheus and mon.node_exporter):
        return ()
    boards = [("cluster-overview", _overview(m)), ("gpus", _gpus(m)), ("fabric", _fabric(m)), ("slurm", _slurm(m))]
    return tuple(Dashboard(slug, b.to_dict(m)) for slug, b in boards if b is not None)


def queries(d: Dashboard) -> list[tuple[str, str]]:
    """(panel title, expr) of every query of a dashboard, its variables' queries included."""
    out = [(p["title"], t["expr"]) for p in d.data["panels"] for t in p.get("targets", [])]
    out += [(f"variable {v['name']}", v["query"]) for v in d.data["templating"]["list"] if v["type"] == "query"]
    return out
