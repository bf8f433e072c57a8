"""What every rule shares: levels, findings, the context a rule weighs a spec against, the
registry, and ``validate`` (all findings, errors first)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from clusterforge.catalog import HardwareProfile, get_profile
from clusterforge.clusterspec.models import Cluster, NodeGroup


class Level(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Finding(NamedTuple):
    level: Level
    code: str
    path: str
    value: object
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.level.value}: {self.path} = {self.value!r}: {self.why} Fix: {self.fix} [{self.code}]"


class RuleContext(NamedTuple):
    """What the rules weigh a spec against: its folder and each group's resolved profile.

    ``profiles`` comes from ``clusterforge.resolve`` (catalog with discovered facts applied), so a
    rule sees the same hardware the renderer prints; ``None`` where the profile is unknown.
    """

    base: Path
    profiles: Mapping[str, HardwareProfile | None]
    facts_dir: Path | None = None

    def profile(self, g: NodeGroup) -> HardwareProfile | None:
        if g.name in self.profiles:
            return self.profiles[g.name]
        return get_profile(g.profile_name)


Rule = Callable[[Cluster, RuleContext], Iterator[Finding]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def _gi(cluster: Cluster, g: NodeGroup) -> str:
    # by identity first: ``list.index`` compares whole pydantic models, field by field
    i = next((i for i, x in enumerate(cluster.node_groups) if x is g), None)
    return f"node_groups[{cluster.node_groups.index(g) if i is None else i}]"


def gpu_nodes(cluster: Cluster, ctx: RuleContext) -> int:
    n = 0
    for g in cluster.node_groups:
        p = ctx.profile(g)
        if g.role == "compute" and p is not None and p.gpu is not None:
            n += g.node_count
    return n



def validate(
    cluster: Cluster,
    base_dir: Path | None = None,
    *,
    profiles: Mapping[str, HardwareProfile | None] | None = None,
    facts_dir: Path | None = None,
) -> list[Finding]:
    """All findings, errors first, in a stable order.

    ``profiles``: each group's resolved profile (``clusterforge.resolve`` passes them); without it,
    the catalog's."""
    ctx = RuleContext(base_dir or Path("."), profiles or {}, facts_dir)
    out = [f for r in RULES for f in r(cluster, ctx)]
    order = {Level.ERROR: 0, Level.WARNING: 1, Level.INFO: 2}
    return sorted(out, key=lambda f: (order[f.level], f.path, f.code))


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level is Level.ERROR]
