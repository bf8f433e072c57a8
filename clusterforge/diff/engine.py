"""Compute a diff: resolve (load, validate, facts) once per side, render, build the inventory and
plan both sides of each spec, then compare files, manifests, host settings, resources and cost."""

from __future__ import annotations

import difflib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterforge.clusterspec import Finding
from clusterforge.diff import scale
from clusterforge.diff.hosts import HostSetting, host_settings, host_steps, inventory_of
from clusterforge.diff.report import CostDelta, DiffReport, FileDiff, FindingChange, SpecDiff
from clusterforge.diff.resources import ResourceDiff, diff_resources
from clusterforge.diff.sides import (
    DiffError,
    SpecSource,
    at_ref,
    default_base,
    discover_specs,
    from_file,
    in_tree,
    repo_root,
    resolve_ref,
    short,
)
from clusterforge.errors import ClusterforgeError
from clusterforge.inventory.generate import Inventory
from clusterforge.plan.model import CostEstimate
from clusterforge.render import restart
from clusterforge.render.restart import Impact, Operations
from clusterforge.render.result import RenderResult
from clusterforge.resolve import ResolvedCluster, resolve_file


@dataclass
class _Side:
    source: SpecSource
    which: str  # "base" or "head"
    rc: ResolvedCluster | None = None
    findings: list[Finding] = field(default_factory=list)
    render: RenderResult | None = None
    inventory: Inventory | None = None
    resources: dict[str, Any] | None = None  # None: not planned (reason in notes)
    cost: CostEstimate | None = None
    error: str = ""  # why this side cannot be compared: "does not load/validate/render: ..."
    notes: list[str] = field(default_factory=list)


def _where(src: SpecSource) -> str:
    return f"{src.spec_path} at {src.label}"


def _load(src: SpecSource, which: str, *, plan: bool, facts_dir: Path | None) -> _Side:
    """Resolve once (load, validate, facts), then render, build the inventory, cost and plan."""
    side = _Side(src, which)
    if src.path is None:
        side.resources = {}
        return side
    from clusterforge.catalog.facts import FactsError

    try:
        rc = resolve_file(src.path, facts_dir=facts_dir)
    except (ClusterforgeError, FactsError) as exc:  # FactsError: a fact file that does not parse
        side.error = "does not load: " + str(exc).replace(str(src.path), src.spec_path)
        return side
    side.rc, side.findings = rc, list(rc.findings)
    c = rc.spec
    if rc.errors:
        # each error with its fix: the reviewer (and the diff's author) reads only this line
        side.error = "does not validate: " + "; ".join(
            f"{f.code} at {f.path}: {f.why} Fix: {f.fix}" for f in rc.errors
        )
    else:
        try:
            from clusterforge.render import render

            side.render = render(rc)
            side.inventory = inventory_of(rc)
        except ClusterforgeError as exc:
            side.render, side.error = None, f"does not render: {exc}"
    if c.aws is not None:
        from clusterforge.plan.cost import estimate_cost

        side.cost = estimate_cost(rc)
    from clusterforge.aws import layout

    if c.aws is None or not layout.cloud_groups(c):
        side.resources = {}  # on-prem only: nothing for Pulumi to create
        return side
    if not plan:
        side.notes.append("AWS resources not planned (--no-plan)")
        return side
    if side.error:
        side.notes.append(f"{_where(src)} {side.error.split(':', 1)[0]}; its AWS resources are not planned")
        return side
    try:
        side.resources = _planned_resources(src, rc)
    except ClusterforgeError as exc:
        side.notes.append(f"{_where(src)}: resources not planned: {exc}")
    return side


def _planned_resources(src: SpecSource, rc: ResolvedCluster) -> dict[str, Any]:
    """The side's planned resources, from the plan cache when its inputs have not changed since a
    diff planned them (``clusterforge.plan.cache``: the base side is usually the same commit run
    after run), else from running the Pulumi program under mocks (then kept for the next diff)."""
    from clusterforge.plan import build_plan, cache, to_dict

    # everything build_plan below is given besides rc; the stack defaults to the cluster's name
    options = {"spec_path": src.spec_path, "stack": rc.spec.name, "render": False}
    key = cache.plan_key(
        fingerprint=src.fingerprint, facts=cache.facts_digest(rc.facts_dir), options=options,
        clock=cache.clock_inputs(rc),
    )
    store = cache.PlanCache.default()
    resources = store.get(key)
    if resources is None:
        resources = to_dict(build_plan(rc, spec_path=src.spec_path, render=False))["resources"]
        store.put(key, resources)
    return resources


def _file_diffs(base: _Side, head: _Side) -> list[FileDiff]:
    """The unified text diff of every changed file (what the PR reviewer reads)."""
    bf = base.render.files if base.render else {}
    hf = head.render.files if head.render else {}
    files: list[FileDiff] = []
    for name in sorted(set(bf) | set(hf)):
        b, h = bf.get(name), hf.get(name)
        before = b.content if b else None
        after = h.content if h else None
        if before == after:
            continue
        f = h or b
        assert f is not None
        lines = list(
            difflib.unified_diff(
                (before or "").splitlines(keepends=True),
                (after or "").splitlines(keepends=True),
                fromfile=f"a/{name}" if b else "/dev/null",
                tofile=f"b/{name}" if h else "/dev/null",
                n=2,
            )
        )
        text = "".join(x if x.endswith("\n") else x + "\n" for x in lines)
        added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
        removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
        status = "added" if b is None else "removed" if h is None else "changed"
        files.append(FileDiff(name, status, f.node_path, tuple(f.groups), text, added, removed))
    return files


def _impacts(base: _Side, head: _Side) -> list[Impact]:
    """Per-file impacts from the one restart policy, comparing the manifests' structured records."""
    bm = base.render.manifest() if base.render else None
    hm = head.render.manifest() if head.render else None
    return restart.impacts(bm, hm)


def _operations(impacts: list[Impact], settings: list[HostSetting], base: _Side, head: _Side) -> Operations:
    """The cloud scale steps (retire, ``pulumi up``: ``scale.first_steps``), then the Slurm steps
    (``restart.summarise``) with the host settings' drain, role runs and reboots."""
    retired = scale.retired_nodes(base.rc, head.rc)
    cloud = scale.first_steps(base.rc, head.rc)
    bm = base.render.manifest() if base.render else None
    hm = head.render.manifest() if head.render else None
    ops = restart.summarise(impacts, retired=retired, version=restart.policy_version(bm, hm))
    if not any(s.roles and s.hosts for s in settings):
        return Operations(ops.cls, (*cloud, *ops.steps), ops.rule)
    slurm_drain = ",".join([*(i.drain_nodes for i in impacts if i.drain_nodes), *[retired] * bool(retired)])
    first, middle, last = host_steps(settings, already_drained=slurm_drain)
    steps = [*first, *ops.steps, *middle, *last] if impacts else [*first, *middle, *last]
    return Operations(ops.cls, (*cloud, *steps), ops.rule)


def _cost(base: _Side, head: _Side) -> CostDelta:
    cb, ch = base.cost, head.cost
    ref = ch or cb
    lb = {(line.item, round(line.hourly, 4)) for line in cb.lines} if cb else set()
    lh = {(line.item, round(line.hourly, 4)) for line in ch.lines} if ch else set()
    return CostDelta(
        currency=ref.currency if ref else "USD",
        before=round(cb.total_hourly, 4) if cb else None,
        after=round(ch.total_hourly, 4) if ch else None,
        hours_per_month=ref.hours_per_month if ref else 730,
        removed=tuple(sorted(lb - lh)),
        added=tuple(sorted(lh - lb)),
    )


def _finding(f: Finding) -> FindingChange:
    return FindingChange(f.level.value, f.code, f.path, str(f.value), f.why, f.fix)


def diff_sources(
    base: SpecSource, head: SpecSource, *, plan: bool = True, facts_dir: Path | None = None
) -> SpecDiff:
    """Compare one spec's two sides (either may be absent: the spec was added or deleted).

    A head that does not load, validate or render is the report's ``error`` (exit 2), never "no
    change"; a base that fails is noted and the head is compared against nothing."""
    if base.path is None and head.path is None:
        raise DiffError(
            f"{base.spec_path} exists neither at {base.label} nor at {head.label}; check the path "
            "(repository-relative, e.g. examples/p5-training.yaml)"
        )
    status = "added" if base.path is None else "removed" if head.path is None else "modified"
    if status == "modified" and base.fingerprint == head.fingerprint:
        return SpecDiff(base.spec_path, base.label, head.label, "unchanged")
    b = _load(base, "base", plan=plan, facts_dir=facts_dir)
    h = _load(head, "head", plan=plan, facts_dir=facts_dir)
    notes = b.notes + h.notes
    if b.error:
        notes.insert(0, f"base ({base.label}) {b.error}; the head is shown against an empty base")
        b = _Side(base, "base", findings=b.findings, resources={}, cost=b.cost)
    resources: ResourceDiff | None = None
    if b.resources is not None and h.resources is not None:
        resources = diff_resources(b.resources, h.resources)
        if b.resources or h.resources:
            notes += list(resources.notes)
    files: list[FileDiff] = []
    impacts: list[Impact] = []
    settings: list[HostSetting] = []
    if not h.error:
        files, impacts = _file_diffs(b, h), _impacts(b, h)
        if b.rc and b.inventory and h.rc and h.inventory:
            settings = host_settings((b.rc, b.inventory), (h.rc, h.inventory))
        elif base.path is not None and head.path is not None:
            notes.append("host settings are not compared: the base has no inventory to compare with")
    key = {(f.code, f.path) for f in b.findings}
    hkey = {(f.code, f.path) for f in h.findings}
    return SpecDiff(
        spec=base.spec_path,
        base=base.label,
        head=head.label,
        status=status,
        resources=resources,
        files=tuple(files),
        cost=_cost(b, h),
        impacts=tuple(impacts),
        operations=_operations(impacts, settings, b, h),
        host_settings=tuple(settings),
        introduced=tuple(_finding(f) for f in h.findings if (f.code, f.path) not in key),
        resolved=tuple(_finding(f) for f in b.findings if (f.code, f.path) not in hkey),
        error=f"head does not {h.error.removeprefix('does not ')}" if h.error else "",
        notes=tuple(dict.fromkeys(notes)),
    )


RENDERER_NOTE = (
    "Both sides are rendered and planned by this checkout's clusterforge; a change to the renderer "
    "itself shows only through the specs (golden tests cover it)."
)


def diff_refs(
    cwd: Path,
    *,
    base: str | None = None,
    head: str | None = None,
    specs: list[str] | None = None,
    plan: bool = True,
    facts_dir: Path | None = None,
) -> DiffReport:
    """Compare specs at git ref ``base`` (default: merge-base with main) with ``head`` (default:
    the working tree). ``specs``: paths (relative to ``cwd`` or the repository); default: discovered."""
    repo = repo_root(cwd)
    head_sha = resolve_ref(repo, head) if head else None
    if base:
        base_sha = resolve_ref(repo, base)
        base_label = f"{base}@{short(base_sha)}"
    else:
        what, base_sha = default_base(repo, head)
        base_label = f"{what}@{short(base_sha)}"
    head_label = f"{head}@{short(head_sha)}" if head and head_sha else "working tree"
    if specs:
        names = []
        for s in specs:
            p = (cwd / s).resolve() if not Path(s).is_absolute() else Path(s).resolve()
            try:
                names.append(p.relative_to(repo.resolve()).as_posix())
            except ValueError:
                raise DiffError(
                    f"spec {s!r} is outside the repository {repo}; compare files outside it with "
                    "--base-spec/--head-spec"
                ) from None
    else:
        names = discover_specs(repo, base_sha, head_sha)
    out: list[SpecDiff] = []
    with tempfile.TemporaryDirectory(prefix="clusterforge-diff-") as tmp:
        for name in names:
            b = at_ref(repo, base_sha, base_label, name, Path(tmp) / "base")
            h = at_ref(repo, head_sha, head_label, name, Path(tmp) / "head") if head_sha else in_tree(repo, name)
            out.append(diff_sources(b, h, plan=plan, facts_dir=facts_dir))
    return DiffReport(base_label, head_label, tuple(out), (RENDERER_NOTE,))


def diff_spec_files(base: Path, head: Path, *, plan: bool = True, facts_dir: Path | None = None) -> DiffReport:
    """Compare two spec files (``--base-spec``/``--head-spec``)."""
    b, h = from_file(base), from_file(head)
    # one name for both sides, so the report reads as one spec changing
    b = SpecSource(b.label, str(head), b.path, b.base_dir, b.fingerprint)
    h = SpecSource(h.label, str(head), h.path, h.base_dir, h.fingerprint)
    return DiffReport(str(base), str(head), (diff_sources(b, h, plan=plan, facts_dir=facts_dir),), (RENDERER_NOTE,))
