"""User data that prepares an instance for Ansible and gives it its Slurm node name.

The instance comes up with Python 3 (Ansible's only requirement on the target) and boto3, the
SSM agent running (Ansible can connect over SSM where SSH is closed), a small JSON file naming its
cluster, group, role, region, name registry and hostlist, and its node name claimed
(``clusterforge/aws/nodename.py``, shipped verbatim as ``/usr/local/sbin/clusterforge-claim-name``).
Everything else (Slurm, drivers, EFA software, file systems) is Ansible's job, so a user-data
change never needs to carry a config change and the launch template stays stable.

AWS caps user data at 16 KB in raw form, before base64 encoding
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html);
:data:`USER_DATA_LIMIT` is that cap and :func:`user_data` refuses to exceed it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from clusterforge import hostlist
from clusterforge.aws.outputs import names_table
from clusterforge.clusterspec.models import Cluster, NodeGroup, OsName

#: 16 KB, raw (see the module docstring).
USER_DATA_LIMIT = 16 * 1024
CLAIM_PATH = "/usr/local/sbin/clusterforge-claim-name"
CLAIM_LOG = "/var/log/clusterforge/claim.log"
#: The claim's whole run (IMDS, DynamoDB, EC2, botocore retries) is bounded inside the script by
#: its --deadline (240 s); this outer bound also catches a hang the script cannot see.
CLAIM_TIMEOUT_S = 300
_EOF = "CLUSTERFORGE_CLAIM_EOF"


def claim_source() -> str:
    """The claim script, byte for byte as it is in the package."""
    return Path(__file__).with_name("nodename.py").read_text(encoding="utf-8")


def user_data(
    *,
    cluster: str,
    group: str,
    role: str,
    os: OsName,
    region: str,
    table: str,
    hostlist: str,
    hostname: str | None = None,
) -> str:
    """A cloud-init shell script run once per new instance; it exits non-zero when the name claim
    fails (the reason is in the claim log and the instance's ``clusterforge:claim-error`` tag).

    ``hostname`` is set for head nodes only: they have a fixed name and claim nothing.
    """
    node = {"cluster": cluster, "group": group, "role": role, "region": region, "table": table, "hostlist": hostlist}
    if hostname:
        node["hostname"] = hostname
    marker = json.dumps(node, sort_keys=True)
    source = claim_source()
    assert _EOF not in source, "the heredoc terminator must not occur in the claim script"
    # The Deep Learning AMIs are Ubuntu; Debian images carry the same package names.
    ssm_agent = "snap start amazon-ssm-agent 2>/dev/null || systemctl enable --now amazon-ssm-agent 2>/dev/null || true"
    script = "\n".join(
        [
            "#!/bin/bash",
            f"# clusterforge: prepare a {role} node of {cluster}/{group} ({os}) for Ansible, claim its node name",
            "set -euo pipefail",
            "install -d -m 0755 /etc/clusterforge /var/log/clusterforge",
            f"cat > /etc/clusterforge/node.json <<'JSON'\n{marker}\nJSON",
            "if ! command -v python3 >/dev/null || ! python3 -c 'import boto3' 2>/dev/null; then",
            "  export DEBIAN_FRONTEND=noninteractive",
            "  apt-get update -q && apt-get install -y -q python3 python3-apt python3-boto3",
            "fi",
            ssm_agent,
            f"cat > {CLAIM_PATH} <<'{_EOF}'\n{source.rstrip(chr(10))}\n{_EOF}",
            f"chmod 0755 {CLAIM_PATH}",
            # cloud-init >= 22.2 runs set_hostname on every boot and would undo the claimed name
            # (https://github.com/canonical/cloud-init/issues/4006); preserve_hostname stops it.
            "if [ -d /etc/cloud/cloud.cfg.d ]; then",
            "  echo 'preserve_hostname: true' > /etc/cloud/cloud.cfg.d/99-clusterforge-hostname.cfg",
            "fi",
            "set +e",
            f"timeout {CLAIM_TIMEOUT_S} {CLAIM_PATH} 2>&1 | tee -a {CLAIM_LOG}",
            "rc=${PIPESTATUS[0]}",
            "set -e",
            'if [ "$rc" -ne 0 ]; then',
            f'  echo "clusterforge: node-name claim failed (exit $rc), see {CLAIM_LOG}" >&2',
            '  exit "$rc"',
            "fi",
            "",
        ]
    )
    size = len(script.encode())
    if size > USER_DATA_LIMIT:  # AWS would refuse the launch template / instance
        raise ValueError(f"user data for {cluster}/{group} is {size} bytes, over the AWS limit of {USER_DATA_LIMIT}")
    return script


def group_user_data(cluster: Cluster, group: NodeGroup, *, hostname: str | None = None) -> str:
    """The user data of one instance of ``group``: a head node passes its fixed ``hostname``, an
    Auto Scaling group's instances claim one of the group's names."""
    assert cluster.aws is not None, "user data is for cloud groups"
    return user_data(
        cluster=cluster.name, group=group.name, role=group.role, os=cluster.os, region=cluster.aws.region,
        table=names_table(cluster.name), hostlist=hostlist.compress(group.hostnames), hostname=hostname,
    )


def base64_text(script: str) -> str:
    """Launch templates take user data base64-encoded (instances take it plain)."""
    return base64.b64encode(script.encode()).decode()
