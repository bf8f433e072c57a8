"""Parser for `rocm-smi --showtopo`: xGMI/PCIe link types and each GPU's NUMA node."""

from __future__ import annotations

import re

from clusterforge.catalog.facts.models import FactsError, GpuTopo
from clusterforge.catalog.facts.text import parse_int as _int


def _rocm_sections(lines: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for ln in lines:
        m = re.fullmatch(r"\s*=+\s*(.*?)\s*=+\s*", ln)
        if m:
            # "=== Title ===" opens a section; a bare "=====" rule only separates.
            if m.group(1):
                current = sections.setdefault(m.group(1), [])
        elif current is not None and ln.strip():
            current.append(ln)
    return sections


def _rocm_matrix(body: list[str], title: str, source: str) -> list[list[str]]:
    if not body:
        raise FactsError(f"{source}: section {title!r} is empty")
    header = body[0].split()
    n = len(header)
    if header != [f"GPU{i}" for i in range(n)]:
        raise FactsError(
            f"{source}: section {title!r} header should be GPU0 GPU1 ..., got {body[0].strip()!r}"
        )
    rows = [ln.split() for ln in body[1:]]
    if len(rows) != n or any(len(r) != n + 1 or r[0] != f"GPU{i}" for i, r in enumerate(rows)):
        raise FactsError(
            f"{source}: section {title!r} should have rows GPU0..GPU{n - 1} with {n} values each"
        )
    return [r[1:] for r in rows]


def parse_rocm_smi_topo(text: str, source: str = "rocm-smi --showtopo output") -> GpuTopo:
    """Parse ``rocm-smi --showtopo``: weight/hops/link-type matrices and the Numa Nodes list.

    xGMI counts as one link per peer (MI300X has one Infinity Fabric link to each of its 7
    peers); PCIE as 0. rocm-smi gives no CPU list, only a NUMA node, so ``cpu_affinity`` is None
    and apply_facts maps the node to CPUs with lscpu.
    """
    sections = _rocm_sections(text.splitlines())
    title = "Link Type between two GPUs"
    if title not in sections:
        raise FactsError(f"{source}: no '{title}' section; expected the output of `rocm-smi --showtopo`")
    kinds = _rocm_matrix(sections[title], title, source)
    n = len(kinds)
    links = [[0] * n for _ in range(n)]
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            if i == j:
                if kind != "0":
                    raise FactsError(f"{source}: {title} GPU{i}/GPU{j} is {kind!r}; the diagonal is 0")
            elif kind == "XGMI":
                links[i][j] = 1
            elif kind != "PCIE":
                raise FactsError(f"{source}: {title} GPU{i}/GPU{j} is {kind!r}; expected XGMI or PCIE")
    for i in range(n):
        for j in range(i):
            if links[i][j] != links[j][i]:
                raise FactsError(f"{source}: link type GPU{i}/GPU{j} and GPU{j}/GPU{i} differ")
    for other in ("Weight between two GPUs", "Hops between two GPUs"):
        if other in sections:
            values = _rocm_matrix(sections[other], other, source)
            if len(values) != n:
                raise FactsError(f"{source}: '{other}' has {len(values)} GPUs, '{title}' has {n}")
            for row in values:
                for v in row:
                    _int(v, f"a value in '{other}'", source)

    nodes: dict[int, int] = {}
    affinities: dict[int, int] = {}
    for ln in sections.get("Numa Nodes", []):
        m = re.fullmatch(
            r"GPU\[([0-9]{1,6})\]\s*:\s*\(Topology\) Numa (Node|Affinity):\s*(-?[0-9]{1,6})", ln.strip()
        )
        if not m:
            raise FactsError(
                f"{source}: {ln.strip()!r} in 'Numa Nodes'; expected 'GPU[i]\\t\\t: (Topology) Numa Node: N'"
            )
        gpu = int(m.group(1))
        if gpu >= n:
            raise FactsError(f"{source}: Numa Nodes names GPU[{gpu}] but the matrices have {n} GPUs")
        (nodes if m.group(2) == "Node" else affinities)[gpu] = int(m.group(3))
    numa: list[int | None] = []
    for g in range(n):
        # The device's own NUMA affinity is what binding should follow; -1 means "no NUMA".
        node = affinities.get(g, nodes.get(g))
        numa.append(node if node is not None and node >= 0 else None)
    return GpuTopo(
        vendor="amd",
        gpu_count=n,
        links=tuple(tuple(r) for r in links),
        cpu_affinity=(None,) * n,
        numa_node=tuple(numa),
    )

