"""The monitoring role's configuration files, written for real by ``ansible-playbook``.

The role builds prometheus.yml and Grafana's provisioning files as data (roles/monitoring/vars/
main.yml) and dumps them with to_nice_yaml, and installs the rendered alertmanager.yml with the
receivers' secret files. Here its file task files (tasks/prometheus_config.yml,
tasks/alertmanager_config.yml, tasks/grafana_provisioning.yml) run on this machine (connection local) as the local example's
monitoring server, with every path under a temporary root and the handlers replaced by recorders
of the same names. The expected contents are written by hand: they are what the Jinja templates the
data replaced wrote for this example (the same jobs, targets, labels and intervals).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterforge.clusterspec import parse_spec
from clusterforge.inventory import generate_inventory
from clusterforge.render import render_cluster
from clusterforge.resolve import resolve_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROMTOOL = shutil.which("promtool") or str(ROOT / ".tools" / "prometheus" / "usr" / "bin" / "promtool")
AMTOOL = shutil.which("amtool") or str(ROOT / ".tools" / "alertmanager" / "usr" / "bin" / "amtool")
HANDLERS = ["Restart prometheus", "Reload alertmanager", "Restart grafana"]
# the local example with a Slack receiver for critical alerts and a webhook for the rest
RECEIVERS = {
    "receivers": [
        {"type": "webhook", "name": "ops", "url": "http://10.79.0.10:9099/alerts"},
        {"type": "slack", "name": "pager", "api_url_secret": "slack_pager_url", "channel": "#gpu-oncall"},
    ],
    "routes": [{"receiver": "pager", "severity": "critical"}],
}
SLACK_URL = "https://hooks.slack.example/services/T000/B000/unit-test-secret"

pytestmark = [
    pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed"),
    pytest.mark.skipif(not Path(PROMTOOL).is_file(), reason="promtool missing: scripts/setup-deps.sh puts it in .tools/"),
    pytest.mark.skipif(not Path(AMTOOL).is_file(), reason="amtool missing: scripts/setup-deps.sh puts it in .tools/"),
    # the tasks write root-owned files (owner: root), as they do on a node
    pytest.mark.skipif(os.geteuid() != 0, reason="the role's file tasks chown to root"),
]


def _node(addr: str, port: int, host: str, group: str) -> dict[str, Any]:
    return {"targets": [f"{addr}:{port}"], "labels": {"instance": host, "node_group": group}}


def _expected_prometheus(rules: str) -> dict[str, Any]:
    """examples/local.yaml: 6 hosts (sorted by name), 2 NVIDIA GPU nodes, scraped every 10 s."""
    hosts = [("10.79.0.31", "cpu-001", "cpu"), ("10.79.0.32", "cpu-002", "cpu"), ("10.79.0.10", "ctl", "ctl"),
             ("10.79.0.21", "gpu-001", "gpu"), ("10.79.0.22", "gpu-002", "gpu"), ("10.79.0.11", "login", "login")]
    return {
        "global": {"scrape_interval": "10s", "scrape_timeout": "10s", "evaluation_interval": "10s",
                   "external_labels": {"cluster": "local"}},
        "rule_files": [rules],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": ["localhost:9093"]}]}]},
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]},
            {"job_name": "node", "static_configs": [_node(a, 9100, h, g) for a, h, g in hosts]},
            {"job_name": "dcgm", "static_configs": [_node("10.79.0.21", 9400, "gpu-001", "gpu"),
                                                    _node("10.79.0.22", 9400, "gpu-002", "gpu")]},
        ],
    }


def _expected_datasource() -> dict[str, Any]:
    return {"apiVersion": 1, "datasources": [{
        "name": "Prometheus", "uid": "clusterforge-prometheus", "type": "prometheus", "access": "proxy",
        "url": "http://localhost:9090", "isDefault": True, "editable": False,
    }]}


def _expected_dashboards(path: str) -> dict[str, Any]:
    return {"apiVersion": 1, "providers": [{
        "name": "clusterforge", "folder": "local", "type": "file", "disableDeletion": True,
        "allowUiUpdates": False, "updateIntervalSeconds": 30, "options": {"path": path},
    }]}


class _Setup:
    """The local example's inventory and render, the role copy with recording handlers, the play."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "root"
        self.log = tmp / "handlers.log"
        spec = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
        spec.setdefault("monitoring", {})["alertmanager"] = RECEIVERS
        spec["monitoring"]["grafana"] = True  # off in the example (its nodes have no Grafana repository)
        (tmp / "local.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))  # no relative paths in it
        inv = generate_inventory(resolve_file(tmp / "local.yaml"), out_dir=tmp / "inv").out_dir
        result = render_cluster(parse_spec(spec, "test"), base_dir=EXAMPLES)
        render = tmp / "render"
        for name, f in result.files.items():
            (render / name).parent.mkdir(parents=True, exist_ok=True)
            (render / name).write_text(f.content)
        m = result.manifest()
        moved = m.model_copy(update={"files": tuple(
            f.model_copy(update={"node_path": str(self.root) + f.node_path}) for f in m.files
        )})
        (render / "manifest.json").write_text(moved.to_text())
        self.rules = str(self.root) + "/etc/prometheus/rules/clusterforge.yml"
        assert self.rules in [f.node_path for f in moved.files]  # the renderer's path, moved

        roles = tmp / "roles"
        shutil.copytree(ROOT / "roles" / "monitoring", roles / "monitoring")
        (roles / "monitoring" / "handlers" / "main.yml").write_text(yaml.safe_dump([
            {"name": t, "ansible.builtin.shell": f"echo '{t}' >> {self.log}", "changed_when": True}
            for t in HANDLERS
        ], sort_keys=False))
        self.prometheus_yml = self.root / "etc" / "prometheus" / "prometheus.yml"
        self.provisioning = self.root / "etc" / "grafana" / "provisioning"
        # the render's folder of the dashboards, moved under the root (the role follows node_path)
        self.dashboards = str(self.root / "var" / "lib" / "grafana" / "dashboards" / "clusterforge")
        self.alertmanager_yml = Path(str(self.root) + "/etc/prometheus/alertmanager.yml")
        assert str(self.alertmanager_yml) in [f.node_path for f in moved.files]
        self.secrets = self.root / "etc" / "prometheus" / "alertmanager-secrets"
        self.prometheus_yml.parent.mkdir(parents=True)
        (tmp / "vars.yml").write_text(yaml.safe_dump({
            "ansible_python_interpreter": sys.executable,
            "clusterforge_manifest_dir": str(render),
            "__monitoring_prometheus_config": str(self.prometheus_yml),
            "__monitoring_grafana_provisioning_dir": str(self.provisioning),
            "__monitoring_alertmanager_secrets_dir": str(self.secrets),
            # no prometheus user here; on a node the group lets Alertmanager read the secrets
            "__monitoring_alertmanager_group": "root",
            # in the test as a vault would give it (the real run reads an Ansible Vault file)
            "clusterforge_secrets": {"slack_pager_url": SLACK_URL, "slurmdbd_storage_pass": "unused"},
        }))
        (tmp / "play.yml").write_text(yaml.safe_dump([{
            "name": "Monitoring role files", "hosts": "monitoring_server", "gather_facts": False,
            "tasks": [
                {"name": "Prometheus",
                 "ansible.builtin.import_role": {"name": "monitoring", "tasks_from": "prometheus_config.yml"}},
                {"name": "Alertmanager",
                 "ansible.builtin.import_role": {"name": "monitoring", "tasks_from": "alertmanager_config.yml"}},
                {"name": "Grafana",
                 "ansible.builtin.import_role": {"name": "monitoring", "tasks_from": "grafana_provisioning.yml"}},
            ],
        }], sort_keys=False))
        self.cmd = ["ansible-playbook", "-i", str(inv), "-c", "local", "-e", f"@{tmp / 'vars.yml'}", str(tmp / "play.yml")]
        self.env = {
            **os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(roles),
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            # the validate commands call promtool and amtool by name, as on a node
            "PATH": os.pathsep.join([str(Path(PROMTOOL).parent), str(Path(AMTOOL).parent), os.environ.get("PATH", "")]),
        }

    def run(self, *extra: str) -> tuple[str, int, list[str]]:
        """Output, the host's changed count, the handlers that ran."""
        self.log.unlink(missing_ok=True)
        t0 = time.monotonic()
        p = subprocess.run([*self.cmd, *extra], capture_output=True, text=True, timeout=300, cwd=self.tmp,
                           env=self.env, check=False)
        assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
        print(f"ansible-playbook {' '.join(extra)}: {time.monotonic() - t0:.1f} s")
        m = re.search(r"^ctl\s+: ok=\d+\s+changed=(\d+)", p.stdout, re.M)
        assert m, p.stdout[-2000:]
        ran = self.log.read_text().splitlines() if self.log.exists() else []
        return p.stdout, int(m.group(1)), ran

    def files(self) -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()}


def test_the_role_writes_its_config_from_data(tmp_path: Path) -> None:
    """First run writes every file and notifies the three handlers; the files are what the templates
    wrote; the dashboards are the render's (a stale one is removed); promtool accepts prometheus.yml,
    amtool alertmanager.yml; a second run changes nothing (same bytes); a check run with another
    scrape interval shows the diff and writes nothing."""
    s = _Setup(tmp_path)
    # a dashboard an earlier render had (the spec lost its GPU groups since): the run removes it
    Path(s.dashboards).mkdir(parents=True)
    (Path(s.dashboards) / "old-gpus.json").write_text("{}")
    out, changed, ran = s.run()
    assert changed > 0 and ran == HANDLERS

    text = s.prometheus_yml.read_text()
    assert text.startswith("# Managed by clusterforge (Ansible): local changes are overwritten.\n"
                           "# Targets generated from the inventory of cluster local.\n"), text[:300]
    p = subprocess.run([PROMTOOL, "check", "config", str(s.prometheus_yml)], capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 rule files found" in p.stdout + p.stderr, p.stdout + p.stderr  # rule_files point at the installed rules
    assert yaml.safe_load(text) == _expected_prometheus(s.rules)
    assert Path(s.rules).is_file()
    datasource = s.provisioning / "datasources" / "clusterforge.yml"
    dashboards = s.provisioning / "dashboards" / "clusterforge.yml"
    assert yaml.safe_load(datasource.read_text()) == _expected_datasource()
    assert yaml.safe_load(dashboards.read_text()) == _expected_dashboards(s.dashboards)
    # the render's dashboards, byte for byte, and nothing else: the stale one is gone
    render = Path(s.env["ANSIBLE_ROLES_PATH"]).parent / "render"
    installed = {f.name: f.read_text() for f in Path(s.dashboards).iterdir()}
    assert installed == {f.name: f.read_text() for f in (render / "grafana").iterdir()}
    assert sorted(installed) == ["cluster-overview.json", "fabric.json", "gpus.json", "slurm.json"]
    assert json.loads(installed["gpus.json"])["uid"] == "clusterforge-gpus"
    for f in (s.prometheus_yml, datasource, dashboards):
        assert oct(f.stat().st_mode & 0o777) == "0o644", f

    # alertmanager.yml: the render's bytes, accepted by amtool, routes as the spec says; the Slack
    # URL only in its secret file (0640), never in the configuration or the play's output
    rendered = (Path(s.env["ANSIBLE_ROLES_PATH"]).parent / "render" / "alertmanager" / "alertmanager.yml").read_text()
    assert s.alertmanager_yml.read_text() == rendered
    p = subprocess.run([AMTOOL, "check-config", str(s.alertmanager_yml)], capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0 and "2 receivers" in p.stdout, p.stdout + p.stderr
    for labels, receiver in ((["severity=critical", "node_group=gpu"], "pager"), (["severity=warning"], "ops")):
        p = subprocess.run([AMTOOL, "config", "routes", "test", f"--config.file={s.alertmanager_yml}", *labels],
                           capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == 0 and p.stdout.strip() == receiver, (labels, p.stdout + p.stderr)
    secret = s.secrets / "slack_pager_url"
    assert secret.read_text() == SLACK_URL and oct(secret.stat().st_mode & 0o777) == "0o640"
    assert oct(s.secrets.stat().st_mode & 0o777) == "0o750"
    assert "api_url_file: /etc/prometheus/alertmanager-secrets/slack_pager_url" in rendered
    assert SLACK_URL not in rendered and SLACK_URL not in out
    assert oct(s.alertmanager_yml.stat().st_mode & 0o777) == "0o644"

    before = s.files()
    _, changed, ran = s.run()
    assert (changed, ran) == (0, [])
    assert s.files() == before

    # the spec's scrape interval changes: --check --diff shows the lines, leaves the file alone
    out, changed, ran = s.run("--check", "--diff", "-e", '{"clusterforge_monitoring": {"node_exporter": true, '
                              '"dcgm_exporter": true, "prometheus": true, "grafana": false, "scrape_interval_s": 30}}')
    assert changed == 1, out[-3000:]
    assert ran == []  # the recorder is a shell task: check mode skips it
    assert "-  scrape_interval: 10s\n+  scrape_interval: 30s\n" in out, out[-3000:]
    assert "+  evaluation_interval: 30s\n" in out
    assert s.files() == before


def test_efa_hosts_get_the_efa_counter_script(tmp_path: Path) -> None:
    """tasks/efa_counters.yml (fabric_efa hosts) installs the script; the installed script turns
    an EFA device's hw_counters into the node_amazonefa_* lines node exporter's textfile collector
    reads, and skips a device of another vendor. The expected text is written by hand."""
    root = tmp_path / "root"
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "EFA counters", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "EFA", "ansible.builtin.import_role": {"name": "monitoring", "tasks_from": "efa_counters.yml"}}],
    }], sort_keys=False))
    extra = {"ansible_python_interpreter": sys.executable, "clusterforge_service_manager": "direct",
             "__monitoring_efa_counters_bin": str(root / "usr/local/sbin/clusterforge-efa-counters"),
             "__monitoring_textfile_dir": str(root / "var/lib/prometheus/node-exporter")}
    (tmp_path / "vars.yml").write_text(yaml.safe_dump(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_NOCOLOR": "1"}
    (root / "usr/local/sbin").mkdir(parents=True)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {}}}}))
    p = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), "-c", "local", "-e", f"@{tmp_path / 'vars.yml'}",
                        str(tmp_path / "play.yml")], capture_output=True, text=True, timeout=300, env=env,
                       cwd=tmp_path, check=False)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    script = root / "usr/local/sbin/clusterforge-efa-counters"
    assert oct(script.stat().st_mode & 0o777) == "0o755"
    sysfs = tmp_path / "sys" / "class" / "infiniband"
    for dev, vendor, drops in (("rdmap79s0", "0x1d0f", "40"), ("mlx5_0", "0x15b3", "7")):
        hw = sysfs / dev / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True)
        (sysfs / dev / "device").mkdir()
        (sysfs / dev / "device" / "vendor").write_text(vendor + "\n")
        for c, v in (("rx_drops", drops), ("rdma_read_wr_err", "3"), ("rx_bytes", "1000")):
            (hw / c).write_text(v + "\n")
    out = root / "var/lib/prometheus/node-exporter"
    p = subprocess.run([sys.executable, str(script), "--sysfs", str(tmp_path / "sys"), "--out", str(out)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    text = (out / "clusterforge-efa.prom").read_text()
    assert 'node_amazonefa_rx_drops{device="rdmap79s0",port="1"} 40\n' in text
    assert 'node_amazonefa_rdma_read_wr_err{device="rdmap79s0",port="1"} 3\n' in text
    assert 'node_amazonefa_rx_bytes{device="rdmap79s0",port="1"} 1000\n' in text
    assert "# TYPE node_amazonefa_rdma_write_wr_err counter\n" in text  # no sample: the device has no such file
    assert "mlx5_0" not in text  # not an EFA device
    assert [f.name for f in out.iterdir()] == ["clusterforge-efa.prom"]  # no temporary file left
    assert oct((out / "clusterforge-efa.prom").stat().st_mode & 0o777) == "0o644"
