"""Hardware facts discovered on real hosts, and how they override the catalog.

``playbooks/discover.yml`` (or an operator by hand) saves the output of a few standard tools per
host, in this layout (every file optional)::

    <dir>/<hostname>/slurmd-C.txt          slurmd -C
    <dir>/<hostname>/lscpu.txt             lscpu
    <dir>/<hostname>/nvidia-smi-topo.txt   nvidia-smi topo -m
    <dir>/<hostname>/rocm-smi-topo.txt     rocm-smi --showtopo
    <dir>/<hostname>/ibstat.txt            ibstat

The parsers read exactly what these tools print (headers, legends, blank lines, tab or space
alignment) and raise :class:`FactsError`, naming the file and what was expected, on anything
else: a fact file that silently parses to the wrong thing would render a gres.conf that drains
every node. :func:`apply_facts` then replaces catalog values with the discovered ones, after
checking that all hosts of a node group agree.

CPU numbering assumption (used for gres.conf ``Cores=``): the GPU tools report affinity as
logical CPU (hardware *thread*) ids, Slurm wants *core* indices (hwloc ``Core L#``). With S
sockets x C cores x T threads, x86 Linux numbers the first thread of every core 0..S*C-1,
socket by socket, and the SMT siblings after that in the same order (CPU ``i + k*S*C`` is thread
``k`` of core ``i``). So core index = CPU id for ids below S*C. :func:`threads_to_cores` checks
that a CPU list is consistent with this numbering, and :func:`apply_facts` checks every NUMA node
lscpu reports, so a host that numbers its CPUs otherwise (siblings adjacent, sockets interleaved)
is refused instead of getting wrong ``Cores=``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from clusterforge import hostlist
from clusterforge.catalog import HardwareProfile

SLURMD_C_FILE = "slurmd-C.txt"
LSCPU_FILE = "lscpu.txt"
NVIDIA_TOPO_FILE = "nvidia-smi-topo.txt"
ROCM_TOPO_FILE = "rocm-smi-topo.txt"
IBSTAT_FILE = "ibstat.txt"
FACT_FILES = (SLURMD_C_FILE, LSCPU_FILE, NVIDIA_TOPO_FILE, ROCM_TOPO_FILE, IBSTAT_FILE)

# Identical hosts differ by a few MiB of RealMemory (firmware and kernel reservations), while a
# different DIMM population differs by whole DIMMs (several percent), so 1 % separates the two.
MEMORY_TOLERANCE = 0.01

# Python refuses int() on very long digit strings with a plain ValueError; no real count or
# memory size has more digits than this, so longer numbers are malformed input. ASCII digits
# only: the tools print nothing else, and int() of other Unicode digits is a surprise.
_NUM = r"[0-9]{1,15}"


class FactsError(ValueError):
    """A fact file that is not what its tool prints, or facts that cannot apply to a profile."""


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


# --------------------------------------------------------------------------------------------
# small helpers


def parse_cpu_list(text: str, source: str = "CPU list") -> list[int]:
    """``0-47,96-143`` -> sorted ids. Raises FactsError on anything else."""
    ids: set[int] = set()
    body = text.strip()
    if not body:
        raise FactsError(f"{source}: empty CPU list")
    for part in body.split(","):
        m = re.fullmatch(rf"({_NUM})(?:-({_NUM}))?", part.strip())
        if not m:
            raise FactsError(f"{source}: bad CPU list {text!r}: expected ranges like 0-47,96-143")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo or hi - lo > 1_000_000:
            raise FactsError(f"{source}: bad CPU range {part!r} in {text!r}")
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def format_ranges(nums: Iterable[int]) -> str:
    """Sorted, de-duplicated ids as Slurm ranges: [0,1,2,3,8] -> ``0-3,8``."""
    values = sorted(set(nums))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


def threads_to_cores(
    cpu_ids: Iterable[int],
    sockets: int,
    cores_per_socket: int,
    threads_per_core: int,
    source: str = "CPU list",
) -> list[int]:
    """Logical CPU (thread) ids -> Slurm core indices, under the numbering in the module docstring.

    CPU ``c + k*S*C`` is thread k of core c, so the answer is the ids below S*C. Every thread of
    a listed core must be listed too (affinity masks cover whole cores); a list that is not
    consistent with that numbering raises FactsError rather than yield wrong ``Cores=``.
    """
    ncores = sockets * cores_per_socket
    total = ncores * threads_per_core
    ids = sorted(set(cpu_ids))
    if ncores <= 0 or threads_per_core <= 0:
        raise FactsError(f"{source}: CPU layout {sockets}x{cores_per_socket}x{threads_per_core} is empty")
    if ids and ids[-1] >= total:
        raise FactsError(
            f"{source}: CPU {ids[-1]} is beyond the {total} CPUs of a "
            f"{sockets}x{cores_per_socket}x{threads_per_core} (sockets x cores x threads) host"
        )
    by_thread: dict[int, set[int]] = {k: set() for k in range(threads_per_core)}
    for cpu in ids:
        by_thread[cpu // ncores].add(cpu % ncores)
    cores = by_thread[0]
    for k in range(1, threads_per_core):
        if by_thread[k] != cores:
            raise FactsError(
                f"{source}: CPUs {format_ranges(ids)} do not hold whole cores when CPU i and "
                f"i+{ncores * k} are threads of core i; this host numbers its CPUs differently, "
                "so gres.conf Cores= cannot be derived: set the affinity by hand"
            )
    return sorted(cores)


def _int(value: str, what: str, source: str, minimum: int = 0) -> int:
    if not re.fullmatch(_NUM, value.strip()):
        raise FactsError(f"{source}: {what} should be a whole number, got {value!r}")
    n = int(value)
    if n < minimum:
        raise FactsError(f"{source}: {what} should be at least {minimum}, got {n}")
    return n


def _natural_key(name: str) -> list[str | int]:
    # mlx5_10 after mlx5_9, as the catalog and NCCL_IB_HCA lists are written. re.split with a
    # group alternates text and digits, so an int is only ever compared with an int.
    return [int(p) if p.isascii() and p.isdigit() else p for p in re.split(r"([0-9]+)", name)]


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --------------------------------------------------------------------------------------------
# parsers


def parse_slurmd_c(text: str, source: str = "slurmd -C output") -> SlurmdC:
    """Parse ``slurmd -C``: ``NodeName=x CPUs=192 Boards=1 ... RealMemory=...`` and ``UpTime=``."""
    node_lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("NodeName=")]
    if len(node_lines) != 1:
        found = "no" if not node_lines else f"{len(node_lines)}"
        raise FactsError(
            f"{source}: {found} 'NodeName=' lines; expected the output of `slurmd -C`: one line "
            "'NodeName=<host> CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=.. "
            "ThreadsPerCore=.. RealMemory=..' and an 'UpTime=' line"
        )
    fields: dict[str, str] = {}
    for token in node_lines[0].split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise FactsError(f"{source}: {token!r} in the NodeName line is not key=value")
        fields[key] = value
    needed = (
        "NodeName",
        "CPUs",
        "Boards",
        "SocketsPerBoard",
        "CoresPerSocket",
        "ThreadsPerCore",
        "RealMemory",
    )
    missing = [k for k in needed if not fields.get(k)]
    if missing:
        raise FactsError(
            f"{source}: the NodeName line lacks {', '.join(missing)} (slurmd -C prints all of them)"
        )
    uptime = None
    for ln in text.splitlines():
        if ln.strip().startswith("UpTime="):
            uptime = ln.strip().partition("=")[2]
    facts = SlurmdC(
        node_name=fields["NodeName"],
        cpus=_int(fields["CPUs"], "CPUs", source, 1),
        boards=_int(fields["Boards"], "Boards", source, 1),
        sockets_per_board=_int(fields["SocketsPerBoard"], "SocketsPerBoard", source, 1),
        cores_per_socket=_int(fields["CoresPerSocket"], "CoresPerSocket", source, 1),
        threads_per_core=_int(fields["ThreadsPerCore"], "ThreadsPerCore", source, 1),
        real_memory_mib=_int(fields["RealMemory"], "RealMemory", source, 1),
        uptime=uptime,
    )
    layout = facts.sockets * facts.cores_per_socket * facts.threads_per_core
    if layout != facts.cpus:
        raise FactsError(
            f"{source}: CPUs={facts.cpus} but Boards x SocketsPerBoard x CoresPerSocket x "
            f"ThreadsPerCore = {layout}; the file is edited or truncated"
        )
    return facts


def parse_lscpu(text: str, source: str = "lscpu output") -> Lscpu:
    """Parse plain ``lscpu`` (flat or the indented util-linux >= 2.37 layout)."""
    fields: dict[str, str] = {}
    numa: dict[int, str] = {}
    for raw in text.splitlines():
        key, sep, value = raw.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue  # lscpu prints only "key: value" lines; section titles end in ":" too
        m = re.fullmatch(r"NUMA node([0-9]{1,6}) CPU\(s\)", key)
        if m:
            node = int(m.group(1))
            if node in numa:
                raise FactsError(f"{source}: NUMA node{node} is listed twice")
            numa[node] = format_ranges(parse_cpu_list(value, f"{source}: NUMA node{node}")) if value else ""
            continue
        fields.setdefault(key, value)  # first wins: hybrid CPUs repeat the per-type block

    wanted = {
        "CPU(s)": "cpus",
        "Socket(s)": "sockets",
        "Core(s) per socket": "cores",
        "Thread(s) per core": "threads",
    }
    missing = [k for k in wanted if k not in fields]
    if missing:
        raise FactsError(
            f"{source}: no {', '.join(repr(k) for k in missing)} line; expected plain `lscpu` "
            "output (CPU(s), Socket(s), Core(s) per socket, Thread(s) per core, NUMA node lists)"
        )
    cpus = _int(fields["CPU(s)"], "CPU(s)", source, 1)
    sockets = _int(fields["Socket(s)"], "Socket(s)", source, 1)
    cores = _int(fields["Core(s) per socket"], "Core(s) per socket", source, 1)
    threads = _int(fields["Thread(s) per core"], "Thread(s) per core", source, 1)
    if "NUMA node(s)" in fields and numa:
        count = _int(fields["NUMA node(s)"], "NUMA node(s)", source, 1)
        if count != len(numa):
            raise FactsError(f"{source}: 'NUMA node(s): {count}' but {len(numa)} 'NUMA nodeN CPU(s)' lines")
    for node, cpu_list in numa.items():
        if cpu_list and parse_cpu_list(cpu_list)[-1] >= cpus:
            raise FactsError(f"{source}: NUMA node{node} lists CPUs {cpu_list} beyond CPU(s): {cpus}")
    return Lscpu(
        cpus=cpus,
        sockets=sockets,
        cores_per_socket=cores,
        threads_per_core=threads,
        model_name=fields.get("Model name") or None,
        numa_nodes=dict(sorted(numa.items())),
    )


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


def parse_ibstat(text: str, source: str = "ibstat output") -> list[Hca]:
    """Parse ``ibstat``: one :class:`Hca` per port of every ``CA '<name>'`` block."""
    hcas: list[Hca] = []
    ca: str | None = None
    ca_ports: int | None = None
    seen_ports = 0
    port: dict[str, str] | None = None
    port_no = 0

    def close_port() -> None:
        nonlocal port
        if port is None or ca is None:
            return
        missing = [k for k in ("State", "Rate", "Link layer") if k not in port]
        if missing:
            raise FactsError(f"{source}: CA {ca!r} port {port_no} has no {', '.join(missing)} line")
        rate = re.fullmatch(rf"({_NUM})(?:\.[0-9]+)?", port["Rate"])
        if not rate:
            raise FactsError(
                f"{source}: CA {ca!r} port {port_no} Rate {port['Rate']!r} is not a number of Gb/s"
            )
        hcas.append(
            Hca(
                ca=ca,
                port=port_no,
                state=port["State"],
                physical_state=port.get("Physical state"),
                # Only 1x SDR (2.5) is fractional; Gb/s as an int is what the catalog stores.
                rate_gbps=int(rate.group(1)),
                link_layer=port["Link layer"],
            )
        )
        port = None

    def close_ca() -> None:
        close_port()
        if ca is not None and ca_ports is not None and ca_ports != seen_ports:
            raise FactsError(f"{source}: CA {ca!r} says 'Number of ports: {ca_ports}' but lists {seen_ports}")

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        # Kernel RDMA device names (mlx5_0, bnxt_re3, rdmap79s0); anything else is not ibstat.
        m = re.fullmatch(r"CA '([A-Za-z0-9_.-]{1,64})'", line)
        if m:
            close_ca()
            ca, ca_ports, seen_ports = m.group(1), None, 0
            if any(h.ca == ca for h in hcas):
                raise FactsError(f"{source}: CA {ca!r} is listed twice")
            continue
        if ca is None:
            raise FactsError(
                f"{source}: {line!r} before the first \"CA '<name>'\" line; expected `ibstat` output"
            )
        m = re.fullmatch(r"Port ([0-9]{1,3}):", line)
        if m:
            close_port()
            port, port_no = {}, int(m.group(1))
            seen_ports += 1
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise FactsError(f"{source}: {line!r} in CA {ca!r} is not 'key: value'")
        if port is not None:
            port[key.strip()] = value.strip()
        elif key.strip() == "Number of ports":
            ca_ports = _int(value, f"CA {ca!r} Number of ports", source)
    close_ca()
    if not hcas:
        raise FactsError(f"{source}: no \"CA '<name>'\" block with a port; expected `ibstat` output")
    return hcas


# --------------------------------------------------------------------------------------------
# loading a facts folder


def _read(f: Path) -> tuple[str, str]:
    try:
        # errors="replace": a stray byte (serial console noise) must reach the parser as text,
        # which then names the file, rather than fail as a bare UnicodeDecodeError.
        return f.read_text(encoding="utf-8", errors="replace"), str(f)
    except OSError as exc:
        raise FactsError(f"{f}: cannot read: {exc}") from exc


def load_facts_dir(path: Path) -> dict[str, HostFacts]:
    """Read ``<path>/<hostname>/<fact files>`` into host name -> HostFacts (sorted by name).

    A host folder must hold at least one known file, and a slurmd-C.txt must name that host:
    both catch files saved under the wrong name or copied into the wrong folder.
    """
    path = Path(path)
    if not path.is_dir():
        raise FactsError(f"{path}: facts folder not found (expected <dir>/<hostname>/{SLURMD_C_FILE} ...)")
    hosts = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not hosts:
        raise FactsError(f"{path}: no host folders; expected <dir>/<hostname>/{{{','.join(FACT_FILES)}}}")
    out: dict[str, HostFacts] = {}
    for host_dir in hosts:
        name = host_dir.name
        found = [f for f in FACT_FILES if (host_dir / f).is_file()]
        if not found:
            raise FactsError(f"{host_dir}: none of {', '.join(FACT_FILES)} found")
        if NVIDIA_TOPO_FILE in found and ROCM_TOPO_FILE in found:
            raise FactsError(
                f"{host_dir}: both {NVIDIA_TOPO_FILE} and {ROCM_TOPO_FILE}; a host has one GPU vendor"
            )
        texts = {f: _read(host_dir / f) for f in found}  # file -> (contents, path for messages)

        slurmd: SlurmdC | None = None
        if got := texts.get(SLURMD_C_FILE):
            slurmd = parse_slurmd_c(*got)
            if slurmd.node_name != name:
                raise FactsError(f"{got[1]}: NodeName={slurmd.node_name} but the folder is {name!r}")
        lscpu = parse_lscpu(*got) if (got := texts.get(LSCPU_FILE)) else None
        topo: GpuTopo | None = None
        if got := texts.get(NVIDIA_TOPO_FILE):
            topo = parse_nvidia_smi_topo(*got)
        if got := texts.get(ROCM_TOPO_FILE):
            topo = parse_rocm_smi_topo(*got)
        ibstat = tuple(parse_ibstat(*got)) if (got := texts.get(IBSTAT_FILE)) else None
        out[name] = HostFacts(
            hostname=name, slurmd=slurmd, lscpu=lscpu, gpu_topo=topo, hcas=ibstat, files=tuple(found)
        )
    return out


# --------------------------------------------------------------------------------------------
# applying facts to a catalog profile


# Fact names: keys of the per-host values and the words error messages use.
_F_LAYOUT = "cpu layout (sockets, cores/socket, threads/core)"
_F_MEMORY = "RealMemory"
_F_GPUS = "GPU count"
_F_LINKS = "links per GPU pair"
_F_AFFINITY = "GPU affinity"
_F_HCAS = "active HCA ports"
_FACT_ORDER = (_F_LAYOUT, _F_MEMORY, _F_GPUS, _F_LINKS, _F_AFFINITY, _F_HCAS)


def _check_numbering(host: HostFacts, layout: tuple[int, int, int]) -> None:
    """Refuse hosts whose lscpu NUMA lists contradict the CPU numbering threads_to_cores assumes."""
    if host.lscpu is None:
        return
    for node, cpus in host.lscpu.numa_nodes.items():
        if not cpus:
            continue
        where = f"{host.hostname} {LSCPU_FILE}: NUMA node{node}"
        cores = threads_to_cores(parse_cpu_list(cpus), *layout, source=where)
        # A NUMA node is a contiguous run of cores in hwloc order; a gap means the host interleaves
        # sockets (CPU 0 on socket 0, CPU 1 on socket 1 ...), and CPU ids are not core indices.
        if cores[-1] - cores[0] + 1 != len(cores):
            raise FactsError(
                f"{where} holds cores {format_ranges(cores)} under the assumed numbering, not one run; "
                "this host interleaves CPU ids across sockets, so gres.conf Cores= cannot be derived"
            )


def _affinity(host: HostFacts, topo: GpuTopo, layout: tuple[int, int, int]) -> dict[str, str] | None:
    """GPU index range -> core range for one host, or None when some GPU's CPUs are unknown."""
    cores_of: dict[int, tuple[int, ...]] = {}
    for g in range(topo.gpu_count):
        where = f"{host.hostname}: GPU{g} affinity"
        listed = topo.cpu_affinity[g]
        node = topo.numa_node[g]
        cpus: frozenset[int] | list[int] | None = None
        if listed is not None:
            cpus = parse_cpu_list(listed, where)
        elif node is not None and host.lscpu is not None:
            cpus = host.lscpu.numa_cpus(node)
        if not cpus:
            return None
        cores_of[g] = tuple(threads_to_cores(cpus, *layout, source=where))
    groups: dict[tuple[int, ...], list[int]] = {}
    for g, cores in cores_of.items():
        groups.setdefault(cores, []).append(g)
    ordered = sorted(groups.items(), key=lambda item: item[1][0])
    return {format_ranges(gpus): format_ranges(cores) for cores, gpus in ordered}


def _host_values(profile: HardwareProfile, host: HostFacts) -> dict[str, object]:
    """The facts one host contributes, keyed by fact name; a missing key means not discovered."""
    values: dict[str, object] = {}
    layout: tuple[int, int, int] | None = None
    if host.slurmd is not None:
        s = host.slurmd
        layout = (s.sockets, s.cores_per_socket, s.threads_per_core)
        values[_F_MEMORY] = s.real_memory_mib
        if host.lscpu is not None and host.lscpu.cpus != s.cpus:
            raise FactsError(
                f"{host.hostname}: {SLURMD_C_FILE} says CPUs={s.cpus} but {LSCPU_FILE} says {host.lscpu.cpus}"
            )
    elif host.lscpu is not None:
        c = host.lscpu
        layout = (c.sockets, c.cores_per_socket, c.threads_per_core)
    if layout is not None:
        values[_F_LAYOUT] = layout
        _check_numbering(host, layout)

    topo = host.gpu_topo
    if topo is not None:
        if profile.gpu is None:
            raise FactsError(
                f"{host.hostname}: the host reports {topo.gpu_count} {topo.vendor} GPUs but profile "
                f"{profile.name!r} has none; pick a GPU profile for this node group"
            )
        if topo.vendor != profile.gpu.vendor:
            raise FactsError(
                f"{host.hostname}: {topo.vendor} GPU facts for profile {profile.name!r} "
                f"({profile.gpu.vendor} {profile.gpu.model})"
            )
        values[_F_GPUS] = topo.gpu_count
        if topo.gpu_count > 1:
            values[_F_LINKS] = topo.uniform_links()
        if layout is not None and (aff := _affinity(host, topo, layout)) is not None:
            values[_F_AFFINITY] = aff

    # Only on-prem profiles list HCAs: on AWS the EFA devices follow from the instance type.
    if host.hcas is not None and profile.kind == "onprem":
        active = [h for h in host.hcas if h.active]
        ports_per_ca: dict[str, int] = {}
        for h in active:
            ports_per_ca[h.ca] = ports_per_ca.get(h.ca, 0) + 1
        # A CA with several active ports is named per port (mlx4_0:1), the NCCL_IB_HCA spelling.
        names = [(h.ca if ports_per_ca[h.ca] == 1 else f"{h.ca}:{h.port}", h.rate_gbps) for h in active]
        values[_F_HCAS] = tuple(sorted(names, key=lambda x: _natural_key(x[0])))
    return values


def _agree(fact: str, per_host: Mapping[str, object]) -> object:
    """The one value all hosts report for ``fact``; FactsError naming the hosts otherwise."""
    by_value: dict[str, tuple[object, list[str]]] = {}
    for host, value in per_host.items():
        by_value.setdefault(repr(value), (value, []))[1].append(host)
    if len(by_value) == 1:
        return next(iter(by_value.values()))[0]
    detail = "; ".join(f"{hostlist.compress(hosts)}: {value}" for value, hosts in by_value.values())
    raise FactsError(
        f"hosts of one node group disagree on {fact} ({detail}); a node group must be homogeneous: "
        "split it into one group per hardware variant"
    )


def _agree_memory(per_host: Mapping[str, object]) -> int:
    mems = {h: v for h, v in per_host.items() if isinstance(v, int)}
    low, high = min(mems.values()), max(mems.values())
    if high - low > high * MEMORY_TOLERANCE:
        lo_hosts = hostlist.compress(h for h, m in mems.items() if m == low)
        hi_hosts = hostlist.compress(h for h, m in mems.items() if m == high)
        raise FactsError(
            f"hosts of one node group disagree on RealMemory ({lo_hosts}: {low} MiB; {hi_hosts}: {high} MiB, "
            f"more than {MEMORY_TOLERANCE:.0%} apart); a node group must be homogeneous: split it"
        )
    # Slurm marks a node invalid whose memory is below its configured RealMemory: take the least.
    return low


def apply_facts(profile: HardwareProfile, facts: list[HostFacts]) -> HardwareProfile:
    """A copy of ``profile`` with the facts discovered on ``facts`` (one node group) in place.

    - sockets/cores/threads from slurmd -C, else lscpu;
    - ``memory_mib`` = slurmd -C RealMemory (the least across hosts; they may differ by up to
      MEMORY_TOLERANCE), and ``discovered=True`` exactly then: it tells the renderer that
      memory_mib is already what the OS sees, not the advertised size;
    - GPU count, gres.conf affinity (CPU threads converted to core indices, see module doc; for
      ROCm via the lscpu CPU list of the GPU's NUMA node), links per GPU pair (None when pairs
      differ, so Links= is left out);
    - on-prem profiles: ``network.hcas`` = (name, Gb/s) of every Active ibstat port.

    Every fact must be found on all hosts or on none, with the same value (memory: within the
    tolerance); otherwise FactsError names the hosts and the fact. With no hosts the profile is
    returned unchanged.
    """
    if not facts:
        return profile
    names = [h.hostname for h in facts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FactsError(f"hosts listed twice in one node group's facts: {', '.join(twice)}")
    per_host = {h.hostname: _host_values(profile, h) for h in facts}
    all_hosts = hostlist.compress(names)

    # Causes before consequences: a CPU layout mismatch explains a differing affinity.
    facts_found = [f for f in _FACT_ORDER if any(f in v for v in per_host.values())]
    agreed: dict[str, object] = {}
    for fact in facts_found:
        having = {h: v[fact] for h, v in per_host.items() if fact in v}
        if len(having) != len(per_host):
            lacking = [h for h in per_host if h not in having]
            raise FactsError(
                f"{fact} was found on {hostlist.compress(having)} but not on {hostlist.compress(lacking)}; "
                "collect the same fact files on every host of the group"
            )
        agreed[fact] = _agree_memory(having) if fact == _F_MEMORY else _agree(fact, having)

    def used(fname: str) -> bool:
        return any(fname in h.files for h in facts)

    update: dict[str, object] = {}
    sources = dict(profile.sources)
    sources["facts"] = f"discovered on {all_hosts}: " + ", ".join(f for f in FACT_FILES if used(f))
    cpu_src = SLURMD_C_FILE if all(h.slurmd is not None for h in facts) else LSCPU_FILE

    layout = agreed.get(_F_LAYOUT)
    if isinstance(layout, tuple):
        update.update(sockets=layout[0], cores_per_socket=layout[1], threads_per_core=layout[2])
        update["vcpus"] = layout[0] * layout[1] * layout[2]
        sources["cpu_memory"] = f"{cpu_src} on {all_hosts}"
    if _F_MEMORY in agreed:
        update["memory_mib"] = agreed[_F_MEMORY]
        update["discovered"] = True
        sources["cpu_memory"] = (
            f"{SLURMD_C_FILE} on {all_hosts}: layout and RealMemory (memory the OS sees, least of the group)"
        )

    gpu = profile.gpu
    if gpu is not None and _F_GPUS in agreed:
        count = agreed[_F_GPUS]
        gpu_update: dict[str, object] = {"count": count}
        topo_file = NVIDIA_TOPO_FILE if gpu.vendor == "nvidia" else ROCM_TOPO_FILE
        if _F_AFFINITY in agreed:
            gpu_update["affinity"] = agreed[_F_AFFINITY]
            sources["affinity"] = f"{topo_file} on {all_hosts}, CPU threads -> core indices"
        elif count != gpu.count:
            # The catalog's ranges name GPUs the host does not have (or miss some): unknown now.
            gpu_update["affinity"] = None
        if _F_LINKS in agreed:
            gpu_update["nvlinks_per_pair"] = agreed[_F_LINKS]
            sources["nvlinks"] = f"{topo_file} on {all_hosts}" + (
                "" if agreed[_F_LINKS] is not None else ": GPU pairs differ, Links= left out"
            )
        update["gpu"] = gpu.model_copy(update=gpu_update)

    ports = agreed.get(_F_HCAS)
    if isinstance(ports, tuple):
        update["network"] = profile.network.model_copy(update={"hcas": list(ports)})
        sources["network"] = f"{IBSTAT_FILE} on {all_hosts}: Active ports"
    update["sources"] = sources
    # model_copy(update=) neither validates nor rejects unknown keys: check both here, so a typo
    # or a wrong type fails loudly instead of yielding a profile the renderer half ignores.
    unknown = set(update) - set(HardwareProfile.model_fields)
    if unknown:
        raise AssertionError(f"apply_facts: not HardwareProfile fields: {sorted(unknown)}")
    merged = profile.model_copy(update=update)
    return HardwareProfile.model_validate(merged.model_dump())
