"""Summarise ``pulumi preview --json`` for the pull-request comment (the real preview, run by the
workflow where cloud credentials exist, next to the offline diff).

    python -m clusterforge.diff.pulumi_preview preview.json >> preview.md

Reads the JSON's ``changeSummary`` (operation -> count) and ``steps`` (``op``, ``urn``,
``replaceReasons``, ``diffReasons``); replacements and deletions are listed, stateful ones first.
The output stays under :data:`MAX_CHARS` so the comment stays under GitHub's limit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from clusterforge.diff.resources import is_stateful

MAX_CHARS = 5_000
DESTRUCTIVE = ("replace", "create-replacement", "delete-replaced", "delete")


def _type_and_name(urn: str) -> tuple[str, str]:
    # urn:pulumi:<stack>::<project>::<parent types$>type::name
    parts = urn.split("::")
    if len(parts) < 4:
        return "", urn
    return parts[2].rsplit("$", 1)[-1], parts[3]


def summarise(data: dict[str, Any], max_chars: int = MAX_CHARS) -> str:
    summary = data.get("changeSummary") or {}
    out = ["### `pulumi preview` (real, against the stack's state)", ""]
    if summary:
        out += ["| operation | count |", "|---|---|"]
        out += [f"| {op} | {n} |" for op, n in sorted(summary.items())]
    else:
        out.append("No change summary in the preview output.")
    rows: list[tuple[bool, str]] = []
    for step in data.get("steps") or []:
        op = step.get("op", "")
        if op not in DESTRUCTIVE:
            continue
        type_, name = _type_and_name(str(step.get("urn", "")))
        state = step.get("newState") or step.get("oldState") or {}
        stateful = is_stateful(type_, state.get("inputs") or {})
        reasons = step.get("replaceReasons") or step.get("diffReasons") or []
        rows.append((stateful, f"| {op} | `{type_}::{name}` | {'⚠ yes' if stateful else ''} | {', '.join(reasons)} |"))
    if rows:
        out += ["", "| op | resource | stateful | reasons |", "|---|---|---|---|"]
        out += [r for _, r in sorted(rows, key=lambda r: (not r[0], r[1]))]
    text = "\n".join(out) + "\n"
    if len(text) > max_chars:
        text = text[: max_chars - 60].rsplit("\n", 1)[0] + "\n\n*… cut; see the workflow log.*\n"
    return text


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m clusterforge.diff.pulumi_preview PREVIEW.json", file=sys.stderr)
        return 2
    try:
        data = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: cannot read {args[0]!r} as pulumi preview JSON: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(summarise(data if isinstance(data, dict) else {}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
