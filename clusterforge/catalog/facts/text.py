"""Small text helpers every fact parser shares: bounded numbers, natural sort, ANSI colours."""

from __future__ import annotations

import re

from clusterforge.catalog.facts.models import FactsError

# Python refuses int() on very long digit strings with a plain ValueError; no real count or
# memory size has more digits than this, so longer numbers are malformed input. ASCII digits
# only: the tools print nothing else, and int() of other Unicode digits is a surprise.
NUM = r"[0-9]{1,15}"

# nvidia-smi colours its matrix when stdout is a terminal (and `script` captures keep that).
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def parse_int(value: str, what: str, source: str, minimum: int = 0) -> int:
    """A whole number of at most 15 ASCII digits, at least ``minimum``; FactsError otherwise."""
    if not re.fullmatch(NUM, value.strip()):
        raise FactsError(f"{source}: {what} should be a whole number, got {value!r}")
    n = int(value)
    if n < minimum:
        raise FactsError(f"{source}: {what} should be at least {minimum}, got {n}")
    return n


def natural_key(name: str) -> list[str | int]:
    """Sort key putting mlx5_10 after mlx5_9, as the catalog and NCCL_IB_HCA lists are written."""
    # re.split with a group alternates text and digits, so an int is only ever compared with an int.
    return [int(p) if p.isascii() and p.isdigit() else p for p in re.split(r"([0-9]+)", name)]
