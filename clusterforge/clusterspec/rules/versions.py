"""Rules on what the target Slurm release supports (topology/block, BlockSizes, topology.yaml)."""

from __future__ import annotations

from collections.abc import Iterator

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule
from clusterforge.clusterspec.types import version_tuple


@rule
def version_gates(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    v = version_tuple(c.slurm.version)
    t = c.topology
    if (t.plugin == "block" or t.blocks) and v < (23, 11):
        yield Finding(
            Level.ERROR, "block-needs-2311", "topology.blocks" if t.blocks else "topology.plugin",
            c.slurm.version if not t.blocks else [b.name for b in t.blocks],
            f"topology/block does not exist before Slurm 23.11 (target is {c.slurm.version}).",
            "raise slurm.version to 23.11+ or describe the network as switches (topology/tree).",
        )
    if t.block_sizes and v < (24, 5):
        yield Finding(
            Level.ERROR, "blocksizes-needs-2405", "topology.block_sizes", t.block_sizes,
            "BlockSizes= arrives in Slurm 24.05 (23.11 used BlockLevels).",
            "raise slurm.version to 24.05+ or drop block_sizes.",
        )
    if t.block_sizes:
        base_size = t.block_sizes[0]
        for k, size in enumerate(t.block_sizes[1:], start=1):
            ratio = size // base_size
            if size % base_size or ratio & (ratio - 1) or ratio > 2**15:
                yield Finding(
                    Level.ERROR, "blocksizes-invalid", f"topology.block_sizes[{k}]", size,
                    "each BlockSizes value must be the base size times a power of two (slurmctld fatals).",
                    f"use {base_size}*2^k, e.g. {base_size * 2}.",
                )
    # cloud compute groups always give leaves (aws-<group> until EC2 reports their instances)
    cloud_compute = any(g.is_cloud and g.role == "compute" for g in c.node_groups)
    if t.plugin == "tree" and not t.switches and not t.ec2_instance_topology and not cloud_compute:
        yield Finding(
            Level.ERROR, "empty-tree", "topology.plugin", "tree",
            "topology/tree without switches would load an empty topology.conf (slurmctld fatals).",
            "declare topology.switches, add a cloud compute group, or set plugin: auto.",
        )
    if t.plugin == "block" and not t.blocks:
        yield Finding(
            Level.ERROR, "empty-block", "topology.plugin", "block",
            "topology/block without blocks renders no usable topology.", "declare topology.blocks.",
        )
    if v >= (25, 5) and (t.switches or t.blocks):
        yield Finding(
            Level.INFO, "topology-yaml", "slurm.version", c.slurm.version,
            "Slurm 25.05 reads topology.yaml; it is rendered instead of topology.conf.",
            "nothing to do; partitions use the cluster default topology.",
        )


