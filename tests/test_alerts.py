"""Alerting rules rendered from the spec: accepted by the real promtool, and they fire as they should.

* every golden ``prometheus/alerts.yml`` passes ``promtool check rules --lint-fatal``;
* ``tests/promtool/*.test.yml`` feed the series failing nodes produce (a node gone, a GPU fallen
  off the bus, Xid codes, a missing mount, a full /) and name the alerts an operator must see:
  ``promtool test rules`` evaluates the golden rules against them;
* the rules follow the spec (GPU counts per group, mounts, scrape interval, exporters switched off);
* on the local cluster, Prometheus loads the installed rules and a stopped exporter raises
  NodeExporterDown (tests/test_local_cluster.py).

promtool comes from Debian's prometheus package (scripts/setup-deps.sh puts it in .tools/).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterforge.clusterspec import load_spec
from clusterforge.render import render_cluster, restart
from clusterforge.render.writer import render_tree

from .conftest import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
RULE_TESTS = sorted((ROOT / "tests" / "promtool").glob("*.test.yml"))
PROMTOOL = shutil.which("promtool") or str(ROOT / ".tools" / "prometheus" / "usr" / "bin" / "promtool")
needs_promtool = pytest.mark.skipif(
    not Path(PROMTOOL).is_file(), reason="promtool missing: scripts/setup-deps.sh puts it in .tools/prometheus"
)
GOLDEN_RULES = sorted(GOLDEN.glob("*/prometheus/alerts.yml"))


def rules(spec_text: str, tmp_path: Path) -> dict[str, list[dict[str, object]]]:
    """alert name -> its rules, for the spec text (rendered as ``clusterforge render`` does)."""
    (tmp_path / "s.yaml").write_text(spec_text)
    tree = render_tree(render_cluster(load_spec(tmp_path / "s.yaml"), base_dir=EXAMPLES))
    if "prometheus/alerts.yml" not in tree:
        return {}
    out: dict[str, list[dict[str, object]]] = {}
    for g in yaml.safe_load(tree["prometheus/alerts.yml"])["groups"]:
        for r in g["rules"]:
            out.setdefault(r["alert"], []).append(r)
    return out


def test_every_example_with_prometheus_has_rules() -> None:
    # the examples that ask for Prometheus (local-aws leaves monitoring off to keep its run short)
    with_prometheus = {p.stem for p in EXAMPLES.glob("*.yaml") if load_spec(p).monitoring.prometheus}
    assert "local-aws" not in with_prometheus and "local" in with_prometheus
    assert {p.parent.parent.name for p in GOLDEN_RULES} == with_prometheus


@needs_promtool
@pytest.mark.parametrize("path", GOLDEN_RULES, ids=lambda p: p.parent.parent.name)
def test_promtool_accepts_golden_rules(path: Path) -> None:
    p = subprocess.run([PROMTOOL, "check", "rules", "--lint-fatal", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout


@needs_promtool
@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_rules_fire_for_real_failures(path: Path) -> None:
    p = subprocess.run([PROMTOOL, "test", "rules", path.name], cwd=path.parent, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_rule_unit_tests_cover_every_alert() -> None:
    """Each alert of every example is named, firing, by at least one promtool test case."""
    named = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            named |= {t["alertname"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    alerts = {r["alert"] for path in GOLDEN_RULES for g in yaml.safe_load(path.read_text())["groups"]
              for r in g["rules"]}
    assert {"GpuLowUtilisation", "GpuThermalThrottling", "GpuNvlinkErrors", "IbPortRateLow",
            "EfaPortNotActive", "EfaErrors"} <= alerts
    assert alerts - {"DcgmExporterDown"} <= named, sorted(alerts - named)


# ------------------------------------------------------------ the metrics the rules read exist

EXPORTERS = ROOT / "tests" / "fixtures" / "exporters"
#: DCGM fields enabled beyond the package's default file that are not in it even as a comment:
#: go-dcgm's field-name table (pkg/dcgm/const_fields.go, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 112,
#: the name dcgm-exporter maps a CSV line through) and dcgm-exporter's clock_events_collector.go,
#: which watches that field.
GO_DCGM_ONLY = {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}


def _csv_fields(text: str, commented: bool) -> set[str]:
    """Field names of a counters file: its active lines, or (commented) its '# DCGM_...' lines too."""
    out = set()
    for line in text.splitlines():
        s = line.strip()
        if commented and s.startswith("# DCGM_"):
            s = s[2:]
        if s and not s.startswith("#"):
            out.add(s.split(",")[0].strip())
    return out


def _metrics(expr: str, prefix: str) -> set[str]:
    """Metric names with ``prefix`` in a PromQL expression (a name is followed by its selector)."""
    return set(re.findall(rf"\b({prefix}\w+)\{{", expr))


def _exprs(path: Path) -> list[str]:
    return [r["expr"] for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


@pytest.mark.parametrize("path", GOLDEN_RULES, ids=lambda p: p.parent.parent.name)
def test_every_dcgm_field_a_rule_reads_is_in_the_counters_file(path: Path) -> None:
    read = set().union(*(_metrics(e, "DCGM_") for e in _exprs(path)))
    counters = path.parent.parent / "dcgm" / "counters.csv"
    if not read:
        assert path.parent.parent.name == "amd-mi300x"  # no NVIDIA GPUs, no DCGM rules
        return
    assert counters.is_file(), f"{path} reads {sorted(read)} but the render has no dcgm/counters.csv"
    enabled = _csv_fields(counters.read_text(), commented=False)
    assert read <= enabled, sorted(read - enabled)
    # the throttling and NVLink fields the package's file comments out are switched on here
    upstream = (EXPORTERS / "dcgm-exporter-default-counters.csv").read_text()
    assert {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION"} & (
        _csv_fields(upstream, commented=False)) == set()
    assert {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"} <= read


def test_the_counters_file_is_the_package_defaults_plus_real_fields() -> None:
    upstream = (EXPORTERS / "dcgm-exporter-default-counters.csv").read_text()
    ours = _csv_fields((GOLDEN / "p5-training" / "dcgm" / "counters.csv").read_text(), commented=False)
    assert _csv_fields(upstream, commented=False) <= ours  # nothing the package exports is lost
    known = _csv_fields(upstream, commented=True) | GO_DCGM_ONLY
    assert ours <= known, sorted(ours - known)
    # dcgm-exporter reads three comma-separated fields a line: a comma in a help text breaks the file
    lines = [x for x in (GOLDEN / "p5-training" / "dcgm" / "counters.csv").read_text().splitlines()
             if x and not x.startswith("#")]
    assert lines and all(len(x.split(",")) == 3 for x in lines)


@pytest.mark.parametrize("path", GOLDEN_RULES, ids=lambda p: p.parent.parent.name)
def test_every_node_exporter_metric_a_rule_reads_exists(path: Path) -> None:
    """Against the names node_exporter's own end-to-end test output has (fixture with its source)."""
    exposed = {x for x in (EXPORTERS / "node_exporter_metrics.txt").read_text().splitlines()
               if x and not x.startswith("#")}
    read = set().union(*(_metrics(e, "node_") for e in _exprs(path)))
    # EFA's counters reach node exporter through its textfile collector, from the monitoring role's
    # clusterforge-efa-counters (tests/test_dashboards.py runs it and Debian's node exporter on it)
    efa = {m for m in read if m.startswith("node_amazonefa_")}
    script = (ROOT / "roles" / "monitoring" / "files" / "clusterforge-efa-counters").read_text()
    assert all(f'"{m.removeprefix("node_amazonefa_")}":' in script for m in efa), sorted(efa)
    read -= efa
    assert read and read <= exposed, sorted(read - exposed)


def test_fabric_rules_follow_the_node_groups(tmp_path: Path) -> None:
    hybrid = rules((EXAMPLES / "hybrid.yaml").read_text(), tmp_path)
    # dgx (InfiniBand, 8 compute HCAs at 400 Gb/s from the dgx-h100 profile), burst (p5, EFA)
    (rate,) = hybrid["IbPortRateLow"]
    assert rate["expr"] == ('node_infiniband_rate_bytes_per_second{job="node",node_group="dgx",'
                            'device=~"mlx5_0|mlx5_3|mlx5_4|mlx5_5|mlx5_6|mlx5_9|mlx5_10|mlx5_11"} < 50000000000')
    assert [r["labels"]["node_group"] for r in hybrid["EfaPortNotActive"]] == ["burst"]
    local = rules((EXAMPLES / "local.yaml").read_text(), tmp_path)  # ethernet only
    assert not {"IbPortRateLow", "IbPortNotActive", "EfaPortNotActive"} & set(local)
    assert "GpuLowUtilisation" in local


def test_gpu_count_per_group_comes_from_the_profile(tmp_path: Path) -> None:
    spec = (EXAMPLES / "hybrid.yaml").read_text()
    got = {r["labels"]["node_group"]: r["expr"] for r in rules(spec, tmp_path)["GpuMissing"]}
    assert set(got) == {"dgx", "burst"}
    assert got["dgx"].endswith('node_group="dgx"}) < 8')
    amd = rules((EXAMPLES / "amd-mi300x.yaml").read_text(), tmp_path)
    assert not {"GpuMissing", "DcgmExporterDown"} & set(amd), "DCGM rules for AMD GPUs"


def test_each_spec_mount_is_watched_on_compute_nodes(tmp_path: Path) -> None:
    got = rules((EXAMPLES / "p5-training.yaml").read_text(), tmp_path)["SharedStorageNotMounted"]
    assert sorted(r["labels"]["mountpoint"] for r in got) == ["/fsx", "/home"]
    assert all('node_group=~"cpu|gpu"' in r["expr"] for r in got)  # not head or login
    local = rules((EXAMPLES / "local.yaml").read_text(), tmp_path)["SharedStorageNotMounted"]
    assert [r["labels"]["mountpoint"] for r in local] == ["/shared"]
    bare = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
    del bare["storage"]  # a spec without shared storage watches no mount
    assert "SharedStorageNotMounted" not in rules(yaml.safe_dump(bare), tmp_path)


def test_rules_follow_the_monitoring_section(tmp_path: Path) -> None:
    spec = (EXAMPLES / "p5-training.yaml").read_text()
    assert "monitoring:" not in spec  # the defaults: every exporter, 30 s scrapes
    assert rules(spec, tmp_path)["NodeExporterDown"][0]["for"] == "120s"
    slow = rules(spec + "monitoring: {scrape_interval_s: 60}\n", tmp_path)
    assert slow["NodeExporterDown"][0]["for"] == "180s"  # three missed scrapes
    no_dcgm = rules(spec + "monitoring: {dcgm_exporter: false}\n", tmp_path)
    assert "NodeExporterDown" in no_dcgm and not any(a.startswith("Gpu") for a in no_dcgm)
    assert rules(spec + "monitoring: {prometheus: false}\n", tmp_path) == {}


def test_changed_rules_touch_no_slurm_daemon() -> None:
    """The restart policy (what the diff and the role obey) on a manifest whose alert rules changed."""
    old = render_cluster(load_spec(EXAMPLES / "p5-training.yaml"), base_dir=EXAMPLES).manifest()
    files = tuple(
        f.model_copy(update={"sha256": "0" * 64}) if f.name == "prometheus/alerts.yml" else f for f in old.files
    )
    (imp,) = restart.impacts(old, old.model_copy(update={"files": files}))
    assert imp.file == "prometheus/alerts.yml"
    assert imp.cls is restart.ImpactClass.NONE and "Prometheus" in imp.why and not imp.slurmd_nodes


def test_promql_is_written_as_is() -> None:
    # Jinja's tojson wrote PromQL's "<" as "\u003c" (HTML escaping); safe_dump writes it verbatim.
    text = (GOLDEN / "p5-training/prometheus/alerts.yml").read_text()
    assert "\\u003c" not in text
    assert ('expr: count by (instance, node_group) (DCGM_FI_DEV_GPU_TEMP{job="dcgm",node_group="gpu"}) < 8\n'
            in text)
    rules = {r["alert"]: r for g in yaml.safe_load(text)["groups"] for r in g["rules"]}
    assert rules["GpuMissing"]["expr"] == (
        'count by (instance, node_group) (DCGM_FI_DEV_GPU_TEMP{job="dcgm",node_group="gpu"}) < 8'
    )
    assert rules["GpuMissing"]["labels"] == {"severity": "critical", "cluster": "p5-training", "node_group": "gpu"}
    assert rules["GpuXidFellOffBus"]["expr"] == 'DCGM_FI_DEV_XID_ERRORS{job="dcgm"} == 79'
    assert "for" not in rules["GpuXidFellOffBus"]  # fires at once
