"""Hardware catalog: instance types and server models as data (``profiles.yaml``).

``None`` in a profile means the fact is unknown; callers leave it out or ask for discovered facts.
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
    discovered: bool = Field(
        False, description="True when memory_mib is RealMemory from slurmd -C on the hosts (already OS-visible)"
    )

    @property
    def cpus(self) -> int | None:
        if self.sockets and self.cores_per_socket and self.threads_per_core:
            return self.sockets * self.cores_per_socket * self.threads_per_core
        return self.vcpus

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
