"""The Grafana dashboards the renderer derives from the spec (clusterforge/render/dashboards.py).

Each rendered dashboard is validated against Grafana's own dashboard JSON schema (the schema
grafana-foundation-sdk generates from Grafana 11.5's kinds, tests/fixtures/grafana-schema/), every
query is parsed by the real promtool, and every metric a query names is checked against what the
exporters really expose: dcgm-exporter's counters file as the dcgm role installs it (the render's
dcgm/counters.csv), node exporter (Debian's prometheus-node-exporter binary run on loopback, and
a capture of its /metrics), and the Slurm exporter's source
(rivosinc/prometheus-slurm-exporter). The expected panels per example are written by hand from the
example specs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from clusterforge.clusterspec import parse_spec
from clusterforge.render import render_cluster

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "golden"
SCHEMA = ROOT / "tests" / "fixtures" / "grafana-schema"
EXPORTERS = ROOT / "tests" / "fixtures" / "exporters"
PROMTOOL = shutil.which("promtool") or str(ROOT / ".tools" / "prometheus" / "usr" / "bin" / "promtool")
NODE_EXPORTER = os.environ.get("CLUSTERFORGE_NODE_EXPORTER") or shutil.which("prometheus-node-exporter") or str(
    ROOT / ".tools" / "node-exporter" / "usr" / "bin" / "prometheus-node-exporter")
#: Series Prometheus makes itself: a target's scrape result, and the rules' alert states.
PROMETHEUS_OWN = {"up", "ALERTS"}
#: PromQL words that are not metric names.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
NEEDS_PROMTOOL = pytest.mark.skipif(not Path(PROMTOOL).is_file(), reason="promtool missing: scripts/setup-deps.sh")
NEEDS_NODE_EXPORTER = pytest.mark.skipif(
    not Path(NODE_EXPORTER).is_file(), reason="prometheus-node-exporter missing: scripts/setup-deps.sh puts it in .tools/")


def render(example: str, **monitoring: Any) -> dict[str, Any]:
    """Rendered files of an example spec (monitoring keys overridden): name -> text."""
    spec = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    spec.setdefault("monitoring", {}).update(monitoring)
    return {n: f.content for n, f in render_cluster(parse_spec(spec, example), base_dir=EXAMPLES).files.items()}


def boards(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {n.removeprefix("grafana/"): json.loads(t) for n, t in files.items() if n.startswith("grafana/")}


#: examples whose spec has Grafana; local switches it on (its spec has it off)
EXAMPLES_WITH_GRAFANA = ["p5-training", "onprem-dgx", "hybrid", "amd-mi300x", "local"]


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, str]]:
    return {e: render(e, grafana=True) for e in EXAMPLES_WITH_GRAFANA}


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def exprs(board: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in panels(board) for t in p["targets"]]
    # a query variable's label_values(selector, label): the selector is PromQL
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.*), *(\w+)\)", v["query"])
            assert m, v["query"]
            out.append(m.group(1))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression: identifiers left once strings, label matchers,
    ranges, grouping clauses, numbers, functions and keywords are taken out."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b", " ", s)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or m.group(0) in KEYWORDS:
            continue  # a function (rate, count, floor, vector, ...) or an operator word
        names.add(m.group(0))
    return names


def test_the_name_extraction_finds_metrics_and_only_metrics() -> None:
    assert metric_names('100 * (1 - avg by (node_group) (rate(node_cpu_seconds_total{job="node",mode="idle"}'
                        '[$__rate_interval])))') == {"node_cpu_seconds_total"}
    assert metric_names("count(floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS{a=\"b\"} / 32) % 2 == 1) or vector(0)") == {
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
    assert metric_names("rate(x_total[5m]) / 1e9 and on (instance) y") == {"x_total", "y"}


# ---------------------------------------------------------------------------------- the schema


def _schema(name: str, ref: str) -> dict[str, Any]:
    s = json.loads((SCHEMA / f"{name}.jsonschema.json").read_text())
    return {"$schema": s["$schema"], "definitions": s["definitions"], "$ref": f"#/definitions/{ref}"}


def _errors(schema: dict[str, Any], instance: Any) -> list[str]:
    v = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in v.iter_errors(instance)]


@pytest.mark.parametrize("example", EXAMPLES_WITH_GRAFANA)
def test_every_dashboard_is_valid_for_grafanas_schema(rendered: dict[str, dict[str, str]], example: str) -> None:
    dashboard = _schema("dashboard", "Dashboard")
    target = _schema("prometheus", "dataquery")
    found = boards(rendered[example])
    assert found, f"{example}: no dashboards rendered"
    for name, b in found.items():
        assert _errors(dashboard, b) == [], name
        for p in panels(b):
            assert p["type"] in ("timeseries", "stat"), p["type"]  # the plugins whose schemas are here
            assert _errors(_schema(p["type"], "Options"), p["options"]) == [], (name, p["title"])
            if p["type"] == "timeseries":
                assert _errors(_schema("timeseries", "FieldConfig"), p["fieldConfig"]["defaults"]["custom"]) == []
            for t in p["targets"]:
                assert _errors(target, t) == [], (name, p["title"])


def test_the_schema_rejects_what_grafana_would_not_load() -> None:
    """The validation can fail: a panel of the real render with an unknown key, a grid position
    wider than Grafana's 24 columns, a target without refId."""
    b = boards(render("p5-training"))["gpus.json"]
    dashboard = _schema("dashboard", "Dashboard")
    bad = json.loads(json.dumps(b))
    bad["panels"][1]["colour"] = "red"
    assert _errors(dashboard, bad)
    bad = json.loads(json.dumps(b))
    bad["panels"][1]["gridPos"]["w"] = 25
    assert _errors(dashboard, bad)
    t = dict(panels(b)[0]["targets"][0])
    del t["refId"]
    assert _errors(_schema("prometheus", "dataquery"), t)


@pytest.mark.parametrize("example", EXAMPLES_WITH_GRAFANA)
def test_panels_and_ids_are_laid_out_once(rendered: dict[str, dict[str, str]], example: str) -> None:
    """Unique uids across dashboards and panel ids within one; no two panels share a grid cell."""
    found = boards(rendered[example])
    uids = [b["uid"] for b in found.values()]
    assert len(uids) == len(set(uids))
    for name, b in found.items():
        ids = [p["id"] for p in b["panels"]]
        assert len(ids) == len(set(ids)), name
        cells: set[tuple[int, int]] = set()
        for p in b["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24, (name, p["title"])
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not mine & cells, (name, p["title"])
            cells |= mine


# --------------------------------------------------------------------------------- the queries


@NEEDS_PROMTOOL
@pytest.mark.parametrize("example", EXAMPLES_WITH_GRAFANA)
def test_promtool_parses_every_query(rendered: dict[str, dict[str, str]], example: str, tmp_path: Path) -> None:
    """Each query, with the variables Grafana would put in, as a recording rule that promtool checks."""
    values = {"$__rate_interval": "2m", "$node_group": "gpu|cpu", "$instance": ".*", "$partition": "gpu"}
    rules = []
    for name, b in boards(rendered[example]).items():
        for i, e in enumerate(exprs(b)):
            for var, value in values.items():
                e = e.replace(var, value)
            assert "$" not in e, (name, e)
            rules.append({"record": f"dashboard:{name.removesuffix('.json').replace('-', '_')}:{i}", "expr": e})
    f = tmp_path / "queries.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, width=100_000))
    p = subprocess.run([PROMTOOL, "check", "rules", str(f)], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert f"SUCCESS: {len(rules)} rules found" in p.stdout + p.stderr


def _csv_fields(text: str) -> set[str]:
    return {ln.split(",")[0].strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")}


def _node_exporter_names() -> set[str]:
    """What Debian 12's node exporter exposes (a capture of the real binary, with its source)."""
    text = (EXPORTERS / "node-exporter-1.5.0-debian12.txt").read_text()
    return {x for x in text.splitlines() if x and not x.startswith("#")}


def _slurm_names() -> dict[str, set[str]]:
    out = {}
    for line in (EXPORTERS / "rivosinc-slurm-exporter-metrics.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, labels = line.partition(" ")
            out[name] = set(filter(None, labels.split(",")))
    return out


def _efa_names(tmp: Path) -> set[str]:
    """What the role's EFA counter script writes for node exporter's textfile collector."""
    text = (efa_textfile(tmp) / "clusterforge-efa.prom").read_text()
    return {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}


@pytest.mark.parametrize("example", EXAMPLES_WITH_GRAFANA)
def test_every_metric_a_panel_reads_is_exposed(rendered: dict[str, dict[str, str]], example: str,
                                               tmp_path: Path) -> None:
    files = rendered[example]
    counters = _csv_fields(files["dcgm/counters.csv"]) if "dcgm/counters.csv" in files else set()
    node, slurm = _node_exporter_names() | _efa_names(tmp_path), _slurm_names()
    read: set[str] = set()
    for name, b in boards(files).items():
        for e in exprs(b):
            for metric in metric_names(e):
                read.add(metric)
                if metric.startswith("DCGM_"):
                    assert metric in counters, f"{name}: {metric} is not in the rendered dcgm/counters.csv"
                elif metric.startswith("node_"):
                    assert metric in node, f"{name}: node exporter has no {metric}"
                elif metric.startswith("slurm_"):
                    assert metric in slurm, f"{name}: the Slurm exporter has no {metric}"
                    # and the labels the query filters or groups by are the exporter's
                    used = set(re.findall(rf"{metric}\{{([^}}]*)\}}", e))
                    for matchers in used:
                        keys = {k for k in re.findall(r"(\w+)\s*[!=]~?", matchers)} - {"job"}
                        assert keys <= slurm[metric], (name, metric, keys)
                else:
                    assert metric in PROMETHEUS_OWN, f"{name}: {metric} comes from no exporter"
    # the families each exporter feeds are all read somewhere
    assert any(x.startswith("node_") for x in read) and any(x.startswith("slurm_") for x in read)
    assert any(x.startswith("DCGM_") for x in read) == ("dcgm/counters.csv" in files)


def test_every_panel_filters_by_job_and_node_group() -> None:
    """A query names its exporter's job (two exporters could export one name) and, for per-node
    series, follows the dashboard's node_group variable."""
    for name, b in boards(render("p5-training")).items():
        for p in panels(b):
            for t in p["targets"]:
                for sel in re.findall(r"\b[A-Za-z_]\w*\{([^}]*)\}", t["expr"]):
                    assert re.search(r'\bjob="(node|dcgm|slurm)"', sel) or "alertstate=" in sel, (name, p["title"], sel)
                per_node = re.search(r"\b(node_\w+|DCGM_\w+)\{", t["expr"])
                if per_node and "hosts up" not in p["title"] and "GPUs reporting" not in p["title"]:
                    assert 'node_group=~"$node_group"' in t["expr"], (name, p["title"])


# -------------------------------------------------------------------- node exporter, for real


def _sysfs_ib(root: Path) -> None:
    """/sys/class/infiniband of a ConnectX-7 port as mlx5 lays it out (state, rate, counters)."""
    d = root / "class" / "infiniband" / "mlx5_0"
    files = {"board_id": "MT_0000000838", "fw_ver": "28.39.1002", "hca_type": "MT4129",
             "node_guid": "0c42:a103:0055:dc1a", "ports/1/state": "4: ACTIVE", "ports/1/phys_state": "5: LinkUp",
             "ports/1/rate": "400 Gb/sec (4X NDR)", "ports/1/link_layer": "InfiniBand"}
    for c in ("excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_link_integrity_errors",
              "multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_constraint_errors", "port_rcv_data",
              "port_rcv_discards", "port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors",
              "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
              "port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets",
              "VL15_dropped"):
        files[f"ports/1/counters/{c}"] = "0"
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text + "\n")


def _sysfs_efa(root: Path) -> None:
    """An EFA device as the efa driver lays it out: no board_id and no counters/ (it has no MAD
    agent); its counters are hw_counters/ (drivers/infiniband/hw/efa/efa_verbs.c port stats)."""
    d = root / "class" / "infiniband" / "rdmap0s6"
    files = {"fw_ver": "0.0.0.0", "node_guid": "0000:0000:0000:0000", "device/vendor": "0x1d0f",
             "ports/1/state": "4: ACTIVE",
             "ports/1/phys_state": "5: LinkUp", "ports/1/rate": "100 Gb/sec (4X EDR)", "ports/1/link_layer": "Unspecified"}
    for c in ("tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes",
              "recv_wrs", "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes",
              "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes", "lifespan"):
        files[f"ports/1/hw_counters/{c}"] = "0"
    files["ports/1/hw_counters/rx_drops"] = "40"
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text + "\n")


EFA_COUNTERS = ROOT / "roles" / "monitoring" / "files" / "clusterforge-efa-counters"


def efa_textfile(tmp: Path) -> Path:
    """The folder the monitoring role's EFA counter script writes, run on an EFA sysfs tree."""
    _sysfs_efa(tmp / "sys-efa")
    out = tmp / "textfile"
    out.mkdir()
    p = subprocess.run([sys.executable, str(EFA_COUNTERS), "--sysfs", str(tmp / "sys-efa"), "--out", str(out)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(sysfs: Path, textfile: Path | None = None) -> str:
    """/metrics of Debian's node exporter on loopback, reading ``sysfs`` instead of /sys (and the
    textfile collector's folder ``textfile``)."""
    port = _free_port()
    extra = [f"--collector.textfile.directory={textfile}"] if textfile else []
    p = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", f"--path.sysfs={sysfs}", *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return str(r.read().decode())
            except OSError as exc:
                if time.monotonic() > end or p.poll() is not None:
                    why = p.stderr.read() if p.stderr else ""
                    raise AssertionError(f"node exporter did not answer on :{port}: {why}") from exc
                time.sleep(0.2)
    finally:
        p.terminate()
        p.wait(10)


def _families(text: str) -> set[str]:
    return {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}


@NEEDS_NODE_EXPORTER
def test_debian_node_exporter_exposes_every_node_metric_dashboards_and_alerts_read(tmp_path: Path) -> None:
    """The package the monitoring role installs, run here on an InfiniBand port's sysfs with the
    EFA counter script's file in its textfile folder: every node_* name a rendered panel or rule
    reads is in its /metrics (the EFA ones through the textfile collector, which parsed the file)."""
    _sysfs_ib(tmp_path / "sys")
    text = _scrape(tmp_path / "sys", efa_textfile(tmp_path))
    exposed = _families(text)
    assert 'node_amazonefa_rx_drops{device="rdmap0s6",port="1"} 40' in text
    assert "node_textfile_scrape_error 0" in text
    read: set[str] = set()
    for example in ("p5-training", "onprem-dgx", "hybrid"):
        for b in boards(render(example)).values():
            read |= {x for e in exprs(b) for x in metric_names(e) if x.startswith("node_")}
        rules = yaml.safe_load((GOLDEN / example / "prometheus" / "alerts.yml").read_text())
        read |= {x for g in rules["groups"] for r in g["rules"] for x in metric_names(r["expr"]) if x.startswith("node_")}
    assert "node_infiniband_symbol_error_total" in read and "node_cpu_seconds_total" in read
    assert read <= exposed, sorted(read - exposed)
    # the capture the other tests read says what this binary says (for every name anything reads)
    assert {x for x in read if not x.startswith("node_amazonefa_")} <= _node_exporter_names()
    assert {"node_amazonefa_rx_drops", "node_amazonefa_rdma_read_wr_err"} <= read


@NEEDS_NODE_EXPORTER
def test_debian_node_exporter_shows_nothing_of_an_efa_port(tmp_path: Path) -> None:
    """Why the EFA counters come from the role's script: with no counters/ folder (EFA has none)
    the infiniband collector of Debian 12's node exporter (1.5.0, procfs 0.8) returns no data at
    all for the device, and no release reads hw_counters/ of an EFA device
    (prometheus/node_exporter#3670 is open)."""
    _sysfs_efa(tmp_path / "sys")
    text = _scrape(tmp_path / "sys")
    version = re.search(r'node_exporter_build_info\{[^}]*version="([^"]+)"', text)
    assert version, text[:500]
    assert 'node_scrape_collector_success{collector="infiniband"}' in text
    if version.group(1).startswith("1.5."):
        assert not [ln for ln in text.splitlines() if ln.startswith("node_infiniband_")]
        assert 'node_scrape_collector_success{collector="infiniband"} 0' in text
    assert "rx_drops" not in text and "rdma_read_wr_err" not in text


# ----------------------------------------------------------------------- derived from the spec


def _var(b: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in b["templating"]["list"] if v["name"] == name)


def _options(v: dict[str, Any]) -> list[str]:
    return [o["value"] for o in v["options"] if o["value"] != "$__all"]


def test_dashboards_follow_the_local_example(rendered: dict[str, dict[str, str]]) -> None:
    """examples/local.yaml: groups ctl, login, gpu (2 nodes of 8 H100), cpu (2 nodes), partitions
    gpu, cpu, all; an Ethernet fabric only."""
    found = boards(rendered["local"])
    assert sorted(found) == ["cluster-overview.json", "fabric.json", "gpus.json", "slurm.json"]
    overview, gpus, fabric, slurm = (found[f"{n}.json"] for n in ("cluster-overview", "gpus", "fabric", "slurm"))
    assert _options(_var(overview, "node_group")) == ["ctl", "login", "gpu", "cpu"]
    assert _options(_var(gpus, "node_group")) == ["gpu"]
    assert _options(_var(slurm, "partition")) == ["gpu", "cpu", "all"]
    assert _options(_var(slurm, "node_group")) == ["gpu", "cpu"]
    stats = {p["title"]: p for p in panels(overview) if p["type"] == "stat"}
    # green from the host count the spec has, the GPUs the profile has
    for title, green in (("ctl: hosts up", 1), ("gpu: hosts up", 2), ("cpu: hosts up", 2), ("gpu: GPUs reporting", 16)):
        steps = stats[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert steps[-1] == {"value": green, "color": "green"}, (title, steps)
    assert stats["gpu: GPUs reporting"]["targets"][0]["expr"] == (
        'count(DCGM_FI_DEV_GPU_TEMP{job="dcgm",node_group="gpu"}) or vector(0)')
    assert "gpu: GPUs reporting" not in stats or "cpu: GPUs reporting" not in stats
    rows = [p["title"] for p in fabric["panels"] if p["type"] == "row"]
    assert rows == ["NVLink (gpu)", "Ethernet"]  # no RDMA ports on an Ethernet fabric
    titles = [p["title"] for p in panels(gpus)]
    for want in ("GPU utilisation", "GPU memory used", "GPU temperature", "Power draw",
                 "GPUs per clock-event reason", "Xid errors"):
        assert want in titles
    util = next(p for p in panels(gpus) if p["title"] == "GPU utilisation")
    assert util["fieldConfig"]["defaults"]["thresholds"]["steps"][1] == {"value": 70, "color": "green"}
    assert util["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"] == {"mode": "dashed"}


def test_fabric_rows_follow_the_groups_fabrics() -> None:
    """p5-training: EFA on gpu (its counters from the role's script, said on the panels); onprem-dgx: InfiniBand;
    amd-mi300x has no NVIDIA GPUs: no GPU dashboard, no NVLink row."""
    p5 = boards(render("p5-training"))["fabric.json"]
    rows = [p["title"] for p in p5["panels"] if p["type"] == "row"]
    assert rows[0] == "RDMA ports (efa: gpu)", rows
    state = next(p for p in panels(p5) if p["title"] == "Port state")
    assert "EFA ports are not in these node_infiniband panels" in state["description"]
    assert "prometheus/node_exporter#3670" in state["description"]
    errors = next(p for p in panels(p5) if p["title"] == "EFA errors")
    assert [t["expr"] for t in errors["targets"]] == [
        f'increase(node_amazonefa_{c}{{job="node",node_group=~"$node_group",instance=~"$instance"}}'
        '[$__rate_interval]) > 0' for c in ("rx_drops", "rdma_read_wr_err", "rdma_write_wr_err")]
    dgx = boards(render("onprem-dgx"))["fabric.json"]
    assert next(p["title"] for p in dgx["panels"] if p["type"] == "row").startswith("RDMA ports (infiniband:")
    assert "EFA" not in next(p for p in panels(dgx) if p["title"] == "Port state")["description"]
    assert not [p for p in panels(dgx) if p["title"].startswith("EFA")]
    amd = boards(render("amd-mi300x"))
    assert "gpus.json" not in amd
    assert not [p for p in amd["fabric.json"]["panels"] if p["title"].startswith("NVLink")]


def test_no_grafana_no_dashboards() -> None:
    assert not boards(render("p5-training", grafana=False))
    assert not boards(render("p5-training", prometheus=False))
    # examples/local.yaml as it is: Grafana off
    spec = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
    assert not spec["monitoring"].get("grafana", True) or boards(render("local"))


def test_the_data_source_is_the_one_the_role_provisions() -> None:
    role = yaml.safe_load((ROOT / "roles" / "monitoring" / "vars" / "main.yml").read_text())
    uid = role["__monitoring_grafana_datasource_data"]["datasources"][0]["uid"]
    b = boards(render("p5-training"))["gpus.json"]
    refs = {json.dumps(p["datasource"], sort_keys=True) for p in panels(b)}
    refs |= {json.dumps(t["datasource"], sort_keys=True) for p in panels(b) for t in p["targets"]}
    assert refs == {json.dumps({"type": "prometheus", "uid": uid}, sort_keys=True)}


def test_dashboards_are_golden_and_stable() -> None:
    """The goldens hold the dashboards of every example with Grafana; a second render is the same
    bytes; a change of a dashboard restarts nothing."""
    a, b = render("p5-training"), render("p5-training")
    assert {n: t for n, t in a.items() if n.startswith("grafana/")} == {n: t for n, t in b.items() if n.startswith("grafana/")}
    for example in ("p5-training", "onprem-dgx", "hybrid", "amd-mi300x"):
        assert sorted(p.name for p in (GOLDEN / example / "grafana").iterdir()) == sorted(
            n.removeprefix("grafana/") for n in render(example) if n.startswith("grafana/"))
    manifest = json.loads((GOLDEN / "p5-training" / "manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["name"] == "grafana/gpus.json")
    assert entry["node_path"] == "/var/lib/grafana/dashboards/clusterforge/gpus.json"
    assert entry["on_change"]["action"] == "none" and entry["on_change"]["restart"] == []
    assert entry["daemons"] == ["grafana"]
