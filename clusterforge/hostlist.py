"""The one codec for Slurm hostlists and integer range lists; nothing else in clusterforge parses or builds them.

Stdlib only: the controller's cloud agent ships this file verbatim (``clusterforge/render/agents.py``).

Two syntaxes, one module, so that a fix to one never misses a private copy. (The one exception is
the small expander inside ``clusterforge/aws/nodename.py``, which must run alone on a fresh
instance; tests/test_nodename.py checks it against :func:`expand`.)

* **host names** (``expand`` / ``compress``): Slurm writes node sets as hostlists so that
  ``slurm.conf`` grows with node *groups*, not nodes. The grammar is Slurm 22.05's reader
  (``_hostlist_create_bracketed`` in src/common/hostlist.c @ slurm-22-05-8-1): a comma-separated
  list of items, each a literal with any number of bracketed range sets that ends in one
  (``r[1-2]n[01-04]``; ``gpu[1-3]-ib`` is refused), ranges keeping their zero padding and at most
  65536 hosts each (and in all), names in Slurm's order (``a[1-2]b[3-4]c[5-6]`` runs c fastest,
  then a, then b). Forms Slurm reads in surprising ways (blanks, empty items, a lone ``[``) are
  refused. ``compress`` writes what ``scontrol show hostlistsorted`` writes.
  tests/test_hostlist_scontrol.py compares both with the real scontrol.
  Device files (``/dev/nvidia[0-7]``) and addresses (``10.0.0.[1-4]``) use it too.
  ``numbered_items``, ``expression_items`` and ``union_items`` give ``compress``'s answer from a
  cloud group's count, an expression's ranges or several sets' own items, without a pass over the
  names (the render grows with node groups, not nodes); each is checked against ``compress``.
  ``count``, ``name_stems``, ``stem_ranges``, ``edge_names`` and ``ordered_items`` answer what the
  spec's checks and the ``NodeAddr=`` pairing ask of every name (how many, which could be equal,
  which are valid, in which order) from the ranges; each is checked against ``expand``.
* **integers** (``expand_ints`` / ``compress_ints``): the Linux CPU list format of
  ``/sys/devices/system/node/node0/cpulist`` and ``lscpu`` (``0-3,8,10-11``), which is also the
  body of a Slurm range set and what ``gres.conf`` ``Cores=`` takes.

Over 500 lines in one module on purpose: the shortcuts above must write exactly what ``compress``
writes and read exactly what ``expand`` reads (its parse, padding rules and ``hostlist_sort``'s
order), so they live beside them, and the cloud agent ships this one file.

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

import functools
import itertools
import math
import re
from collections.abc import Iterable

try:
    from clusterforge.errors import ClusterforgeError
except ImportError:  # shipped alone to the controller with the cloud agent (clusterforge/render/agents.py)

    class ClusterforgeError(Exception):  # type: ignore[no-redef]
        exit_code = 2

#: No integer range list may stand for more than this many numbers: a typo such as
#: ``0-10000000`` must be an error, not minutes of work and gigabytes of memory.
_MAX_EXPANSION = 1_000_000

#: Slurm refuses one range of more than 64K hosts (``MAX_RANGE``, ``_parse_single_range``) and a
#: bracket before the last one standing for more than 64K in all (``MAX_PREFIX_CNT``):
#: src/common/hostlist.c and src/common/hostlist.h @ slurm-22-05-8-1 (both ``64*1024``).
_SLURM_MAX_RANGE = 64 * 1024

#: A whole expression may stand for at most this many names. Slurm 22.05's reader has no such
#: limit (``a[1-65536]b[1-65536]`` is 2**32 names), but no Slurm cluster holds more nodes
#: (``MAX_SLURM_NODES`` 65536, slurm/slurm.h @ slurm-24-11-5-1), and it is checked on counts
#: before any name is built, so a typo costs milliseconds.
_MAX_HOSTS = 64 * 1024

#: Numbers longer than this are refused before ``int()`` sees them (Python refuses to convert
#: more than 4300 digits with its own ValueError; no host or CPU number is this long). It also
#: keeps every number inside the C ``unsigned long`` Slurm reads it into with ``strtoul``
#: (a 20-digit name suffix comes back from scontrol as 18446744073709551615).
_MAX_DIGITS = 18

_RANGE = re.compile(rf"(\d{{1,{_MAX_DIGITS}}})(?:-(\d{{1,{_MAX_DIGITS}}}))?")

#: Slurm's separators between names outside brackets are ``"\t, "`` (hostlist_create_dims in
#: src/common/hostlist.c @ slurm-22-05-8-1); we split on commas only and refuse blanks elsewhere.
_BLANKS = re.compile(r"[ \t\n\r\f\v]")
_TRAILING_DIGITS = re.compile(r"\d+$")


class HostlistError(ClusterforgeError, ValueError):
    """A hostlist or range list that Slurm (or the kernel) would not write or accept.

    A ``ValueError`` too, so that pydantic validators report it as a field error.
    """

    def __init__(self, field: str, value: str, why: str, fix: str) -> None:
        self.field, self.value, self.why, self.fix = field, value, why, fix
        shown = value if len(value) <= 80 else value[:77] + "..."
        super().__init__(f"{field} {shown!r}: {why}. Fix: {fix}.")


def _range_set(
    body: str, expr: str, field: str, kind: str, per_range: int | None = None
) -> list[tuple[int, int, int]]:
    """``001-003,7`` -> ``[(1, 3, 3), (7, 7, 0)]`` (low, high, zero-padded width or 0).

    ``per_range`` caps the size of each range (Slurm's ``MAX_RANGE`` for host names); integer
    lists are capped in total instead.
    """
    out: list[tuple[int, int, int]] = []
    total = 0
    for raw in body.split(","):
        # A CPU list may carry blanks ("0-3, 8"); a host range cannot: expand refuses them first.
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
        if per_range is not None and hi - lo + 1 > per_range:
            raise HostlistError(
                field, expr,
                f"the range {part} stands for {hi - lo + 1} {kind}, more than the {per_range} Slurm reads in one range",
                f"split it into ranges of at most {per_range} {kind}, or check the bounds for a typo",
            )
        total += hi - lo + 1
        if per_range is None and total > _MAX_EXPANSION:
            raise HostlistError(
                field, expr, f"it stands for more than {_MAX_EXPANSION} {kind}", "check the range bounds for a typo"
            )
        # Slurm pads every number of a range to the width of its low bound as written
        # (range->width = strlen(lo) in _parse_single_range): [001-10] is 001..010, [1-03] is 1..3.
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


_Item = tuple[list[str], list[list[tuple[int, int, int]]], int]  # literals, range sets, name count


def _parse_item(item: str, expr: str, field: str) -> _Item:
    """``a[1-2]b[3]`` -> (``["a", "b", ""]``, its two range sets, 2): counted, nothing built yet."""
    if not item:
        raise HostlistError(field, expr, "it has an empty name (an extra comma)", "remove the extra comma")
    blank = _BLANKS.search(item)
    if blank:
        inside = item.rfind("[", 0, blank.start()) > item.rfind("]", 0, blank.start())
        if inside:  # strtoul skips the blank but the width counts it: a[1, 2] is a1,a02
            why = "it has a blank inside a range, which Slurm reads as zero padding"
            raise HostlistError(field, expr, why, "remove the blanks between the brackets")
        why = f"the name {item!r} has a blank in it, which Slurm reads as a separator between two names"
        raise HostlistError(field, expr, why, "separate names with commas (a,b)")
    parts = re.split(r"\[([^\]]*)\]", item)  # literal, body, literal, ..., literal
    literals, bodies = parts[0::2], parts[1::2]
    if not bodies:
        digits = _TRAILING_DIGITS.search(item)
        if digits and len(digits.group()) > _MAX_DIGITS:
            why = f"its name ends in {len(digits.group())} digits, a number Slurm cannot hold (unsigned long)"
            raise HostlistError(field, expr, why, f"end names in at most {_MAX_DIGITS} digits")
        return literals, [], 1
    if literals[-1]:
        # Slurm 22.05 reads only a range at the very end of a name ("if ((q[1] != ',') && (q[1] !=
        # '\0')) goto error;" in _hostlist_create_bracketed, src/common/hostlist.c @ slurm-22-05-8-1).
        # 24.11 reads a suffix there (same place @ slurm-24-11-5-1), but a spec must load on 22.05.
        why = f"it has text ({literals[-1]!r}) after its last range, which Slurm 22.05 refuses"
        moved = "".join(f"{lit}[{b}]" for lit, b in zip(literals[:-2], bodies[:-1], strict=True))
        moved += f"{literals[-2]}{literals[-1]}[{bodies[-1]}]"  # gpu[1-3]-ib -> gpu-ib[1-3]
        raise HostlistError(field, expr, why, f"end each name with its range, e.g. {moved}")
    sets = [_range_set(b, expr, field, "hosts", per_range=_SLURM_MAX_RANGE) for b in bodies]
    sizes = [sum(hi - lo + 1 for lo, hi, _w in rs) for rs in sets]
    for body, size in zip(bodies[:-1], sizes[:-1], strict=True):
        if size > _SLURM_MAX_RANGE:  # MAX_PREFIX_CNT in _push_range_list (src/common/hostlist.c @ slurm-22-05-8-1)
            why = (
                f"the range [{body}] before the last one stands for {size} hosts, "
                f"more than the {_SLURM_MAX_RANGE} Slurm reads there"
            )
            raise HostlistError(field, expr, why, "split the expression, or check the range bounds for a typo")
    return literals, sets, math.prod(sizes)


def _names(literals: list[str], sets: list[list[tuple[int, int, int]]]) -> list[str]:
    if not sets:
        return [literals[0]]
    values = [[str(i).zfill(w) for lo, hi, w in rs for i in range(lo, hi + 1)] for rs in sets]
    n = len(sets)
    if n == 1:  # one range set, as a spec writes (gpu-[001-128]): no product to unroll
        head, tail = literals[0], literals[1]
        return [head + v + tail for v in values[0]]
    # Slurm's order: the last range runs fastest; the ranges before it are unrolled from the right
    # (_push_range_list recurses on strrchr(prefix, '[')), so the one before the last runs slowest
    # and the first runs next to the last. a[1-2]b[3-4]c[5-6]: a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ...
    order = [*range(n - 2, -1, -1), n - 1]
    out: list[str] = []
    chosen = [""] * n
    for combo in itertools.product(*(values[i] for i in order)):
        for k, v in zip(order, combo, strict=True):
            chosen[k] = v
        out.append("".join(lit + v for lit, v in zip(literals, chosen, strict=False)))
    return out


def expand(expr: str, *, field: str = "hostlist") -> list[str]:
    """All names of a hostlist expression, in Slurm's order, duplicates kept.

    ``field`` names the input in the error (e.g. ``node_groups[0].onprem.hosts``). Every
    expression accepted here gives the same names in the same order as ``scontrol show hostnames``
    of Slurm 22.05 (tests/test_hostlist_scontrol.py); some that Slurm reads in a surprising way
    (blanks, empty items, a '[' without ']') are refused instead.

    >>> expand("r[1-2]n[01-02]")
    ['r1n01', 'r1n02', 'r2n01', 'r2n02']
    """
    return [name for literals, sets, _n in _parse(expr, field) for name in _names(literals, sets)]


def count(expr: str, *, field: str = "hostlist") -> int:
    """``len(expand(expr))`` (duplicates counted), from the expression's ranges: no name is built.
    Errors are :func:`expand`'s, so it also checks an expression.

    >>> count("r[1-2]n[01-02],login")
    5
    """
    return sum(n for _literals, _sets, n in _parse(expr, field))


def name_stems(expr: str, *, field: str = "hostlist") -> set[str] | None:
    """The stems of the expression's names (each name's text before its trailing ASCII digits),
    from its items: a plain name's own, and a range's literal's, since its names are the literal
    and a number's digits. None where an item has several range sets (its names' stems depend on
    the numbers). Equal names have equal stems, so two expressions with no stem in common share no
    name.

    >>> sorted(name_stems("head-01,dgx-[01-08],x9[1-2]"))
    ['dgx-', 'head-', 'x']
    """
    stems: set[str] = set()
    for literals, sets, _n in _parse(expr, field):
        if len(sets) > 1:
            return None
        stems.add(literals[0].rstrip(_ASCII_DIGITS))  # a range ends its item (_parse_item)
    return stems


def edge_names(expr: str, *, field: str = "hostlist") -> list[str]:
    """A few of the expression's names that stand for all of them in a check of each name as
    text: per range of an item with one range set (``dgx-[001-128]``, ``10.0.5.[1-254]``), the
    names of its first and last number of each digit count; the names of other items.

    Each name of such an item is its literal and one number's ASCII digits. A check whose answer,
    for one literal and one digit count, holds for a span of numbers (a DNS label's minds only the
    count; an IP address's last part is good up to a bound, 255 or four hex digits, and its
    leading zeros are fixed by the count) passes for every name exactly when it passes for these.

    >>> edge_names("gpu-[1-3,08-10],login,r[1-2]n[1]")
    ['gpu-1', 'gpu-3', 'gpu-08', 'gpu-10', 'login', 'r1n1', 'r2n1']
    """
    out: list[str] = []
    for literals, sets, _n in _parse(expr, field):
        if len(sets) != 1:
            out.extend(_names(literals, sets))
            continue
        for lo, hi, w in sets[0]:
            start = max(w, len(str(lo)))  # a number's digits as written: padded to w
            for digits in range(start, max(w, len(str(hi))) + 1):
                first = lo if digits == start else 10 ** (digits - 1)
                last = min(hi, 10**digits - 1)
                out.extend(dict.fromkeys(literals[0] + str(i).zfill(w) for i in (first, last)))
    return out


def stem_ranges(expr: str, *, field: str = "hostlist") -> dict[str, list[tuple[int, int]]] | None:
    """The expression's names by stem (text before the trailing ASCII digits), each stem's numbers
    as the ranges written, overlaps kept: for items that are one name ending in digits, or a
    literal that does not end in a digit and one range set. None for other forms. Equal names have
    one stem and one number, so a stem whose ranges do not overlap names no host twice.

    >>> stem_ranges("10.0.5.[1-4,9],10.0.6.[1-2],10.0.5.10")
    {'10.0.5.': [(1, 4), (9, 9), (10, 10)], '10.0.6.': [(1, 2)]}
    """
    out: dict[str, list[tuple[int, int]]] = {}
    for literals, sets, _n in _parse(expr, field):
        stem = literals[0].rstrip(_ASCII_DIGITS)
        if not sets and stem != literals[0]:
            number = int(literals[0][len(stem):])
            out.setdefault(stem, []).append((number, number))
        elif len(sets) == 1 and stem == literals[0]:
            out.setdefault(stem, []).extend((lo, hi) for lo, hi, _w in sets[0])
        else:
            return None
    return out


def ordered_items(expr: str, *, field: str = "hostlist") -> list[Item] | None:
    """:func:`expression_items` when their hostlist expands to the expression's own names in the
    expression's order (its ranges ascend, each prefix's together, prefixes in hostlist order, as
    ``dgx-[001-064]`` and ``10.0.5.[1-254],10.0.6.[1-254]`` do); None otherwise. A ``NodeName=``
    hostlist and a ``NodeAddr=`` hostlist of two such expressions pair each name with its address
    as the spec does (``render.model.NodeSet.addr_hostlist``)."""
    items = expression_items(expr, field=field)
    if items is None:
        return None
    return items if _runs(_parse(expr, field)) == _runs(_parse(join_items(items), field)) else None


def _runs(parsed: list[_Item]) -> list[tuple[str, int, int, int]]:
    """The names of one-range-set items as runs (literal, low, high, padding), neighbours of one
    padding merged: two lists of equal runs expand to the same names in the same order."""
    runs: list[tuple[str, int, int, int]] = []
    for literals, sets, _n in parsed:  # no item of several range sets (expression_items answered)
        ranges = sets[0] if sets else []
        if not sets:  # one name, as a hostlist writes a range of one (dgx-[7] is dgx-7)
            stem = literals[0].rstrip(_ASCII_DIGITS)
            digits = literals[0][len(stem):]
            if not digits:
                runs.append((stem, -1, -1, 0))
                continue
            literals = [stem, ""]
            ranges = [(int(digits), int(digits), len(digits) if digits[0] == "0" and len(digits) > 1 else 0)]
        for lo, hi, w in ranges:
            w = w if len(str(lo)) < w else 0  # a run whose numbers are all that wide is written unpadded
            last = runs[-1] if runs else None
            # the next number, written as the run before writes its numbers (n[001-099],n[100-200])
            written_alike = last is not None and (w == last[3] or (not w and len(str(lo)) >= last[3]))
            if last and written_alike and last[0] == literals[0] and last[2] + 1 == lo:
                runs[-1] = (literals[0], last[1], hi, last[3])
            else:
                runs.append((literals[0], lo, hi, w))
    return runs


def _parse(expr: str, field: str) -> list[_Item]:
    """The expression's items, checked and counted, no name built yet."""
    expr = expr.strip(" \t")  # Slurm's own separators, skipped at both ends
    if not expr:
        raise HostlistError(field, expr, "it is empty", "write host sets like dgx-[001-032] or node1,node2")
    parsed: list[_Item] = []
    total = 0
    for item in _split_top_level(expr, field):
        parsed.append(_parse_item(item.strip(" \t"), expr, field))
        total += parsed[-1][2]
        if total > _MAX_HOSTS:  # counted, never built: a[1-65536]b[1-65536] fails in 0.2 ms
            raise HostlistError(
                field, expr, f"it stands for more than {_MAX_HOSTS} hosts (more than a Slurm cluster holds)",
                "check the range bounds for a typo",
            )
    return parsed


_TRAILING_NUM = re.compile(r"^(.*?)(\d+)$")
_ASCII_DIGITS = "0123456789"


def _split_number(name: str) -> tuple[str, str] | None:
    """``gpu-017`` -> ``("gpu-", "017")``: the prefix and the last run of digits, or None.

    What ``_TRAILING_NUM`` matches, without the regex for the names a spec makes: for an ASCII
    name without a newline, ``\\d`` is ``0-9`` and the run is what ``rstrip`` leaves off.
    """
    if name.isascii() and "\n" not in name:
        prefix = name.rstrip(_ASCII_DIGITS)
        return (prefix, name[len(prefix):]) if len(prefix) < len(name) else None
    m = _TRAILING_NUM.match(name)
    return (m.group(1), m.group(2)) if m else None


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


#: One bracketed (or plain) item of a compressed hostlist: its prefix (the name before the last run
#: of digits, or the whole name of one without digits), 1 when it ranges over numbers (0 for a plain
#: name), and its text. A hostlist is its items in ``hostlist_sort``'s order, joined by commas.
Item = tuple[str, int, str]


def compress(names: Iterable[str]) -> str:
    """The shortest-form hostlist for ``names`` (sorted, duplicates dropped).

    Names are grouped by their prefix before the last run of digits, one bracket per prefix as
    ``scontrol show hostlistsorted`` writes it: ``gpu-001`` and ``gpu-1`` stay two numbers
    (``gpu-[1,001]``), and an unpadded number at least as long as a zero-padded width shares its
    range (``gpu-[099-100]``, ``n[998-1000]`` beside ``n001``). For names of one prefix and one
    zero padding, which is what a spec makes, the text is exactly scontrol's
    (tests/test_hostlist_scontrol.py); for any names, Slurm reads it back to the same names in the
    order :func:`expand` gives.

    One pass over the names, linear but for the sort (65,536 names in a few tens of ms):
    ``render`` compresses each node group once (``NodeSet.hostlist``).

    >>> compress(["n9", "n10", "n11", "login"])
    'login,n[9-11]'
    """
    return join_items(compress_items(names))


def compress_items(names: Iterable[str]) -> list[Item]:
    """:func:`compress`'s items for ``names``, one per prefix (plain names one each), unordered."""
    plain: list[str] = []
    # prefix -> digits as written, in sorted-name order
    by_prefix: dict[str, list[str]] = {}
    digits_of = _ASCII_DIGITS
    all_ascii = True  # every number in 0-9: then equal lengths sort as text the way they do as numbers
    # sorted, then each once: a node group's names come in order, which timsort takes in one pass
    for name in dict.fromkeys(sorted(names)):
        if name.isascii() and "\n" not in name:  # _split_number, inlined: this loop sees every node
            prefix = name.rstrip(digits_of)
            split = (prefix, name[len(prefix):]) if len(prefix) < len(name) else None
        else:
            split = _split_number(name)
            all_ascii = False
        # A run too long for int() is no host number Slurm would range over: keep the name whole.
        if split is not None and len(split[1]) <= _MAX_DIGITS:
            got = by_prefix.get(split[0])
            if got is None:
                by_prefix[split[0]] = [split[1]]
            else:
                got.append(split[1])
        else:
            plain.append(name)
    items: list[Item] = [(name, 0, name) for name in plain]
    for prefix, all_digits in by_prefix.items():
        padded = sorted({len(d) for d in all_digits if len(d) > 1 and d[0] == "0"})
        # width -> numbers. An unpadded number prints the same at any width up to its own
        # length, so Slurm joins it to such a padded range (_width_equiv in src/common/hostlist.c @
        # slurm-22-05-8-1: 099 and 100 are one range, and so are 999 and 1000 at width 3).
        if all_ascii and len(padded) <= 1:
            first = len(all_digits[0])
            if all(len(d) == first for d in all_digits):
                # one width, as a spec's names have: sorted as text is sorted as numbers (each
                # once), so without a gap the run is one range
                nums = list(map(int, all_digits))
                if nums[-1] - nums[0] == len(nums) - 1:
                    text = all_digits[0] if len(nums) == 1 else f"[{all_digits[0]}-{all_digits[-1]}]"
                    items.append((prefix, 1, prefix + text))
                    continue
        widths: dict[int, list[tuple[int, str]]] = {}
        for digits in all_digits:
            if len(digits) > 1 and digits[0] == "0":
                width = len(digits)
            elif not padded:
                width = 0
            else:
                width = max((w for w in padded if w <= len(digits)), default=0)
            widths.setdefault(width, []).append((int(digits), digits))
        # Slurm sorts ranges of widths it cannot combine by width, unpadded first: a[1-2,01-02]
        runs = [sorted(widths[w]) for w in sorted(widths)]
        if sum(map(len, runs)) == 1:
            items.append((prefix, 1, prefix + runs[0][0][1]))
        else:
            items.append((prefix, 1, f"{prefix}[{','.join(_ranges(nums) for nums in runs)}]"))
    return items


def join_items(items: Iterable[Item]) -> str:
    """The hostlist of ``items`` whose prefixes are each once (:func:`compress_items`' items)."""
    # hostlist_sort's order (hostrange_cmp): prefixes in natural order, a name without a number
    # before the numbered names of the same prefix (login before login[1-2])
    return ",".join(text for _p, _r, text in sorted(items, key=functools.cmp_to_key(_item_cmp)))


def numbered_items(prefix: str, count: int, width: int) -> list[Item] | None:
    """:func:`compress_items` of ``prefix`` + 1 .. ``count`` zero-padded to ``width`` digits, from the
    numbers alone: the names a cloud node group makes (``NodeGroup.hostnames``), without a pass
    over them. None where that shortcut is not sure to be :func:`compress`'s answer (a prefix that
    ends in a digit or is not plain ASCII, a number wider than ``width``, an unpadded first
    number); the caller then compresses the names.

    >>> numbered_items("gpu-", 16, 3)
    [('gpu-', 1, 'gpu-[001-016]')]
    >>> numbered_items("gpu-", 16, 3) == compress_items(f"gpu-{i:03d}" for i in range(1, 17))
    True
    """
    if (count < 1 or not 2 <= width <= _MAX_DIGITS or len(str(count)) > width or not prefix.isascii()
            or "\n" in prefix or prefix.rstrip(_ASCII_DIGITS) != prefix):
        return None
    # every number has ``width`` digits and the first starts with 0: one padded width, one run
    first, last = f"{1:0{width}d}", f"{count:0{width}d}"
    return [(prefix, 1, prefix + (first if count == 1 else f"[{first}-{last}]"))]


def expression_items(expr: str, *, field: str = "hostlist") -> list[Item] | None:
    """:func:`compress_items` of ``expand(expr)``, from the expression's ranges alone, for the forms
    a spec writes: every item a literal and one range set at its end (``dgx-[00001-52428]``,
    ``rack1-n[01-32],rack2-n[01-32]``). Numbers of one prefix merge across ranges and items,
    overlaps and neighbours included, as :func:`compress` merges them.

    None where that is not sure to be :func:`compress`'s answer, and the caller compresses the
    names: a name without a range, several range sets in one item, a literal that ends in a digit
    or is not plain ASCII, a padded range whose high end outgrows its width (``[01-100]``), or
    one prefix with two zero paddings. Errors are :func:`expand`'s.

    >>> expression_items("n[1-3,5],n[4],m[01-02]")
    [('n', 1, 'n[1-5]'), ('m', 1, 'm[01-02]')]
    """
    spans: dict[str, list[tuple[int, int, int]]] = {}  # prefix -> its ranges (low, high, padded width or 0)
    for literals, sets, _n in _parse(expr, field):
        if len(sets) != 1:
            return None
        prefix = literals[0]  # a range set ends the item (_parse_item refuses text after it)
        if not prefix.isascii() or "\n" in prefix or prefix.rstrip(_ASCII_DIGITS) != prefix:
            return None
        spans.setdefault(prefix, []).extend(sets[0])
    items: list[Item] = []
    for prefix, spec_ranges in spans.items():
        # Slurm pads a range to its low bound's width (0: not padded). Every number of the prefix
        # must be written the one way: unpadded, or all of one padded width (an unpadded range of
        # numbers that wide, [100-200] beside [001-099], is written so too)
        padded = {w for _lo, _hi, w in spec_ranges if w}
        if len(padded) > 1:
            return None
        width = padded.pop() if padded else 0
        if width and not all(len(str(hi)) <= width and (w or len(str(lo)) == width) for lo, hi, w in spec_ranges):
            return None
        ranges = [(lo, hi) for lo, hi, _w in spec_ranges]
        merged: list[list[int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        text = [str(lo).zfill(width) if lo == hi else f"{str(lo).zfill(width)}-{str(hi).zfill(width)}"
                for lo, hi in merged]
        single = len(merged) == 1 and merged[0][0] == merged[0][1]
        items.append((prefix, 1, prefix + text[0] if single else f"{prefix}[{','.join(text)}]"))
    return items


def union_items(parts: Iterable[list[Item]]) -> list[Item] | None:
    """The items of several name sets' union, from each set's own :func:`compress_items`, when no
    prefix is in two of them (then each prefix's item is its one set's); None otherwise, and the
    caller compresses the union's names (a prefix in two sets merges their numbers)."""
    out: list[Item] = []
    seen: set[str] = set()
    for items in parts:
        prefixes = {p for p, _r, _t in items}
        if prefixes & seen:
            return None
        seen |= prefixes
        out.extend(items)
    return out


def _item_cmp(a: Item, b: Item) -> int:
    return _strnatcmp(a[0], b[0]) or a[1] - b[1]


def _digits_run(s: str, i: int) -> str:
    j = i
    while j < len(s) and s[j].isascii() and s[j].isdigit():
        j += 1
    return s[i:j]


def _strnatcmp(a: str, b: str) -> int:
    """Slurm's strnatcmp (src/common/strnatcmp.c @ slurm-22-05-8-1) for names without blanks:
    runs of digits compare as numbers (n9 < n10), or digit by digit when either starts with 0."""
    i = 0
    while i < len(a) and i < len(b):
        ra, rb = _digits_run(a, i), _digits_run(b, i)
        if ra and rb:
            if ra[0] == "0" or rb[0] == "0":  # compare_left: the first differing digit wins
                if ra != rb:
                    return -1 if ra < rb else 1
            elif ra != rb:  # compare_right: the longer run wins, then the larger value
                return -1 if (len(ra), ra) < (len(rb), rb) else 1
        if a[i] != b[i]:
            return -1 if a[i] < b[i] else 1
        i += 1
    return (len(a) > len(b)) - (len(a) < len(b))


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
