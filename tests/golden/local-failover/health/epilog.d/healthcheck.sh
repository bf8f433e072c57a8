#!/bin/sh
# Slurm epilog for cluster local-failover (Slurm 24.11), rendered by clusterforge: the
# health check's epilog mode (/usr/local/sbin/clusterforge-healthcheck epilog, this node group's checks).
# After each job: the fast checks and, on NVIDIA GPU nodes, DCGM's diagnostic; one that keeps
# failing drains the node. Ordered after the dcgm job map's epilog (90- after 50-), which it
# cannot stop.
exec /usr/local/sbin/clusterforge-healthcheck epilog
