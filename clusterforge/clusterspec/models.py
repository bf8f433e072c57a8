"""The cluster spec: one YAML file describes a whole cluster, on AWS, on-prem racks, or both.

Structure (types, required fields, one-of choices) is checked here by pydantic; rules that need
the hardware catalog or weigh several sections against each other live in ``rules/`` with a
level (error, warning, info).

About 680 lines in one module on purpose: every section of the spec in the order of the YAML, read
together, and the JSON Schema is generated from this one module (``package_repo.py`` and
``types.py`` hold what can stand alone).
"""

from datetime import UTC, datetime
from functools import cached_property
from typing import Annotated, Literal, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from clusterforge import hostlist
from clusterforge.clusterspec.package_repo import PackageRepo
from clusterforge.clusterspec.types import (
    MAX_HOSTS,
    AbsPath,
    AddressList,
    Cidr,
    HostCount,
    Hostlist,
    Name,
    PositiveInt,
    S3Bucket,
    SlurmTime,
    SlurmVersion,
    Version,
    one_line,
)


class Model(BaseModel):
    """Base of every spec section: unknown keys are errors, values are immutable once loaded, and
    no string holds a newline or control character (``types.one_line``: config injection)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("*")
    @classmethod
    def _one_line(cls, v: object) -> object:
        return one_line(v)


# --------------------------------------------------------------------------------------- AWS


class Subnet(Model):
    name: Name
    cidr: Cidr
    availability_zone: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")]
    public: bool = Field(False, description="public subnets hold NAT gateways and login nodes")


class Aws(Model):
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$", examples=["us-east-1"])]
    vpc_cidr: Cidr
    subnets: Annotated[list[Subnet], Field(min_length=1)]
    login_allowed_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="CIDRs allowed to reach login nodes over SSH; empty means no SSH ingress (use SSM)",
    )
    s3_bucket: S3Bucket | None = Field(None, description="bucket the instance roles may read (datasets, installers)")
    ami: str = Field(
        "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id",
        description="AMI id (ami-...) or resolve:ssm:<parameter>; node groups may override",
    )
    key_name: str | None = Field(None, description="EC2 key pair for SSH; leave empty to rely on SSM")


class Capacity(Model):
    type: Literal["on_demand", "spot", "capacity_block", "reservation"] = "on_demand"
    reservation_id: Annotated[str | None, Field(pattern=r"^cr-[0-9a-f]{8,17}$")] = Field(
        None, description="capacity reservation id (cr-...), required for capacity_block and reservation"
    )

    start: AwareDatetime | None = Field(
        None, description="capacity_block only: when the block starts (ISO 8601 with a zone, e.g. 2027-01-04T11:30:00Z)"
    )
    end: AwareDatetime | None = Field(
        None, description="capacity_block only: when the block ends (ISO 8601 with a zone)"
    )
    # >= 35: EC2 begins terminating a Capacity Block's instances 30 minutes before its end
    # ("Capacity Block Expiration Warning" 40 min before, termination 10 min later; EC2 User Guide,
    # capacity-blocks-monitor; facts.md 1.4), and the ASG scales to 0 at end - 35 min (facts 8.2).
    drain_minutes_before_end: Annotated[int, Field(ge=35)] = Field(
        60, description="capacity_block only: Slurm drains the group's nodes this long before the block ends"
    )

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        return v.astimezone(UTC) if v is not None else None

    @model_validator(mode="after")
    def _window_matches_type(self) -> Self:
        if self.type == "capacity_block":
            for name in ("start", "end"):
                if getattr(self, name) is None:
                    raise ValueError(
                        f"{name} is missing: a capacity_block needs the block's window (start and end, as "
                        "shown by `aws ec2 describe-capacity-reservations`: StartDate/EndDate); "
                        f"add e.g. {name}: 2026-12-01T11:30:00Z"
                    )
            assert self.start is not None and self.end is not None
            if self.end <= self.start:
                raise ValueError(
                    f"end={self.end.isoformat()} is not after start={self.start.isoformat()}: a block ends after it "
                    "starts; check the reservation's StartDate/EndDate"
                )
            if (self.end - self.start).total_seconds() <= self.drain_minutes_before_end * 60:
                raise ValueError(
                    f"drain_minutes_before_end={self.drain_minutes_before_end} is not shorter than the block "
                    f"({self.start.isoformat()} .. {self.end.isoformat()}): the nodes would be drained before they "
                    "start; lower it (>= 35) or fix the window"
                )
        elif self.start is not None or self.end is not None:
            raise ValueError(
                f"start/end are only used with type capacity_block, not {self.type!r}: other capacity has no "
                "window; remove them"
            )
        return self

    @model_validator(mode="after")
    def _reservation_matches_type(self) -> Self:
        needs = self.type in ("capacity_block", "reservation")
        if needs and not self.reservation_id:
            raise ValueError(
                f"capacity type {self.type!r} needs reservation_id (the cr-... id of the block or reservation)"
            )
        if not needs and self.reservation_id:
            raise ValueError(
                f"reservation_id is only used with type capacity_block or reservation, not {self.type!r}"
            )
        return self


class CloudNodes(Model):
    instance_type: Annotated[str, Field(pattern=r"^[a-z0-9-]+\.[a-z0-9]+$", examples=["p5.48xlarge"])]
    count: HostCount
    subnet: Name | None = Field(None, description="subnet name; default: the first private subnet")
    efa: bool = False
    placement_group: bool = Field(False, description="launch the group into its own cluster placement group")
    capacity: Capacity = Capacity()
    root_volume_gib: Annotated[int, Field(ge=30, le=16384)] = 200
    local_nvme_raid0: AbsPath | None = Field(
        None, description="mount point for the instance-store NVMe disks assembled as RAID0 scratch"
    )
    ami: str | None = Field(None, description="overrides aws.ami for this group")


class RackPlacement(Model):
    rack: Name
    switch: Name = Field(description="the leaf switch the rack's hosts attach to (a topology.switches name)")
    hosts: Hostlist


class OnPremNodes(Model):
    hosts: Hostlist
    addresses: AddressList | None = Field(None, description="one address per host, in host order")
    profile: str = Field(description="hardware profile from the catalog, e.g. dgx-h100")
    placement: list[RackPlacement] = Field(default_factory=list)

    @model_validator(mode="after")
    def _addresses_match_hosts(self) -> Self:
        n_hosts = hostlist.count(self.hosts)
        if self.addresses is not None:
            n_addr = hostlist.count(self.addresses)
            if n_addr != n_hosts:
                raise ValueError(
                    f"addresses {self.addresses!r} lists {n_addr} addresses for {n_hosts} hosts "
                    f"({self.hosts!r}); give exactly one address per host"
                )
        return self


class Fabric(Model):
    type: Literal["efa", "infiniband", "roce", "ethernet"]
    hcas: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_]+$")]] = Field(
        default_factory=list, description="InfiniBand/RoCE HCAs NCCL may use, e.g. mlx5_0"
    )
    port: Annotated[int, Field(ge=1, le=2)] = 1
    gid_index: Annotated[int | None, Field(ge=0, le=255)] = Field(
        None, description="RoCE GID index (3 is RoCEv2 over IPv4 on most hosts)"
    )
    socket_ifname: str | None = Field(
        None, description="NCCL_SOCKET_IFNAME for bootstrap traffic, e.g. '=eth0' or '^docker,lo'"
    )


Role = Literal["controller", "compute", "login"]


class NodeGroup(Model):
    name: Name
    role: Role = "compute"
    cloud: CloudNodes | None = None
    onprem: OnPremNodes | None = None
    fabric: Fabric | None = Field(None, description="default: efa when cloud.efa, else ethernet")
    features: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]] = Field(default_factory=list)
    weight: Annotated[int, Field(ge=1, le=65533)] | None = Field(
        None, description="Slurm node weight; lower is scheduled first"
    )

    @model_validator(mode="after")
    def _one_location(self) -> Self:
        if (self.cloud is None) == (self.onprem is None):
            raise ValueError(
                f"node group {self.name!r} needs exactly one of 'cloud' (instance_type, count) "
                "or 'onprem' (hosts, profile)"
            )
        return self

    @property
    def is_cloud(self) -> bool:
        return self.cloud is not None

    @cached_property
    def hostnames(self) -> list[str]:
        """Slurm node names: on-prem hosts as given; cloud nodes ``<group>-001`` … ``<group>-NNN``."""
        if self.onprem is not None:
            return hostlist.expand(self.onprem.hosts)
        prefix, count, width = self.name_numbers  # type: ignore[misc]  # a cloud group has them
        return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]

    @property
    def node_count(self) -> int:
        """How many nodes the group has: a cloud group's count without listing its names."""
        if self.onprem is not None:
            return hostlist.count(self.onprem.hosts)  # from its ranges, as long as hostnames is
        return self.cloud.count if self.cloud is not None else 0  # a group has one of the two

    @property
    def node_hostlist(self) -> str:
        """``hostnames`` as one Slurm hostlist (``hostlist.compress``'s text), from
        ``hostlist_items`` where they are known."""
        items = self.hostlist_items
        return hostlist.join_items(items) if items is not None else hostlist.compress(self.hostnames)

    @property
    def hostlist_items(self) -> list[hostlist.Item] | None:
        """``hostlist.compress_items`` of ``hostnames``, without a pass over the names: a cloud
        group's from its count, an on-prem group's from the ranges of its ``hosts`` expression.
        None where only compressing the names is sure (``hostlist.expression_items``)."""
        if self.onprem is not None:
            return hostlist.expression_items(self.onprem.hosts)
        return hostlist.numbered_items(*self.name_numbers)  # type: ignore[misc]  # a cloud group has them

    @property
    def name_numbers(self) -> tuple[str, int, int] | None:
        """A cloud group's node names as (prefix, count, width): ``hostnames`` are the prefix and
        1 … count zero-padded to width digits (at least 3). None for an on-prem group."""
        if self.cloud is None:
            return None
        return f"{self.name}-", self.cloud.count, max(3, len(str(self.cloud.count)))

    @property
    def fabric_type(self) -> str:
        if self.fabric is not None:
            return self.fabric.type
        return "efa" if self.cloud is not None and self.cloud.efa else "ethernet"

    @property
    def profile_name(self) -> str:
        if self.cloud is not None:
            return self.cloud.instance_type
        assert self.onprem is not None
        return self.onprem.profile


class Partition(Model):
    name: Name
    node_groups: Annotated[list[Name], Field(min_length=1)]
    default: bool = False
    max_time: SlurmTime = "UNLIMITED"
    exclusive: bool = Field(False, description="whole nodes per job (OverSubscribe=EXCLUSIVE)")
    allow_mixed_gpus: bool = Field(
        False, description="allow GPU models of different generations in one partition (slowest sets the pace)"
    )


class Switch(Model):
    name: Name
    parent: Name | None = Field(None, description="the switch above this one; empty for the root")


class Block(Model):
    name: Name
    hosts: Hostlist


class Topology(Model):
    plugin: Literal["auto", "tree", "block", "none"] = Field(
        "auto", description="auto: tree when switches or EC2 topology are known, block for blocks, else none"
    )
    switches: list[Switch] = Field(default_factory=list)
    blocks: list[Block] = Field(default_factory=list, description="NVLink domains (topology/block, 23.11+)")
    block_sizes: list[PositiveInt] = Field(default_factory=list)
    ec2_instance_topology: str | None = Field(
        None,
        description="JSON file: node name -> its EC2 NetworkNodes (top first), or a saved raw "
        "`aws ec2 describe-instance-topology` response (then ec2_instances is required)",
    )
    ec2_instances: str | None = Field(
        None,
        description="a saved `aws ec2 describe-instances` response: names the instances of a raw "
        "ec2_instance_topology response through their clusterforge:hostname tags",
    )


# ----------------------------------------------------------------------------------- storage

Purpose = Literal["home", "checkpoints", "datasets", "scratch", "apps"]


class _StorageBase(Model):
    name: Name
    mount: AbsPath
    purpose: list[Purpose] = Field(default_factory=list)


class FsxLustre(_StorageBase):
    type: Literal["fsx_lustre"]
    capacity_gib: Annotated[int, Field(ge=1200)] = 4800
    throughput_per_tib: Literal[125, 250, 500, 1000] = 250
    s3_import_path: Annotated[str | None, Field(pattern=r"^s3://[a-z0-9.-]+(/.*)?$")] = None

    @model_validator(mode="after")
    def _capacity_step(self) -> Self:
        # PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB (FSx CreateFileSystem rules).
        if self.capacity_gib != 1200 and self.capacity_gib % 2400:
            raise ValueError(
                f"FSx for Lustre PERSISTENT_2 capacity_gib={self.capacity_gib} is not 1200 or a multiple "
                "of 2400; round it to the next multiple of 2400"
            )
        return self


class Efs(_StorageBase):
    type: Literal["efs"]
    throughput_mode: Literal["elastic", "bursting"] = "elastic"


class Nfs(_StorageBase):
    type: Literal["nfs"]
    server: str
    export: AbsPath
    options: str = "vers=4.1,hard,noatime"


class Lustre(_StorageBase):
    type: Literal["lustre"]
    mgs_nid: str = Field(description="MGS NID, e.g. 10.0.0.5@tcp or 192.168.1.2@o2ib")
    fsname: Annotated[str, Field(pattern=r"^[a-z0-9]{1,8}$")]
    options: str = "flock,noatime"


Storage = Annotated[FsxLustre | Efs | Nfs | Lustre, Field(discriminator="type")]


# ------------------------------------------------------------------------- services, stacks


class Accounting(Model):
    enabled: bool = False
    storage_host: str = Field("localhost", description="MariaDB host for slurmdbd")
    database: str = "slurm_acct_db"
    password_secret: str = Field(
        "slurmdbd_storage_pass",
        description="name of the Pulumi secret / Ansible Vault variable holding the DB password (never the value)",
    )


SecretName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]


class WebhookReceiver(Model):
    type: Literal["webhook"]
    name: Name
    url: Annotated[str, Field(pattern=r"^https?://[^/@\s]+(/\S*)?$")] = Field(
        description="where Alertmanager POSTs its JSON; no user:password@ (use bearer_token_secret)"
    )
    bearer_token_secret: SecretName | None = Field(
        None, description="name of the Ansible Vault variable / Pulumi secret holding a bearer token (never the value)"
    )


class SlackReceiver(Model):
    type: Literal["slack"]
    name: Name
    api_url_secret: SecretName = Field(
        description="name of the Ansible Vault variable / Pulumi secret holding the incoming-webhook URL "
        "(never the value)"
    )
    channel: Annotated[str, Field(pattern=r"^[#@][A-Za-z0-9._-]{1,80}$")]


Receiver = Annotated[WebhookReceiver | SlackReceiver, Field(discriminator="type")]


class AlertRoute(Model):
    receiver: Name
    severity: Literal["critical", "warning"] | None = Field(None, description="match alerts of this severity")
    node_groups: list[Name] = Field(default_factory=list, description="match alerts of these node groups")

    @model_validator(mode="after")
    def _matches_something(self) -> Self:
        if self.severity is None and not self.node_groups:
            raise ValueError(
                f"route to {self.receiver!r} matches every alert; give severity and/or node_groups "
                "(alerts no route matches go to default_receiver)"
            )
        return self


class Alertmanager(Model):
    enabled: bool = Field(True, description="run Alertmanager on the monitoring server (needs prometheus)")
    receivers: list[Receiver] = Field(
        default_factory=list, description="empty: alerts are kept in Alertmanager (web UI, amtool alert) only"
    )
    default_receiver: Name | None = Field(None, description="for alerts no route matches; default: the first receiver")
    routes: list[AlertRoute] = Field(default_factory=list, description="tried in order; the first match wins")

    @model_validator(mode="after")
    def _known_receivers(self) -> Self:
        names = [r.name for r in self.receivers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"alertmanager.receivers: names {dup} appear more than once; give each its own name")
        used = [("default_receiver", self.default_receiver)] if self.default_receiver else []
        used += [(f"routes[{i}].receiver", r.receiver) for i, r in enumerate(self.routes)]
        for where, name in used:
            if name not in names:
                raise ValueError(
                    f"alertmanager.{where} {name!r} names no receiver; use one of {names} or add it to receivers"
                )
        return self

    @property
    def secret_names(self) -> tuple[str, ...]:
        """Vault variables / Pulumi secrets the receivers read, in order, each once."""
        out: list[str] = []
        for r in self.receivers:
            s = r.bearer_token_secret if isinstance(r, WebhookReceiver) else r.api_url_secret
            if s and s not in out:
                out.append(s)
        return tuple(out)


class Monitoring(Model):
    node_exporter: bool = True
    dcgm_exporter: bool = True
    prometheus: bool = True
    grafana: bool = True
    scrape_interval_s: Annotated[int, Field(ge=5, le=300)] = 30
    alertmanager: Alertmanager = Field(default_factory=Alertmanager)


#: Xid codes whose resolution is a GPU reset or a reboot (NVIDIA's Xid catalog, r590 "Resolution
#: Bucket"; aws-samples/awsome-distributed-training gpu-cluster-healthcheck 0-nvidia-smi-check.sh):
#: 79 fell off the bus; 64, 95, 119, 120, 143 reset the GPU; 48 (DBE) and 74 (NVLink) by workflow.
#: Application Xids (13, 31, 43, 94, ...) are a job's fault, not the node's, and never drain.
XID_DRAIN_CODES = (48, 64, 74, 79, 95, 119, 120, 143)


class HealthChecks(Model):
    """Slurm's HealthCheckProgram plus a prolog and an epilog check, rendered per node group
    (templates/healthcheck.sh.j2)."""

    enabled: bool = True
    interval_s: Annotated[int, Field(ge=5, le=86400)] = Field(
        300,
        description="HealthCheckInterval: slurmd runs the program this often (and when it starts); production "
        "keeps minutes, a test cluster seconds",
    )
    node_state: Literal["ANY", "IDLE", "ALLOC", "MIXED", "NONDRAINED_IDLE"] = Field(
        "ANY", description="HealthCheckNodeState; ANY also checks drained nodes, which is how they return"
    )
    program: AbsPath = "/usr/local/sbin/clusterforge-healthcheck"
    consecutive_failures: Annotated[int, Field(ge=1, le=10)] = Field(
        2,
        description="a check drains the node after failing this many runs in a row (1: at once); in the prolog "
        "and epilog, attempts 2 s apart. A check that fails once and then passes drains nothing",
    )
    prolog: bool = Field(True, description="fast checks before each job; a failing one drains and requeues the job")
    epilog: bool = Field(True, description="checks after each job (with epilog_dcgm_level on NVIDIA GPU nodes)")
    epilog_dcgm_level: Literal[0, 1, 2] = Field(
        1,
        description="dcgmi diag -r LEVEL in the epilog on NVIDIA GPU nodes: 1 takes seconds, 2 about two "
        "minutes (the node stays COMPLETING that long); 0: none",
    )
    spool_min_free_mib: Annotated[int, Field(ge=0)] = Field(
        1024, description="free space the Slurm spool (SlurmdSpoolDir) must keep for job scripts and state"
    )
    xid_codes: list[Annotated[int, Field(ge=1, le=999)]] = Field(
        default_factory=lambda: list(XID_DRAIN_CODES),
        description="Xid codes in the kernel log since boot that drain the node (default: those NVIDIA "
        "resolves by a GPU reset or reboot)",
    )


class GpuStack(Model):
    vendor: Literal["nvidia", "amd"] = "nvidia"
    driver_branch: Annotated[str, Field(pattern=r"^\d{3}$")] | None = Field(
        "570", description="NVIDIA datacenter driver branch, pinned; empty for AMD"
    )
    cuda: Version | None = "12.8"
    rocm: Version | None = None
    nccl: Version = Field("2.26.2", description="NCCL version (RCCL for AMD)")
    aws_ofi_nccl: Version | None = Field("1.14.0", description="aws-ofi-nccl plugin version on EFA nodes")
    efa_installer: Version | None = "1.40.0"

    @model_validator(mode="after")
    def _vendor_stack(self) -> Self:
        if self.vendor == "amd" and self.rocm is None:
            raise ValueError("gpu_stack.vendor 'amd' needs rocm (e.g. rocm: '6.3')")
        return self


#: Where a ``state_storage: {type: ebs}`` volume is mounted on the controller. Fixed, so the user
#: data (clusterforge/aws/userdata.py), the rules and the Slurm role agree on it without passing
#: it around; StateSaveLocation and a controller-local MariaDB's datadir live below it.
STATE_VOLUME_MOUNT = "/srv/clusterforge-state"


class EbsStateStorage(Model):
    """A retained EBS volume (AWS): created beside the controller, attached to it, kept when the
    instance is replaced or terminated (``protect``); one controller only."""

    type: Literal["ebs"]
    size_gib: Annotated[int, Field(ge=8, le=16384)] = Field(
        64, description=f"the volume's size; mounted at {STATE_VOLUME_MOUNT} on the controller"
    )
    volume_type: Literal["gp3", "io2"] = "gp3"


class SharedStateStorage(Model):
    """A folder on a shared file system of ``storage[]`` (FSx, EFS, NFS, Lustre): both controllers
    of a primary/backup pair see the same state."""

    type: Literal["shared"]
    mount: AbsPath = Field(description="the mount of one storage[] entry, e.g. /fsx")


StateStorage = Annotated[EbsStateStorage | SharedStateStorage, Field(discriminator="type")]


class Rollout(Model):
    """How ``configure`` rolls a change out on a running cluster (site.yml's Slurm compute play)."""

    batch: Annotated[str, Field(pattern=r"^([1-9][0-9]{0,5}|([1-9][0-9]?|100)%)$")] = Field(
        "25%",
        description="nodes per batch (Ansible serial: a count, e.g. 1, or a percentage of the compute and "
        "login hosts, e.g. 25%): each batch restarts, registers and returns to service before the next, and "
        "the first failure stops the rollout; a first run configures every host at once",
    )
    canary: Annotated[int, Field(ge=0, le=65536)] = Field(
        1,
        description="nodes changed first, alone: the rest (in batches) goes only when they came back "
        "registered and in service (0: no canary batch)",
    )
    drain_timeout_s: Annotated[int, Field(ge=0, le=7 * 86400)] = Field(
        3600,
        description="how long a node drained for a change of its layout may take to finish its jobs before "
        "the run stops (nothing is killed; the node stays drained)",
    )


class SlurmSettings(Model):
    version: SlurmVersion = Field(
        "23.11", description="Slurm release the configs are rendered for (the default: what the default os ships)"
    )
    package_repo: PackageRepo | None = Field(
        None,
        description="an apt repository of the site's own builds of slurm.version; needed when the OS "
        "does not ship that release (clusterforge/catalog/os_slurm.yaml)",
    )
    state_save_location: AbsPath = Field(
        "/var/spool/slurmctld",
        description="slurmctld state (StateSaveLocation); below state_storage's mount when that is set",
    )
    state_storage: StateStorage | None = Field(
        None,
        description="where the controller's state lives: ebs (a retained volume, AWS) or shared (a storage[] "
        "mount); empty: the controller's root disk, which AWS deletes with the instance",
    )
    slurmctld_timeout_s: Annotated[int, Field(ge=5, le=3600)] = Field(
        120,
        description="SlurmctldTimeout: seconds the backup controller waits for the primary before taking over "
        "(Slurm's default 120)",
    )
    return_to_service: Literal[0, 1, 2] = 2
    os_memory_reserve_mib: Annotated[int, Field(ge=0)] = Field(
        8192, description="memory held back from RealMemory for the OS, slurmd and daemons"
    )
    slurmd_timeout_s: Annotated[int, Field(ge=10, le=3600)] = Field(
        300,
        description="SlurmdTimeout: seconds without an answer before slurmctld marks a node DOWN and requeues "
        "its --requeue jobs",
    )
    cred_expire_s: Annotated[int, Field(ge=5, le=86400)] | None = Field(
        None,
        description="AuthInfo=cred_expire: job credential lifetime in seconds; a requeued job also waits this "
        "long (+1 s) before it may start again (Slurm's default 120; below 5 Slurm ignores it)",
    )
    extra_conf: dict[Annotated[str, Field(pattern=r"^[A-Za-z]+$")], str] = Field(
        default_factory=dict, description="extra slurm.conf key=value lines (escape hatch, printed last)"
    )
    rollout: Rollout = Field(
        default_factory=Rollout, description="how configure rolls a change out on a running cluster"
    )


# what each one ships of Slurm: clusterforge/catalog/os_slurm.yaml (a test keeps the two in step)
OsName = Literal["ubuntu-22.04", "ubuntu-24.04", "debian-12", "debian-13"]


class Cluster(Model):
    """A whole cluster. ``clusterforge validate`` checks it; every other verb starts from it."""

    name: Name
    os: OsName = Field(
        "ubuntu-24.04", description="the hosts' OS; it must ship slurm.version unless slurm.package_repo is set"
    )
    facts_dir: str | None = Field(
        None, description="folder of hardware facts discovered on the hosts (relative to the spec file)"
    )
    slurm: SlurmSettings = SlurmSettings()
    aws: Aws | None = None
    gpu_stack: GpuStack = GpuStack()
    node_groups: Annotated[list[NodeGroup], Field(min_length=1)]
    partitions: list[Partition] = Field(default_factory=list)
    topology: Topology = Topology()
    storage: list[Storage] = Field(default_factory=list)
    accounting: Accounting = Accounting()
    monitoring: Monitoring = Monitoring()
    health_checks: HealthChecks = HealthChecks()

    @field_validator("node_groups")
    @classmethod
    def _bounded_hosts(cls, groups: list[NodeGroup]) -> list[NodeGroup]:
        # each group is bounded by its own field; this bounds the sum before anything expands it
        total = sum(g.node_count for g in groups if g.role == "compute")
        if total > MAX_HOSTS:
            raise ValueError(
                f"the compute node groups hold {total} hosts: the implicit partition names every compute host "
                f"in one Slurm hostlist, and Slurm reads at most {MAX_HOSTS} hosts in one; split the cluster"
            )
        return groups

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        for what, names in (
            ("node group", [g.name for g in self.node_groups]),
            ("partition", [p.name for p in self.partitions]),
            ("storage", [s.name for s in self.storage]),
            ("switch", [s.name for s in self.topology.switches]),
        ):
            seen: set[str] = set()
            for n in names:
                if n in seen:
                    raise ValueError(f"{what} name {n!r} is used twice; names must be unique")
                seen.add(n)
        return self

    @property
    def checkpoint_storage(self) -> FsxLustre | Efs | Nfs | Lustre | None:
        """The storage[] entry with purpose ``checkpoints`` (the job environment names its mount as
        CLUSTERFORGE_CHECKPOINT_DIR); the rule ``checkpoint-storage-twice`` keeps it to one."""
        return next((s for s in self.storage if "checkpoints" in s.purpose), None)

    def group(self, name: str) -> NodeGroup:
        for g in self.node_groups:
            if g.name == name:
                return g
        raise KeyError(name)

    def groups_with_role(self, role: Role) -> list[NodeGroup]:
        return [g for g in self.node_groups if g.role == role]
