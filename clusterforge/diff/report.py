"""The diff report: the model, and two of its forms — JSON (stable, sorted) and Markdown for a pull
request comment (errors and the summary first, collapsible sections, a hard size cap that keeps the
summary). The terminal form (rich tables and trees) is :mod:`clusterforge.diff.terminal`.

About 430 lines: the report model and the two forms that must show the same facts stay together,
so a field added to the model is seen next to both places that print it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from clusterforge.diff.hosts import HostSetting, top_action
from clusterforge.diff.resources import ResourceChange, ResourceDiff, show
from clusterforge.inventory.settings_impact import HostAction
from clusterforge.render.restart import Impact, ImpactClass, Operations

MARKER = "<!-- clusterforge-preview -->"
"""First line of the Markdown form: the workflow finds its own comment by it."""
MAX_MARKDOWN = 60_000
"""GitHub rejects comments over 65,536 characters; the rest is room for the pulumi preview summary."""
REPORT_FORMAT = 2  # 2: host_settings, error, exit code 2 for a head that fails


@dataclass(frozen=True)
class FileDiff:
    name: str
    status: str  # added, removed, changed
    node_path: str
    groups: tuple[str, ...]
    diff: str  # unified diff
    added: int
    removed: int


@dataclass(frozen=True)
class CostDelta:
    """Hourly estimates (``None``: that side has no AWS part); changed lines as (item, hourly)."""

    currency: str = "USD"
    before: float | None = None
    after: float | None = None
    hours_per_month: int = 730
    removed: tuple[tuple[str, float], ...] = ()
    added: tuple[tuple[str, float], ...] = ()

    @property
    def delta(self) -> float:
        return round((self.after or 0.0) - (self.before or 0.0), 4)


@dataclass(frozen=True)
class FindingChange:
    level: str
    code: str
    path: str
    value: str
    why: str
    fix: str


@dataclass(frozen=True)
class SpecDiff:
    """One spec, base against head. ``status``: modified, added, removed or unchanged;
    ``resources`` is ``None`` when a side could not be planned (``notes`` says why); ``error``
    says why the head cannot be compared ("head does not validate: ..."), which is exit 2."""

    spec: str
    base: str
    head: str
    status: str
    resources: ResourceDiff | None = None
    files: tuple[FileDiff, ...] = ()
    cost: CostDelta = field(default_factory=CostDelta)
    impacts: tuple[Impact, ...] = ()
    operations: Operations = field(default_factory=lambda: Operations(ImpactClass.NONE, ()))
    host_settings: tuple[HostSetting, ...] = ()
    introduced: tuple[FindingChange, ...] = ()
    resolved: tuple[FindingChange, ...] = ()
    error: str = ""
    notes: tuple[str, ...] = ()

    @property
    def host_action(self) -> HostAction:
        return top_action(self.host_settings)

    @property
    def host_drain(self) -> bool:
        return any(h.drain_nodes for h in self.host_settings)

    @property
    def loud(self) -> list[ResourceChange]:
        return [c for c in self.resources.changes if c.loud] if self.resources else []

    @property
    def changed(self) -> bool:
        return self.status != "unchanged" and bool(
            (self.resources and self.resources.changes)
            or self.files
            or self.host_settings
            or self.error
            or self.cost.delta
            or self.introduced
            or self.resolved
            or self.status in ("added", "removed")
        )


@dataclass(frozen=True)
class DiffReport:
    base: str
    head: str
    specs: tuple[SpecDiff, ...]
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return any(s.changed for s in self.specs)

    @property
    def errors(self) -> list[SpecDiff]:
        return [s for s in self.specs if s.error]

    @property
    def exit_code(self) -> int:
        """0 no change, 1 changes, 2 a head spec that does not load, validate or render."""
        return 2 if self.errors else 1 if self.changed else 0


# ----------------------------------------------------------------------------- JSON


def to_dict(report: DiffReport) -> dict[str, Any]:
    specs = []
    for s in report.specs:
        d: dict[str, Any] = {
            "spec": s.spec,
            "status": s.status,
            "changed": s.changed,
            "resources": None,
            "files": [asdict(f) for f in s.files],
            "cost": {**asdict(s.cost), "delta": s.cost.delta},
            "impacts": [{**i._asdict(), "cls": i.cls.value, "actions": i.actions} for i in s.impacts],
            "operations": {"class": s.operations.cls.value, "steps": list(s.operations.steps),
                           "rule": s.operations.rule},
            "host_settings": [{**asdict(h), "action": h.action.value} for h in s.host_settings],
            "host_action": s.host_action.value,
            "error": s.error,
            "findings": {"introduced": [asdict(f) for f in s.introduced], "resolved": [asdict(f) for f in s.resolved]},
            "notes": list(s.notes),
        }
        if s.resources is not None:
            d["resources"] = {
                "counts": s.resources.counts,
                "unchanged": s.resources.same,
                "changes": [{**asdict(c), "loud": c.loud} for c in s.resources.changes],
            }
        specs.append(d)
    return {
        "format": REPORT_FORMAT,
        "base": report.base,
        "head": report.head,
        "changed": report.changed,
        "exit_code": report.exit_code,
        "specs": specs,
        "notes": list(report.notes),
    }


def to_json(report: DiffReport) -> str:
    return json.dumps(to_dict(report), indent=2, sort_keys=True, default=str) + "\n"


# ----------------------------------------------------------------------------- shared text


def money(value: float | None, currency: str = "USD") -> str:
    if value is None:
        return "—"
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,.2f}" if currency == "USD" else f"{value:,.2f} {currency}"


def cost_line(c: CostDelta) -> str:
    if c.before is None and c.after is None:
        return "no AWS part"
    delta = c.delta
    pm = c.hours_per_month
    sign = "+" if delta > 0 else ""
    return (
        f"{money(c.before, c.currency)}/h → {money(c.after, c.currency)}/h "
        f"({sign}{money(delta, c.currency)}/h, {sign}{money(delta * pm, c.currency)}/month)"
    )


def resource_counts(r: ResourceDiff | None) -> str:
    if r is None:
        return "not planned"
    if not r.changes and not r.same:
        return "no AWS part"
    c = r.counts
    return f"+{c['add']} ~{c['update']} ±{c['replace']} -{c['remove']}"


def _props(c: ResourceChange, limit: int = 6) -> str:
    bits = []
    for p in c.properties[:limit]:
        flag = " (forces replacement)" if p.forces_replacement else f" ({p.interrupts})" if p.interrupts else ""
        bits.append(f"{p.path}: {show(p.before, 40)} → {show(p.after, 40)}{flag}")
    if len(c.properties) > limit:
        bits.append(f"… {len(c.properties) - limit} more")
    return "; ".join(bits)


def _loud_line(c: ResourceChange) -> str:
    what = {"replace": "REPLACED", "remove": "DELETED"}.get(c.action, "INTERRUPTED")
    return f"{what}: {c.key}" + (f" — {_props(c, 3)}" if c.properties else "")


# ----------------------------------------------------------------------------- Markdown


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>", ""]


def _fence(lines: list[str], lang: str = "") -> list[str]:
    return [f"```{lang}", *lines, "```"]


@dataclass
class _Section:
    title: str
    summary: str
    body: list[str]
    fenced: str | None = None  # language of a code block the body is, cut line-wise when too long

    def render(self, cut_to: int | None = None) -> tuple[str, int]:
        body = self.body
        cut = 0
        if cut_to is not None and cut_to < len(body):
            cut = len(body) - cut_to
            body = [*body[:cut_to]]
        inner = _fence(body, self.fenced) if self.fenced is not None else body
        if cut:
            inner = [*inner, "", f"*… {cut} more line(s) cut to keep this comment under the size limit.*"]
        return "\n".join(_details(self.summary, inner)) + "\n", cut


def _summary_md(report: DiffReport) -> list[str]:
    out = [MARKER, f"## clusterforge preview: `{report.base}` → `{report.head}`", ""]
    for s in report.errors:  # first, before anything that could read as "no change"
        what, _, detail = s.error.partition(": ")
        out += ["> [!CAUTION]", f"> **`{s.spec}`: {_esc(what)}** (exit 2; nothing below is its diff):"]
        out += [f"> - {_esc(d.strip())}" for d in detail.split("; ") if d.strip()] or ["> - (no detail)"]
        out.append("")
    changed = [s for s in report.specs if s.changed]
    if not report.specs:
        out += ["No cluster spec is affected by this change.", ""]
    out += [
        "| spec | resources (+ ~ ± -) | config files | hourly cost | running cluster | hosts | findings |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in report.specs:
        if not s.changed:
            out.append(f"| `{s.spec}` | unchanged | — | — | — | — | — |")
            continue
        findings = f"+{len(s.introduced)} / -{len(s.resolved)}"
        if s.error:
            out.append(f"| `{s.spec}` | — | — | — | **error: {_esc(s.error.split(':', 1)[0])}** | — | {findings} |")
            continue
        files = f"{len(s.files)} changed" if s.files else "none"
        out.append(
            f"| `{s.spec}`{' (' + s.status + ')' if s.status != 'modified' else ''} | {resource_counts(s.resources)} "
            f"| {files} | {_esc(cost_line(s.cost))} | **{s.operations.cls.value}** | {host_cell(s)} | {findings} |"
        )
    out.append("")
    for s in changed:
        loud = s.loud
        if loud:
            out += ["> [!CAUTION]", f"> **Stateful resources disrupted in `{s.spec}`:**"]
            out += [f"> - {_esc(_loud_line(c))}" for c in loud]
            out.append("")
        errors = [f for f in s.introduced if f.level == "error"]
        if errors:
            out += ["> [!WARNING]", f"> **New validation errors in `{s.spec}`:**"]
            out += [f"> - `{f.code}` {_esc(f.path)}: {_esc(f.why)}" for f in errors]
            out.append("")
        heavy = [h for h in s.host_settings if h.action in (HostAction.REBOOT, HostAction.REFORMAT)]
        if heavy:
            out += ["> [!WARNING]", f"> **Hosts rebooted or reformatted by `{s.spec}`:**"]
            out += [f"> - `{_esc(h.variable)}` {_esc(show(h.before, 40))} → {_esc(show(h.after, 40))}: "
                    f"**{h.action.value}** {_esc(h.hosts)}" for h in heavy]
            out.append("")
        if s.operations.steps and (s.operations.cls is not ImpactClass.NONE or s.host_action is not HostAction.NONE):
            out.append(f"**`{s.spec}` on a running cluster (Slurm: {s.operations.cls.value}; "
                       f"hosts: {s.host_action.value}):**")
            out += [f"{i}. {step}" for i, step in enumerate(s.operations.steps, 1)]
            if s.operations.rule:  # the release decides what a reconfigure can take
                out += ["", f"*{_esc(s.operations.rule)}*"]
            out.append("")
    out += [f"Result: **{verdict(report)}**. Impact classes: none < reconfigure < restart-slurmdbd < restart-slurmd "
            "< restart-slurmctld < restart-all; host actions: none < restart-service < reinstall < remount "
            "< reboot < reformat.", ""]
    return out


def verdict(report: DiffReport) -> str:
    if report.errors:
        return f"error: {len(report.errors)} head spec(s) do not load, validate or render (exit 2)"
    return "changes (exit 1)" if report.changed else "no change (exit 0)"


def host_cell(s: SpecDiff) -> str:
    if not s.host_settings:
        return "—"
    return f"{len(s.host_settings)}: **{s.host_action.value}**" + (" (drain)" if s.host_drain else "")


def _sections(s: SpecDiff) -> list[_Section]:
    out: list[_Section] = []
    if s.resources is not None and s.resources.changes:
        rows = ["| action | resource | stateful | changed properties |", "|---|---|---|---|"]
        for c in s.resources.changes:
            flag = "⚠ yes" if c.loud else "yes" if c.stateful else ""
            rows.append(f"| {c.action} | `{c.key}` | {flag} | {_esc(_props(c, 20))} |")
        counts = s.resources.counts
        out.append(_Section(
            f"{s.spec} resources", f"Resources: {counts['add']} added, {counts['update']} changed, "
            f"{counts['replace']} replaced, {counts['remove']} removed ({s.resources.same} unchanged)", rows,
        ))
    if s.impacts:
        rows = ["| file | what | change | class | actions | why (source) |", "|---|---|---|---|---|---|"]
        for i in s.impacts:
            rows.append(
                f"| `{i.file}` | {_esc(i.subject)} | {_esc(i.change)} | {i.cls.value} | {_esc('; '.join(i.actions))} "
                f"| {_esc(i.why)} ({_esc(i.source)}) |"
            )
        out.append(_Section(f"{s.spec} impact", f"Impact on a running cluster: {len(s.impacts)} change(s)", rows))
    if s.host_settings:
        rows = ["| variable | scope | before → after | roles | hosts | action | drain | why (source) |",
                "|---|---|---|---|---|---|---|---|"]
        for h in s.host_settings:
            rows.append(
                f"| `{_esc(h.variable)}` | {_esc(h.scope)} | {_esc(show(h.before, 40))} → {_esc(show(h.after, 40))} "
                f"| {_esc(', '.join(h.roles) or '—')} | {_esc(h.hosts or '—')} | {h.action.value} "
                f"| {_esc(h.drain_nodes or '—')} | {_esc(h.why)} ({_esc(h.source)}) |"
            )
        out.append(_Section(
            f"{s.spec} host settings",
            f"Host settings: {len(s.host_settings)} changed inventory variable(s), most disruptive "
            f"{s.host_action.value}", rows,
        ))
    if s.introduced or s.resolved:
        rows = ["| | level | code | path | why |", "|---|---|---|---|---|"]
        rows += [f"| introduced | {f.level} | `{f.code}` | {_esc(f.path)} | {_esc(f.why)} |" for f in s.introduced]
        rows += [f"| resolved | {f.level} | `{f.code}` | {_esc(f.path)} | {_esc(f.why)} |" for f in s.resolved]
        out.append(_Section(
            f"{s.spec} findings",
            f"Validation findings: {len(s.introduced)} introduced, {len(s.resolved)} resolved", rows,
        ))
    if s.cost.removed or s.cost.added:
        rows = ["| | item | hourly |", "|---|---|---|"]
        rows += [f"| before | {_esc(item)} | {money(h, s.cost.currency)} |" for item, h in s.cost.removed]
        rows += [f"| after | {_esc(item)} | {money(h, s.cost.currency)} |" for item, h in s.cost.added]
        out.append(_Section(f"{s.spec} cost", f"Cost: {cost_line(s.cost)}", rows))
    for f in s.files:
        out.append(_Section(
            f"{s.spec} {f.name}",
            f"<code>{f.name}</code> → <code>{f.node_path}</code> ({f.status}, +{f.added} -{f.removed})",
            f.diff.rstrip("\n").replace("```", "`\u200b``").splitlines(), "diff",
        ))
    if s.notes:
        out.append(_Section(f"{s.spec} notes", "Notes", [f"- {n}" for n in s.notes]))
    return out


def to_markdown(report: DiffReport, max_chars: int = MAX_MARKDOWN) -> str:
    """A PR comment: the summary always, then per spec collapsible sections while they fit.

    Past ``max_chars`` a section is cut line-wise (a diff keeps its first lines) and later ones are
    left out; the comment then ends with what was cut."""
    summary = "\n".join(_summary_md(report)) + "\n"
    footer = "\n".join(f"_{n}_" for n in report.notes) + "\n"
    sections: list[tuple[str, list[_Section]]] = [
        (s.spec, _sections(s)) for s in report.specs if s.changed
    ]
    reserve = 1_500  # the "what was cut" note
    budget = max_chars - len(summary) - len(footer) - reserve
    parts: list[str] = []
    cut_notes: list[str] = []
    for spec, secs in sections:
        head = f"### `{spec}`\n\n"
        if budget < len(head) + 200:
            cut_notes.append(f"`{spec}`: all sections")
            continue
        parts.append(head)
        budget -= len(head)
        for sec in secs:
            text, _ = sec.render()
            if len(text) <= budget:
                parts.append(text)
                budget -= len(text)
                continue
            # cut line-wise: keep as many lines as fit
            lo, hi = 0, len(sec.body)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if len(sec.render(mid)[0]) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            if lo >= 3:
                text, cut = sec.render(lo)
                parts.append(text)
                budget -= len(text)
                cut_notes.append(f"{sec.title}: {cut} line(s)")
            else:
                cut_notes.append(f"{sec.title}: left out")
    out = summary + "".join(parts)
    if cut_notes:
        shown = cut_notes[:12]
        more = f" and {len(cut_notes) - 12} more" if len(cut_notes) > 12 else ""
        out += (
            f"\n**Cut to stay under {max_chars:,} characters:** " + "; ".join(shown) + more
            + ". The full report: `clusterforge diff --format json` (the workflow uploads it as an artifact).\n"
        )
    out += "\n" + footer
    if len(out) > max_chars:  # a summary alone over the cap (hundreds of specs): hard cut, say so
        tail = "\n\n**Cut: the summary alone exceeds the size limit; see the JSON report.**\n"
        out = out[: max_chars - len(tail)] + tail
    return out
