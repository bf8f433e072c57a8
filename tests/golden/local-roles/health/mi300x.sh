#!/bin/bash
# clusterforge-healthcheck for node group mi300x: Slurm's HealthCheckProgram.
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
# 8 amd GPU device(s) must exist as character devices.
for dev in /dev/dri/renderD128 /dev/dri/renderD129 /dev/dri/renderD130 /dev/dri/renderD131 /dev/dri/renderD132 /dev/dri/renderD133 /dev/dri/renderD134 /dev/dri/renderD135; do
  [ -c "$dev" ] || fail "GPU device $dev missing (expected 8)"
done
exit 0
