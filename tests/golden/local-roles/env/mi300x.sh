# /etc/profile.d/clusterforge-nccl.sh for node group mi300x (roce)
# Rendered by clusterforge: the job environment that /etc/nccl.conf cannot carry (library paths,
# device ordering). Sourced by login shells and by batch jobs (sbatch --export=ALL, the default).
# rocm-smi and ROCm tools for jobs and health checks
export PATH="/opt/rocm/bin:${PATH}"
