"""Hardware facts discovered on real hosts, and how they override the catalog.

The package holds one module per job:

- ``models``: the typed facts of one host (:class:`SlurmdC`, :class:`Lscpu`, :class:`GpuTopo`,
  :class:`Hca`, :class:`HostFacts`) and :class:`FactsError`;
- one parser per tool: ``slurmd_c`` (``slurmd -C``), ``lscpu``, ``nvidia_smi``
  (``nvidia-smi topo -m``), ``rocm_smi`` (``rocm-smi --showtopo``), ``ibstat``;
- ``cpus``: CPU lists and the logical-CPU -> core-index numbering gres.conf ``Cores=`` needs;
  ``text``: number/sort helpers the parsers share;
- ``load``: reading a facts folder (``<dir>/<hostname>/<tool output>``) with :func:`load_facts_dir`;
- ``apply``: :func:`apply_facts`, which puts one node group's facts into its catalog profile and
  records which tool on which hosts gave each fact (``HardwareProfile.discovered_from``).

The parsers read exactly what these tools print (headers, legends, blank lines, tab or space
alignment) and raise :class:`FactsError`, naming the file and what was expected, on anything
else: a fact file that silently parses to the wrong thing would render a gres.conf that drains
every node.
"""

from __future__ import annotations

from clusterforge.catalog.facts.apply import MEMORY_TOLERANCE, apply_facts
from clusterforge.catalog.facts.cpus import format_ranges, parse_cpu_list, threads_to_cores
from clusterforge.catalog.facts.ibstat import parse_ibstat
from clusterforge.catalog.facts.load import (
    FACT_FILES,
    IBSTAT_FILE,
    LSCPU_FILE,
    NVIDIA_TOPO_FILE,
    ROCM_TOPO_FILE,
    SLURMD_C_FILE,
    load_facts_dir,
)
from clusterforge.catalog.facts.lscpu import parse_lscpu
from clusterforge.catalog.facts.models import FactsError, GpuTopo, Hca, HostFacts, Lscpu, SlurmdC
from clusterforge.catalog.facts.nvidia_smi import parse_nvidia_smi_topo
from clusterforge.catalog.facts.rocm_smi import parse_rocm_smi_topo
from clusterforge.catalog.facts.slurmd_c import parse_slurmd_c

__all__ = [
    "FACT_FILES",
    "IBSTAT_FILE",
    "LSCPU_FILE",
    "MEMORY_TOLERANCE",
    "NVIDIA_TOPO_FILE",
    "ROCM_TOPO_FILE",
    "SLURMD_C_FILE",
    "FactsError",
    "GpuTopo",
    "Hca",
    "HostFacts",
    "Lscpu",
    "SlurmdC",
    "apply_facts",
    "format_ranges",
    "load_facts_dir",
    "parse_cpu_list",
    "parse_ibstat",
    "parse_lscpu",
    "parse_nvidia_smi_topo",
    "parse_rocm_smi_topo",
    "parse_slurmd_c",
    "threads_to_cores",
]
