"""Slurm hostlist expressions: expand ``dgx-[001-032]`` into names and compress names back.

Slurm writes node sets as hostlists so that ``slurm.conf`` grows with node *groups*, not nodes.
The grammar handled here is the one ``scontrol show hostnames`` accepts for our names: a
comma-separated list of items, each a literal with any number of bracketed range sets
(``r[1-2]n[01-04]``), ranges keeping their zero padding.

>>> expand("dgx-[001-003],cpu1")
['dgx-001', 'dgx-002', 'dgx-003', 'cpu1']
>>> compress(["gpu-001", "gpu-002", "gpu-003", "gpu-005"])
'gpu-[001-003,005]'
>>> compress(["10.0.0.1", "10.0.0.2"])
'10.0.0.[1-2]'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_MAX_EXPANSION = 1_000_000


class HostlistError(ValueError):
    """A hostlist expression that Slurm would not accept."""


def _split_top_level(expr: str) -> list[str]:
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    items.append("".join(cur))
    return items


def _expand_range_set(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise HostlistError(f"bad range {part!r} in hostlist {expr!r}: use digits like [001-032] or [1,3,5]")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"descending range {part!r} in hostlist {expr!r}")
        if hi - lo >= _MAX_EXPANSION:
            raise HostlistError(f"range {part!r} in hostlist {expr!r} is larger than {_MAX_EXPANSION} hosts")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_item(item: str, expr: str) -> list[str]:
    if not item:
        raise HostlistError(f"empty name in hostlist {expr!r}")
    results = [""]
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", item):
        literal = item[pos : m.start()]
        values = _expand_range_set(m.group(1), expr)
        results = [r + literal + v for r in results for v in values]
        if len(results) > _MAX_EXPANSION:
            raise HostlistError(f"hostlist {expr!r} expands to more than {_MAX_EXPANSION} hosts")
        pos = m.end()
    tail = item[pos:]
    if "[" in tail or "]" in tail:
        raise HostlistError(f"unbalanced brackets in hostlist {expr!r}")
    return [r + tail for r in results]


def expand(expr: str) -> list[str]:
    """All names of a hostlist expression, in order, duplicates kept."""
    expr = expr.strip()
    if not expr:
        raise HostlistError("empty hostlist")
    names: list[str] = []
    for item in _split_top_level(expr):
        names.extend(_expand_item(item.strip(), expr))
    return names


_TRAILING_NUM = re.compile(r"^(.*?)(\d+)$")


def _ranges(nums: list[tuple[int, str]]) -> str:
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1][0] == nums[j][0] + 1:
            j += 1
        parts.append(nums[i][1] if i == j else f"{nums[i][1]}-{nums[j][1]}")
        i = j + 1
    return ",".join(parts)


def compress(names: Iterable[str]) -> str:
    """The shortest-form hostlist for ``names`` (sorted, duplicates dropped).

    Names are grouped by their prefix before the last run of digits and by that run's width, so
    ``gpu-001`` and ``gpu-1`` never merge (Slurm would print them differently).
    """
    parsed: list[tuple[str, str]] = []
    plain: list[str] = []
    for name in sorted(set(names)):
        m = _TRAILING_NUM.match(name)
        if m:
            parsed.append((m.group(1), m.group(2)))
        else:
            plain.append(name)
    # A zero-padded run fixes a width for its prefix; an unpadded number of exactly that length
    # (gpu-100 beside gpu-099) belongs to the same padded range.
    padded = {(p, len(d)) for p, d in parsed if d.startswith("0") and len(d) > 1}
    groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for prefix, digits in parsed:
        width = len(digits) if (prefix, len(digits)) in padded else 0
        groups.setdefault((prefix, width), []).append((int(digits), digits))
    items: list[str] = list(plain)
    for (prefix, _width), nums in sorted(groups.items()):
        nums.sort()
        if len(nums) == 1:
            items.append(prefix + nums[0][1])
        else:
            items.append(f"{prefix}[{_ranges(nums)}]")
    return ",".join(sorted(items))
