"""Hardware catalog: instance types and server models as data (``profiles.yaml``).

``None`` in a profile means the fact is unknown; callers leave it out or ask for discovered facts.
Each profile says where every fact comes from: :meth:`HardwareProfile.source_of` names the tool
and hosts for a fact discovered on the hosts (``facts`` subpackage), else the catalog's citation.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from clusterforge import hostlist

CATALOG_FILE = Path(__file__).with_name("profiles.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuInfo(_Strict):
    vendor: Literal["nvidia", "amd"]
    model: str
    generation: str
    count: int
    memory_mib: int | None
    interconnect: Literal["nvswitch", "nvlink", "xgmi", "pcie"] | None
    affinity: dict[str, str] | None = Field(
        None, description="GPU index range -> logical core index range (gres.conf Cores=)"
    )
    nvlinks_per_pair: int | None = Field(
        None, description="links between each pair of GPUs as gres.conf Links= counts them; 0 = PCIe only"
    )

    def cores_by_gpu(self) -> dict[int, str] | None:
        """GPU index -> core range, or None when the affinity is unknown."""
        if self.affinity is None:
            return None
        out: dict[int, str] = {}
        for gpus, cores in self.affinity.items():
            for g in hostlist.expand_ints(gpus, field=f"{self.model} gpu.affinity key"):
                out[g] = cores
        return out


class NetworkInfo(_Strict):
    cards: int | None = None
    enis_per_card: int | None = None
    efa_max: int | None = None
    bandwidth_gbps: int | None = None
    hcas: list[tuple[str, int]] | None = Field(None, description="(HCA name, Gb/s) of on-prem compute ports")


FactKey = Literal["cpu_layout", "memory", "gpu_count", "affinity", "links", "hcas"]
"""The facts discovered values can replace (see ``facts.apply``)."""

FactTool = Literal["slurmd -C", "lscpu", "nvidia-smi topo -m", "rocm-smi --showtopo", "ibstat"]

#: The ``sources`` key (``profiles.yaml``) that cites a fact the catalog gives.
CATALOG_SOURCE_KEY: dict[FactKey, str] = {
    "cpu_layout": "cpu_memory",
    "memory": "cpu_memory",
    "gpu_count": "gpu",
    "affinity": "affinity",
    "links": "nvlinks",
    "hcas": "network",
}


class FactOrigin(_Strict):
    """Where a discovered fact came from: the tools whose output gave it, on which hosts."""

    tools: tuple[FactTool, ...] = Field(min_length=1)
    hosts: str = Field(description="hostlist of the hosts that reported it")
    note: str = ""

    def __str__(self) -> str:
        return " + ".join(self.tools) + f" on {self.hosts}" + (f" ({self.note})" if self.note else "")


class HardwareProfile(_Strict):
    name: str
    kind: Literal["aws", "onprem"]
    description: str
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    vcpus: int | None = None
    memory_mib: int | None
    gpu: GpuInfo | None
    network: NetworkInfo
    sources: dict[str, str]
    discovered_from: dict[FactKey, FactOrigin] = Field(
        default_factory=dict, description="facts replaced by ones discovered on the hosts, and where from"
    )

    @property
    def discovered(self) -> bool:
        """True when memory_mib is RealMemory from slurmd -C on the hosts (already OS-visible)."""
        return "memory" in self.discovered_from

    def source_of(self, fact: FactKey) -> str:
        """Where ``fact`` comes from, for comments in rendered files: the tool or the catalog's citation."""
        origin = self.discovered_from.get(fact)
        if origin is not None:
            return str(origin)
        cited = self.sources.get(CATALOG_SOURCE_KEY[fact])
        return f"catalog: {cited}" if cited else "catalog (no source cited)"

    @property
    def cpus(self) -> int | None:
        if self.sockets and self.cores_per_socket and self.threads_per_core:
            return self.sockets * self.cores_per_socket * self.threads_per_core
        return self.vcpus

    @property
    def cores(self) -> int | None:
        """Physical cores (EC2 DefaultCores), also when the socket split is unknown."""
        if self.sockets and self.cores_per_socket:
            return self.sockets * self.cores_per_socket
        cpus = self.cpus
        if cpus and self.threads_per_core and cpus % self.threads_per_core == 0:
            return cpus // self.threads_per_core
        return None

    @property
    def cpu_layout_known(self) -> bool:
        return bool(self.sockets and self.cores_per_socket and self.threads_per_core)

    @property
    def efa_capable(self) -> bool:
        return bool(self.network.efa_max)


@cache
def load_catalog(path: Path = CATALOG_FILE) -> dict[str, HardwareProfile]:
    # the C loader when libyaml is there: the pure-Python one takes seconds on this file
    raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {name: HardwareProfile(name=name, **row) for name, row in raw["profiles"].items()}


def get_profile(name: str) -> HardwareProfile | None:
    return load_catalog().get(name)


def profile_names(kind: str | None = None) -> list[str]:
    return sorted(n for n, p in load_catalog().items() if kind is None or p.kind == kind)
