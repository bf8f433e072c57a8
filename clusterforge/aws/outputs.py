"""Names shared by the Pulumi program, its tests, the offline plan and the Ansible inventory.

The stack outputs are a contract: ``infra/`` exports exactly these keys, and everything that reads
a stack (``pulumi stack output --json``, the inventory generator, the tests) uses these constants
instead of spelling the strings again. Change a name here and every reader follows.
"""

from __future__ import annotations

from typing import Final

# ------------------------------------------------------------------------------- tag keys
#: Every tagged resource carries the cluster name; instances also carry their group and role.
#: The inventory finds a group's instances with these tags (see :func:`group_tag_filters`).
TAG_CLUSTER: Final = "clusterforge:cluster"
TAG_GROUP: Final = "clusterforge:group"
TAG_ROLE: Final = "clusterforge:role"
#: The Slurm node name an instance holds: set by the boot-time claim (clusterforge/aws/nodename.py,
#: which spells both keys itself because it is shipped alone) or, on head nodes, by Pulumi.
TAG_HOSTNAME: Final = "clusterforge:hostname"
#: Why the boot-time claim failed (absent once a claim succeeds).
TAG_CLAIM_ERROR: Final = "clusterforge:claim-error"
#: Tags the policy pack requires on every taggable resource.
REQUIRED_TAGS: Final = (TAG_CLUSTER,)
#: Tags every instance (controller, login and compute) carries.
INSTANCE_TAGS: Final = (TAG_CLUSTER, TAG_GROUP, TAG_ROLE)

# --------------------------------------------------------------------------- stack outputs
CLUSTER_NAME: Final = "cluster_name"
REGION: Final = "region"
VPC_ID: Final = "vpc_id"
SUBNET_IDS: Final = "subnet_ids"
"""subnet name -> subnet id"""
CONTROLLER_ADDRESS: Final = "controller_address"
"""private IP of the cloud controller, or the on-prem controller's address from the spec"""
LOGIN_ADDRESSES: Final = "login_addresses"
"""login host name -> address (public IP when SSH is open to allowed CIDRs, else private IP)"""
NODE_GROUPS: Final = "node_groups"
"""group name -> {role, instance_type, count, hostnames, tag_filters, asg_name}"""
STORAGE: Final = "storage"
"""storage name -> {type, mount, dns_name, mount_name} (FSx for Lustre / EFS only)"""
SECRET_PARAMETERS: Final = "secret_parameters"
"""secret name -> SSM SecureString parameter name the controller reads at configure time"""

ALL_OUTPUTS: Final = (
    CLUSTER_NAME,
    REGION,
    VPC_ID,
    SUBNET_IDS,
    CONTROLLER_ADDRESS,
    LOGIN_ADDRESSES,
    NODE_GROUPS,
    STORAGE,
    SECRET_PARAMETERS,
)


def group_tag_filters(cluster: str, group: str) -> dict[str, list[str]]:
    """EC2 ``DescribeInstances`` filters (also the ``amazon.aws.aws_ec2`` inventory ``filters``)
    that select the running instances of one node group."""
    return {
        f"tag:{TAG_CLUSTER}": [cluster],
        f"tag:{TAG_GROUP}": [group],
        "instance-state-name": ["pending", "running"],
    }


def names_table(cluster: str) -> str:
    """The DynamoDB table that registers which instance holds which node name (one per cluster)."""
    return f"{cluster}-node-names"


def secret_parameter_name(cluster: str, secret: str) -> str:
    """SSM parameter that holds a cluster secret (``/clusterforge/<cluster>/<secret>``)."""
    return f"/clusterforge/{cluster}/{secret}"
