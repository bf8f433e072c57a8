"""``clusterforge local``: a real multi-node GPU Slurm cluster on one machine, built by the production roles.

Each node of an on-prem spec (default ``examples/local.yaml``) becomes a host of its own: a network
namespace on a private bridge, its own hostname, an overlay rootfs of a cached Debian minbase of
the spec's ``os`` (Debian 12 or 13), a private ``/dev`` (fake ``/dev/nvidia*`` on GPU nodes) and,
booted with ``systemd-nspawn``, systemd as PID 1 (or sshd as PID 1 in a chroot: ``nodes.sh``). Then
``playbooks/site.yml`` runs on them through ``clusterforge configure`` (ansible-runner), exactly
as on a rack. Local mode overrides only addresses and what a small host needs, and lists what it
overrode (``layout.py``). ``down`` removes all of it by the PIDs and names it recorded.
"""

from clusterforge.local.cluster import (
    DEFAULT_SPEC,
    DEFAULT_STATE,
    LocalCluster,
    UpResult,
    in_netns,
    missing_prerequisites,
)
from clusterforge.local.layout import DEFAULT_NET, LocalError, LocalLayout, LocalNode, local_vars, plan_layout

__all__ = [
    "DEFAULT_NET",
    "DEFAULT_SPEC",
    "DEFAULT_STATE",
    "LocalCluster",
    "LocalError",
    "LocalLayout",
    "LocalNode",
    "UpResult",
    "in_netns",
    "local_vars",
    "missing_prerequisites",
    "plan_layout",
]
