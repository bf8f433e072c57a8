"""Rendered JSON files (the Grafana dashboards, the agents' configs, ``manifest.json``): two-space indent.

The bytes are those of ``json.dumps(data, indent=2)``. The standard library's C encoder has no
indent, so ``json.dumps(indent=2)`` runs its pure-Python encoder, a generator call per value: on
the dashboards and the manifest that was the largest single cost of a render's own work.
pydantic-core's serializer (``pydantic_core.to_json``, Rust) writes the same text for the data
these files hold: string keys, ASCII strings (but DEL), ints, bools, None, lists and tuples. Where the two
spell a value differently (a float: serde writes 1e-05 as 0.00001; non-ASCII text and its
escapes; an int beyond 64 bits; a key that is not a string, which json.dumps converts and sorts its own way), the data
goes through ``json.dumps``, so every file is byte for byte what ``json.dumps`` gives
(tests/test_render.py compares them).
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core


def _rust_writes_the_same(v: Any) -> bool:
    """True when ``pydantic_core.to_json`` writes ``v`` exactly as ``json.dumps`` does."""
    t = type(v)
    if t is str:
        return bool(v.isascii()) and "\x7f" not in v  # json.dumps escapes DEL, serde does not
    if t is dict:
        return all(type(k) is str and _rust_writes_the_same(k) and _rust_writes_the_same(x) for k, x in v.items())
    if t is list or t is tuple:
        return all(_rust_writes_the_same(x) for x in v)
    return (t is int and -(2**63) <= v < 2**64) or t is bool or v is None


def _sorted(v: Any) -> Any:
    """``v`` with every dict's keys in sorted order (what ``sort_keys=True`` prints)."""
    if type(v) is dict:
        return {k: _sorted(v[k]) for k in sorted(v)}
    if type(v) is list or type(v) is tuple:
        return [_sorted(x) for x in v]
    return v


def dumps(data: Any, *, sort_keys: bool = False, ensure_ascii: bool = True) -> str:
    """``json.dumps(data, indent=2, sort_keys=..., ensure_ascii=...) + "\\n"``, written in Rust
    where that gives the same bytes."""
    if not _rust_writes_the_same(data):
        return json.dumps(data, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n"
    return pydantic_core.to_json(_sorted(data) if sort_keys else data, indent=2).decode() + "\n"
