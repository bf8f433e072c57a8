"""Alertmanager's configuration from the spec: receivers, routes by severity and node group, and
inhibition of a node's alerts while the node itself is down.

The spec names secrets, never holds them: a Slack incoming-webhook URL or a webhook's bearer
token is the value of an Ansible Vault variable (or Pulumi secret) of the name the spec gives.
The monitoring role writes each value into its own file under SECRETS_DIR (mode 0640, group
prometheus) and the rendered file points at it (Slack ``api_url_file``, the webhook's
``http_config.authorization.credentials_file``), so alertmanager.yml holds no secret and the real
``amtool check-config`` checks it as rendered. (Alertmanager 0.25, Debian 12's, has no file form
of a webhook URL or an SMTP password: webhook URLs are plain spec values, and email is not offered.)
"""

from __future__ import annotations

from typing import Any

from clusterforge.clusterspec.models import Alertmanager, AlertRoute, SlackReceiver, WebhookReceiver
from clusterforge.render.yamlfile import dump_yaml

#: Debian's prometheus-alertmanager reads this (/etc/default/prometheus-alertmanager).
CONFIG_PATH = "/etc/prometheus/alertmanager.yml"
#: One file per secret the receivers read, written by the monitoring role from clusterforge_secrets.
SECRETS_DIR = "/etc/prometheus/alertmanager-secrets"
#: The receiver of a spec without receivers: alerts stay visible in Alertmanager (web UI, amtool alert).
NO_RECEIVER = "none"
#: Port of Alertmanager (Debian's default), which prometheus.yml's alerting section points at.
PORT = 9093

#: An alert of a node whose exporter is down is noise: the one page is NodeExporterDown.
NODE_DOWN_ALERT = "NodeExporterDown"


def secret_file(name: str) -> str:
    return f"{SECRETS_DIR}/{name}"


def _receiver(r: WebhookReceiver | SlackReceiver) -> dict[str, Any]:
    if isinstance(r, WebhookReceiver):
        hook: dict[str, Any] = {"url": r.url, "send_resolved": True}
        if r.bearer_token_secret:
            hook["http_config"] = {
                "authorization": {"type": "Bearer", "credentials_file": secret_file(r.bearer_token_secret)}
            }
        return {"name": r.name, "webhook_configs": [hook]}
    return {
        "name": r.name,
        "slack_configs": [{
            "api_url_file": secret_file(r.api_url_secret),
            "channel": r.channel,
            "send_resolved": True,
            "title": '[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }} ({{ .CommonLabels.cluster }})',
            "text": "{{ range .Alerts }}{{ .Annotations.summary }}: {{ .Annotations.action }}\n{{ end }}",
        }],
    }


def _route(r: AlertRoute) -> dict[str, Any]:
    matchers = [f'severity="{r.severity}"'] if r.severity else []
    if r.node_groups:
        matchers.append(f'node_group=~"{"|".join(r.node_groups)}"')
    return {"receiver": r.receiver, "matchers": matchers}


def alertmanager_config(am: Alertmanager) -> dict[str, Any]:
    """alertmanager.yml as data (keys in the order of Alertmanager's documentation)."""
    receivers = [_receiver(r) for r in am.receivers] or [{"name": NO_RECEIVER}]
    default = am.default_receiver or receivers[0]["name"]
    route: dict[str, Any] = {
        "receiver": default,
        # one notification per alert and node group: 16 nodes losing a mount page once
        "group_by": ["alertname", "cluster", "node_group"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
    }
    if am.routes:
        route["routes"] = [_route(r) for r in am.routes]
    return {
        "route": route,
        "inhibit_rules": [{
            "source_matchers": [f'alertname="{NODE_DOWN_ALERT}"'],
            "target_matchers": [f'alertname!="{NODE_DOWN_ALERT}"'],
            "equal": ["cluster", "instance"],
        }],
        "receivers": receivers,
    }


def alertmanager_yaml(cluster: str, am: Alertmanager) -> str:
    header = [
        f"Alertmanager configuration for cluster {cluster}, rendered by clusterforge from the spec",
        f"(monitoring.alertmanager). The monitoring role installs it as {CONFIG_PATH}",
        "(amtool check-config validates it first); edit the spec, not the node.",
        f"Secrets are files under {SECRETS_DIR}, written from Ansible Vault.",
    ]
    return dump_yaml(header, alertmanager_config(am))
