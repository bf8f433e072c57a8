"""NCCL settings per node group, chosen by fabric and by the installed versions.

Set only what is needed, each with its reason: on EFA the aws-ofi-nccl plugin tunes NCCL per
instance type itself and the variables that older guides set (FI_PROVIDER, NCCL_PROTO,
NCCL_BUFFSIZE, FI_EFA_FORK_SAFE, ...) fight it (aws-ofi-nccl doc/efa-env-var.md, facts.md §4).
"""

from __future__ import annotations

from typing import NamedTuple

from clusterforge.clusterspec.models import Cluster
from clusterforge.render.model import NodeSet
from clusterforge.render.nccl_versions import documented_for, first, has, listed_types
from clusterforge.render.slurm import Setting

OFI_PREFIX = "/opt/amazon/ofi-nccl"
EFA_PREFIX = "/opt/amazon/efa"


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class NcclPlan(NamedTuple):
    conf: list[Setting]
    env: list[Setting]
    not_set: list[str]


def _efa(c: Cluster, n: NodeSet) -> NcclPlan:
    """Each gate reads nccl_versions.GATES; each EFA variable is set only on a documented type."""
    gs = c.gpu_stack
    ofi, itype = gs.aws_ofi_nccl, n.profile.name
    conf: list[Setting] = [
        Setting(
            "NCCL_SOCKET_IFNAME",
            "^docker,lo,veth",
            "bootstrap over the ENA interface; never a container bridge or loopback",
        )
    ]
    not_set = [
        "NCCL_BUFFSIZE, NCCL_P2P_NET_CHUNKSIZE (aws-ofi-nccl sets them per instance type)",
        "FI_EFA_FORK_SAFE, RDMAV_FORK_SAFE (not needed; the plugin handles fork safety)",
        "NCCL_IB_* (EFA is not InfiniBand; NCCL uses the OFI net plugin)",
    ]
    if has(ofi, "ofi_picks_efa"):
        not_set.append(f"FI_PROVIDER, NCCL_PROTO (only needed for aws-ofi-nccl <= 1.5.0; installed {ofi})")
    else:
        # efa-env-var.md lists both for every EFA GPU instance; documented_for() says so from data.
        for key, value, why in (
            ("FI_PROVIDER", "efa", "does not pick EFA itself"),
            ("NCCL_PROTO", "simple", "is only correct with Simple"),
        ):
            if documented_for(key, itype, ofi):
                conf.append(Setting(key, value, f"aws-ofi-nccl {ofi} (<= 1.5.0) {why}"))
    conf += _device_rdma(gs.efa_installer, ofi, itype, not_set)
    conf += _tuner(gs.nccl, ofi, itype, not_set)
    conf.append(Setting("NCCL_DEBUG", "WARN", "initialisation and transport errors reach the job log"))
    env = [
        Setting(
            "LD_LIBRARY_PATH",
            f"{OFI_PREFIX}/lib:{EFA_PREFIX}/lib:${{LD_LIBRARY_PATH:-}}",
            "NCCL loads the EFA net plugin (libnccl-net.so) and libfabric from here",
        )
    ]
    return NcclPlan(conf, env, not_set)


def _device_rdma(efa: str | None, ofi: str | None, itype: str, not_set: list[str]) -> list[Setting]:
    """FI_EFA_USE_DEVICE_RDMA=1 until libfabric 1.18 *and* aws-ofi-nccl 1.7.0, on p4/p5 only."""
    key = "FI_EFA_USE_DEVICE_RDMA"
    libfabric_ok = has(ofi, "ofi_requires_libfabric_1_18") or has(efa, "libfabric_gdr_default")
    if has(ofi, "ofi_gdr_default") and libfabric_ok:
        not_set.append(f"{key} (not needed with libfabric >= 1.18.0 and aws-ofi-nccl >= 1.7.0; installed {ofi})")
        return []
    if not documented_for(key, itype, ofi):
        not_set.append(f"{key} ({itype} has no GPUDirect RDMA over EFA; the doc lists it for {listed_types(key)})")
        return []
    if not has(ofi, "ofi_gdr_default"):
        why = f"GPUDirect RDMA must be requested explicitly before aws-ofi-nccl 1.7.0 (installed {ofi})"
    else:
        why = (f"GPUDirect RDMA must be requested explicitly before libfabric 1.18.0 (EFA installer "
               f"{efa or 'unknown'} < {first('libfabric_gdr_default')}, aws-ofi-nccl {ofi} < 1.8.0)")
    return [Setting(key, "1", why)]


def _tuner(nccl: str, ofi: str | None, itype: str, not_set: list[str]) -> list[Setting]:
    """NCCL_TUNER_PLUGIN points NCCL at the plugin's tuner when nothing else finds it."""
    key, why_not = "NCCL_TUNER_PLUGIN", None
    v2 = has(nccl, "nccl_tuner_v2")  # NCCL >= 2.21 calls only ncclTunerPlugin_v2
    if not has(nccl, "nccl_tuner_plugin_env"):
        why_not = f"NCCL {nccl} has no tuner plugin interface (first in {first('nccl_tuner_plugin_env')})"
    elif not has(ofi, "ofi_tuner"):
        why_not = f"aws-ofi-nccl {ofi} ships no tuner (first in {first('ofi_tuner')})"
    elif has(ofi, "ofi_sets_tuner_plugin"):
        why_not = f"aws-ofi-nccl >= {first('ofi_sets_tuner_plugin')} sets it itself"
    elif not documented_for(key, itype, ofi):
        why_not = f"the tuner in aws-ofi-nccl {ofi} has no model for {itype}; NCCL's own tuner decides"
    elif v2 and not has(ofi, "ofi_tuner_v2"):
        why_not = f"NCCL {nccl} loads only the v2 tuner API, which aws-ofi-nccl has from {first('ofi_tuner_v2')}"
    elif not v2 and has(ofi, "ofi_tuner_v2") and not has(ofi, "ofi_tuner_v1_fixed"):
        why_not = f"the tuner of aws-ofi-nccl {ofi} fails to load with NCCL 2.19/2.20 (fixed in 1.9.2)"
    if why_not:
        not_set.append(f"{key} ({why_not})")
        return []
    found = "NCCL 2.19-2.20 loads a tuner only when named" if not v2 else (
        f"aws-ofi-nccl {ofi} keeps it out of libnccl-net.so (in from {first('ofi_sets_tuner_plugin')})")
    return [Setting(key, "libnccl-ofi-tuner.so", f"the plugin's tuner, which models {itype}; {found}")]


def _rdma(c: Cluster, n: NodeSet, roce: bool) -> NcclPlan:
    group = c.group(n.group)
    f = group.fabric
    assert f is not None
    conf: list[Setting] = []
    if f.hcas:
        conf.append(
            Setting(
                "NCCL_IB_HCA",
                "=" + ",".join(f"{h}:{f.port}" for h in f.hcas),
                "compute HCAs only; '=' makes names exact (mlx5_1 would otherwise also match mlx5_10)",
            )
        )
    if f.socket_ifname:
        conf.append(Setting("NCCL_SOCKET_IFNAME", f.socket_ifname, "bootstrap and out-of-band traffic interface"))
    conf.append(
        Setting(
            "NCCL_NET_GDR_LEVEL",
            "PXB",
            "GPUDirect RDMA when GPU and HCA share a PCIe switch (NCCL's default, pinned for review)",
        )
    )
    if roce and f.gid_index is not None:
        conf.append(Setting("NCCL_IB_GID_INDEX", str(f.gid_index), "the RoCEv2 GID of the data interface"))
    conf.append(Setting("NCCL_DEBUG", "WARN", "initialisation and transport errors reach the job log"))
    not_set = ["NCCL_ALGO, NCCL_PROTO (NCCL's tuner chooses per message size)"]
    return NcclPlan(conf, [], not_set)


def _ethernet(c: Cluster, n: NodeSet) -> NcclPlan:
    group = c.group(n.group)
    ifname = group.fabric.socket_ifname if group.fabric and group.fabric.socket_ifname else "^docker,lo,veth"
    conf = [
        Setting("NCCL_SOCKET_IFNAME", ifname, "inter-node traffic over TCP sockets on this interface"),
        Setting("NCCL_IB_DISABLE", "1", "no RDMA fabric on this group; skip probing for HCAs"),
        Setting("NCCL_DEBUG", "WARN", "initialisation and transport errors reach the job log"),
    ]
    return NcclPlan(conf, [], ["NCCL_NET_GDR_LEVEL (no RDMA NIC)"])


def nccl_plan(c: Cluster, n: NodeSet) -> NcclPlan:
    if n.fabric == "efa":
        plan = _efa(c, n)
    elif n.fabric in ("infiniband", "roce"):
        plan = _rdma(c, n, roce=n.fabric == "roce")
    else:
        plan = _ethernet(c, n)
    env = list(plan.env)
    if n.gpus is not None and n.gpus.vendor == "nvidia":
        env.append(
            Setting(
                "CUDA_DEVICE_ORDER",
                "PCI_BUS_ID",
                "CUDA device numbers follow PCI order, as nvidia-smi and Slurm's GRES indices do",
            )
        )
    if n.gpus is not None and n.gpus.vendor == "amd":
        env.append(
            Setting("PATH", "/opt/rocm/bin:${PATH}", "rocm-smi and ROCm tools for jobs and health checks")
        )
    return NcclPlan(plan.conf, env, plan.not_set)
