"""Rendered YAML files: data dumped by ``yaml.safe_dump`` under a comment header, never text from a template.

A template that prints YAML must quote every scalar by hand (a cluster named ``on`` or ``0123``,
a PromQL ``<``, a summary with ``: `` or ``{{``); ``safe_dump`` gets that right by construction.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

#: Never fold a line: a PromQL expression or a summary split over two lines is still valid YAML
#: but hard to read and to grep in the rendered file and in a diff.
WIDTH = 100_000

_CDumper: Any = getattr(yaml, "CSafeDumper", None)  # libyaml's emitter, when PyYAML was built with it
_PLAIN_ASCII = re.compile(r"[ -~]*")


def _c_emits_the_same(v: Any) -> bool:
    """True when libyaml's emitter writes ``v`` byte for byte as PyYAML's does: every string
    printable ASCII, every key a non-empty string of fewer than 128 characters. Outside that the
    two differ (an empty or long key becomes ``? key``, a newline or non-ASCII text is quoted
    another way; tests/test_render.py compares them), and PyYAML's own emitter writes it."""
    if isinstance(v, str):
        return _PLAIN_ASCII.fullmatch(v) is not None
    if isinstance(v, dict):
        return all(isinstance(k, str) and 0 < len(k) < 128 and _c_emits_the_same(k) and _c_emits_the_same(x)
                   for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return all(_c_emits_the_same(x) for x in v)
    return v is None or isinstance(v, (bool, int, float))


def dump_yaml(header: list[str], data: Any) -> str:
    """``# header`` lines, then ``data`` as block-style YAML.

    Keys keep the order the code builds them in (``sort_keys=False``): that order is fixed, so the
    output is stable, and it is the order of the upstream documentation (alert, expr, for, labels,
    annotations; topology, cluster_default, tree), which a reader compares against.
    """
    # libyaml's emitter when it writes the same bytes (a tenth of the time for the alert rules)
    same = isinstance(data, (dict, list)) and _c_emits_the_same(data)  # a bare scalar ends in "..." in PyYAML
    dumper = _CDumper if _CDumper is not None and same else yaml.SafeDumper
    body = yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=WIDTH)
    return "".join(f"# {line}\n" if line else "#\n" for line in header) + body
