"""Which Slurm release introduced (or removed) what the renderer uses.

One table, so the gates are reviewable in one place and unit-tested per version. Sources are
the release notes and man pages per tag, summarised in ../shared/reference/facts.md §3.
"""

from __future__ import annotations

FEATURES: dict[str, tuple[tuple[int, int], str]] = {
    # name: (first version, why/source)
    "cons_tres_default": ((23, 11), "select/cons_tres became the default; cons_res removed (RELEASE_NOTES 23.11)"),
    "no_cgroup_automount": ((23, 11), "CgroupAutomount removed from cgroup.conf (RELEASE_NOTES 23.11)"),
    "topology_block": ((23, 11), "topology/block plugin added in 23.11"),
    "block_sizes": ((24, 5), "BlockSizes= replaced BlockLevels= in 24.05"),
    "topology_yaml": ((25, 5), "topology.yaml (several topologies, TopologyPlugin ignored) in 25.05"),
    "gres_env_flags": ((21, 8), "gres.conf Flags=amd_gpu_env/nvidia_gpu_env (21.08)"),
    "cloud_nodes_shown": (
        (23, 2),
        "powered-down CLOUD nodes shown by sinfo by default; PrivateData=cloud no longer needed (RELEASE_NOTES 23.02)",
    ),
    "prolog_timeout": ((25, 5), "PrologTimeout/EpilogTimeout added in 25.05; older: PrologEpilogTimeout"),
}


def has(version: tuple[int, ...], feature: str) -> bool:
    first, _why = FEATURES[feature]
    return tuple(version[:2]) >= first
