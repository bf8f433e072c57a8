"""Alertmanager's configuration rendered from the spec, checked by the real amtool (Debian's
prometheus-alertmanager, extracted into .tools/alertmanager by scripts/setup-deps.sh):

* every golden alertmanager.yml passes ``amtool check-config``;
* ``amtool config routes test`` sends label sets through the rendered routes of a spec with
  receivers: severity critical to the pager, a node group to its team, the rest to the default;
* a down node's other alerts are inhibited (the end-to-end check of the real Alertmanager
  belongs to the local cluster test: Debian's binary reads its templates from /usr/share);
* receivers' secrets stay names in the spec and file paths in the render;
* a route to an unknown receiver or node group is refused with the field and the fix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterforge.clusterspec import parse_spec
from clusterforge.clusterspec.rules import validate
from clusterforge.errors import SpecError
from clusterforge.inventory import generate_inventory
from clusterforge.render import render_cluster
from clusterforge.resolve import resolve_file

from .conftest import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
TOOLS = ROOT / ".tools" / "alertmanager" / "usr" / "bin"
AMTOOL = shutil.which("amtool") or str(TOOLS / "amtool")
needs_amtool = pytest.mark.skipif(
    not Path(AMTOOL).is_file(), reason="amtool missing: scripts/setup-deps.sh puts it in .tools/alertmanager"
)
GOLDEN_CONFIGS = sorted(GOLDEN.glob("*/alertmanager/alertmanager.yml"))

RECEIVERS = {
    "receivers": [
        {"type": "webhook", "name": "ops", "url": "http://ops.example:9000/hook"},
        {"type": "slack", "name": "pager", "api_url_secret": "slack_pager_url", "channel": "#gpu-oncall"},
        {"type": "webhook", "name": "cpu-team", "url": "https://cpu.example/hook",
         "bearer_token_secret": "cpu_team_token"},
    ],
    "routes": [
        {"receiver": "pager", "severity": "critical"},
        {"receiver": "cpu-team", "node_groups": ["cpu"]},
    ],
}


def _spec(alertmanager: dict[str, Any]) -> dict[str, Any]:
    d = yaml.safe_load((EXAMPLES / "p5-training.yaml").read_text())
    d["monitoring"] = {"alertmanager": alertmanager}
    return d


def _render(alertmanager: dict[str, Any], tmp_path: Path) -> Path:
    files = render_cluster(parse_spec(_spec(alertmanager), "test"), base_dir=EXAMPLES).files
    out = tmp_path / "alertmanager.yml"
    out.write_text(files["alertmanager/alertmanager.yml"].content)
    return out


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


def test_every_example_with_prometheus_has_an_alertmanager_config() -> None:
    rules = {p.parent.parent.name for p in GOLDEN.glob("*/prometheus/alerts.yml")}
    assert {p.parent.parent.name for p in GOLDEN_CONFIGS} == rules
    for p in GOLDEN_CONFIGS:
        manifest = json.loads((p.parent.parent / "manifest.json").read_text())
        (entry,) = [f for f in manifest["files"] if f["name"] == "alertmanager/alertmanager.yml"]
        assert entry["node_path"] == "/etc/prometheus/alertmanager.yml"  # Debian's default path
        assert entry["secret_refs"] == [] and entry["mode"] == "0644"


@needs_amtool
@pytest.mark.parametrize("path", GOLDEN_CONFIGS, ids=lambda p: p.parent.parent.name)
def test_amtool_accepts_golden_configs(path: Path) -> None:
    p = _amtool("check-config", str(path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout and "1 inhibit rules" in p.stdout, p.stdout


@needs_amtool
def test_routes_send_each_alert_to_its_receiver(tmp_path: Path) -> None:
    conf = _render(RECEIVERS, tmp_path)
    p = _amtool("check-config", str(conf))
    assert p.returncode == 0 and "3 receivers" in p.stdout, p.stdout + p.stderr
    cases = [
        (["alertname=GpuMissing", "severity=critical", "node_group=gpu"], "pager"),
        (["alertname=NodeExporterDown", "severity=critical", "node_group=cpu"], "pager"),  # first match wins
        (["alertname=NodeRootFilesystemFull", "severity=warning", "node_group=cpu"], "cpu-team"),
        (["alertname=GpuLowUtilisation", "severity=warning", "node_group=gpu"], "ops"),  # the default
    ]
    for labels, receiver in cases:
        p = _amtool("config", "routes", "test", f"--config.file={conf}", f"--verify.receivers={receiver}", *labels)
        assert p.returncode == 0, (labels, p.stdout + p.stderr)
        assert p.stdout.strip() == receiver, (labels, p.stdout)


@needs_amtool
def test_a_spec_without_receivers_keeps_alerts_in_alertmanager(tmp_path: Path) -> None:
    conf = _render({}, tmp_path)
    p = _amtool("config", "routes", "test", f"--config.file={conf}", "severity=critical")
    assert p.returncode == 0 and p.stdout.strip() == "none", p.stdout + p.stderr


def test_secrets_are_names_in_the_spec_and_files_in_the_render(tmp_path: Path) -> None:
    data = yaml.safe_load(_render(RECEIVERS, tmp_path).read_text())
    by_name = {r["name"]: r for r in data["receivers"]}
    assert by_name["pager"]["slack_configs"][0]["api_url_file"] == (
        "/etc/prometheus/alertmanager-secrets/slack_pager_url")
    assert by_name["cpu-team"]["webhook_configs"][0]["http_config"] == {
        "authorization": {"type": "Bearer", "credentials_file": "/etc/prometheus/alertmanager-secrets/cpu_team_token"}}
    assert "api_url" not in by_name["pager"]["slack_configs"][0]
    # the configure step asks the vault for exactly these names
    onprem = yaml.safe_load((EXAMPLES / "onprem-dgx.yaml").read_text())  # no Pulumi stack needed
    onprem["monitoring"] = {"alertmanager": RECEIVERS}
    assert onprem["accounting"]["enabled"]
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(onprem))
    inv = generate_inventory(resolve_file(spec), out_dir=tmp_path / "inv")
    assert inv.inventory.all_vars["clusterforge_secret_names"] == ["slurmdbd_storage_pass", "slack_pager_url", "cpu_team_token"]


@pytest.mark.parametrize(("alertmanager", "message"), [
    ({"receivers": [{"type": "webhook", "name": "ops", "url": "http://h/x"}],
      "routes": [{"receiver": "pager", "severity": "critical"}]},
     "alertmanager.routes[0].receiver 'pager' names no receiver"),
    ({"receivers": [{"type": "webhook", "name": "ops", "url": "http://h/x"},
                    {"type": "webhook", "name": "ops", "url": "http://h/y"}]},
     "names ['ops'] appear more than once"),
    ({"receivers": [{"type": "webhook", "name": "ops", "url": "http://h/x"}], "routes": [{"receiver": "ops"}]},
     "matches every alert; give severity and/or node_groups"),
    ({"receivers": [{"type": "webhook", "name": "ops", "url": "https://user:pw@h/x"}]}, "url"),
    ({"receivers": [{"type": "slack", "name": "pager", "api_url_secret": "https://hooks.slack.com/x",
                     "channel": "#a"}]}, "api_url_secret"),
])
def test_bad_alertmanager_sections_are_refused(alertmanager: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(_spec(alertmanager), "test")
    assert message in str(e.value), str(e.value)


def test_a_route_to_an_unknown_node_group_is_an_error() -> None:
    spec = parse_spec(_spec({"receivers": [{"type": "webhook", "name": "ops", "url": "http://h/x"}],
                             "routes": [{"receiver": "ops", "node_groups": ["gpux"]}]}), "test")
    found = [f for f in validate(spec, EXAMPLES) if f.code == "unknown-alert-node-group"]
    assert found and found[0].path == "monitoring.alertmanager.routes[0].node_groups[0]" and "gpu" in found[0].fix


def test_a_down_node_mutes_its_other_alerts() -> None:
    """The inhibition (written by hand from Alertmanager's configuration docs): NodeExporterDown
    mutes every other alert of the same cluster and instance, and not itself."""
    data = yaml.safe_load((GOLDEN / "p5-training" / "alertmanager" / "alertmanager.yml").read_text())
    assert data["inhibit_rules"] == [{
        "source_matchers": ['alertname="NodeExporterDown"'],
        "target_matchers": ['alertname!="NodeExporterDown"'],
        "equal": ["cluster", "instance"],
    }]
    # the node's alerts carry the instance label the inhibition compares (the rules keep it)
    rules = yaml.safe_load((GOLDEN / "p5-training" / "prometheus" / "alerts.yml").read_text())
    assert all("instance" in r["annotations"]["summary"] for g in rules["groups"] for r in g["rules"])
