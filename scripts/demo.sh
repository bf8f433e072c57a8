#!/usr/bin/env bash
# The main job, no cloud account needed: `clusterforge local up` builds examples/local.yaml as a
# real 6-node GPU Slurm cluster on this machine (controller with slurmdbd, login node, 2 GPU
# nodes with 8 fake H100 each, 2 CPU nodes) with the production playbook, then runs a 2-node
# GPU batch job with the rendered NCCL environment and `srun -N4 hostname`. The cluster stays up
# until `clusterforge local down`. Re-running it re-runs the playbook (changes nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC=${SPEC:-examples/local.yaml}
echo "== clusterforge local up $SPEC"
clusterforge local up "$SPEC"
run() { echo "\$ $*"; clusterforge local run -- "$@"; }
echo
echo "== a 2-node GPU batch job, 8 GPUs per node, with the rendered NCCL environment"
job=$(clusterforge local run -- sbatch --parsable < examples/jobs/gpu-nccl-env.sbatch)
echo "submitted job $job"
for _ in $(seq 60); do
  state=$(clusterforge local run -- scontrol show job "$job" -o | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
  sleep 2
done
echo "job $job: $state"
clusterforge local run --node gpu-001 -- cat "/tmp/nccl-env-$job.out"
[ "$state" = COMPLETED ]
echo
echo "== srun across all four compute nodes"
run srun -N4 -p all hostname
echo
run sinfo -N -o '%N %P %T %G'
run sacct -X -o JobID,JobName,Partition,NodeList,State
cat <<MSG

The local cluster is running. Log in:      clusterforge local ssh login
Run a job from here:                      clusterforge local run -- srun -N2 -p gpu nvidia-smi -L
Status:                                    clusterforge local status
Remove everything it made:                 clusterforge local down
MSG
