"""Validation rules with levels, on top of the schema.

The schema (models.py) guarantees shapes; these rules weigh the spec against the hardware
catalog, the target Slurm version and itself. Every finding names the field path, the value,
why it matters and how to fix it. Each rule is a function registered in ``RULES``; a test
checks that each one can fire.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from clusterforge import hostlist
from clusterforge.catalog import HardwareProfile, get_profile, profile_names
from clusterforge.clusterspec.models import Cluster, NodeGroup
from clusterforge.clusterspec.types import version_tuple


class Level(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    level: Level
    code: str
    path: str
    value: object
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.level.value}: {self.path} = {self.value!r}: {self.why} Fix: {self.fix} [{self.code}]"


@dataclass(frozen=True)
class RuleContext:
    """What the rules weigh a spec against: its folder and each group's resolved profile.

    ``profiles`` comes from ``clusterforge.resolve`` (catalog with discovered facts applied), so a
    rule sees the same hardware the renderer prints; ``None`` where the profile is unknown.
    """

    base: Path
    profiles: Mapping[str, HardwareProfile | None]
    facts_dir: Path | None = None

    def profile(self, g: NodeGroup) -> HardwareProfile | None:
        if g.name in self.profiles:
            return self.profiles[g.name]
        return get_profile(g.profile_name)


Rule = Callable[[Cluster, RuleContext], Iterator[Finding]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def _gi(cluster: Cluster, g: NodeGroup) -> str:
    return f"node_groups[{cluster.node_groups.index(g)}]"


def gpu_nodes(cluster: Cluster, ctx: RuleContext) -> int:
    n = 0
    for g in cluster.node_groups:
        p = ctx.profile(g)
        if g.role == "compute" and p is not None and p.gpu is not None:
            n += len(g.hostnames)
    return n


# ----------------------------------------------------------------------------- node groups


@rule
def profiles_exist(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        name = g.profile_name
        field = "cloud.instance_type" if g.is_cloud else "onprem.profile"
        p = ctx.profile(g)
        if p is None:
            known = ", ".join(profile_names("aws" if g.is_cloud else None))
            yield Finding(
                Level.ERROR, "unknown-profile", f"{_gi(c, g)}.{field}", name,
                "is not in the hardware catalog, so its sockets, memory and GPUs are unknown.",
                f"use one of: {known}; or add a profile to clusterforge/catalog/profiles.yaml with sources.",
            )


@rule
def one_controller(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    ctl = c.groups_with_role("controller")
    hosts = sum(len(g.hostnames) for g in ctl)
    if len(ctl) != 1 or hosts not in (1, 2):
        yield Finding(
            Level.ERROR, "controller-count", "node_groups[*].role", f"{len(ctl)} group(s), {hosts} host(s)",
            "Slurm needs exactly one controller group with one host (or two for a backup controller).",
            "mark exactly one node group 'role: controller' with count 1 (or 2).",
        )
    elif hosts == 2 and not any(
        c.slurm.state_save_location.startswith(s.mount.rstrip("/") + "/") for s in c.storage
    ):
        yield Finding(
            Level.ERROR, "ha-state-not-shared", "slurm.state_save_location", c.slurm.state_save_location,
            "two controllers must share StateSaveLocation, or the backup takes over with stale state.",
            "put slurm.state_save_location under a shared storage mount (e.g. /fsx/slurm/state).",
        )
    if not c.groups_with_role("compute"):
        yield Finding(
            Level.ERROR, "no-compute", "node_groups", len(c.node_groups),
            "a cluster without compute nodes runs no jobs.", "add a node group with role: compute.",
        )


@rule
def unique_hosts(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    owner: dict[str, str] = {}
    for g in c.node_groups:
        for h in g.hostnames:
            if h in owner and owner[h] != g.name:
                yield Finding(
                    Level.ERROR, "duplicate-host", f"{_gi(c, g)}", h,
                    f"host name is also in node group {owner[h]!r}; Slurm node names must be unique.",
                    "rename the hosts of one group or remove the overlap.",
                )
            owner.setdefault(h, g.name)
    addr_owner: dict[str, str] = {}
    for g in c.node_groups:
        if g.onprem and g.onprem.addresses:
            for a in hostlist.expand(g.onprem.addresses):
                if a in addr_owner:
                    yield Finding(
                        Level.ERROR, "duplicate-address", f"{_gi(c, g)}.onprem.addresses", a,
                        f"address is also used by group {addr_owner[a]!r}.", "give every host its own address.",
                    )
                addr_owner.setdefault(a, g.name)


@rule
def cloud_needs_aws(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        if g.cloud is None:
            continue
        if c.aws is None:
            yield Finding(
                Level.ERROR, "cloud-without-aws", f"{_gi(c, g)}.cloud", g.cloud.instance_type,
                "a cloud node group needs the 'aws' section (region, VPC, subnets).",
                "add 'aws:' with region, vpc_cidr and subnets, or make the group on-prem.",
            )
            continue
        names = [s.name for s in c.aws.subnets]
        if g.cloud.subnet is not None and g.cloud.subnet not in names:
            yield Finding(
                Level.ERROR, "unknown-subnet", f"{_gi(c, g)}.cloud.subnet", g.cloud.subnet,
                "names no subnet in aws.subnets.", f"use one of: {', '.join(names)}.",
            )


@rule
def efa_rules(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    # Imported here: clusterforge.render imports the resolver, which imports these rules.
    from clusterforge.render.nccl_versions import first as nccl_first
    from clusterforge.render.nccl_versions import has as nccl_gate

    for g in c.node_groups:
        cl = g.cloud
        if cl is None or not cl.efa:
            continue
        path = f"{_gi(c, g)}.cloud"
        p = ctx.profile(g)
        if p is not None and not p.efa_capable:
            yield Finding(
                Level.ERROR, "efa-unsupported", f"{path}.instance_type", cl.instance_type,
                "this instance type has no EFA interfaces (maximumEfaInterfaces = 0).",
                "use an EFA-capable type (p5.48xlarge, p4d.24xlarge, hpc7a.96xlarge, ...) or set efa: false.",
            )
        if c.aws is not None and cl.subnet is None:
            azs = {s.availability_zone for s in c.aws.subnets if not s.public}
            if len(azs) != 1:
                yield Finding(
                    Level.ERROR, "efa-multi-az", f"{path}.subnet", None,
                    f"EFA traffic does not cross availability zones, and the private subnets span {sorted(azs)}.",
                    "name one subnet for the group (cloud.subnet) so all its nodes land in one AZ.",
                )
        cb = cl.capacity.type == "capacity_block"
        if cb and cl.placement_group:
            yield Finding(
                Level.WARNING, "placement-with-capacity-block", f"{path}.placement_group", True,
                "a capacity block is already placed by AWS; an extra placement group can cause "
                "insufficient-capacity errors outside the reservation.",
                "set placement_group: false for capacity-block groups.",
            )
        elif not cb and not cl.placement_group:
            yield Finding(
                Level.ERROR, "efa-needs-placement", f"{path}.placement_group", False,
                "EFA nodes outside a cluster placement group may land on distant racks: higher "
                "latency and lower all-reduce bandwidth.",
                "set placement_group: true (or use a capacity block).",
            )
        if cl.capacity.type == "spot":
            yield Finding(
                Level.WARNING, "efa-on-spot", f"{path}.capacity.type", "spot",
                "a reclaimed spot node kills every synchronous multi-node job on the group.",
                "use on_demand, a reservation or a capacity block for training groups.",
            )
        gs = c.gpu_stack
        if p is not None and p.gpu is not None and gs.vendor == "nvidia":
            if gs.aws_ofi_nccl is None:
                yield Finding(
                    Level.ERROR, "efa-without-ofi", "gpu_stack.aws_ofi_nccl", None,
                    "NCCL cannot use EFA without the aws-ofi-nccl plugin; it would fall back to TCP sockets.",
                    "set gpu_stack.aws_ofi_nccl (e.g. '1.14.0').",
                )
            elif p.gpu.generation == "hopper" and not nccl_gate(gs.aws_ofi_nccl, "ofi_p5_minimum"):
                yield Finding(
                    Level.ERROR, "ofi-too-old", "gpu_stack.aws_ofi_nccl", gs.aws_ofi_nccl,
                    f"p5-class instances need aws-ofi-nccl >= {nccl_first('ofi_p5_minimum')} (EFA cheatsheet).",
                    "upgrade to 1.7.3 or newer.",
                )
            if p.gpu.generation == "hopper" and not nccl_gate(gs.nccl, "nccl_nvls"):
                yield Finding(
                    Level.WARNING, "nccl-too-old", "gpu_stack.nccl", gs.nccl,
                    f"on p5-class instances NCCL < {nccl_first('nccl_nvls')} runs without NVLS (plugin disables it).",
                    "use NCCL 2.18.5 or newer.",
                )


@rule
def fabric_matches_location(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        f = g.fabric
        if f is None:
            continue
        path = f"{_gi(c, g)}.fabric.type"
        if g.is_cloud and f.type in ("infiniband", "roce"):
            yield Finding(
                Level.ERROR, "fabric-not-in-cloud", path, f.type,
                "EC2 offers no InfiniBand or RoCE; its RDMA fabric is EFA.",
                "use fabric type efa (with cloud.efa: true) or ethernet.",
            )
        if f.type == "efa" and not (g.cloud and g.cloud.efa):
            yield Finding(
                Level.ERROR, "efa-fabric-without-efa", path, f.type,
                "fabric efa needs EFA interfaces on the instances.",
                "set cloud.efa: true on this group, or use fabric ethernet/infiniband.",
            )
        if f.type in ("infiniband", "roce") and not f.hcas:
            yield Finding(
                Level.WARNING, "no-hcas", f"{_gi(c, g)}.fabric.hcas", [],
                "without NCCL_IB_HCA NCCL may use storage or management ports for collectives.",
                "list the compute HCAs (ibstat shows them; playbooks/discover.yml collects them).",
            )
        if f.type == "roce" and f.gid_index is None:
            yield Finding(
                Level.INFO, "roce-gid-auto", f"{_gi(c, g)}.fabric.gid_index", None,
                "NCCL will auto-select the GID (NCCL >= 2.21 follows NCCL_SOCKET_FAMILY).",
                "set gid_index (usually 3 for RoCEv2/IPv4) to pin it.",
            )


@rule
def gpu_vendor_matches(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        p = ctx.profile(g)
        if p is not None and p.gpu is not None and p.gpu.vendor != c.gpu_stack.vendor:
            yield Finding(
                Level.ERROR, "gpu-vendor-mismatch", "gpu_stack.vendor", c.gpu_stack.vendor,
                f"node group {g.name!r} ({g.profile_name}) has {p.gpu.vendor} GPUs.",
                f"set gpu_stack.vendor: {p.gpu.vendor}, or split the clusters.",
            )


@rule
def unknown_cpu_layout(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    # the resolved profile: discovered facts (--facts DIR or facts_dir) already applied
    for g in c.node_groups:
        p = ctx.profile(g)
        if p is not None and not p.cpu_layout_known:
            yield Finding(
                Level.INFO if p.cpus else Level.ERROR, "cpu-layout-unknown", f"{_gi(c, g)}", g.profile_name,
                "neither the catalog nor discovered facts give this profile's sockets/cores/threads"
                + (
                    (" (slurm.conf gets CPUs and ThreadsPerCore only)." if p.threads_per_core else
                     " (slurm.conf gets CPUs only).")
                    if p.cpus
                    else " nor its CPU count."
                ),
                "run playbooks/discover.yml and render with --facts DIR (or set facts_dir).",
            )


# -------------------------------------------------------------------------------- network


@rule
def cidrs_nest(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    if c.aws is None:
        return
    vpc = ipaddress.ip_network(c.aws.vpc_cidr)
    nets: list[tuple[int, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for i, s in enumerate(c.aws.subnets):
        net = ipaddress.ip_network(s.cidr)
        if net.version != vpc.version or not net.subnet_of(vpc):  # type: ignore[arg-type]
            yield Finding(
                Level.ERROR, "subnet-outside-vpc", f"aws.subnets[{i}].cidr", s.cidr,
                f"is not inside the VPC {c.aws.vpc_cidr}.", "pick a subnet CIDR inside aws.vpc_cidr.",
            )
        for j, other in nets:
            if net.overlaps(other):
                yield Finding(
                    Level.ERROR, "subnets-overlap", f"aws.subnets[{i}].cidr", s.cidr,
                    f"overlaps aws.subnets[{j}].cidr {other}.", "make subnet CIDRs disjoint.",
                )
        nets.append((i, net))
    if not any(not s.public for s in c.aws.subnets) and any(g.is_cloud for g in c.node_groups):
        yield Finding(
            Level.ERROR, "no-private-subnet", "aws.subnets", len(c.aws.subnets),
            "compute nodes must not have public addresses, so they need a private subnet.",
            "add a subnet with public: false.",
        )
    for i, cidr in enumerate(c.aws.login_allowed_cidrs):
        if ipaddress.ip_network(cidr).prefixlen == 0:
            yield Finding(
                Level.WARNING, "ssh-open-to-world", f"aws.login_allowed_cidrs[{i}]", cidr,
                "opens SSH on login nodes to the whole internet.",
                "list your office/VPN CIDRs, or leave the list empty and use SSM.",
            )


# ----------------------------------------------------------------------------- partitions


@rule
def partitions_valid(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    names = {g.name for g in c.node_groups}
    defaults = [p.name for p in c.partitions if p.default]
    if len(defaults) > 1:
        yield Finding(
            Level.ERROR, "many-defaults", "partitions[*].default", defaults,
            "Slurm takes only one default partition.", "set default: true on one partition.",
        )
    if c.partitions and not defaults:
        yield Finding(
            Level.WARNING, "no-default-partition", "partitions", [p.name for p in c.partitions],
            "jobs submitted without -p fail when no partition is the default.",
            "set default: true on one partition.",
        )
    if not c.partitions:
        yield Finding(
            Level.INFO, "implicit-partition", "partitions", [],
            "no partitions given: one default partition 'batch' with every compute group is rendered.",
            "declare partitions to split GPU and CPU work.",
        )
    for i, part in enumerate(c.partitions):
        models: dict[str, list[str]] = {}
        for j, gname in enumerate(part.node_groups):
            if gname not in names:
                yield Finding(
                    Level.ERROR, "unknown-node-group", f"partitions[{i}].node_groups[{j}]", gname,
                    "names no node group.", f"use one of: {', '.join(sorted(names))}.",
                )
                continue
            g = c.group(gname)
            if g.role != "compute":
                yield Finding(
                    Level.ERROR, "non-compute-in-partition", f"partitions[{i}].node_groups[{j}]", gname,
                    f"is a {g.role} group; jobs would land on it.", "list only compute groups in partitions.",
                )
            p = ctx.profile(g)
            key = f"{p.gpu.model} ({p.gpu.generation})" if p and p.gpu else "cpu"
            models.setdefault(key, []).append(gname)
        gpu_kinds = [k for k in models if k != "cpu"]
        if len(gpu_kinds) > 1:
            yield Finding(
                Level.INFO if part.allow_mixed_gpus else Level.ERROR, "mixed-gpus",
                f"partitions[{i}].node_groups", part.node_groups,
                f"mixes GPU models {sorted(gpu_kinds)}: synchronous training runs at the slowest GPU's pace "
                "and NCCL cannot use NVLink-specific algorithms across them.",
                "split the partition per GPU model, or set allow_mixed_gpus: true if that is intended.",
            )
        if gpu_kinds and "cpu" in models:
            yield Finding(
                Level.WARNING, "gpu-and-cpu-partition", f"partitions[{i}].node_groups", part.node_groups,
                "mixes GPU and CPU-only nodes: CPU jobs can occupy GPU nodes.",
                "put CPU groups in their own partition.",
            )


# ------------------------------------------------------------------------------- topology


@rule
def topology_references(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    t = c.topology
    switches = {s.name: s for s in t.switches}
    for i, s in enumerate(t.switches):
        if s.parent is not None and s.parent not in switches:
            yield Finding(
                Level.ERROR, "unknown-parent-switch", f"topology.switches[{i}].parent", s.parent,
                "names no switch in topology.switches.", "declare the parent switch or fix the name.",
            )
    # cycles: follow parents; a path longer than the switch count loops
    for i, s in enumerate(t.switches):
        seen: set[str] = set()
        cur: str | None = s.name
        while cur is not None and cur in switches:
            if cur in seen:
                yield Finding(
                    Level.ERROR, "switch-cycle", f"topology.switches[{i}]", s.name,
                    "the parent chain loops; topology/tree needs a tree.", "break the loop in 'parent'.",
                )
                break
            seen.add(cur)
            cur = switches[cur].parent
    roots = [s.name for s in t.switches if s.parent is None]
    if t.switches and len(roots) != 1:
        yield Finding(
            Level.ERROR, "topology-roots", "topology.switches", roots,
            "a topology tree needs exactly one root; without a common parent no job spans the subtrees.",
            "add one top switch and set it as 'parent' of the others.",
        )
    parents = {s.parent for s in t.switches if s.parent}
    placed: dict[str, str] = {}
    for g in c.node_groups:
        if g.onprem is None:
            continue
        ghosts = set(g.hostnames)
        for k, pl in enumerate(g.onprem.placement):
            path = f"{_gi(c, g)}.onprem.placement[{k}]"
            if pl.switch not in switches:
                yield Finding(
                    Level.ERROR, "unknown-switch", f"{path}.switch", pl.switch,
                    "names no switch in topology.switches.", "declare it under topology.switches.",
                )
            elif pl.switch in parents:
                yield Finding(
                    Level.ERROR, "hosts-on-inner-switch", f"{path}.switch", pl.switch,
                    "has child switches; Slurm forbids a switch with both nodes and switches.",
                    "attach hosts to leaf switches only.",
                )
            for h in hostlist.expand(pl.hosts):
                if h not in ghosts:
                    yield Finding(
                        Level.ERROR, "placement-unknown-host", f"{path}.hosts", h,
                        f"is not a host of node group {g.name!r}.", "list only the group's own hosts.",
                    )
                elif h in placed:
                    yield Finding(
                        Level.ERROR, "host-placed-twice", f"{path}.hosts", h,
                        f"is already placed in rack {placed[h]!r}.", "place each host once.",
                    )
                placed[h] = pl.rack
        if t.switches and g.role == "compute":
            missing = [h for h in g.hostnames if h not in placed]
            if missing:
                yield Finding(
                    Level.WARNING, "unplaced-hosts", f"{_gi(c, g)}.onprem.placement", hostlist.compress(missing),
                    "these hosts have no switch; they are put under a switch 'unplaced' below the root, "
                    "so topology-aware scheduling cannot see where they really are.",
                    "add placement entries (rack, switch, hosts) for them.",
                )
    # topology/tree: every declared switch needs compute hosts or child switches (slurmctld rejects
    # an empty one); the renderer places only compute hosts
    tree = t.plugin == "tree" or (t.plugin == "auto" and not (t.blocks and not t.switches))
    with_hosts = {
        pl.switch for g in c.node_groups if g.onprem is not None and g.role == "compute" for pl in g.onprem.placement
    }
    for i, s in enumerate(t.switches):
        if tree and s.name not in parents and s.name not in with_hosts:
            yield Finding(
                Level.ERROR, "empty-switch", f"topology.switches[{i}]", s.name,
                "has neither compute hosts nor child switches; slurmctld rejects such a switch in topology.conf.",
                "place compute hosts under it (onprem.placement) or remove it.",
            )
    unplaced = [
        h for g in c.node_groups if g.onprem is not None and g.role == "compute" for h in g.hostnames if h not in placed
    ]
    if tree and unplaced and len(roots) == 1 and roots[0] in with_hosts:
        yield Finding(
            Level.ERROR, "unplaced-below-leaf-root", "topology.switches", roots[0],
            f"hosts {hostlist.compress(unplaced)} have no placement, so they go under a switch 'unplaced' below "
            "the root; but the root has hosts itself, and Slurm forbids a switch with both hosts and switches.",
            "place every compute host, or add a top switch above the root.",
        )
    all_hosts = {h for g in c.node_groups for h in g.hostnames}
    for i, b in enumerate(t.blocks):
        for h in hostlist.expand(b.hosts):
            if h not in all_hosts:
                yield Finding(
                    Level.ERROR, "block-unknown-host", f"topology.blocks[{i}].hosts", h,
                    "is not a host of any node group.", "list existing hosts only.",
                )
    if t.ec2_instance_topology is not None and not (ctx.base / t.ec2_instance_topology).is_file():
        yield Finding(
            Level.ERROR, "missing-ec2-topology", "topology.ec2_instance_topology", t.ec2_instance_topology,
            "file not found (paths are relative to the spec file).",
            "give the JSON written from `aws ec2 describe-instance-topology`, or remove the key.",
        )


@rule
def version_gates(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    v = version_tuple(c.slurm.version)
    t = c.topology
    if (t.plugin == "block" or t.blocks) and v < (23, 11):
        yield Finding(
            Level.ERROR, "block-needs-2311", "topology.blocks" if t.blocks else "topology.plugin",
            c.slurm.version if not t.blocks else [b.name for b in t.blocks],
            f"topology/block does not exist before Slurm 23.11 (target is {c.slurm.version}).",
            "raise slurm.version to 23.11+ or describe the network as switches (topology/tree).",
        )
    if t.block_sizes and v < (24, 5):
        yield Finding(
            Level.ERROR, "blocksizes-needs-2405", "topology.block_sizes", t.block_sizes,
            "BlockSizes= arrives in Slurm 24.05 (23.11 used BlockLevels).",
            "raise slurm.version to 24.05+ or drop block_sizes.",
        )
    if t.block_sizes:
        base_size = t.block_sizes[0]
        for k, size in enumerate(t.block_sizes[1:], start=1):
            ratio = size // base_size
            if size % base_size or ratio & (ratio - 1) or ratio > 2**15:
                yield Finding(
                    Level.ERROR, "blocksizes-invalid", f"topology.block_sizes[{k}]", size,
                    "each BlockSizes value must be the base size times a power of two (slurmctld fatals).",
                    f"use {base_size}*2^k, e.g. {base_size * 2}.",
                )
    if t.plugin == "tree" and not t.switches and not t.ec2_instance_topology:
        yield Finding(
            Level.ERROR, "empty-tree", "topology.plugin", "tree",
            "topology/tree without switches would load an empty topology.conf (slurmctld fatals).",
            "declare topology.switches or set plugin: auto.",
        )
    if t.plugin == "block" and not t.blocks:
        yield Finding(
            Level.ERROR, "empty-block", "topology.plugin", "block",
            "topology/block without blocks renders no usable topology.", "declare topology.blocks.",
        )
    if v >= (25, 5) and (t.switches or t.blocks):
        yield Finding(
            Level.INFO, "topology-yaml", "slurm.version", c.slurm.version,
            "Slurm 25.05 reads topology.yaml; it is rendered instead of topology.conf.",
            "nothing to do; partitions use the cluster default topology.",
        )


# ------------------------------------------------------------------------------- storage


@rule
def checkpoint_storage(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    n = gpu_nodes(c, ctx)
    for i, s in enumerate(c.storage):
        if "checkpoints" in s.purpose and s.type in ("nfs", "efs") and n > 8:
            yield Finding(
                Level.WARNING, "checkpoints-on-nfs", f"storage[{i}].type", s.type,
                f"{n} GPU nodes writing checkpoints at once saturate a single NFS/EFS endpoint; a "
                "checkpoint that takes minutes stalls every GPU for that time.",
                "put checkpoints on a parallel file system (fsx_lustre or lustre).",
            )
    mounts = Counter(s.mount for s in c.storage)
    for i, s in enumerate(c.storage):
        if mounts[s.mount] > 1:
            yield Finding(
                Level.ERROR, "duplicate-mount", f"storage[{i}].mount", s.mount,
                "two file systems are mounted at the same path.", "give each a distinct mount point.",
            )
        if s.type in ("fsx_lustre", "efs") and c.aws is None:
            yield Finding(
                Level.ERROR, "aws-storage-without-aws", f"storage[{i}].type", s.type,
                "FSx and EFS are AWS services; the spec has no aws section.",
                "add 'aws:' or use nfs/lustre for on-prem storage.",
            )
    if c.facts_dir is not None and not (ctx.base / c.facts_dir).is_dir():
        yield Finding(
            Level.ERROR, "missing-facts-dir", "facts_dir", c.facts_dir,
            "folder not found (paths are relative to the spec file).",
            "run playbooks/discover.yml to collect facts there, or remove facts_dir.",
        )


def validate(
    cluster: Cluster,
    base_dir: Path | None = None,
    *,
    profiles: Mapping[str, HardwareProfile | None] | None = None,
    facts_dir: Path | None = None,
) -> list[Finding]:
    """All findings, errors first, in a stable order.

    ``profiles``: each group's resolved profile (``clusterforge.resolve`` passes them); without it,
    the catalog's."""
    ctx = RuleContext(base_dir or Path("."), profiles or {}, facts_dir)
    out = [f for r in RULES for f in r(cluster, ctx)]
    order = {Level.ERROR: 0, Level.WARNING: 1, Level.INFO: 2}
    return sorted(out, key=lambda f: (order[f.level], f.path, f.code))


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level is Level.ERROR]
