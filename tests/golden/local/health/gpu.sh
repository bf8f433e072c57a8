#!/bin/bash
# clusterforge-healthcheck for node group gpu: Slurm's HealthCheckProgram.
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
# 8 nvidia GPU device(s) must exist as character devices.
for dev in /dev/nvidia0 /dev/nvidia1 /dev/nvidia2 /dev/nvidia3 /dev/nvidia4 /dev/nvidia5 /dev/nvidia6 /dev/nvidia7; do
  [ -c "$dev" ] || fail "GPU device $dev missing (expected 8)"
done
# A hung driver shows up as nvidia-smi not answering; skip where no driver is installed yet.
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi -L >/dev/null 2>&1 || fail "nvidia-smi did not answer within 20 s"
fi
# /shared is a shared file system the spec requires on this node.
mountpoint -q /shared || fail "/shared is not mounted"
exit 0
