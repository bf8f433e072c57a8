"""Rendered YAML files: data dumped by ``yaml.safe_dump`` under a comment header, never text from a template.

A template that prints YAML must quote every scalar by hand (a cluster named ``on`` or ``0123``,
a PromQL ``<``, a summary with ``: `` or ``{{``); ``safe_dump`` gets that right by construction.
"""

from __future__ import annotations

from typing import Any

import yaml

#: Never fold a line: a PromQL expression or a summary split over two lines is still valid YAML
#: but hard to read and to grep in the rendered file and in a diff.
WIDTH = 100_000


def dump_yaml(header: list[str], data: Any) -> str:
    """``# header`` lines, then ``data`` as block-style YAML.

    Keys keep the order the code builds them in (``sort_keys=False``): that order is fixed, so the
    output is stable, and it is the order of the upstream documentation (alert, expr, for, labels,
    annotations; topology, cluster_default, tree), which a reader compares against.
    """
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=WIDTH)
    return "".join(f"# {line}\n" if line else "#\n" for line in header) + body
