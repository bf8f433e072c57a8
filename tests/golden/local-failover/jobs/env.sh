# /etc/profile.d/clusterforge-jobs.sh of cluster local-failover
# Rendered by clusterforge: what batch jobs need to know of this cluster (examples/jobs/torchrun.sbatch
# reads it). Sourced by login shells and by batch scripts that start `#!/bin/bash -l`.
# storage shared (nfs) has purpose checkpoints: a requeued job finds its checkpoint here on any node
export CLUSTERFORGE_CHECKPOINT_DIR="/shared"
