"""Reading a facts folder: ``<dir>/<hostname>/<fact file>`` -> one :class:`HostFacts` per host.

``playbooks/discover.yml`` (or an operator by hand) saves the output of a few standard tools per
host, in this layout (every file optional)::

    <dir>/<hostname>/slurmd-C.txt          slurmd -C
    <dir>/<hostname>/lscpu.txt             lscpu
    <dir>/<hostname>/nvidia-smi-topo.txt   nvidia-smi topo -m
    <dir>/<hostname>/rocm-smi-topo.txt     rocm-smi --showtopo
    <dir>/<hostname>/ibstat.txt            ibstat
"""

from __future__ import annotations

import os
from pathlib import Path

from clusterforge.catalog.facts.ibstat import parse_ibstat
from clusterforge.catalog.facts.lscpu import parse_lscpu
from clusterforge.catalog.facts.models import FactsError, GpuTopo, HostFacts, SlurmdC
from clusterforge.catalog.facts.nvidia_smi import parse_nvidia_smi_topo
from clusterforge.catalog.facts.rocm_smi import parse_rocm_smi_topo
from clusterforge.catalog.facts.slurmd_c import parse_slurmd_c

SLURMD_C_FILE = "slurmd-C.txt"
LSCPU_FILE = "lscpu.txt"
NVIDIA_TOPO_FILE = "nvidia-smi-topo.txt"
ROCM_TOPO_FILE = "rocm-smi-topo.txt"
IBSTAT_FILE = "ibstat.txt"
FACT_FILES = (SLURMD_C_FILE, LSCPU_FILE, NVIDIA_TOPO_FILE, ROCM_TOPO_FILE, IBSTAT_FILE)


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
        # a fact file's name that is not a readable regular file (a dangling symlink, a loop, a
        # folder) is a broken copy, not a fact the host lacks: skipping it would drop the fact silently
        for f in FACT_FILES:
            if os.path.lexists(host_dir / f) and not (host_dir / f).is_file():
                raise FactsError(f"{host_dir / f}: not a readable file (a folder, a dangling symlink or a loop)")
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

