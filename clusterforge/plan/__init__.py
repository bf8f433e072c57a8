"""Offline plan: what ``pulumi up`` would create for a spec, without the Pulumi CLI or AWS.

The same Pulumi program (``infra/program.py``) runs in the engine's mock mode; every resource it
registers is recorded with its type, name, parent and inputs. The plan adds the stack outputs,
the rendered config files with their hashes (from ``clusterforge.render``) and an estimated
hourly cost (``clusterforge/catalog/prices.yaml``). Values AWS assigns at creation (ids,
addresses, DNS names) appear as ``"(known after apply)"``, never invented.

API for the CLI (``clusterforge plan SPEC [--json]``)::

    from clusterforge.plan import build_plan, format_text, to_json

    rc = resolve_file(path).require_valid("planned")  # clusterforge.resolve: once, for every consumer
    plan = build_plan(rc, spec_path=path)           # -> Plan
    print(format_text(plan), end="")                # human-readable tree, counts, files, cost
    print(to_json(plan), end="")                    # stable, sorted JSON (``--json``)

``build_plan(rc, *, spec_path, stack=None, render=True) -> Plan`` can be
called repeatedly in one process (it resets the Pulumi runtime before each run), e.g. to diff
the plans of two specs. It raises ``PlanError`` (a ``ClusterforgeError``) when the spec has no
cloud part or the Pulumi SDK is missing, and ``LayoutError``/``EfaLayoutError`` (also
``ClusterforgeError``) when the spec cannot be laid out on AWS. Importing this package does not
import Pulumi; ``build_plan`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from clusterforge.plan.model import (
    SECRET,
    UNKNOWN,
    CostEstimate,
    CostLine,
    Plan,
    PlanError,
    PlannedFile,
    PlannedResource,
)
from clusterforge.plan.text import format_text, to_dict, to_json

if TYPE_CHECKING:
    from clusterforge.resolve import ResolvedCluster

__all__ = [
    "SECRET",
    "UNKNOWN",
    "CostEstimate",
    "CostLine",
    "Plan",
    "PlanError",
    "PlannedFile",
    "PlannedResource",
    "build_plan",
    "format_text",
    "to_dict",
    "to_json",
]


def build_plan(
    rc: ResolvedCluster,
    *,
    spec_path: str | Path,
    stack: str | None = None,
    render: bool = True,
) -> Plan:
    """Run the Pulumi program for a resolved cluster offline and return the plan (see module docs)."""
    from clusterforge.plan.build import build_plan as _build

    return _build(rc, spec_path=spec_path, stack=stack, render=render)
