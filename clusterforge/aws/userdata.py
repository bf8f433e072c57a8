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

from clusterforge.aws.outputs import names_table
from clusterforge.clusterspec.models import STATE_VOLUME_MOUNT, Cluster, EbsStateStorage, NodeGroup, OsName

#: 16 KB, raw (see the module docstring).
USER_DATA_LIMIT = 16 * 1024
CLAIM_PATH = "/usr/local/sbin/clusterforge-claim-name"
CLAIM_LOG = "/var/log/clusterforge/claim.log"
#: The claim's whole run (IMDS, DynamoDB, EC2, botocore retries) is bounded inside the script by
#: its --deadline (240 s); this outer bound also catches a hang the script cannot see.
CLAIM_TIMEOUT_S = 300
_EOF = "CLUSTERFORGE_CLAIM_EOF"
#: The state volume's attachment (infra/head.py) is created after the instance, so the boot may
#: come before the disk: wait this long for it (120 x 5 s).
STATE_VOLUME_WAIT_TRIES = 120
STATE_VOLUME_LABEL = "cf-state"


def state_volume_lines(mount: str) -> list[str]:
    """Mount the controller's retained state volume (slurm.state_storage ebs) at ``mount``.

    The volume is the one EBS disk that is not the root disk: on Nitro instances EBS volumes are NVMe
    devices named by udev /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<id> (EC2 User Guide,
    "Amazon EBS and NVMe"); on Xen types the attachment's /dev/xvdf. It is formatted only when blkid
    finds nothing on it (``blkid -p`` exits 2) and its first MiB reads as zeros, so a volume
    that holds state, or anything else, is never formatted over (blkid(8) exits 2 also when it cannot
    read the device: hence the zeros, which a new EBS volume reads as and which every file system,
    partition table and LUKS header overwrites). fstab's ``nofail`` lets the host
    boot without it; the slurm role makes slurmctld require the mount (RequiresMountsFor), so
    slurmctld never starts on the empty folder below it."""
    script = f"""\
# the controller's state volume: wait for the attachment, format only a blank disk, mount it
root_disk=$(lsblk -no PKNAME "$(findmnt -no SOURCE /)" 2>/dev/null || true)
state_dev=''
for _ in $(seq 1 {STATE_VOLUME_WAIT_TRIES}); do
  found=$(for d in /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol* /dev/xvdf; do
    [ -b "$d" ] || continue; case "$d" in *-part*) continue;; esac
    r=$(readlink -f "$d"); [ "$(basename "$r")" = "$root_disk" ] || echo "$r"; done | sort -u)
  if [ "$(echo "$found" | grep -c .)" -gt 1 ]; then
    echo "clusterforge: more than one candidate state volume: $found" >&2; exit 1
  fi
  if [ -n "$found" ]; then state_dev=$found; break; fi
  sleep 5
done
if [ -z "$state_dev" ]; then
  echo 'clusterforge: the state volume for {mount} was not attached within {STATE_VOLUME_WAIT_TRIES * 5} s' >&2
  exit 1
fi
set +e; blkid -p "$state_dev" >/dev/null 2>&1; probe=$?; set -e
if [ "$probe" -eq 2 ] && cmp -s -n 1048576 "$state_dev" /dev/zero; then
  mkfs.ext4 -q -L {STATE_VOLUME_LABEL} "$state_dev"
elif [ "$probe" -ne 0 ] || [ -z "$(blkid -s UUID -o value "$state_dev")" ]; then
  echo "clusterforge: $state_dev: blkid -p exited $probe or its first MiB is not blank: not formatting it" >&2
  exit 1
fi
state_uuid=$(blkid -s UUID -o value "$state_dev")
install -d -m 0755 {mount}
if ! grep -q ' {mount} ' /etc/fstab; then
  echo "UUID=$state_uuid {mount} ext4 defaults,noatime,nofail,x-systemd.device-timeout=5min 0 2" >> /etc/fstab
fi
mountpoint -q {mount} || mount {mount}"""
    return script.splitlines()


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
    state_volume: str | None = None,
) -> str:
    """A cloud-init shell script run once per new instance; it exits non-zero when the name claim
    fails (the reason is in the claim log and the instance's ``clusterforge:claim-error`` tag).

    ``hostname`` is set for head nodes only: they have a fixed name and claim nothing.
    ``state_volume``: the controller's state volume mount (slurm.state_storage ebs), mounted first.
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
            *(state_volume_lines(state_volume) if state_volume else []),
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
        table=names_table(cluster.name), hostlist=group.node_hostlist, hostname=hostname,
        state_volume=STATE_VOLUME_MOUNT
        if group.role == "controller" and isinstance(cluster.slurm.state_storage, EbsStateStorage)
        else None,
    )


def base64_text(script: str) -> str:
    """Launch templates take user data base64-encoded (instances take it plain)."""
    return base64.b64encode(script.encode()).decode()
