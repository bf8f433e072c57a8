"""clusterforge.hostlist against the real Slurm reader: ``scontrol show hostnames`` and
``scontrol show hostlistsorted`` of the host's slurm-wlm 22.05, on seeded random expressions.

scontrol reads hostlists locally: it needs only a slurm.conf with ``ClusterName`` and
``SlurmctldHost`` (without either it exits "Unable to process configuration file"), starts no
daemon and sends nothing on the network. It prints "Invalid hostlist: ..." on stderr, with exit
status 0, for an expression it refuses. One call takes about 3 ms here, so each expression gets
its own call.

The generator writes three kinds of expression, and each kind has its rule:

* ``valid``: both read it, to the same names in the same order;
* ``refused``: Slurm refuses it (text after the last range, a backwards or empty range, a step, a
  range of more than 65536 hosts, ...): clusterforge must refuse it too;
* ``stricter``: Slurm reads it, in a way no spec means (``a[1, 2]`` is a1,a02, ``a[1-2`` is
  ``a]``, ``a,,b`` drops the empty name, a 20-digit suffix overflows): clusterforge refuses it.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterforge.hostlist import HostlistError, compress, expand

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs Slurm's scontrol (slurm-client)"),
]

SEED = 15_003
N_VALID, N_REFUSED, N_STRICTER = 400, 150, 50

PREFIXES = ["gpu-", "n", "dgx", "r", "10.0.0.", "/dev/nvidia", "a-b_c", "x1", "", "node.", "C"]
LITERALS = ["n", "-", "b", ".", "s", "x", "_rack", "0", "-ib-"]


class Scontrol:
    def __init__(self, conf: Path) -> None:
        self.env = {"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args], env=self.env, capture_output=True, text=True, timeout=30, check=False
        )

    def hostnames(self, expr: str) -> list[str] | None:
        """The names Slurm reads, or None when it refuses the expression or complains about it."""
        done = self.run("show", "hostnames", expr)
        assert done.returncode == 0, (expr, done.stderr)
        # "Invalid hostlist: ..." is a refusal. With three or more bracket groups a bad range
        # before the last but one is only logged ("error: _parse_single_range: Invalid range")
        # and the expression reads as no names: _push_range_list keeps MAX(rc, rc1) of its
        # recursive calls, so their -1 is lost (src/common/hostlist.c @ slurm-22-05-8-1).
        if done.stderr:
            assert "Invalid hostlist" in done.stderr or "scontrol: error: " in done.stderr, done.stderr
            return None
        return done.stdout.splitlines()

    def hostlistsorted(self, names: list[str], tmp: Path) -> str:
        # Given a path, scontrol reads the names from that file (scontrol_encode_hostlist): names
        # such as /dev/nvidia0 would otherwise be taken for a path themselves.
        listing = tmp / "names"
        listing.write_text("\n".join(names) + "\n")
        done = self.run("show", "hostlistsorted", str(listing))
        assert done.returncode == 0 and not done.stderr, done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="module")
def scontrol(tmp_path_factory: pytest.TempPathFactory) -> Scontrol:
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n")
    sc = Scontrol(conf)
    assert sc.hostnames("a[1-3]") == ["a1", "a2", "a3"], "scontrol cannot read a plain hostlist here"
    return sc


# --------------------------------------------------------------------------------------------
# the generator


def _number(rng: random.Random, lo: int, width: int) -> str:
    return str(lo).zfill(width) if width else str(lo)


def _range(rng: random.Random, span: int = 12) -> str:
    lo = rng.choice([0, 1, 7, 9, 10, 99, 100, 998, rng.randrange(0, 5000)])
    width = rng.choice([0, 0, 0, 2, 3, 4])
    if rng.random() < 0.4:
        return _number(rng, lo, width)
    hi = lo + rng.randrange(0, span)
    # the high bound as people write it: padded like the low one, or not
    return f"{_number(rng, lo, width)}-{_number(rng, hi, rng.choice([0, width]))}"


def _group(rng: random.Random, items: int = 3) -> str:
    return "[" + ",".join(_range(rng) for _ in range(rng.randint(1, items))) + "]"


def _item(rng: random.Random) -> str:
    groups = rng.choice([0, 1, 1, 1, 2, 2, 3, 4])
    text = rng.choice(PREFIXES)
    if groups == 0:
        return text + rng.choice(["login", "ctl", "a", ""]) + _number(rng, rng.randrange(0, 300), rng.choice([0, 3]))
    for i in range(groups):
        # four groups of up to three ranges each would be tens of thousands of names: keep them small
        text += _group(rng, items=3 if groups <= 2 else 1)
        if i < groups - 1:
            text += rng.choice(LITERALS)
    return text


def _valid(rng: random.Random) -> str:
    sep = rng.choice([",", ",", ", "])  # Slurm skips a blank after a comma as we do
    return sep.join(_item(rng) for _ in range(rng.randint(1, 3)))


def _refused(rng: random.Random) -> str:
    """Expressions Slurm 22.05 refuses ("Invalid hostlist")."""
    base = _item(rng)
    while "[" not in base:
        base = _item(rng)
    cut = base.rindex("[")
    head, body = base[:cut], base[cut + 1 : -1]
    forms = [
        base + rng.choice(["-ib", ".ib", "b", "x", "0"]),  # text after the last range (a suffix)
        f"{head}[{body},]",  # an empty range
        f"{head}[]",
        f"{head}[5-3]",  # backwards
        f"{head}[1-9:2]",  # a step: 22.05 has none
        f"{head}[{body},-4]",  # a negative number
        f"{head}[1-2x3-4]",  # a box: only for multi-dimensional clusters
        f"{head}[a-b]",
        f"{head}[1-{65536 + rng.randrange(1, 9)}]",  # MAX_RANGE
        f"{head}[{rng.randrange(0, 9)}-{70000 + rng.randrange(0, 9)}]",
        f"a[1-40000,1-30000]b{_group(rng, 1)}",  # MAX_PREFIX_CNT before the last range
        f"{head}[[{body}]]",  # nested
        base.replace("[", "[0x", 1),
    ]
    return rng.choice(forms) + rng.choice(["", "", ",n1"])


def _stricter(rng: random.Random) -> str:
    """Expressions Slurm reads (to surprising names) and clusterforge refuses."""
    base = _item(rng)
    while "[" not in base:
        base = _item(rng)
    forms = [
        base.replace(",", ", ", 1) if "," in base[base.index("[") :] else base.replace("[", "[ ", 1),
        base.replace("[", "[+", 1),  # strtoul reads the sign and the width counts it
        base + ",," + _item(rng),  # an empty name, which Slurm drops
        "," + base,
        base + ",",
        base[:-1],  # a '[' without ']': Slurm makes the name "<head>]"
        base + " " + _item(rng),  # a blank: Slurm's separator
        "n" + base.replace("[", "\t[", 1),
        "n" + "9" * rng.randint(20, 24),  # 20+ digits: strtoul overflows
        base[: base.rindex("[") + 1] + "1-]",  # Slurm reads 1- as 1
    ]
    return rng.choice(forms)


def expressions() -> Iterator[tuple[str, str]]:
    rng = random.Random(SEED)
    seen: set[str] = set()
    for kind, make, count in (("valid", _valid, N_VALID), ("refused", _refused, N_REFUSED),
                              ("stricter", _stricter, N_STRICTER)):
        made = 0
        while made < count:
            expr = make(rng)
            if expr not in seen:
                seen.add(expr)
                made += 1
                yield kind, expr
    # the limits themselves, by hand
    yield "valid", "a[1-65536]"
    yield "valid", "a[0-65535]"
    yield "valid", "a[1-2]b[1-32768]"
    yield "refused", "a[1-65537]"
    yield "refused", "a[0-65536]"
    yield "refused", "gpu[1-3]-ib"


def _cf(expr: str) -> list[str] | HostlistError:
    try:
        return expand(expr, field="hosts")
    except HostlistError as exc:
        return exc


def test_expand_matches_scontrol_show_hostnames(scontrol: Scontrol) -> None:
    counts = {"valid": 0, "refused": 0, "stricter": 0}
    wrong: list[str] = []
    for kind, expr in expressions():
        slurm, ours = scontrol.hostnames(expr), _cf(expr)
        counts[kind] += 1
        if kind == "valid":
            if slurm is None or ours != slurm:
                wrong.append(f"valid {expr!r}: slurm {slurm and slurm[:6]} clusterforge {str(ours)[:200]}")
        elif kind == "refused":
            if slurm is not None:
                wrong.append(f"generator: Slurm reads {expr!r} ({slurm[:4]}), not a 'refused' form")
            elif not isinstance(ours, HostlistError):
                wrong.append(f"refused {expr!r}: Slurm refuses it, clusterforge reads {ours[:6]}")
        else:
            if slurm is None:
                wrong.append(f"generator: Slurm refuses {expr!r}, not a 'stricter' form")
            elif not isinstance(ours, HostlistError):
                wrong.append(f"stricter {expr!r}: clusterforge reads {ours[:6]}, Slurm {slurm[:6]}")
        if isinstance(ours, HostlistError):
            # a clear error: the field, the value, why and how to fix it
            assert ours.field == "hosts" and ours.why and ours.fix and "Fix: " in str(ours)
    assert not wrong, "\n".join(wrong[:20])
    assert counts == {"valid": N_VALID + 3, "refused": N_REFUSED + 3, "stricter": N_STRICTER}


def _name_sets() -> Iterator[tuple[str, list[str]]]:
    """Sets of names as clusterforge's spec makes them (one prefix, one width, gaps), and mixed."""
    rng = random.Random(SEED + 1)
    for _ in range(60):
        prefix, width = rng.choice(PREFIXES[:8]), rng.choice([0, 2, 3, 4])
        nums = rng.sample(range(0, 2000 if width != 2 else 100), rng.randint(1, 40))
        yield "uniform", [f"{prefix}{n:0{width}d}" if width else f"{prefix}{n}" for n in nums]
    for _ in range(140):
        names = [n for _ in range(rng.randint(1, 3)) for n in expand(_item(rng))]
        yield "mixed", rng.sample(names, len(names))


def test_compress_reads_back_through_scontrol(scontrol: Scontrol, tmp_path: Path) -> None:
    """compress(names) is what scontrol writes for the same names (sorted, each once), and what
    the renderer relies on: Slurm reads it back to those names in the order clusterforge's expand
    gives (NodeName=/NodeAddr= pairs are matched by that order, render/model.py)."""
    checked = 0
    for _kind, names in _name_sets():
        text = compress(names)
        assert text == scontrol.hostlistsorted(sorted(set(names)), tmp_path), names
        back = scontrol.hostnames(text)
        assert back == expand(text), (names, text, back)
        assert sorted(back) == sorted(set(names)) and len(back) == len(set(names)), (names, text)
        checked += 1
    assert checked == 200


def test_cloud_groups_hostlists_are_scontrols(scontrol: Scontrol, tmp_path: Path) -> None:
    """A cloud node group's hostlist comes from its count (hostlist.numbered_items), and a
    partition's from its groups' own (union_items): each is what scontrol writes for the names."""
    from clusterforge.hostlist import join_items, numbered_items, union_items

    groups = [("gpu-", 1), ("gpu-a-", 9), ("cpu-", 100), ("p5e-", 1001), ("big-", 65536)]
    parts = []
    for prefix, count in groups:
        width = max(3, len(str(count)))  # NodeGroup.name_numbers
        names = [prefix + str(i).rjust(width, "0") for i in range(1, count + 1)]
        items = numbered_items(prefix, count, width)
        assert items is not None
        assert join_items(items) == scontrol.hostlistsorted(names, tmp_path), prefix
        parts.append((items, names))
    for chosen in (parts[:2], parts[1:4], parts):
        union = union_items(items for items, _names in chosen)
        assert union is not None
        every = [n for _items, names in chosen for n in names]
        assert join_items(union) == scontrol.hostlistsorted(every, tmp_path)


def test_expression_items_are_scontrols(scontrol: Scontrol, tmp_path: Path) -> None:
    """An on-prem group's hostlist comes from the ranges of its expression where the form allows
    (hostlist.expression_items): on the generator's valid expressions, whenever it answers, it is
    what scontrol writes for the expanded names."""
    from clusterforge.hostlist import expression_items, join_items

    answered = 0
    for kind, expr in expressions():
        if kind != "valid":
            continue
        items = expression_items(expr, field="hosts")
        if items is None:
            continue
        names = expand(expr)
        assert join_items(items) == scontrol.hostlistsorted(sorted(set(names)), tmp_path) == compress(names), expr
        answered += 1
    assert answered >= 35, answered  # 39 of the seeded 403
