from __future__ import annotations

import contextlib
import doctest
import ipaddress
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterforge import hostlist
from clusterforge.errors import ClusterforgeError
from clusterforge.hostlist import HostlistError, compress, compress_ints, expand, expand_ints


def test_doctests() -> None:
    assert doctest.testmod(hostlist).failed == 0


def test_expand_padding_and_products() -> None:
    assert expand("dgx-[001-003]") == ["dgx-001", "dgx-002", "dgx-003"]
    assert expand("r[1-2]n[01-02]") == ["r1n01", "r1n02", "r2n01", "r2n02"]
    assert expand("a,b[7,9]") == ["a", "b7", "b9"]


@pytest.mark.parametrize("bad", ["", "a[1-", "a]", "a[3-1]", "a[x]", "a[[1]]", "a,,b"])
def test_bad_expressions(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad)


def test_compress_keeps_padded_ranges_together() -> None:
    names = [f"gpu-{i:03d}" for i in range(1, 129)]
    assert compress(names) == "gpu-[001-128]"
    # unpadded numbers of other widths are a different range in Slurm's notation
    assert compress(["n9", "n10", "n11"]) == "n[9-11]"
    assert compress(["gpu-099", "gpu-100"]) == "gpu-[099-100]"


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100)
@given(st.sets(st.integers(min_value=0, max_value=5000), min_size=1, max_size=300), st.sampled_from([0, 3, 4]))
def test_roundtrip(nums: set[int], width: int) -> None:
    names = {f"node-{n:0{width}d}" for n in nums}
    assert sorted(expand(compress(names))) == sorted(names)


def test_device_files_and_addresses_compress_like_gres_conf() -> None:
    # gres.conf File= and NodeAddr= take the same syntax (slurm.conf(5), gres.conf(5))
    assert compress([f"/dev/nvidia{i}" for i in range(8)]) == "/dev/nvidia[0-7]"
    assert compress([f"/dev/nvidia{i}" for i in range(16)]) == "/dev/nvidia[0-15]"
    assert compress(["/dev/nvidia0"]) == "/dev/nvidia0"
    assert compress([f"/dev/dri/renderD{i}" for i in range(128, 136)]) == "/dev/dri/renderD[128-135]"
    assert compress(["10.0.0.9", "10.0.0.10", "10.0.0.12"]) == "10.0.0.[9-10,12]"


def test_expand_ints_cpu_lists() -> None:
    # the forms the kernel prints in /sys/devices/system/node/node*/cpulist and lscpu -p
    assert expand_ints("0-47,96-143\n") == [*range(48), *range(96, 144)]
    assert expand_ints("7") == [7]
    assert expand_ints(" 3, 1-2 ") == [1, 2, 3]
    assert expand_ints("0-3,2-5") == [0, 1, 2, 3, 4, 5]  # a set: each id once
    assert expand_ints("0,0") == [0]


def test_compress_ints() -> None:
    assert compress_ints([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert compress_ints([5, 3, 4, 4]) == "3-5"
    assert compress_ints({9}) == "9"
    assert compress_ints([]) == ""
    assert compress_ints(range(988, 989)) == "988"
    assert compress_ints(range(1018, 1024)) == "1018-1023"


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("", "it is empty"),
        ("  \n", "it is empty"),
        ("4-1", "the range 4-1 runs backwards"),
        ("0-3,,8", "it has an empty item"),
        ("0-3,", "it has an empty item"),
        ("[0-3]", "'[0-3]' is not a number or a range"),
        ("-1", "'-1' is not a number or a range"),
        ("0x10", "'0x10' is not a number or a range"),
        ("1-2-3", "'1-2-3' is not a number or a range"),
        ("9" * 19, "is not a number or a range"),  # refused before int() (4300-digit limit)
        ("0-1000000", "more than 1000000 numbers"),
        ("0-600000,700000-1300000", "more than 1000000 numbers"),
    ],
)
def test_expand_ints_errors(bad: str, why: str) -> None:
    with pytest.raises(HostlistError) as exc:
        expand_ints(bad, field="lscpu NUMA node0")
    assert why in exc.value.why
    text = str(exc.value)
    assert text.startswith("lscpu NUMA node0 ") and "Fix: " in text
    assert isinstance(exc.value, ClusterforgeError) and isinstance(exc.value, ValueError)


def test_expand_error_message_names_field_value_why_fix() -> None:
    with pytest.raises(HostlistError) as exc:
        expand("dgx-[032-001]", field="node_groups[0].onprem.hosts")
    assert str(exc.value) == (
        "node_groups[0].onprem.hosts 'dgx-[032-001]': the range 032-001 runs backwards. "
        "Fix: write the lower number first (001-032)."
    )
    assert (exc.value.field, exc.value.value) == ("node_groups[0].onprem.hosts", "dgx-[032-001]")


@pytest.mark.parametrize(
    "bad",
    ["n[1-1000001]", "n[1-1000],m[1-1000]x[1-1000]", "a[" + "9" * 5000 + "]", "a[-1]", "a[]", "a[1,,2]"],
)
def test_expand_refuses_huge_or_empty_ranges(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad)


def test_compress_keeps_absurdly_long_numbers_whole() -> None:
    # int() of more than 4300 digits raises; such a name is kept as it is, never ranged.
    long = "n" + "1" * 5000
    assert compress([long]) == long


def test_compress_ints_refuses_negatives() -> None:
    with pytest.raises(HostlistError, match="negative"):
        compress_ints([-1, 0])


@settings(deadline=None, max_examples=100)
@given(st.sets(st.integers(min_value=0, max_value=5000), max_size=300))
def test_ints_roundtrip(nums: set[int]) -> None:
    text = compress_ints(nums)
    assert (expand_ints(text) if text else []) == sorted(nums)


# ---- issue 15 item 3: the gaps against Slurm 22.05's reader (expected values from
# `scontrol show hostnames` of slurm-wlm 22.05.8 on this host, run by hand).


def test_three_bracket_groups_expand_in_slurms_order() -> None:
    # scontrol show hostnames 'a[1-2]b[3-4]c[5-6]': the last group runs fastest, then the first,
    # and the second slowest (_push_range_list recurses from the rightmost bracket before the last)
    assert expand("a[1-2]b[3-4]c[5-6]") == [
        "a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6",
    ]
    assert expand("a[1-2]b[3-4]c[5-6]d[7-8]")[:6] == ["a1b3c5d7", "a1b3c5d8", "a2b3c5d7", "a2b3c5d8", "a1b4c5d7", "a1b4c5d8"]
    assert expand("a[1-2]b[3-4]c[5-6]d[7-8]")[8] == "a1b3c6d7"


@pytest.mark.parametrize(
    ("bad", "fixed"),
    [("gpu[1-3]-ib", "gpu-ib[1-3]"), ("r[1-2]n[1-2].ib", "r[1-2]n.ib[1-2]"), ("n1,a[1,3]b", "ab[1,3]")],
)
def test_text_after_the_last_range_is_refused(bad: str, fixed: str) -> None:
    # scontrol 22.05: "Invalid hostlist: gpu[1-3]-ib" (and the same for the others)
    with pytest.raises(HostlistError) as exc:
        expand(bad, field="hosts")
    assert "after its last range" in exc.value.why
    assert exc.value.fix == f"end each name with its range, e.g. {fixed}"
    assert expand(fixed)  # the suggestion itself reads


def test_a_range_of_more_than_65536_hosts_is_refused_at_once() -> None:
    # scontrol 22.05: "_parse_single_range: Too many hosts in range `1-65537'"
    assert len(expand("a[1-65536]")) == 65536
    with pytest.raises(HostlistError, match="65537 hosts"):
        expand("a[1-65537]")
    with pytest.raises(HostlistError, match="65536"):
        expand("a[0-999999]")


def test_a_bracket_before_the_last_of_more_than_65536_hosts_is_refused() -> None:
    # scontrol 22.05 refuses 'a[1-40000,1-40000]b[1]' (MAX_PREFIX_CNT) but reads 'a[1-40000,1-40000]'
    with pytest.raises(HostlistError, match="65536"):
        expand("a[1-40000,1-40000]b[1]")


def test_an_expression_of_billions_of_hosts_is_refused_in_milliseconds() -> None:
    import time

    start = time.perf_counter()
    for bad in ("a[1-65536]b[1-65536]", "a[1-60000]b[1-60000]c[1-60000]", ",".join(["x[1-60000]"] * 1000)):
        with pytest.raises(HostlistError, match="more than 65536 hosts"):
            expand(bad)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("a b", "blank"),  # Slurm reads two names, a and b
        ("a[1, 2]", "blank inside a range"),  # Slurm reads ' 2' as a number of width 2: a1, a02
        ("a[+1-3]", "not a number"),  # Slurm: a01 a02 a03 (strtoul reads the sign, the width counts it)
        ("a" + "9" * 20, "digits"),  # Slurm overflows strtoul: a18446744073709551615
    ],
)
def test_forms_slurm_misreads_are_refused(bad: str, why: str) -> None:
    with pytest.raises(HostlistError) as exc:
        expand(bad)
    assert why in exc.value.why


@pytest.mark.parametrize(
    ("names", "slurm"),
    [
        # `scontrol show hostlistsorted` of slurm-wlm 22.05.8, run by hand on these names
        ("r10n1,r10n2,r2n1,r2n2", "r2n[1-2],r10n[1-2]"),  # prefixes in natural order
        ("gpu-998,gpu-999,gpu-1000,gpu-1001,gpu-001", "gpu-[001,998-1001]"),  # 1000 fits width 3
        ("gpu-1,gpu-001", "gpu-[1,001]"),  # one bracket per prefix, unpadded first
        ("n01,n1", "n[1,01]"),
        ("n09,n10,n100", "n[09-10,100]"),
        ("a-1,a-2,a1", "a1,a-[1-2]"),
        ("login,login1,login2", "login,login[1-2]"),
        ("b2,a1,b1", "a1,b[1-2]"),
    ],
)
def test_compress_writes_what_scontrol_writes(names: str, slurm: str) -> None:
    assert compress(names.split(",")) == slurm


# ---------------------------------------------------------------- hostlists without a pass over names


def _cloud_names(prefix: str, count: int, width: int) -> list[str]:
    # NodeGroup.hostnames' form, written out here: the prefix and 1..count zero-padded to width
    return [prefix + str(i).rjust(width, "0") for i in range(1, count + 1)]


@pytest.mark.parametrize("count", [1, 2, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 9999, 10000, 65536])
def test_numbered_items_are_compress_of_the_names(count: int) -> None:
    width = max(3, len(str(count)))
    names = _cloud_names("gpu-", count, width)
    got = hostlist.numbered_items("gpu-", count, width)
    assert got == hostlist.compress_items(names)
    assert hostlist.join_items(got or []) == compress(names)
    # the text itself, so that both cannot drift together
    assert hostlist.join_items(got or []) == ("gpu-001" if count == 1 else f"gpu-[{'1'.rjust(width, '0')}-{str(count).rjust(width, '0')}]")


@pytest.mark.parametrize(("prefix", "count", "width"), [
    ("gpu0", 4, 3),       # a prefix ending in a digit: its digits run into the number's
    ("gpü-", 4, 3),       # not ASCII
    ("gpu-", 1000, 3),    # 1000 is wider than the width: not one padded run
    ("gpu-", 4, 1),       # unpadded numbers
    ("gpu-", 4, 19),      # longer than a number Slurm ranges over
    ("gpu-", 0, 3),       # no names
    ("gpu\n-", 4, 3),     # a newline: compress takes such a name apart by regex
])
def test_numbered_items_refuse_what_they_are_not_sure_of(prefix: str, count: int, width: int) -> None:
    assert hostlist.numbered_items(prefix, count, width) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(
    st.lists(st.one_of(
        st.tuples(st.sampled_from(["gpu-", "cpu-", "n", "a-b-", "dgx", "login", "x1-"]), st.integers(0, 130),
                  st.sampled_from([0, 2, 3, 4])),
        st.tuples(st.sampled_from(["head", "login", "ctl", "gpu-"]), st.none(), st.none()),
    ), min_size=1, max_size=12),
    min_size=1, max_size=4,
))
def test_union_items_are_compress_of_the_union(sets: list[list[tuple[str, int | None, int | None]]]) -> None:
    """Sets' own items joined are the union's compress whenever union_items answers, and it
    answers whenever no prefix is in two sets."""
    names = [[p if n is None else p + (str(n).rjust(w, "0") if w else str(n)) for p, n, w in s] for s in sets]
    parts = [hostlist.compress_items(ns) for ns in names]
    got = hostlist.union_items(parts)
    every = [n for ns in names for n in ns]
    prefixes = [{p for p, _r, _t in items} for items in parts]
    shared = any(prefixes[i] & prefixes[j] for i in range(len(parts)) for j in range(i))
    assert (got is None) == shared
    if got is not None:
        assert hostlist.join_items(got) == compress(every)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(
    st.tuples(
        st.sampled_from(["dgx-", "n", "rack1-n", "a.b-", "", "x9", "gpü-"]),
        st.lists(st.tuples(st.integers(0, 120), st.integers(0, 15), st.sampled_from([0, 2, 3])), min_size=1, max_size=4),
        st.sampled_from(["range", "range", "range", "plain", "two ranges"]),
    ),
    min_size=1, max_size=4,
))
def test_expression_items_are_compress_of_the_names(
    items: list[tuple[str, list[tuple[int, int, int]], str]],
) -> None:
    """Whenever expression_items answers, it is compress of the expanded names; and it answers for
    the forms a spec writes: literals without a trailing digit, one range set each, one padding
    per prefix that holds every number."""
    parts = []
    for prefix, ranges, form in items:
        body = ",".join(
            (str(lo).zfill(w) if lo == lo + n else f"{str(lo).zfill(w)}-{str(lo + n).zfill(w)}")
            if w == 0 or lo < 10 ** (w - 1) else str(lo) for lo, n, w in ranges
        )
        parts.append({"range": f"{prefix}[{body}]", "plain": f"{prefix}7", "two ranges": f"{prefix}[1-2]x[{body}]"}[form])
    expr = ",".join(parts)
    got = hostlist.expression_items(expr)
    if got is not None:
        assert hostlist.join_items(got) == compress(expand(expr)), expr
    sure = all(form == "range" and prefix.isascii() and not prefix[-1:].isdigit() for prefix, _r, form in items)
    widths: dict[str, set[int]] = {}
    fits = True
    for prefix, ranges, _form in items:
        for lo, n, w in ranges:
            written = str(lo).zfill(w) if w == 0 or lo < 10 ** (w - 1) else str(lo)
            width = len(written) if written.startswith("0") and len(written) > 1 else 0
            widths.setdefault(prefix, set()).add(width)
            fits = fits and (width == 0 or len(str(lo + n)) <= width)
    if sure and fits and all(len(ws) == 1 for ws in widths.values()):
        assert got is not None, expr


_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")  # the spec's host name check, written out


def _is_address(text: str) -> bool:  # the spec's address check, written out
    with contextlib.suppress(ValueError):
        return bool(ipaddress.ip_address(text))
    return False


def _expression(items: list[tuple[str, list[tuple[int, int, int]], str]]) -> str:
    parts = []
    for prefix, ranges, form in items:
        body = ",".join(str(lo).zfill(w) if n == 0 else f"{str(lo).zfill(w)}-{str(lo + n).zfill(w)}" for lo, n, w in ranges)
        parts.append({"range": f"{prefix}[{body}]", "plain": f"{prefix}7", "two ranges": f"{prefix}[1-2]x[{body}]"}[form])
    return ",".join(parts)


_RANGES = st.lists(st.tuples(st.integers(0, 1200), st.integers(0, 15), st.sampled_from([0, 2, 3, 5])), min_size=1, max_size=3)
_FORMS = st.sampled_from(["range", "range", "plain", "two ranges"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(
    # prefixes a check of the characters or the length refuses, at the 63-character edge too
    st.sampled_from(["dgx-", "n", "", "x9", "Gpu-", "-x", "a_b", "r" * 58, "r" * 60 + "-", "r" * 62]), _RANGES, _FORMS,
), min_size=1, max_size=4))
def test_count_stems_and_edge_names_stand_for_the_names(items: list[tuple[str, list[tuple[int, int, int]], str]]) -> None:
    """count is len(expand); name_stems is the set of the expanded names' stems wherever it
    answers, and it answers without a two-range item; edge_names are names of the expression
    and pass the DNS-label check exactly when every name does."""
    expr = _expression(items)
    names = expand(expr)
    assert hostlist.count(expr) == len(names)
    stems = hostlist.name_stems(expr)
    assert (stems is None) == any(form == "two ranges" for _p, _r, form in items), expr
    if stems is not None:
        assert stems == {n.rstrip("0123456789") for n in names}, expr
    edges = hostlist.edge_names(expr)
    assert set(edges) <= set(names)
    assert all(_DNS_LABEL.fullmatch(n) for n in edges) == all(_DNS_LABEL.fullmatch(n) for n in names), expr


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(
    # the last octet or group, a literal ending in a digit (10.0.0.1[0-5]), too few octets, an
    # IPv4 tail in IPv6, hex groups of one to four digits, a scope
    st.sampled_from(["10.0.5.", "10.0.0.1", "10.0.0.25", "10.0.", "300.1.1.", "fd00::", "fd00::ab", "fd00::abc",
                     "::ffff:10.0.0.", "fe80::1%", "10.0.0.0"]), _RANGES, _FORMS,
), min_size=1, max_size=3))
def test_edge_addresses_stand_for_the_addresses(items: list[tuple[str, list[tuple[int, int, int]], str]]) -> None:
    """edge_names pass the spec's address check (ipaddress.ip_address) exactly when every
    address does; stem_ranges are the expanded addresses' stems and numbers wherever it answers."""
    expr = _expression(items)
    names = expand(expr)
    edges = hostlist.edge_names(expr)
    assert set(edges) <= set(names)
    assert all(map(_is_address, edges)) == all(map(_is_address, names)), expr
    stems = hostlist.stem_ranges(expr)
    sure = all(form != "two ranges" and (form == "plain" or not prefix[-1:].isdigit()) for prefix, _r, form in items)
    assert (stems is not None) == sure, expr
    if stems is not None:
        want: dict[str, list[int]] = {}
        for n in names:
            stem = n.rstrip("0123456789")
            want.setdefault(stem, []).append(int(n[len(stem):]))
        assert {s: sorted(i for lo, hi in rs for i in range(lo, hi + 1)) for s, rs in stems.items()} == {
            s: sorted(ns) for s, ns in want.items()}, expr


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["dgx-", "n", "10.0.5.", "10.0.6.", "rack1-n"]), _RANGES,
                          st.sampled_from(["range", "range", "range", "plain"])), min_size=1, max_size=4))
def test_ordered_items_expand_to_the_names_in_their_order(items: list[tuple[str, list[tuple[int, int, int]], str]]) -> None:
    """Whenever ordered_items answers, its hostlist expands to the expression's names in the
    expression's order; and it answers for ascending ranges of one prefix written one way."""
    expr = _expression(items)
    got = hostlist.ordered_items(expr)
    if got is not None:
        assert expand(hostlist.join_items(got)) == expand(expr), expr
    elif hostlist.expression_items(expr) is not None:
        assert expand(compress(expand(expr))) != expand(expr), expr


@pytest.mark.parametrize(("expr", "hostlist_text"), [
    ("dgx-[00001-32768]", "dgx-[00001-32768]"),
    ("10.0.5.[1-254],10.0.6.[1-254],10.0.10.[1-3]", "10.0.5.[1-254],10.0.6.[1-254],10.0.10.[1-3]"),
    ("n[001-099],n[100-200]", "n[001-200]"),   # the unpadded numbers are as wide as the padding
    ("n[01-09],n[10-12],n[13]", "n[01-13]"),
    ("n[1-3],n[4-9]", "n[1-9]"),
    ("n[7]", "n7"),
])
def test_ordered_items_of_ascending_expressions(expr: str, hostlist_text: str) -> None:
    got = hostlist.ordered_items(expr)
    assert got is not None and hostlist.join_items(got) == hostlist_text


@pytest.mark.parametrize("expr", [
    "10.0.6.[1-254],10.0.5.[1-254]",   # /24s out of hostlist order
    "n[4-9],n[1-3]",                   # ranges descending
    "n[1-5],n[3-7]",                   # overlapping: the hostlist drops the repeats
    "n[10-12],n[01-09]",
])
def test_ordered_items_refuse_another_order(expr: str) -> None:
    assert hostlist.ordered_items(expr) is None
    assert expand(compress(expand(expr))) != expand(expr)


def test_edge_names_take_each_digit_count_of_a_range() -> None:
    assert hostlist.edge_names("gpu-[998-999,1000,7]") == ["gpu-998", "gpu-999", "gpu-1000", "gpu-7"]
    assert hostlist.edge_names("n[0001-0002,5-60000]") == [
        "n0001", "n0002", "n5", "n9", "n10", "n99", "n100", "n999", "n1000", "n9999", "n10000", "n60000"]
    assert hostlist.count("n[0001-0002,5-99],login,a[1-3]b[1-2]") == 2 + 95 + 1 + 6


def test_expression_items_of_a_large_group() -> None:
    expr = "dgx-[00001-32428],dgx-[32429-50000],cpu-[1-9,10-99,100-13108]"
    got = hostlist.expression_items(expr)
    assert got is not None and hostlist.join_items(got) == "cpu-[1-13108],dgx-[00001-50000]"
    assert hostlist.join_items(got) == compress(expand(expr))
