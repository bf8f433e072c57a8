"""Rules on partitions: existing node groups, one GPU model unless allowed, one default."""

from __future__ import annotations

from collections.abc import Iterator

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule


@rule
def partitions_valid(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    names = {g.name for g in c.node_groups}
    defaults = [p.name for p in c.partitions if p.default]
    if len(defaults) > 1:
        yield Finding(
            Level.ERROR, "many-defaults", "partitions[*].default", defaults,
            "Slurm takes only one default partition.", "set default: true on one partition.",
        )
    if c.partitions and not defaults:
        yield Finding(
            Level.WARNING, "no-default-partition", "partitions", [p.name for p in c.partitions],
            "jobs submitted without -p fail when no partition is the default.",
            "set default: true on one partition.",
        )
    if not c.partitions:
        yield Finding(
            Level.INFO, "implicit-partition", "partitions", [],
            "no partitions given: one default partition 'batch' with every compute group is rendered.",
            "declare partitions to split GPU and CPU work.",
        )
    for i, part in enumerate(c.partitions):
        models: dict[str, list[str]] = {}
        for j, gname in enumerate(part.node_groups):
            if gname not in names:
                yield Finding(
                    Level.ERROR, "unknown-node-group", f"partitions[{i}].node_groups[{j}]", gname,
                    "names no node group.", f"use one of: {', '.join(sorted(names))}.",
                )
                continue
            g = c.group(gname)
            if g.role != "compute":
                yield Finding(
                    Level.ERROR, "non-compute-in-partition", f"partitions[{i}].node_groups[{j}]", gname,
                    f"is a {g.role} group; jobs would land on it.", "list only compute groups in partitions.",
                )
            p = ctx.profile(g)
            key = f"{p.gpu.model} ({p.gpu.generation})" if p and p.gpu else "cpu"
            models.setdefault(key, []).append(gname)
        gpu_kinds = [k for k in models if k != "cpu"]
        if len(gpu_kinds) > 1:
            yield Finding(
                Level.INFO if part.allow_mixed_gpus else Level.ERROR, "mixed-gpus",
                f"partitions[{i}].node_groups", part.node_groups,
                f"mixes GPU models {sorted(gpu_kinds)}: synchronous training runs at the slowest GPU's pace "
                "and NCCL cannot use NVLink-specific algorithms across them.",
                "split the partition per GPU model, or set allow_mixed_gpus: true if that is intended.",
            )
        if gpu_kinds and "cpu" in models:
            yield Finding(
                Level.WARNING, "gpu-and-cpu-partition", f"partitions[{i}].node_groups", part.node_groups,
                "mixes GPU and CPU-only nodes: CPU jobs can occupy GPU nodes.",
                "put CPU groups in their own partition.",
            )


