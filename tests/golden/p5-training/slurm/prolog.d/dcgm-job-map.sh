#!/bin/sh
# Slurm prolog for cluster p5-training (Slurm 23.11), rendered by clusterforge.
# dcgm-exporter's HPC job mapping: /run/dcgm-job-mapping/<GPU index> holds the ids of the jobs that run
# on that GPU, one a line, and dcgm-exporter labels the GPU's series hpc_job=<id>; the alert
# GpuLowUtilisation reads only series with that label.
# The prolog adds this job's id to the file of each GPU Slurm allocated to it. Slurm gives the GPUs
# as device minors (/dev/nvidiaN: CUDA_VISIBLE_DEVICES in the prolog, see prolog_epilog.html);
# DCGM numbers GPUs by NVML index, which need not be the minor, so each minor is looked up through
# the GPU's PCI address (nvidia-smi, /proc/driver/nvidia/gpus/<address>/information).
# It always exits 0: a failing prolog drains the node, and a missing label costs only an alert.
set -u
dir=/run/dcgm-job-mapping
job=${SLURM_JOB_ID:-}
[ -n "$job" ] || exit 0
gpus=${CUDA_VISIBLE_DEVICES:-${SLURM_JOB_GPUS:-}}
[ -n "$gpus" ] || exit 0
command -v nvidia-smi >/dev/null 2>&1 || exit 0
mkdir -p "$dir" 2>/dev/null || exit 0

# "<minor> <NVML index>" per GPU
map=$(nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader 2>/dev/null |
  while IFS=', ' read -r index bus; do
    # nvidia-smi prints 00000000:18:00.0, /proc/driver/nvidia/gpus has 0000:18:00.0
    addr=$(printf '%s' "$bus" | cut -c5- | tr 'A-F' 'a-f')
    minor=$(awk -F: '/^Device Minor/ { gsub(/[ \t]/, "", $2); print $2 }' \
      "/proc/driver/nvidia/gpus/$addr/information" 2>/dev/null)
    [ -n "$minor" ] && printf '%s %s\n' "$minor" "$index"
  done)

# `command exec`: a failed redirection of a plain exec would end the shell with an error
command exec 9>"$dir/.lock" 2>/dev/null && flock -w 10 9 || exit 0
for minor in $(printf '%s' "$gpus" | tr ',' ' '); do
  index=$(printf '%s\n' "$map" | awk -v m="$minor" '$1 == m { print $2 }')
  [ -n "$index" ] || continue
  grep -qx "$job" "$dir/$index" 2>/dev/null || printf '%s\n' "$job" >>"$dir/$index"
done
exit 0
