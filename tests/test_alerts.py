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
    """Each alert of the richest example is named by at least one promtool test case."""
    named = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            named |= {t["alertname"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    alerts = {r["alert"] for g in yaml.safe_load((GOLDEN / "p5-training/prometheus/alerts.yml").read_text())["groups"]
              for r in g["rules"]}
    assert alerts - {"DcgmExporterDown"} <= named, sorted(alerts - named)


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
    assert "SharedStorageNotMounted" not in rules((EXAMPLES / "local.yaml").read_text(), tmp_path)


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
