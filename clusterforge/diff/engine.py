"""Compute a diff: load, validate, render and plan both sides of each spec, then compare."""

from __future__ import annotations

import difflib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterforge import hostlist
from clusterforge.clusterspec import Cluster, Finding, Level, load_spec, validate
from clusterforge.diff.impact import Impact, classify_file, summarise
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
from clusterforge.plan.model import CostEstimate
from clusterforge.render.result import RenderResult
from clusterforge.resolve import resolve


@dataclass
class _Side:
    source: SpecSource
    cluster: Cluster | None = None
    findings: list[Finding] = field(default_factory=list)
    render: RenderResult | None = None
    resources: dict[str, Any] | None = None  # None: not planned (reason in notes)
    cost: CostEstimate | None = None
    notes: list[str] = field(default_factory=list)


def _where(src: SpecSource) -> str:
    return f"{src.spec_path} at {src.label}"


def _load(src: SpecSource, *, plan: bool) -> _Side:
    side = _Side(src)
    if src.path is None:
        side.resources = {}
        return side
    try:
        side.cluster = load_spec(src.path)
    except ClusterforgeError as exc:
        msg = str(exc).replace(str(src.path), src.spec_path)
        raise DiffError(f"{_where(src)}: {msg}") from None
    c = side.cluster
    side.findings = validate(c, src.base_dir)
    try:
        side.render = render_side(c, src.base_dir)
    except ClusterforgeError as exc:
        side.notes.append(f"{_where(src)} does not render ({exc}); its config files are not compared")
    if c.aws is not None:
        from clusterforge.plan.cost import estimate_cost

        side.cost = estimate_cost(resolve(c, base_dir=src.base_dir))
    from clusterforge.aws import layout

    if c.aws is None or not layout.cloud_groups(c):
        side.resources = {}  # on-prem only: nothing for Pulumi to create
        return side
    if not plan:
        side.notes.append("AWS resources not planned (--no-plan)")
        return side
    if any(f.level is Level.ERROR for f in side.findings):
        side.notes.append(f"{_where(src)} has validation errors; its AWS resources are not planned")
        return side
    try:
        from clusterforge.plan import build_plan, to_dict

        side.resources = to_dict(build_plan(resolve(c, base_dir=src.base_dir), spec_path=src.spec_path, render=False))[
            "resources"
        ]
    except ClusterforgeError as exc:
        side.notes.append(f"{_where(src)}: resources not planned: {exc}")
    return side


def render_side(cluster: Cluster, base_dir: Path) -> RenderResult:
    from clusterforge.render import render_cluster

    return render_cluster(cluster, base_dir=base_dir)


def _slurmd_nodes(sides: list[_Side], groups: tuple[str, ...] | None = None) -> str:
    names: set[str] = set()
    for s in sides:
        if s.cluster is None:
            continue
        for g in s.cluster.node_groups:
            if g.role == "compute" and (groups is None or g.name in groups):
                names.update(g.hostnames)
    return hostlist.compress(sorted(names)) if names else ""


def _file_diffs(base: _Side, head: _Side) -> tuple[list[FileDiff], list[Impact]]:
    bf = base.render.files if base.render else {}
    hf = head.render.files if head.render else {}
    files: list[FileDiff] = []
    impacts: list[Impact] = []
    all_slurmd = _slurmd_nodes([base, head])
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
        impacts += classify_file(
            name, before, after, slurmd_nodes=all_slurmd, file_nodes=_slurmd_nodes([base, head], tuple(f.groups)),
            daemons=tuple(f.daemons),
        )
    return files, impacts


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


def diff_sources(base: SpecSource, head: SpecSource, *, plan: bool = True) -> SpecDiff:
    """Compare one spec's two sides (either may be absent: the spec was added or deleted)."""
    if base.path is None and head.path is None:
        raise DiffError(
            f"{base.spec_path} exists neither at {base.label} nor at {head.label}; check the path "
            "(repository-relative, e.g. examples/p5-training.yaml)"
        )
    status = "added" if base.path is None else "removed" if head.path is None else "modified"
    if status == "modified" and base.fingerprint == head.fingerprint:
        return SpecDiff(base.spec_path, base.label, head.label, "unchanged")
    b, h = _load(base, plan=plan), _load(head, plan=plan)
    notes = b.notes + h.notes
    resources: ResourceDiff | None = None
    if b.resources is not None and h.resources is not None:
        resources = diff_resources(b.resources, h.resources)
        if b.resources or h.resources:
            notes += list(resources.notes)
    files, impacts = _file_diffs(b, h)
    if (base.path and not b.render) or (head.path and not h.render):
        files, impacts = [], []
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
        operations=summarise(impacts),
        introduced=tuple(_finding(f) for f in h.findings if (f.code, f.path) not in key),
        resolved=tuple(_finding(f) for f in b.findings if (f.code, f.path) not in hkey),
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
            out.append(diff_sources(b, h, plan=plan))
    return DiffReport(base_label, head_label, tuple(out), (RENDERER_NOTE,))


def diff_spec_files(base: Path, head: Path, *, plan: bool = True) -> DiffReport:
    """Compare two spec files (``--base-spec``/``--head-spec``)."""
    b, h = from_file(base), from_file(head)
    # one name for both sides, so the report reads as one spec changing
    b = SpecSource(b.label, str(head), b.path, b.base_dir, b.fingerprint)
    h = SpecSource(h.label, str(head), h.path, h.base_dir, h.fingerprint)
    return DiffReport(str(base), str(head), (diff_sources(b, h, plan=plan),), (RENDERER_NOTE,))
