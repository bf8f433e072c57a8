"""Which Slurm release introduced (or removed) what the renderer prints and what the restart
policy assumes.

One table, so the gates are reviewable in one place and unit-tested per release
(tests/test_versions.py). Every gate names the first release it holds for and its source as
``file@tag`` in SchedMD/slurm (the tags are ``slurm-YY-MM-0-1``, the first release of each
series; ../shared/reference/facts.md §3 has the pre-24.11 ones). A removal is a gate too, named
for what holds from then on (``no_cgroup_automount``: CgroupAutomount is gone from 23.11).

Releases whose notes were read for the renderer's keys (slurm.conf, gres.conf, cgroup.conf,
topology.conf/.yaml, slurmdbd.conf) and found nothing it prints: 24.11 changed only the restart
procedure (``reconfigure_applies_node_changes``); 25.11 removed AccountingStorageUser and made
slurmdbd.conf accept mode 0640 and owner root, neither of which the render uses
(CHANGELOG/slurm-25.11.md@slurm-25-11-0-1).
"""

from __future__ import annotations

from typing import NamedTuple


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Gate(NamedTuple):
    first: tuple[int, int]
    """The first release for which the gate holds."""
    what: str
    """What changed, and what the renderer (or the restart policy) does about it."""
    source: str
    """Where it says so: ``file@tag`` in SchedMD/slurm."""


FEATURES: dict[str, Gate] = {
    "gres_env_flags": Gate(
        (21, 8),
        "gres.conf Flags=amd_gpu_env/nvidia_gpu_env: AMD GPUs get only ROCR_VISIBLE_DEVICES (every supported "
        "release has it)",
        "doc/man/man5/gres.conf.5@slurm-22-05-0-1 (Flags, amd_gpu_env)",
    ),
    "cloud_nodes_shown": Gate(
        (23, 2),
        "powered-down CLOUD nodes shown by sinfo by default: PrivateData=cloud is no longer printed",
        "RELEASE_NOTES@slurm-23-02-0-1 (HIGHLIGHTS: 'Change cloud nodes to show by default')",
    ),
    "cons_tres_default": Gate(
        (23, 11),
        "select/cons_tres became the default and select/cons_res was removed: the SelectType comment says so",
        "RELEASE_NOTES@slurm-23-11-0-1 ('Removed select/cons_res', 'Changed the default SelectType')",
    ),
    "no_cgroup_automount": Gate(
        (23, 11),
        "CgroupAutomount= removed from cgroup.conf: not printed from 23.11",
        "RELEASE_NOTES@slurm-23-11-0-1 ('Remove CgroupAutomount= option from cgroup.conf')",
    ),
    "cloud_reg_addrs_default": Gate(
        (23, 11),
        "SlurmctldParameters=cloud_reg_addrs became the default behaviour and the option defunct (slurmctld "
        "logs an error for it): not printed from 23.11",
        "RELEASE_NOTES@slurm-23-11-0-1 ('Remove cloud_reg_addrs and make it default behavior'); "
        "src/common/read_config.c@slurm-23-11-0-1 ('is defunct, please remove it')",
    ),
    "topology_block": Gate(
        (23, 11),
        "topology/block plugin and BlockName= lines in topology.conf",
        "src/plugins/topology/block and doc/man/man5/topology.conf.5@slurm-23-11-0-1 (absent @slurm-23-02-0-1)",
    ),
    "reconfigure_restarts_daemons": Gate(
        (23, 11),
        "scontrol reconfigure starts new slurmctld and slurmd processes and hands over when they start: it "
        "applies plugin changes, but not TCP listening ports or the authentication mechanism (restart policy)",
        "doc/man/man1/scontrol.1@slurm-24-05-0-1 (reconfigure: 'Starting in 23.11 ...'); "
        "src/slurmctld/controller.c and src/slurmd/slurmd/slurmd.c@slurm-23-11-0-1 (_try_to_reconfig: execve)",
    ),
    "stepd_follows_controller": Gate(
        (23, 11),
        "running steps are told a new SlurmctldHost, so moving the controller no longer drains the cluster "
        "(restart policy)",
        "RELEASE_NOTES@slurm-23-11-0-1 ('Update slurmstepd processes with current SlurmctldHost settings'); "
        "doc/html/faq.shtml@slurm-24-11-0-1 (controller: '(Slurm 23.02 and older) Drain the cluster')",
    ),
    "block_sizes": Gate(
        (24, 5),
        "topology/block: BlockSizes= replaced BlockLevels= in topology.conf",
        "RELEASE_NOTES@slurm-24-05-0-1 ('Replaced the BlockLevels with BlockSizes')",
    ),
    "reconfigure_applies_node_changes": Gate(
        (24, 11),
        "adding, removing or changing nodes takes slurm.conf everywhere plus scontrol reconfigure; before, "
        "the FAQ's procedure restarted slurmctld and every slurmd (restart policy)",
        "doc/html/faq.shtml@slurm-24-11-0-1 (add_nodes, rem_nodes: 'sufficient on Slurm 24.11 and newer'); "
        "doc/man/man5/slurm.conf.5@slurm-24-11-0-1 (NODE CONFIGURATION: 'restarting or reconfiguring')",
    ),
    "topology_yaml": Gate(
        (25, 5),
        "topology.yaml (several topologies; topology.conf and TopologyPlugin ignored when it exists): rendered "
        "instead of topology.conf, no TopologyPlugin line",
        "RELEASE_NOTES.md@slurm-25-05-0-1 (multiple topologies); doc/man/man5/topology.yaml.5 and "
        "slurm.conf.5@slurm-25-05-0-1 (TopologyPlugin: 'ignored if topology.yaml exists')",
    ),
    "prolog_timeout": Gate(
        (25, 5),
        "PrologTimeout/EpilogTimeout added; older releases have only PrologEpilogTimeout (not rendered yet)",
        "doc/man/man5/slurm.conf.5@slurm-25-05-0-1 (absent @slurm-24-11-0-1)",
    ),
    "cgroup_v1_deprecated": Gate(
        (25, 5),
        "cgroup/v1 deprecated (slurmd warns when it runs on a v1 host; still shipped through 26.05): the "
        "CgroupPlugin comment says so",
        "RELEASE_NOTES.md@slurm-25-05-0-1 ('Marked cgroup/v1 support as deprecated'); "
        "CHANGELOG/slurm-25.05.md@slurm-25-05-0-1; src/plugins/cgroup/v1@slurm-26-05-0-1",
    ),
    "partition_exclusive": Gate(
        (26, 5),
        "Exclusive=NODE is the documented whole-node partition; OverSubscribe lists only FORCE, YES, NO "
        "(EXCLUSIVE still parsed for compatibility): an exclusive partition prints Exclusive=NODE",
        "RELEASE_NOTES.md@slurm-26-05-0-1 ('Exclusive=[NO|NODE|USER|TOPO]'); doc/man/man5/slurm.conf.5 "
        "(OverSubscribe, Exclusive) and src/common/read_config.c@slurm-26-05-0-1",
    ),
}


def has(version: tuple[int, ...], feature: str) -> bool:
    """Whether the release ``version`` (``(24, 11)``) has the gate ``feature`` (a key of FEATURES)."""
    return tuple(version[:2]) >= FEATURES[feature].first


def release(version: tuple[int, ...]) -> str:
    """``(24, 11)`` -> ``"24.11"``."""
    return f"{version[0]}.{version[1]:02d}"
