"""Parser for plain `lscpu`: CPU layout and the logical CPUs of each NUMA node."""

from __future__ import annotations

import re

from clusterforge.catalog.facts.cpus import format_ranges, parse_cpu_list
from clusterforge.catalog.facts.models import FactsError, Lscpu
from clusterforge.catalog.facts.text import parse_int as _int


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

