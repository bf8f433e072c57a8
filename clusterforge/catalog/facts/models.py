"""The facts found on one host, as typed records: one model per tool, and the error they raise.

The parsers (one module per tool) build these; :mod:`.apply` turns them into profile values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from clusterforge.errors import ClusterforgeError


class FactsError(ClusterforgeError, ValueError):
    """A fact file that is not what its tool prints, or facts that cannot apply to a profile.

    A ``ClusterforgeError``: every verb reports it as one message (exit 2), never a traceback;
    still a ``ValueError`` for the callers that caught it as one."""


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlurmdC(_Fact):
    """``slurmd -C``: the node line slurmd would register with."""

    node_name: str
    cpus: int
    boards: int
    sockets_per_board: int
    cores_per_socket: int
    threads_per_core: int
    real_memory_mib: int
    uptime: str | None = None

    @property
    def sockets(self) -> int:
        return self.boards * self.sockets_per_board


class Lscpu(_Fact):
    """``lscpu``: CPU layout and the logical CPUs of each NUMA node."""

    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    model_name: str | None = None
    numa_nodes: dict[int, str] = {}
    """NUMA node -> logical CPU list (``0-47,96-143``); ``""`` for a memory-only node."""

    def numa_cpus(self, node: int) -> frozenset[int] | None:
        """Logical CPU ids of a NUMA node, or None when lscpu did not list that node."""
        # Imported here: the CPU-list helpers raise FactsError, which this module defines.
        from clusterforge.catalog.facts.cpus import parse_cpu_list

        cpus = self.numa_nodes.get(node)
        if cpus is None:
            return None
        return frozenset(parse_cpu_list(cpus)) if cpus else frozenset()


class GpuTopo(_Fact):
    """GPU topology from ``nvidia-smi topo -m`` or ``rocm-smi --showtopo``.

    ``links[i][j]`` counts direct links between GPU i and j as gres.conf ``Links=`` does:
    the NVLink count of an ``NV#`` entry, 1 for an xGMI peer link, 0 for any PCIe/SMP path and
    on the diagonal.
    """

    vendor: Literal["nvidia", "amd"]
    gpu_count: int
    links: tuple[tuple[int, ...], ...]
    cpu_affinity: tuple[str | None, ...]
    """per GPU: logical CPU (thread) list as the tool printed it, None where not reported"""
    numa_node: tuple[int | None, ...]
    nics: tuple[str, ...] = ()
    """RDMA devices nvidia-smi lists next to the GPUs (legend names: mlx5_0, rdmap79s0)"""

    @model_validator(mode="after")
    def _shapes(self) -> GpuTopo:
        n = self.gpu_count
        if len(self.links) != n or any(len(row) != n for row in self.links):
            raise ValueError(f"links must be a {n}x{n} matrix")
        if len(self.cpu_affinity) != n or len(self.numa_node) != n:
            raise ValueError(f"cpu_affinity and numa_node need one entry per GPU ({n})")
        return self

    def uniform_links(self) -> int | None:
        """The link count shared by every GPU pair, or None when pairs differ (or only one GPU)."""
        values = {self.links[i][j] for i in range(self.gpu_count) for j in range(self.gpu_count) if i != j}
        return values.pop() if len(values) == 1 else None


class Hca(_Fact):
    """One port of an RDMA adapter from ``ibstat``."""

    ca: str
    port: int
    state: str
    physical_state: str | None = None
    rate_gbps: int
    link_layer: str

    @property
    def active(self) -> bool:
        return self.state == "Active"


class HostFacts(_Fact):
    """Everything found for one host; a None field means its file was absent."""

    hostname: str
    slurmd: SlurmdC | None = None
    lscpu: Lscpu | None = None
    gpu_topo: GpuTopo | None = None
    hcas: tuple[Hca, ...] | None = None
    files: tuple[str, ...] = ()
