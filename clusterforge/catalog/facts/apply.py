"""Applying the facts of one node group's hosts to its catalog profile, recording their origin.

:func:`apply_facts` replaces catalog values with the discovered ones after checking that all
hosts of the group agree, and records per fact which tool on which hosts gave it
(``HardwareProfile.discovered_from``), so every rendered comment can name the true source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from clusterforge import hostlist
from clusterforge.catalog import FactKey, FactOrigin, FactTool, HardwareProfile
from clusterforge.catalog.facts.cpus import format_ranges, parse_cpu_list, threads_to_cores
from clusterforge.catalog.facts.load import FACT_FILES, LSCPU_FILE, SLURMD_C_FILE
from clusterforge.catalog.facts.models import FactsError, GpuTopo, HostFacts
from clusterforge.catalog.facts.text import natural_key

# Identical hosts differ by a few MiB of RealMemory (firmware and kernel reservations), while a
# different DIMM population differs by whole DIMMs (several percent), so 1 % separates the two.
MEMORY_TOLERANCE = 0.01

# The words error messages use for each fact, in the order facts are checked: causes before
# consequences (a CPU layout mismatch explains a differing affinity).
_FACT_WORDS: dict[FactKey, str] = {
    "cpu_layout": "cpu layout (sockets, cores/socket, threads/core)",
    "memory": "RealMemory",
    "gpu_count": "GPU count",
    "links": "links per GPU pair",
    "affinity": "GPU affinity",
    "hcas": "active HCA ports",
}


@dataclass
class _HostValues:
    """The facts one host contributes (a missing key: not discovered) and the tools behind each."""

    values: dict[FactKey, object] = field(default_factory=dict)
    tools: dict[FactKey, tuple[FactTool, ...]] = field(default_factory=dict)

    def put(self, fact: FactKey, value: object, *tools: FactTool) -> None:
        self.values[fact] = value
        self.tools[fact] = tools  # the tool that measured it first, then any it was combined with


def _topo_tool(topo: GpuTopo) -> FactTool:
    return "nvidia-smi topo -m" if topo.vendor == "nvidia" else "rocm-smi --showtopo"


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


def _affinity(
    host: HostFacts, topo: GpuTopo, layout: tuple[int, int, int]
) -> tuple[dict[str, str], bool] | None:
    """GPU index range -> core range for one host, and whether lscpu's NUMA CPU lists were used;
    None when some GPU's CPUs are unknown."""
    cores_of: dict[int, tuple[int, ...]] = {}
    used_lscpu = False
    for g in range(topo.gpu_count):
        where = f"{host.hostname}: GPU{g} affinity"
        listed = topo.cpu_affinity[g]
        node = topo.numa_node[g]
        cpus: frozenset[int] | list[int] | None = None
        if listed is not None:
            cpus = parse_cpu_list(listed, where)
        elif node is not None and host.lscpu is not None:
            # The tool names only the GPU's NUMA node (rocm-smi always): lscpu lists its CPUs.
            cpus = host.lscpu.numa_cpus(node)
            used_lscpu = True
        if not cpus:
            return None
        cores_of[g] = tuple(threads_to_cores(cpus, *layout, source=where))
    groups: dict[tuple[int, ...], list[int]] = {}
    for g, cores in cores_of.items():
        groups.setdefault(cores, []).append(g)
    ordered = sorted(groups.items(), key=lambda item: item[1][0])
    return {format_ranges(gpus): format_ranges(cores) for cores, gpus in ordered}, used_lscpu


def _host_values(profile: HardwareProfile, host: HostFacts) -> _HostValues:
    """The facts one host contributes."""
    out = _HostValues()
    layout: tuple[int, int, int] | None = None
    if host.slurmd is not None:
        s = host.slurmd
        layout = (s.sockets, s.cores_per_socket, s.threads_per_core)
        out.put("cpu_layout", layout, "slurmd -C")
        out.put("memory", s.real_memory_mib, "slurmd -C")
        if host.lscpu is not None and host.lscpu.cpus != s.cpus:
            raise FactsError(
                f"{host.hostname}: {SLURMD_C_FILE} says CPUs={s.cpus} but {LSCPU_FILE} says {host.lscpu.cpus}"
            )
    elif host.lscpu is not None:
        c = host.lscpu
        layout = (c.sockets, c.cores_per_socket, c.threads_per_core)
        out.put("cpu_layout", layout, "lscpu")
    if layout is not None:
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
        tool = _topo_tool(topo)
        out.put("gpu_count", topo.gpu_count, tool)
        if topo.gpu_count > 1:
            out.put("links", topo.uniform_links(), tool)
        if layout is not None and (found := _affinity(host, topo, layout)) is not None:
            aff, used_lscpu = found
            out.put("affinity", aff, tool, *(("lscpu",) if used_lscpu else ()))

    # Only on-prem profiles list HCAs: on AWS the EFA devices follow from the instance type.
    if host.hcas is not None and profile.kind == "onprem":
        active = [h for h in host.hcas if h.active]
        ports_per_ca: dict[str, int] = {}
        for h in active:
            ports_per_ca[h.ca] = ports_per_ca.get(h.ca, 0) + 1
        # A CA with several active ports is named per port (mlx4_0:1), the NCCL_IB_HCA spelling.
        names = [(h.ca if ports_per_ca[h.ca] == 1 else f"{h.ca}:{h.port}", h.rate_gbps) for h in active]
        out.put("hcas", tuple(sorted(names, key=lambda x: natural_key(x[0]))), "ibstat")
    return out


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
      MEMORY_TOLERANCE); ``profile.discovered`` is then True: memory_mib is already what the OS
      sees, not the advertised size;
    - GPU count, gres.conf affinity (CPU threads converted to core indices, see ``cpus``; for
      ROCm via the lscpu CPU list of the GPU's NUMA node), links per GPU pair (None when pairs
      differ, so Links= is left out);
    - on-prem profiles: ``network.hcas`` = (name, Gb/s) of every Active ibstat port.

    Each replaced fact gets a ``discovered_from`` entry naming its tools and hosts. Every fact
    must be found on all hosts or on none, with the same value (memory: within the tolerance);
    otherwise FactsError names the hosts and the fact. With no hosts the profile is returned
    unchanged.
    """
    if not facts:
        return profile
    names = [h.hostname for h in facts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FactsError(f"hosts listed twice in one node group's facts: {', '.join(twice)}")
    per_host = {h.hostname: _host_values(profile, h) for h in facts}
    all_hosts = hostlist.compress(names)

    agreed: dict[FactKey, object] = {}
    origin: dict[FactKey, FactOrigin] = {}
    for fact, words in _FACT_WORDS.items():
        having = {h: v.values[fact] for h, v in per_host.items() if fact in v.values}
        if not having:
            continue
        if len(having) != len(per_host):
            lacking = [h for h in per_host if h not in having]
            raise FactsError(
                f"{words} was found on {hostlist.compress(having)} but not on {hostlist.compress(lacking)}; "
                "collect the same fact files on every host of the group"
            )
        agreed[fact] = _agree_memory(having) if fact == "memory" else _agree(words, having)
        # Hosts may differ in tools (slurmd -C here, lscpu there): name each once, first-seen order.
        tools = dict.fromkeys(t for v in per_host.values() for t in v.tools[fact])
        origin[fact] = FactOrigin(tools=tuple(tools), hosts=all_hosts)

    update: dict[str, object] = {}
    sources = dict(profile.sources)
    used = [f for f in FACT_FILES if any(f in h.files for h in facts)]
    sources["facts"] = f"discovered on {all_hosts}: " + ", ".join(used)
    discovered_from = dict(profile.discovered_from)

    layout = agreed.get("cpu_layout")
    if isinstance(layout, tuple):
        update.update(sockets=layout[0], cores_per_socket=layout[1], threads_per_core=layout[2])
        update["vcpus"] = layout[0] * layout[1] * layout[2]
        discovered_from["cpu_layout"] = origin["cpu_layout"]
    if "memory" in agreed:
        update["memory_mib"] = agreed["memory"]
        discovered_from["memory"] = origin["memory"].model_copy(update={"note": "least of the group"})

    gpu = profile.gpu
    if gpu is not None and "gpu_count" in agreed:
        count = agreed["gpu_count"]
        gpu_update: dict[str, object] = {"count": count}
        discovered_from["gpu_count"] = origin["gpu_count"]
        if "affinity" in agreed:
            gpu_update["affinity"] = agreed["affinity"]
            discovered_from["affinity"] = origin["affinity"]
        elif count != gpu.count:
            # The catalog's ranges name GPUs the host does not have (or miss some): unknown now.
            gpu_update["affinity"] = None
            discovered_from.pop("affinity", None)
        if "links" in agreed:
            gpu_update["nvlinks_per_pair"] = agreed["links"]
            note = "" if agreed["links"] is not None else "GPU pairs differ, Links= left out"
            discovered_from["links"] = origin["links"].model_copy(update={"note": note})
        update["gpu"] = gpu.model_copy(update=gpu_update)

    ports = agreed.get("hcas")
    if isinstance(ports, tuple):
        update["network"] = profile.network.model_copy(update={"hcas": list(ports)})
        discovered_from["hcas"] = origin["hcas"].model_copy(update={"note": "Active ports"})
    update["sources"] = sources
    update["discovered_from"] = discovered_from
    # model_copy(update=) neither validates nor rejects unknown keys: check both here, so a typo
    # or a wrong type fails loudly instead of yielding a profile the renderer half ignores.
    unknown = set(update) - set(HardwareProfile.model_fields)
    if unknown:
        raise AssertionError(f"apply_facts: not HardwareProfile fields: {sorted(unknown)}")
    merged = profile.model_copy(update=update)
    return HardwareProfile.model_validate(merged.model_dump())
