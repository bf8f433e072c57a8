"""What the health check of each node group tests, from the resolved model (never re-derived).

``health_plan`` turns one compute ``NodeSet`` (its profile with discovered facts already applied)
and the spec's ``health_checks`` into plain data; ``templates/healthcheck.sh.j2`` only prints it.
The same program is slurmd's HealthCheckProgram (every ``interval_s``, and when slurmd starts),
and the prolog and epilog run it in their own mode (``PHASE_SCRIPTS``), so a node is judged by
one set of rules whichever way the check ran.
"""

from __future__ import annotations

from typing import NamedTuple

from clusterforge.clusterspec.models import Cluster
from clusterforge.render.model import NodeSet

#: Drain reasons the program sets begin with this; it resumes only nodes whose reason does, so a
#: drain an operator (or Slurm) set is never undone.
REASON_PREFIX = "clusterforge-healthcheck:"

#: Seconds between the prolog's (and epilog's) attempts at a failing check.
RETRY_PAUSE_S = 2

#: The consecutive-failure counters and the log of every run (tmpfs: a reboot starts afresh).
STATE_DIR = "/run/clusterforge-healthcheck"

#: (render name, path below slurm.conf's folder) of the prolog and epilog that call the program; the numbers order them
#: in slurm.conf's Prolog/Epilog glob (glob(3) sorts): the prolog check runs before the dcgm job
#: map's 50-, so a job that will not start is never mapped; the epilog check runs after it, so a
#: failing check cannot stop the job map's clean-up (slurmd stops at the first failing script).
PHASE_SCRIPTS = {
    "prolog": ("health/prolog.d/healthcheck.sh", "prolog.d/10-clusterforge-healthcheck"),
    "epilog": ("health/epilog.d/healthcheck.sh", "epilog.d/90-clusterforge-healthcheck"),
}

#: Where the EFA installer puts fi_info (the efa role's efa_fi_info): on the program's PATH on EFA nodes.
EFA_BIN = "/opt/amazon/efa/bin"

#: GPU generations with row remapping (nvmlDeviceGetRemappedRows: "Ampere or newer").
ROW_REMAP_GENERATIONS = frozenset({"ampere", "ada", "hopper", "blackwell"})


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class IbPort(NamedTuple):
    device: str
    port: int
    rate_gbps: int | None  # the profile's (catalog or ibstat facts); None: state only


class HealthPlan(NamedTuple):
    """The checks one node group's program runs, with the values each is held against."""

    group: str
    gpu_vendor: str | None
    gpu_devices: tuple[str, ...]
    nvidia: bool
    row_remap: bool
    #: NVSwitch systems: NVLink links every GPU must show active; None: no NVLink check
    nvlinks_per_gpu: int | None
    xid_codes: tuple[int, ...]
    efa_devices: int  # 0: not an EFA group
    ib_ports: tuple[IbPort, ...]
    mounts: tuple[str, ...]
    spool_dir: str
    spool_min_free_mib: int
    dcgm_level: int  # epilog dcgmi diag level; 0: none


def hca_ports(c: Cluster, n: NodeSet) -> tuple[IbPort, ...]:
    """The InfiniBand/RoCE ports NCCL uses on ``n``: the spec's fabric.hcas (else every HCA of the
    profile), with the profile's rate where it knows one."""
    if n.fabric not in ("infiniband", "roce"):
        return ()
    fabric = c.group(n.group).fabric
    rated = dict(n.profile.network.hcas or [])
    hcas = list(fabric.hcas) if fabric and fabric.hcas else sorted(rated)
    port = fabric.port if fabric else 1
    return tuple(IbPort(h, port, rated.get(h)) for h in hcas)


def health_plan(c: Cluster, n: NodeSet, spool_dir: str) -> HealthPlan:
    hc = c.health_checks
    gpu = n.profile.gpu if n.gpus is not None else None
    nvidia = n.gpus is not None and n.gpus.vendor == "nvidia"
    nvlinks = None
    if nvidia and gpu is not None and gpu.interconnect == "nvswitch" and gpu.nvlinks_per_pair:
        # through NVSwitches every GPU has all its links up (gres.conf Links= counts the same links)
        nvlinks = gpu.nvlinks_per_pair
    return HealthPlan(
        group=n.group,
        gpu_vendor=n.gpus.vendor if n.gpus else None,
        gpu_devices=n.gpus.device_paths if n.gpus else (),
        nvidia=nvidia,
        row_remap=nvidia and gpu is not None and gpu.generation.lower() in ROW_REMAP_GENERATIONS,
        nvlinks_per_gpu=nvlinks,
        xid_codes=tuple(sorted(set(hc.xid_codes))) if nvidia else (),
        efa_devices=(n.profile.network.efa_max or 0) if n.fabric == "efa" else 0,
        ib_ports=hca_ports(c, n),
        mounts=tuple(s.mount for s in c.storage),
        spool_dir=spool_dir,
        spool_min_free_mib=hc.spool_min_free_mib,
        dcgm_level=hc.epilog_dcgm_level if nvidia and hc.epilog else 0,
    )


def phase_scripts_wanted(c: Cluster) -> tuple[str, ...]:
    """The phases (prolog, epilog) whose health script the render has."""
    hc = c.health_checks
    if not hc.enabled:
        return ()
    return tuple(p for p, on in (("prolog", hc.prolog), ("epilog", hc.epilog)) if on)
