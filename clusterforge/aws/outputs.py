"""Names and the typed shape shared by the Pulumi program, its tests, the offline plan and the inventory.

The stack outputs are a contract: ``infra/`` exports exactly the fields of :class:`StackOutputs`
(whose names are the key constants below), and everything that reads a stack (``pulumi stack
output --json``, the inventory generator, the tests) validates it with ``StackOutputs.model_validate``
instead of picking keys out of a dict. Change a field here and every reader follows; a stack file
written by another version fails validation, naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

# ------------------------------------------------------------------------------- tag keys
#: Every tagged resource carries the cluster name; instances also carry their group and role.
#: The inventory finds a group's instances with these tags (see :func:`group_tag_filters`).
TAG_CLUSTER: Final = "clusterforge:cluster"
TAG_GROUP: Final = "clusterforge:group"
TAG_ROLE: Final = "clusterforge:role"
#: The Slurm node name of an instance: set by Pulumi on head nodes, by the boot-time claim
#: (``clusterforge/aws/nodename.py``) on Auto Scaling group instances. The inventory's only hostname.
TAG_HOSTNAME: Final = "clusterforge:hostname"
#: Why the boot-time name claim failed (short reason), set by the claim when it cannot finish.
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
"""group name -> :class:`ComputeGroupOutputs` or :class:`HeadGroupOutputs`"""
STORAGE: Final = "storage"
"""storage name -> {type, mount, dns_name, mount_name} (FSx for Lustre / EFS only)"""
SECRET_PARAMETERS: Final = "secret_parameters"
"""secret name -> SSM SecureString parameter name the controller reads at configure time"""
NODE_NAMES_TABLE: Final = "node_names_table"
"""DynamoDB table of the boot-time name claims (:func:`names_table`), None without cloud compute groups"""

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
    NODE_NAMES_TABLE,
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


# ------------------------------------------------------------------------ the typed outputs


class _Outputs(BaseModel):
    # extra="forbid": a key this version does not know means the stack came from another version;
    # defer_build: the schemas are built when a stack's outputs are first read (plan, inventory),
    # not by every module that imports this one for a name (render: names_table)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ComputeGroupOutputs(_Outputs):
    """A compute group: one fixed-size Auto Scaling group. No addresses: instances come and go,
    and each finds its name at boot (``TAG_HOSTNAME``); the inventory finds them by tags."""

    role: Literal["compute"]
    instance_type: str
    count: int = Field(ge=1)
    hostlist: str
    """the group's Slurm node names, compressed (``gpu-[001-016]``)"""
    tag_filters: dict[str, list[str]]
    asg_name: str


class HeadGroupOutputs(_Outputs):
    """A controller or login group: one EC2 instance per host name, addressed individually."""

    role: Literal["controller", "login"]
    instance_type: str
    count: int = Field(ge=1)
    hostlist: str
    tag_filters: dict[str, list[str]]
    instance_ids: dict[str, str]
    """host name -> instance id"""
    addresses: dict[str, str]
    """host name -> address Ansible connects to (public IP for an SSH-reachable login node)"""


NodeGroupOutputs = Annotated[ComputeGroupOutputs | HeadGroupOutputs, Field(discriminator="role")]


class StorageMount(_Outputs):
    type: Literal["fsx_lustre", "efs"]
    mount: str
    dns_name: str
    mount_name: str | None
    """FSx for Lustre's mount name; None for EFS"""


class StackOutputs(_Outputs):
    """Everything ``pulumi stack output --json`` prints for a clusterforge stack (field names are
    the key constants above; a test checks they match ``ALL_OUTPUTS``)."""

    cluster_name: str
    region: str
    vpc_id: str
    subnet_ids: dict[str, str]
    controller_address: str
    login_addresses: dict[str, str]
    node_groups: dict[str, NodeGroupOutputs]
    storage: dict[str, StorageMount]
    secret_parameters: dict[str, str]
    node_names_table: str | None


def output_fields(model: type[BaseModel], **values: Any) -> dict[str, Any]:
    """``values`` as an output dict, refused unless its keys are exactly ``model``'s fields.

    The program holds ``pulumi.Output`` values, so it cannot instantiate the model; this keeps it
    on the model's field names at least (the types are checked by the contract test, which
    validates the resolved outputs under mocks)."""
    want = set(model.model_fields)
    if set(values) != want:
        raise ValueError(
            f"{model.__name__} output keys {sorted(values)} differ from its fields {sorted(want)}: "
            "clusterforge/aws/outputs.py and infra/program.py disagree"
        )
    return values
