# /etc/profile.d/clusterforge-nccl.sh for node group gpu (efa)
# Rendered by clusterforge: the job environment that /etc/nccl.conf cannot carry (library paths,
# device ordering). Sourced by login shells and by batch jobs (sbatch --export=ALL, the default).
# NCCL loads the EFA net plugin (libnccl-net.so) and libfabric from here
export LD_LIBRARY_PATH="/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:${LD_LIBRARY_PATH:-}"
# CUDA device numbers follow PCI order, as nvidia-smi and Slurm's GRES indices do
export CUDA_DEVICE_ORDER="PCI_BUS_ID"
