"""Parser for `nvidia-smi topo -m`: NVLink matrix, per-GPU CPU/NUMA affinity, NIC legend."""

from __future__ import annotations

import re

from clusterforge.catalog.facts.cpus import format_ranges, parse_cpu_list
from clusterforge.catalog.facts.models import FactsError, GpuTopo
from clusterforge.catalog.facts.text import ANSI as _ANSI
from clusterforge.catalog.facts.text import NUM as _NUM

_NV_HEADER_WORDS = {
    "CPU Affinity": "CPU_Affinity",
    "NUMA Affinity": "NUMA_Affinity",
    "GPU NUMA ID": "GPU_NUMA_ID",
}
_PCIE_PATHS = frozenset({"SYS", "NODE", "PHB", "PXB", "PIX"})


def _nv_link(code: str, where: str, source: str) -> int:
    """One nvidia-smi topo cell -> NVLink count (0 for any PCIe/SMP path)."""
    if code in _PCIE_PATHS:
        return 0
    m = re.fullmatch(r"NV([0-9]{1,3})", code)
    if m:
        return int(m.group(1))
    raise FactsError(f"{source}: {where} is {code!r}; expected X, NV#, SYS, NODE, PHB, PXB or PIX")


def parse_nvidia_smi_topo(text: str, source: str = "nvidia-smi topo -m output") -> GpuTopo:
    """Parse ``nvidia-smi topo -m``: link matrix, per-GPU CPU/NUMA affinity, NIC legend."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    header_at = next((i for i, ln in enumerate(lines) if "GPU0" in ln and "CPU Affinity" in ln), None)
    if header_at is None:
        raise FactsError(
            f"{source}: no header line with 'GPU0 ... CPU Affinity'; "
            "expected the output of `nvidia-smi topo -m`"
        )
    header = lines[header_at]
    for words, token in _NV_HEADER_WORDS.items():
        header = header.replace(words, token)
    columns = header.split()
    extra_at = next((i for i, c in enumerate(columns) if c in _NV_HEADER_WORDS.values()), len(columns))
    devices, extras = columns[:extra_at], columns[extra_at:]
    gpus = [d for d in devices if re.fullmatch(r"GPU[0-9]+", d)]
    if devices[: len(gpus)] != [f"GPU{i}" for i in range(len(gpus))]:
        raise FactsError(
            f"{source}: header columns {' '.join(devices)} should start GPU0, GPU1, ... in order"
        )
    if not gpus:
        raise FactsError(f"{source}: the header has no GPU columns: {lines[header_at].strip()!r}")
    if (
        len(set(devices)) != len(devices)
        or len(set(extras)) != len(extras)
        or any(c not in _NV_HEADER_WORDS.values() for c in extras)
    ):
        raise FactsError(f"{source}: unexpected header {lines[header_at].strip()!r}")
    n = len(gpus)

    rows: dict[str, list[str]] = {}
    legend_at = len(lines)
    for i in range(header_at + 1, len(lines)):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("Legend"):
            legend_at = i
            break
        cells = stripped.split()
        label = cells[0]
        if label not in devices:
            raise FactsError(f"{source}: row {label!r} is not one of the header columns {' '.join(devices)}")
        if label in rows:
            raise FactsError(f"{source}: row {label} appears twice")
        want = len(devices) + (len(extras) if label in gpus else 0)
        if len(cells) - 1 != want:
            raise FactsError(
                f"{source}: row {label} has {len(cells) - 1} cells, expected {want} (one per header column)"
            )
        rows[label] = cells[1:]
    missing = [d for d in devices if d not in rows]
    if missing:
        raise FactsError(f"{source}: no row for {', '.join(missing)}; the matrix is truncated")

    links: list[list[int]] = [[0] * n for _ in range(n)]
    for label, cells in rows.items():
        for j, dev in enumerate(devices):
            code = cells[j]
            if (label == dev) != (code == "X"):
                raise FactsError(f"{source}: {label}/{dev} is {code!r}; 'X' belongs on the diagonal only")
            if code == "X":
                continue
            count = _nv_link(code, f"{label}/{dev}", source)
            if label in gpus and dev in gpus:
                links[int(label[3:])][j] = count
    for i in range(n):
        for j in range(i):
            if links[i][j] != links[j][i]:
                raise FactsError(f"{source}: GPU{i}/GPU{j} and GPU{j}/GPU{i} differ; links are symmetric")

    affinity: list[str | None] = []
    numa: list[int | None] = []
    for g in gpus:
        extra = dict(zip(extras, rows[g][len(devices) :], strict=True))
        cpu = extra.get("CPU_Affinity", "N/A")
        affinity.append(
            None if cpu == "N/A" else format_ranges(parse_cpu_list(cpu, f"{source}: {g} CPU Affinity"))
        )
        node = extra.get("NUMA_Affinity", "N/A")
        if node == "N/A":
            numa.append(None)
        elif re.fullmatch(_NUM, node):
            numa.append(int(node))
        else:
            # A GPU near several nodes ("0-1") has no single node; its CPU Affinity covers them.
            parse_cpu_list(node, f"{source}: {g} NUMA Affinity")  # but garbage is still refused
            numa.append(None)

    # "NIC Legend:" maps NIC<k> columns to RDMA device names; older drivers name columns directly.
    legend: dict[str, str] = {}
    for ln in lines[legend_at:]:
        m = re.fullmatch(r"\s*(NIC[0-9]+):\s*(\S+)\s*", ln)
        if m:
            legend[m.group(1)] = m.group(2)
    nics: list[str] = []
    for dev in devices[n:]:
        if re.fullmatch(r"NIC[0-9]+", dev):
            if dev not in legend:
                raise FactsError(f"{source}: column {dev} has no 'NIC Legend' entry ('  {dev}: mlx5_0')")
            nics.append(legend[dev])
        else:
            nics.append(dev)
    return GpuTopo(
        vendor="nvidia",
        gpu_count=n,
        links=tuple(tuple(r) for r in links),
        cpu_affinity=tuple(affinity),
        numa_node=tuple(numa),
        nics=tuple(nics),
    )

