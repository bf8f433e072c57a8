# /etc/profile.d/clusterforge-nccl.sh for node group p5 (ethernet)
# Rendered by clusterforge: the job environment that /etc/nccl.conf cannot carry (library paths,
# device ordering). Sourced by login shells and by batch jobs (sbatch --export=ALL, the default).
# CUDA device numbers follow PCI order, as nvidia-smi and Slurm's GRES indices do
export CUDA_DEVICE_ORDER="PCI_BUS_ID"
