"""NCCL settings per node group, chosen by fabric and by the installed versions.

Set only what is needed, each with its reason: on EFA the aws-ofi-nccl plugin tunes NCCL per
instance type itself and the variables that older guides set (FI_PROVIDER, NCCL_PROTO,
NCCL_BUFFSIZE, FI_EFA_FORK_SAFE, ...) fight it (aws-ofi-nccl doc/efa-env-var.md, facts.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.types import version_tuple
from clusterforge.render.model import NodeSet
from clusterforge.render.slurm import Setting

OFI_PREFIX = "/opt/amazon/ofi-nccl"
EFA_PREFIX = "/opt/amazon/efa"


@dataclass(frozen=True)
class NcclPlan:
    conf: list[Setting]
    env: list[Setting]
    not_set: list[str]


def _efa(c: Cluster, n: NodeSet) -> NcclPlan:
    gs = c.gpu_stack
    ofi = version_tuple(gs.aws_ofi_nccl or "0")
    nccl = version_tuple(gs.nccl)
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
    if ofi <= (1, 5, 0):
        conf += [
            Setting("FI_PROVIDER", "efa", f"aws-ofi-nccl {gs.aws_ofi_nccl} (<= 1.5.0) does not pick EFA itself"),
            Setting("NCCL_PROTO", "simple", f"aws-ofi-nccl {gs.aws_ofi_nccl} (<= 1.5.0) is only correct with Simple"),
        ]
    else:
        not_set.append(f"FI_PROVIDER, NCCL_PROTO (only needed for aws-ofi-nccl <= 1.5.0; installed {gs.aws_ofi_nccl})")
    if ofi < (1, 7, 0):
        conf.append(
            Setting(
                "FI_EFA_USE_DEVICE_RDMA",
                "1",
                f"GPUDirect RDMA must be requested explicitly before aws-ofi-nccl 1.7.0 (installed {gs.aws_ofi_nccl})",
            )
        )
    else:
        not_set.append("FI_EFA_USE_DEVICE_RDMA (default since libfabric 1.18 / aws-ofi-nccl 1.7.0)")
    if (2, 19) <= nccl[:2] < (2, 21) and ofi >= (1, 7, 0):
        conf.append(
            Setting(
                "NCCL_TUNER_PLUGIN",
                "libnccl-ofi-tuner.so",
                f"NCCL {gs.nccl} (2.19-2.20) does not find the plugin's built-in tuner by itself",
            )
        )
    else:
        not_set.append("NCCL_TUNER_PLUGIN (NCCL >= 2.21 finds the tuner inside the net plugin)")
    conf.append(Setting("NCCL_DEBUG", "WARN", "initialisation and transport errors reach the job log"))
    env = [
        Setting(
            "LD_LIBRARY_PATH",
            f"{OFI_PREFIX}/lib:{EFA_PREFIX}/lib:${{LD_LIBRARY_PATH:-}}",
            "NCCL loads the EFA net plugin (libnccl-net.so) and libfabric from here",
        )
    ]
    return NcclPlan(conf, env, not_set)


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
