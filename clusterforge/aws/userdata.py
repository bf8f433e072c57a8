"""User data that prepares an instance for Ansible (and nothing more).

The instance comes up with Python 3 (Ansible's only requirement on the target), the SSM agent
running (Ansible can connect over SSM where SSH is closed) and a small JSON file naming its
cluster, group and role, which the discovery playbook reads. Everything else (Slurm, drivers,
EFA software, file systems) is Ansible's job, so a user-data change never needs to carry a
config change and the launch template stays stable.
"""

from __future__ import annotations

import base64
import json

from clusterforge.clusterspec.models import OsName


def user_data(*, cluster: str, group: str, role: str, os: OsName) -> str:
    """A cloud-init shell script (idempotent: it runs on every first boot of a new instance)."""
    marker = json.dumps({"cluster": cluster, "group": group, "role": role}, sort_keys=True)
    # The Deep Learning AMIs are Ubuntu; Debian images carry the same package names.
    ssm_agent = "snap start amazon-ssm-agent 2>/dev/null || systemctl enable --now amazon-ssm-agent 2>/dev/null || true"
    return "\n".join(
        [
            "#!/bin/bash",
            f"# clusterforge: prepare a {role} node of {cluster}/{group} ({os}) for Ansible",
            "set -euo pipefail",
            "install -d -m 0755 /etc/clusterforge",
            f"cat > /etc/clusterforge/node.json <<'JSON'\n{marker}\nJSON",
            "if ! command -v python3 >/dev/null; then",
            "  export DEBIAN_FRONTEND=noninteractive",
            "  apt-get update -q && apt-get install -y -q python3 python3-apt",
            "fi",
            ssm_agent,
            "",
        ]
    )


def user_data_base64(*, cluster: str, group: str, role: str, os: OsName) -> str:
    """Launch templates take user data base64-encoded (instances take it plain)."""
    return base64.b64encode(user_data(cluster=cluster, group=group, role=role, os=os).encode()).decode()
