"""The config model: spec + hardware profiles (catalog or discovered facts) -> plain data.

Every rendered file is printed from these objects; no template derives a hardware fact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from clusterforge import hostlist
from clusterforge.catalog import HardwareProfile
from clusterforge.clusterspec.models import Cluster, NodeGroup
from clusterforge.errors import RenderError
from clusterforge.resolve import ResolvedGroup

# What the OS sees of the advertised memory: slurmd -C on a p5.48xlarge reports 2,047,961 MiB of
# the 2,097,152 MiB EC2 advertises (97.65 %; facts.md 1.1). Below that, the spec's
# os_memory_reserve_mib is kept free for the kernel, slurmd, munge and exporters, so a node never
# registers with less memory than slurm.conf claims (which would set it INVALID).
KERNEL_VISIBLE_FRACTION = 0.975


@dataclass(frozen=True)
class GpuSet:
    vendor: str
    type: str
    count: int
    files: str  # hostlist form, e.g. /dev/nvidia[0-7]
    device_paths: tuple[str, ...]
    cores: tuple[str | None, ...]  # per GPU: gres.conf Cores= or None when unknown
    links: tuple[str | None, ...]  # per GPU: gres.conf Links= or None when unknown


@dataclass(frozen=True)
class NodeSet:
    """One node group as Slurm sees it."""

    group: str
    role: str
    count: int  # how many nodes: len(names), known without listing them
    # lists the node names when something first reads ``names`` (ResolvedGroup.hosts): the
    # hostlists come from known_items, so rendering 65,536 cloud nodes lists none of them
    list_names: Callable[[], tuple[str, ...]] = field(compare=False, repr=False)
    # on-prem addresses, paired with the names (ResolvedGroup.addresses), listed on first read
    list_addresses: Callable[[], tuple[str, ...] | None] = field(compare=False, repr=False)
    addressed: bool  # whether the spec gives addresses (slurm.conf NodeAddr=)
    cpus: int
    boards: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    real_memory: int
    gpus: GpuSet | None
    features: tuple[str, ...]
    weight: int | None
    fabric: str
    profile: HardwareProfile
    # compute nodes of an Auto Scaling group: State=CLOUD, NodeAddr learnt from registration
    cloud: bool = False
    # the names' hostlist items as the spec gives them (NodeGroup.hostlist_items: a cloud group's
    # count, an on-prem group's ranges), or None: then the names are compressed
    known_items: tuple[hostlist.Item, ...] | None = None
    # the addresses' hostlist items when names and addresses are both written in hostlist order
    # (hostlist.ordered_items), so the two hostlists pair them as the spec does; else None
    known_addr_items: tuple[hostlist.Item, ...] | None = None

    # Listed once, on first read (cached_property writes the instance dict, past the frozen
    # __setattr__): only a group with one NodeName line per node, and the consumers past the
    # render (inventory, check), read them.
    @cached_property
    def names(self) -> tuple[str, ...]:
        """Every node name, in the spec's order."""
        return self.list_names()

    @cached_property
    def addresses(self) -> tuple[str, ...] | None:
        """Every node's address, paired with ``names``; None without addresses."""
        return self.list_addresses()

    # Worked out once per node group: slurm.conf, gres.conf, the topology basis, the manifest and
    # the daemon host lists all print it. Compressing names is linear in the group's nodes; the
    # spec's own numbers are not, so rendering grows with groups where the spec gives them.
    @cached_property
    def hostlist_items(self) -> list[hostlist.Item]:
        """The hostlist's items (``hostlist.compress_items``): partitions join their groups' items."""
        return list(self.known_items) if self.known_items is not None else hostlist.compress_items(self.names)

    @cached_property
    def hostlist(self) -> str:
        return hostlist.join_items(self.hostlist_items)

    @cached_property
    def addr_hostlist(self) -> str | None:
        """``NodeAddr=`` for the group's one ``NodeName=`` line, or None: without addresses, or
        when the two hostlists would not pair the names with their addresses (then one line per
        node)."""
        if not self.addressed:
            return None
        if self.known_addr_items is not None:
            return hostlist.join_items(self.known_addr_items)
        addrs = self.addresses or ()  # addressed: the spec gives them
        return hostlist.compress(addrs) if _same_order(self.names, addrs) else None

    @property
    def gres(self) -> str | None:
        return f"gpu:{self.gpus.type}:{self.gpus.count}" if self.gpus else None


def _known_items(group: NodeGroup) -> tuple[hostlist.Item, ...] | None:
    items = group.hostlist_items
    return tuple(items) if items is not None else None


def _known_addr_items(group: NodeGroup) -> tuple[hostlist.Item, ...] | None:
    on = group.onprem
    if on is None or not on.addresses or hostlist.ordered_items(on.hosts) is None:
        return None
    items = hostlist.ordered_items(on.addresses)
    return tuple(items) if items is not None else None


def _same_order(names: tuple[str, ...], addrs: tuple[str, ...]) -> bool:
    """True when ``NodeName=<hostlist> NodeAddr=<hostlist>`` pairs every name with its address.

    Slurm pairs the two lists by position after expanding them; the compressed forms are
    sorted, so when the spec pairs names and addresses in another order, one line per node is
    needed instead.
    """
    paired = zip(hostlist.expand(hostlist.compress(names)), hostlist.expand(hostlist.compress(addrs)), strict=False)
    return sorted(paired) == sorted(zip(names, addrs, strict=True))


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class PartitionModel(NamedTuple):
    name: str
    nodes: str
    default: bool
    max_time: str
    exclusive: bool
    def_mem_per_cpu: int


class SwitchModel(NamedTuple):
    name: str
    nodes: str | None
    switches: str | None
    comment: str = ""


class BlockModel(NamedTuple):
    name: str
    nodes: str


@dataclass(frozen=True)
class TopologyModel:
    plugin: str | None  # topology/tree, topology/block or None
    switches: tuple[SwitchModel, ...] = ()
    blocks: tuple[BlockModel, ...] = ()
    block_sizes: tuple[int, ...] = ()
    #: the tree's basis (``render/tree.py``) for topology/tree: what the cloud agent rebuilds from
    basis: dict[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ClusterModel:
    cluster: Cluster
    version: tuple[int, ...]
    version_str: str
    controllers: tuple[tuple[str, str | None], ...]
    nodesets: tuple[NodeSet, ...]
    partitions: tuple[PartitionModel, ...]
    topology: TopologyModel
    notes: list[str] = field(default_factory=list)

    @property
    def compute(self) -> tuple[NodeSet, ...]:
        return tuple(n for n in self.nodesets if n.role == "compute")

    @property
    def has_gpus(self) -> bool:
        return any(n.gpus for n in self.compute)


def _gpu_set(group: NodeGroup, p: HardwareProfile) -> GpuSet | None:
    gpu = p.gpu
    if gpu is None or group.role != "compute":
        return None
    n = gpu.count
    if gpu.vendor == "nvidia":
        devices = tuple(f"/dev/nvidia{i}" for i in range(n))
    else:
        # AMD GPUs are handed out by their DRM render nodes; card i is renderD(128+i).
        devices = tuple(f"/dev/dri/renderD{128 + i}" for i in range(n))
    files = hostlist.compress(devices)  # /dev/nvidia[0-7]: gres.conf File= takes hostlist syntax
    by_gpu = gpu.cores_by_gpu() or {}
    cores = tuple(by_gpu.get(i) for i in range(n))
    links: tuple[str | None, ...]
    if gpu.nvlinks_per_pair:
        links = tuple(
            ",".join("-1" if j == i else str(gpu.nvlinks_per_pair) for j in range(n)) for i in range(n)
        )
    else:
        links = (None,) * n
    return GpuSet(gpu.vendor, gpu.model, n, files, devices, cores, links)


def real_memory(p: HardwareProfile, reserve_mib: int, group: str) -> int:
    if p.memory_mib is None:
        raise RenderError(
            f"node group {group!r}: memory of profile {p.name!r} is unknown; run playbooks/discover.yml "
            "and render with --facts DIR"
        )
    visible = p.memory_mib if p.discovered else int(p.memory_mib * KERNEL_VISIBLE_FRACTION)
    mem = visible - reserve_mib
    if mem < 1024:
        raise RenderError(
            f"node group {group!r}: slurm.os_memory_reserve_mib={reserve_mib} leaves {mem} MiB of "
            f"{visible} MiB; lower the reserve"
        )
    return mem


def build_nodeset(rg: ResolvedGroup, reserve_mib: int) -> NodeSet:
    group, p = rg.spec, rg.profile
    if p is None:
        raise RenderError(f"node group {group.name!r}: profile {group.profile_name!r} is not in the catalog")
    cpus = p.cpus
    if cpus is None:
        raise RenderError(
            f"node group {group.name!r}: the CPU count of profile {p.name!r} is unknown; run "
            "playbooks/discover.yml on its hosts and render with --facts DIR (or set facts_dir)"
        )
    known = p.cpu_layout_known
    return NodeSet(
        group=group.name,
        role=group.role,
        count=group.node_count,
        list_names=lambda: rg.hosts,
        list_addresses=lambda: rg.addresses,
        addressed=group.onprem is not None and bool(group.onprem.addresses),
        cpus=cpus,
        boards=1 if known else None,
        sockets=p.sockets if known else None,
        cores_per_socket=p.cores_per_socket if known else None,
        # Known without the socket split for some EC2 types: slurm.conf then gets CPUs and
        # ThreadsPerCore (see render.slurm.node_fields).
        threads_per_core=p.threads_per_core,
        real_memory=real_memory(p, reserve_mib, group.name),
        gpus=_gpu_set(group, p),
        features=tuple(group.features),
        weight=group.weight,
        fabric=group.fabric_type,
        profile=p,
        cloud=group.is_cloud and group.role == "compute",
        known_items=_known_items(group),
        known_addr_items=_known_addr_items(group),
    )
