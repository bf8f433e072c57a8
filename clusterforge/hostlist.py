"""The one codec for Slurm hostlists and integer range lists; nothing else in clusterforge parses or builds them.

Stdlib only: the controller's cloud agent ships this file verbatim (``clusterforge/render/agents.py``).

Two syntaxes, one module, so that a fix to one never misses a private copy. (The one exception is
the small expander inside ``clusterforge/aws/nodename.py``, which must run alone on a fresh
instance; tests/test_nodename.py checks it against :func:`expand`.)

* **host names** (``expand`` / ``compress``): Slurm writes node sets as hostlists so that
  ``slurm.conf`` grows with node *groups*, not nodes. The grammar is the one
  ``scontrol show hostnames`` accepts for our names: a comma-separated list of items, each a
  literal with any number of bracketed range sets (``r[1-2]n[01-04]``), ranges keeping their zero
  padding. Device files (``/dev/nvidia[0-7]``) and addresses (``10.0.0.[1-4]``) use it too.
* **integers** (``expand_ints`` / ``compress_ints``): the Linux CPU list format of
  ``/sys/devices/system/node/node0/cpulist`` and ``lscpu`` (``0-3,8,10-11``), which is also the
  body of a Slurm range set and what ``gres.conf`` ``Cores=`` takes.

>>> expand("dgx-[001-003],cpu1")
['dgx-001', 'dgx-002', 'dgx-003', 'cpu1']
>>> compress(["gpu-001", "gpu-002", "gpu-003", "gpu-005"])
'gpu-[001-003,005]'
>>> compress(["10.0.0.1", "10.0.0.2"])
'10.0.0.[1-2]'
>>> compress(["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"])
'/dev/nvidia[0-2]'
>>> expand_ints("0-3,8,10-11")
[0, 1, 2, 3, 8, 10, 11]
>>> compress_ints([11, 0, 1, 2, 3, 8, 10, 3])
'0-3,8,10-11'
>>> try:
...     expand_ints("4-1")
... except HostlistError as exc:
...     print(exc)
range list '4-1': the range 4-1 runs backwards. Fix: write the lower number first (1-4).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

try:
    from clusterforge.errors import ClusterforgeError
except ImportError:  # shipped alone to the controller with the cloud agent (clusterforge/render/agents.py)

    class ClusterforgeError(Exception):  # type: ignore[no-redef]
        exit_code = 2

#: No expression may stand for more than this many names or numbers: a typo such as
#: ``node[1-10000000]`` must be an error, not minutes of work and gigabytes of memory.
_MAX_EXPANSION = 1_000_000

#: Numbers longer than this are refused before ``int()`` sees them (Python refuses to convert
#: more than 4300 digits with its own ValueError; no host or CPU number is this long).
_MAX_DIGITS = 18

_RANGE = re.compile(rf"(\d{{1,{_MAX_DIGITS}}})(?:-(\d{{1,{_MAX_DIGITS}}}))?")


class HostlistError(ClusterforgeError, ValueError):
    """A hostlist or range list that Slurm (or the kernel) would not write or accept.

    A ``ValueError`` too, so that pydantic validators report it as a field error.
    """

    def __init__(self, field: str, value: str, why: str, fix: str) -> None:
        self.field, self.value, self.why, self.fix = field, value, why, fix
        shown = value if len(value) <= 80 else value[:77] + "..."
        super().__init__(f"{field} {shown!r}: {why}. Fix: {fix}.")


def _range_set(body: str, expr: str, field: str, kind: str) -> list[tuple[int, int, int]]:
    """``001-003,7`` -> ``[(1, 3, 3), (7, 7, 0)]`` (low, high, zero-padded width or 0)."""
    out: list[tuple[int, int, int]] = []
    total = 0
    for raw in body.split(","):
        part = raw.strip()
        m = _RANGE.fullmatch(part)
        if not m:
            why = f"{part!r} is not a number or a range" if part else "it has an empty item (extra comma, or [])"
            example = "[001-032] or [1,3,5]" if kind == "hosts" else "0-47,96-143"
            raise HostlistError(field, expr, why, f"use numbers of at most {_MAX_DIGITS} digits like {example}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            fix = f"write the lower number first ({hi_s}-{lo_s})"
            raise HostlistError(field, expr, f"the range {part} runs backwards", fix)
        total += hi - lo + 1
        if total > _MAX_EXPANSION:
            raise HostlistError(
                field, expr, f"it stands for more than {_MAX_EXPANSION} {kind}", "check the range bounds for a typo"
            )
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.append((lo, hi, width))
    return out


# --------------------------------------------------------------------------------------------
# host names


def _split_top_level(expr: str, field: str) -> list[str]:
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(field, expr, "it nests '[' inside a range", "close each range before the next '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(field, expr, "it has a ']' without its '['", "balance the brackets")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(field, expr, "it has a '[' without its ']'", "balance the brackets")
    items.append("".join(cur))
    return items


def _expand_item(item: str, expr: str, field: str) -> list[str]:
    if not item:
        raise HostlistError(field, expr, "it has an empty name (an extra comma)", "remove the extra comma")
    results = [""]
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", item):
        literal = item[pos : m.start()]
        ranges = _range_set(m.group(1), expr, field, "hosts")
        values = [str(i).zfill(w) for lo, hi, w in ranges for i in range(lo, hi + 1)]
        if len(results) * len(values) > _MAX_EXPANSION:
            raise HostlistError(
                field, expr, f"it stands for more than {_MAX_EXPANSION} hosts", "check the range bounds for a typo"
            )
        results = [r + literal + v for r in results for v in values]
        pos = m.end()
    tail = item[pos:]
    if "[" in tail or "]" in tail:
        raise HostlistError(field, expr, "its brackets do not pair up", "balance the brackets")
    return [r + tail for r in results]


def expand(expr: str, *, field: str = "hostlist") -> list[str]:
    """All names of a hostlist expression, in order, duplicates kept.

    ``field`` names the input in the error (e.g. ``node_groups[0].onprem.hosts``).

    >>> expand("r[1-2]n[01-02]")
    ['r1n01', 'r1n02', 'r2n01', 'r2n02']
    """
    expr = expr.strip()
    if not expr:
        raise HostlistError(field, expr, "it is empty", "write host sets like dgx-[001-032] or node1,node2")
    names: list[str] = []
    for item in _split_top_level(expr, field):
        names.extend(_expand_item(item.strip(), expr, field))
        if len(names) > _MAX_EXPANSION:
            raise HostlistError(
                field, expr, f"it stands for more than {_MAX_EXPANSION} hosts", "check the range bounds for a typo"
            )
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

    >>> compress(["n9", "n10", "n11", "login"])
    'login,n[9-11]'
    """
    parsed: list[tuple[str, str]] = []
    plain: list[str] = []
    for name in sorted(set(names)):
        m = _TRAILING_NUM.match(name)
        # A run too long for int() is no host number Slurm would range over: keep the name whole.
        if m and len(m.group(2)) <= _MAX_DIGITS:
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


# --------------------------------------------------------------------------------------------
# integers


def expand_ints(text: str, *, field: str = "range list") -> list[int]:
    """The numbers of a CPU list / range set such as ``0-3,8,10-11``: sorted, each once.

    Surrounding white space (the newline of a ``/sys`` file) is ignored; brackets, letters,
    signs and backwards ranges are errors.

    >>> expand_ints("96-99,0-1\\n")
    [0, 1, 96, 97, 98, 99]
    """
    body = text.strip()
    if not body:
        raise HostlistError(field, text, "it is empty", "write numbers and ranges like 0-47,96-143")
    ids: set[int] = set()
    for lo, hi, _width in _range_set(body, body, field, "numbers"):
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def compress_ints(nums: Iterable[int]) -> str:
    """Numbers as the shortest range list, sorted and each once: ``[0, 1, 2, 3, 8]`` -> ``0-3,8``.

    The empty set is ``""``; negative numbers have no range syntax and are an error.

    >>> compress_ints(range(48))
    '0-47'
    >>> compress_ints([])
    ''
    """
    values = sorted(set(nums))
    if values and values[0] < 0:
        raise HostlistError(
            "range list", str(values[:8]), f"{values[0]} is negative", "pass CPU, core or device numbers (0 or more)"
        )
    return _ranges([(v, str(v)) for v in values])
