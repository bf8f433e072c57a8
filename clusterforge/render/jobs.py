"""The job environment that is not NCCL's: what a batch job needs to know of the cluster.

``/etc/profile.d/clusterforge-jobs.sh`` on every compute and login node (the slurm role installs
it), sourced by login shells and, through ``#!/bin/bash -l``, by batch scripts such as
``examples/jobs/torchrun.sbatch``. Today it names the checkpoint storage: a job that is
pre-empted or requeued resumes from there on whatever nodes it lands, so the folder must be on
a file system every node mounts (the storage[] entry with purpose ``checkpoints``).
"""

from __future__ import annotations

from clusterforge.clusterspec.models import Cluster
from clusterforge.render.slurm import Setting

#: where the slurm role installs the rendered job environment
JOBS_ENV_PATH = "/etc/profile.d/clusterforge-jobs.sh"


def job_settings(c: Cluster) -> list[Setting]:
    """The variables of the job environment; empty when the spec says nothing a job needs."""
    s = c.checkpoint_storage
    if s is None:
        return []
    return [
        Setting(
            "CLUSTERFORGE_CHECKPOINT_DIR",
            s.mount,
            f"storage {s.name} ({s.type}) has purpose checkpoints: a requeued job finds its checkpoint here on "
            "any node",
        )
    ]
