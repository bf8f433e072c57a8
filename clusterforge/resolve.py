"""Resolution: load → validate → resolve, once, in one place.

``resolve`` turns a spec into a ``ResolvedCluster``: the spec, every node group's hardware profile
with discovered facts applied, its host names and addresses (listed when first read), and the
validation findings weighed against those resolved profiles. The renderer, the inventory, the
local cluster, the Pulumi program, the plan and its cost estimate, and the diff all take this one
object, so ``--facts DIR`` means the same to every verb and no module looks a profile up on its
own.

``require_valid`` is the one refusal every verb that builds something uses (``render``, ``plan``,
``inventory``, ``configure``, ``local up``): a spec with errors is refused with its findings, exit 1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from clusterforge import hostlist
from clusterforge.catalog import HardwareProfile, get_profile
from clusterforge.clusterspec.loader import load_spec
from clusterforge.clusterspec.models import Cluster, NodeGroup
from clusterforge.clusterspec.rules import Finding, Level, validate
from clusterforge.clusterspec.types import SLURM_VERSIONS
from clusterforge.errors import ClusterforgeError, RenderError, SpecError


class SpecInvalid(ClusterforgeError):
    """The spec fits the schema but has validation errors; the message lists them."""

    exit_code = 1


@dataclass(frozen=True)
class ResolvedGroup:
    """One node group with what every consumer needs of it."""

    spec: NodeGroup
    profile: HardwareProfile | None  # None only with an ``unknown-profile`` error finding
    facts_hosts: tuple[str, ...] = ()  # the hosts whose discovered facts were applied

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        """Every node name of the group, listed on first use: the renderer takes a group's hostlist
        from its counts and ranges (``NodeGroup.hostlist_items``), so rendering 65,536 cloud nodes
        never lists them; the inventory, the check and the topology do."""
        return tuple(self.spec.hostnames)

    @cached_property
    def addresses(self) -> tuple[str, ...] | None:
        """On-prem addresses, paired with ``hosts``, listed on first use; None on cloud groups."""
        on = self.spec.onprem
        return tuple(hostlist.expand(on.addresses)) if on is not None and on.addresses else None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> str:
        return self.spec.role


@dataclass(frozen=True)
class ResolvedCluster:
    """The spec, resolved once: profiles with facts, hosts, addresses, findings."""

    spec: Cluster
    source: str  # the spec's path as the user gave it (for messages)
    base_dir: Path  # the spec's relative paths (facts_dir, topology files) start here
    facts_dir: Path | None
    groups: tuple[ResolvedGroup, ...]
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level is Level.ERROR)

    @property
    def slurm_version(self) -> str:
        return self.spec.slurm.version

    @functools.cached_property
    def _groups_by_name(self) -> dict[str, ResolvedGroup]:
        return {g.name: g for g in self.groups}

    def group(self, name: str) -> ResolvedGroup:
        """The group named ``name`` (a lookup, not a scan: the program asks once per group)."""
        return self._groups_by_name[name]

    def profile(self, name: str) -> HardwareProfile:
        """The resolved profile of group ``name``; only for specs without errors."""
        p = self.group(name).profile
        if p is None:
            wanted = self.group(name).spec.profile_name
            raise RenderError(f"node group {name!r}: profile {wanted!r} is not in the catalog")
        return p

    def profiles(self) -> dict[str, HardwareProfile | None]:
        return {g.name: g.profile for g in self.groups}

    def with_role(self, role: str) -> tuple[ResolvedGroup, ...]:
        return tuple(g for g in self.groups if g.role == role)

    def require_valid(self, verb: str) -> ResolvedCluster:
        """Refuse a spec with errors (exit 1), naming each finding; else return self."""
        if self.errors:
            lines = [f"{self.source}: {len(self.errors)} error(s); not {verb}:"]
            lines += [f"  {f}" for f in self.errors]
            lines.append("fix them (`clusterforge validate` shows warnings too)")
            raise SpecInvalid("\n".join(lines))
        return self


def load_facts(facts_dir: Path, origin: str = "--facts") -> dict[str, Any]:
    """``origin`` is where the folder came from ("--facts" or the spec's "facts_dir"), for messages."""
    from clusterforge.catalog.facts import FactsError, load_facts_dir

    if not facts_dir.is_dir():
        why = "is not a folder" if facts_dir.exists() else "does not exist"
        raise SpecError(
            f"{origin}: facts folder {str(facts_dir)!r} {why}; run playbooks/discover.yml to collect it, "
            "or drop --facts / facts_dir"
        )
    try:
        return load_facts_dir(facts_dir)
    except FactsError as exc:
        # the parsers say what is wrong with which file; this says which option led there and the fix
        raise FactsError(
            f"{origin} {str(facts_dir)!r}: {exc}. Fix: save the tools' output again with playbooks/discover.yml "
            f"(<dir>/<hostname>/slurmd-C.txt, lscpu.txt, ...), or drop {origin}"
        ) from None


def _resolve_group(g: NodeGroup, facts: dict[str, Any]) -> ResolvedGroup:
    profile = get_profile(g.profile_name)
    found = [h for h in g.hostnames if h in facts] if facts else []
    if profile is not None and found:
        from clusterforge.catalog.facts import apply_facts

        profile = apply_facts(profile, [facts[h] for h in found])
    return ResolvedGroup(g, profile, tuple(found))


def resolve(
    cluster: Cluster,
    *,
    base_dir: Path,
    facts_dir: Path | None = None,
    slurm_version: str | None = None,
    source: str = "spec",
) -> ResolvedCluster:
    """Resolve ``cluster``: ``facts_dir`` (or the spec's ``facts_dir``) overrides catalog facts;
    ``slurm_version`` renders for another release than the spec's."""
    if slurm_version is not None:
        if slurm_version not in SLURM_VERSIONS:
            raise SpecError(
                f"--slurm-version {slurm_version!r} is not supported; use one of {', '.join(SLURM_VERSIONS)}"
            )
        cluster = cluster.model_copy(update={"slurm": cluster.slurm.model_copy(update={"version": slurm_version})})
    origin = "--facts"
    if facts_dir is None and cluster.facts_dir is not None and (base_dir / cluster.facts_dir).is_dir():
        facts_dir = base_dir / cluster.facts_dir  # a missing spec facts_dir is a validation error
        origin = "facts_dir"
    facts = load_facts(facts_dir, origin) if facts_dir is not None else {}
    groups = tuple(_resolve_group(g, facts) for g in cluster.node_groups)
    profiles = {g.name: g.profile for g in groups}
    findings = tuple(validate(cluster, base_dir, profiles=profiles, facts_dir=facts_dir))
    return ResolvedCluster(cluster, source, base_dir, facts_dir, groups, findings)


def resolve_file(
    path: Path, *, facts_dir: Path | None = None, slurm_version: str | None = None
) -> ResolvedCluster:
    """Load the spec file at ``path`` and resolve it (relative paths start at its folder)."""
    cluster = load_spec(path)
    return resolve(cluster, base_dir=path.parent, facts_dir=facts_dir, slurm_version=slurm_version, source=str(path))
