#!/bin/bash
# clusterforge-healthcheck for node group cpu: Slurm's HealthCheckProgram.
# Rendered by clusterforge. slurmd runs it every 300 s and kills it after 60 s, so
# only quick checks belong here (DCGM level 2+ runs in a prolog or by hand). On the first
# failure it drains this node with a reason that says what failed, and exits 1.
set -u
node=$(hostname -s)
fail() {
  scontrol update NodeName="$node" State=DRAIN Reason="clusterforge-healthcheck: $1" >/dev/null 2>&1
  echo "clusterforge-healthcheck: $1" >&2
  exit 1
}
# /shared is a shared file system the spec requires on this node.
mountpoint -q /shared || fail "/shared is not mounted"
exit 0
