"""Rules on storage: mounts, AWS-only file systems, checkpoints (on NFS/EFS, on one entry only), the facts folder."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, gpu_nodes, rule


@rule
def checkpoint_storage(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    n = gpu_nodes(c, ctx)
    for i, s in enumerate(c.storage):
        if "checkpoints" in s.purpose and s.type in ("nfs", "efs") and n > 8:
            yield Finding(
                Level.WARNING, "checkpoints-on-nfs", f"storage[{i}].type", s.type,
                f"{n} GPU nodes writing checkpoints at once saturate a single NFS/EFS endpoint; a "
                "checkpoint that takes minutes stalls every GPU for that time.",
                "put checkpoints on a parallel file system (fsx_lustre or lustre).",
            )
    ckpt = [i for i, s in enumerate(c.storage) if "checkpoints" in s.purpose]
    for i in ckpt[1:]:
        yield Finding(
            Level.ERROR, "checkpoint-storage-twice", f"storage[{i}].purpose", c.storage[i].purpose,
            f"storage[{ckpt[0]}] ({c.storage[ckpt[0]].name}) has purpose checkpoints already; the job environment "
            "names one checkpoint folder (CLUSTERFORGE_CHECKPOINT_DIR), which a requeued job must find again on "
            "whatever nodes it lands.",
            f"keep checkpoints in the purpose of one storage entry only (a parallel file system: "
            f"{c.storage[ckpt[0]].name} or {c.storage[i].name}).",
        )
    mounts = Counter(s.mount for s in c.storage)
    for i, s in enumerate(c.storage):
        if mounts[s.mount] > 1:
            yield Finding(
                Level.ERROR, "duplicate-mount", f"storage[{i}].mount", s.mount,
                "two file systems are mounted at the same path.", "give each a distinct mount point.",
            )
        if s.type in ("fsx_lustre", "efs") and c.aws is None:
            yield Finding(
                Level.ERROR, "aws-storage-without-aws", f"storage[{i}].type", s.type,
                "FSx and EFS are AWS services; the spec has no aws section.",
                "add 'aws:' or use nfs/lustre for on-prem storage.",
            )
    if c.facts_dir is not None and not (ctx.base / c.facts_dir).is_dir():
        yield Finding(
            Level.ERROR, "missing-facts-dir", "facts_dir", c.facts_dir,
            "folder not found (paths are relative to the spec file).",
            "run playbooks/discover.yml to collect facts there, or remove facts_dir.",
        )


