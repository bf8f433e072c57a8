"""The terminal form of a diff report: rich tables for the summary, resources, impacts and host
settings, trees for the operator's steps and the changed files (with their coloured diff)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from clusterforge.diff.report import DiffReport, SpecDiff, _loud_line, cost_line, host_cell, resource_counts, verdict
from clusterforge.diff.resources import show

_LINE_STYLE = {"+": "green", "-": "red", "@": "cyan"}
_ACTION_STYLE = {"add": "green", "remove": "red", "replace": "magenta", "update": "yellow"}


def _table(title: str, *cols: str) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
    for c in cols:
        t.add_column(c)
    return t


def _summary(report: DiffReport) -> Table:
    t = _table("", "spec", "resources (+ ~ ± -)", "files", "hourly cost", "running cluster", "hosts", "findings")
    for s in report.specs:
        if not s.changed:
            t.add_row(s.spec, "unchanged", "", "", "", "", "")
        elif s.error:
            findings = f"+{len(s.introduced)}/-{len(s.resolved)}"
            t.add_row(s.spec, "", "", "", Text("error", style="bold red"), "", findings)
        else:
            t.add_row(
                s.spec + ("" if s.status == "modified" else f" ({s.status})"), resource_counts(s.resources),
                str(len(s.files)), cost_line(s.cost), s.operations.cls.value, host_cell(s).replace("**", ""),
                f"+{len(s.introduced)}/-{len(s.resolved)}",
            )
    return t


def _resources(s: SpecDiff) -> Table | None:
    if s.resources is None or not s.resources.changes:
        return None
    t = _table("Resources", "action", "resource", "changed properties")
    for c in s.resources.changes:
        props = []
        for p in c.properties:
            flag = "forces replacement" if p.forces_replacement else p.interrupts
            props.append(f"{p.path}: {show(p.before)} → {show(p.after)}" + (f"  [{flag}]" if flag else ""))
        t.add_row(Text(c.action, style=_ACTION_STYLE[c.action]), c.key, "\n".join(props))
    return t


def _impacts(s: SpecDiff) -> Table | None:
    if not s.impacts:
        return None
    t = _table(f"Running cluster: {s.operations.cls.value}", "file", "what", "change", "class", "actions")
    for i in s.impacts:
        t.add_row(i.file, i.subject, i.change, i.cls.value, "; ".join(i.actions))
    return t


def _hosts(s: SpecDiff) -> Tree | None:
    """A tree, not a table: the why of a host change is a sentence, too long for a column."""
    if not s.host_settings:
        return None
    tree = Tree(Text(f"Host settings: {s.host_action.value}", style="bold"))
    for h in s.host_settings:
        head = Text(f"{h.variable} ({h.scope}): {show(h.before, 60)} → {show(h.after, 60)}  ")
        style = "bold red" if h.drain_nodes else "bold"
        head.append(h.action.value + (", drain" if h.drain_nodes else ""), style=style)
        node = tree.add(head)
        node.add(f"roles {', '.join(h.roles) or '—'} on {h.hosts or '—'}")
        if h.drain_nodes:
            node.add(Text(f"drain {h.drain_nodes}", style="red"))
        node.add(Text(f"{h.why} ({h.source})", style="dim"))
    return tree


def _steps(s: SpecDiff) -> Tree | None:
    if not s.operations.steps:
        return None
    tree = Tree(Text("Operator's steps", style="bold"))
    for k, step in enumerate(s.operations.steps, 1):
        tree.add(Text(f"{k}. {step}", style="cyan"))
    if s.operations.rule:
        tree.add(Text(s.operations.rule, style="dim"))
    return tree


def _files(s: SpecDiff) -> Tree | None:
    if not s.files:
        return None
    tree = Tree(Text(f"Rendered files: {len(s.files)} changed", style="bold"))
    for fd in s.files:
        diff = Text()
        for line in fd.diff.splitlines():
            diff.append(line + "\n", style=_LINE_STYLE.get(line[:1], ""))
        node = tree.add(Text(f"{fd.name} -> {fd.node_path} ({fd.status}, +{fd.added} -{fd.removed})", style="bold"))
        node.add(diff)
    return tree


def print_terminal(report: DiffReport, console: Console) -> None:
    console.print(Text(f"clusterforge diff: {report.base} → {report.head}", style="bold"))
    for s in report.errors:
        console.print(Text(f"✗ {s.spec}: {s.error}", style="bold red"))
    console.print(_summary(report))
    for s in report.specs:
        if not s.changed:
            continue
        console.rule(Text(s.spec, style="bold"))
        if s.error:
            console.print(Text(s.error, style="bold red"))
        for c in s.loud:
            console.print(Text("⚠ " + _loud_line(c), style="bold red"))
        parts = [p for p in (_resources(s), _impacts(s), _hosts(s), _steps(s)) if p is not None]
        if parts:
            console.print(Group(*parts), soft_wrap=False)  # wrap long reasons, never crop them
        console.print(Text(f"Cost: {cost_line(s.cost)}"))
        for fc in s.introduced:
            style = "red" if fc.level == "error" else "yellow"
            console.print(Text(f"  + {fc.level} {fc.code} {fc.path}: {fc.why}", style=style))
        for fc in s.resolved:
            console.print(Text(f"  - {fc.level} {fc.code} {fc.path} (resolved)", style="green"))
        files = _files(s)
        if files is not None:
            console.print(files, soft_wrap=False)
        for n in s.notes:
            console.print(Text(f"note: {n}", style="dim"))
    for n in report.notes:
        console.print(Text(f"note: {n}", style="dim"))
    console.print(Text(verdict(report), style="bold"))
