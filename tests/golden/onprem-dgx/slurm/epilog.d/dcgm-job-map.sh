#!/bin/sh
# Slurm epilog for cluster dgx-pod (Slurm 24.11), rendered by clusterforge.
# dcgm-exporter's HPC job mapping: /run/dcgm-job-mapping/<GPU index> holds the ids of the jobs that run
# on that GPU, one a line, and dcgm-exporter labels the GPU's series hpc_job=<id>; the alert
# GpuLowUtilisation reads only series with that label.
# The epilog removes this job's id from every file (also a GPU's the prolog did not see, e.g. after
# slurmd restarted) and deletes files left empty.
# It always exits 0: a failing epilog drains the node, and a missing label costs only an alert.
set -u
dir=/run/dcgm-job-mapping
job=${SLURM_JOB_ID:-}
[ -n "$job" ] || exit 0
[ -d "$dir" ] || exit 0
command exec 9>"$dir/.lock" 2>/dev/null && flock -w 10 9 || exit 0
for f in "$dir"/[0-9]*; do
  case ${f##*/} in *[!0-9.]*) continue ;; esac  # only dcgm-exporter's <index> or <index>.<instance>
  [ -f "$f" ] || continue
  grep -qx "$job" "$f" || continue
  grep -vx "$job" "$f" >"$f.new"
  if [ -s "$f.new" ]; then mv -f "$f.new" "$f"; else rm -f "$f" "$f.new"; fi
done
exit 0
