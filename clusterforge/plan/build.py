"""``build_plan``: run the Pulumi program offline (engine mock mode) and assemble a ``Plan``."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterforge.aws import layout
from clusterforge.plan.cost import estimate_cost
from clusterforge.plan.model import Plan, PlanError, PlannedFile, PlannedResource
from clusterforge.resolve import ResolvedCluster

if TYPE_CHECKING:
    from clusterforge.plan.mocks import Recording

#: Inputs shown as a digest: large, opaque, and what matters in a diff is whether they changed.
DIGESTED = ("userData", "userDataBase64")


def _properties(inputs: dict[str, Any]) -> dict[str, Any]:
    props = dict(inputs)
    for k in DIGESTED:
        v = props.get(k)
        if isinstance(v, str):
            props[k] = "sha256:" + hashlib.sha256(v.encode()).hexdigest()
    return props


def _kind(type_: str, custom: bool) -> str:
    if type_.startswith("pulumi:providers:"):
        return "provider"
    return "resource" if custom else "component"


def build_plan(
    rc: ResolvedCluster,
    *,
    spec_path: str | Path,
    stack: str | None = None,
    render: bool = True,
) -> Plan:
    """Plan a resolved cluster offline; see :mod:`clusterforge.plan` for the contract."""
    cluster = rc.spec
    if cluster.aws is None or not layout.cloud_groups(cluster):
        raise PlanError(
            f"cluster {cluster.name!r} has no cloud node groups (or no 'aws' section): there is nothing "
            "for Pulumi to create; use `clusterforge render` for on-prem-only clusters"
        )
    try:
        from clusterforge.plan.mocks import run_program
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise PlanError(
            f"clusterforge plan needs the Pulumi SDK ({exc.name} is missing): pip install 'clusterforge[cloud]'"
        ) from None
    stack = stack or cluster.name
    recording = run_program(rc, preview=True, stack=stack)
    return plan_from_recording(rc, recording, spec_path=spec_path, stack=stack, render=render)


def plan_from_recording(
    rc: ResolvedCluster,
    recording: Recording,
    *,
    spec_path: str | Path,
    stack: str,
    render: bool = True,
) -> Plan:
    """Assemble a plan from a preview-mode recording of the program (``run_program(..., preview=True)``)."""
    cluster = rc.spec
    assert cluster.aws is not None
    keys = {r.urn: r.key for r in recording.resources}
    resources = tuple(
        sorted(
            (
                PlannedResource(
                    key=r.key,
                    type=r.type,
                    name=r.name,
                    parent=keys.get(r.parent_urn) if r.parent_urn else None,
                    kind=_kind(r.type, r.custom),
                    properties=_properties(r.inputs),
                    protected=r.protect,
                )
                for r in recording.resources
            ),
            key=lambda r: r.key,
        )
    )
    notes: list[str] = [
        "Offline plan: the Pulumi program ran in the engine's mock mode; nothing was sent to AWS. "
        "Values AWS assigns at creation read '(known after apply)'.",
    ]
    files: tuple[PlannedFile, ...] = ()
    if render:
        files = _rendered_files(rc)
    return Plan(
        cluster=cluster.name,
        spec_path=str(spec_path),
        stack=stack,
        region=cluster.aws.region,
        resources=resources,
        outputs=recording.outputs,
        files=files,
        cost=estimate_cost(rc),
        notes=tuple(notes),
    )


def _rendered_files(rc: ResolvedCluster) -> tuple[PlannedFile, ...]:
    from clusterforge.render import render

    result = render(rc)
    return tuple(
        PlannedFile(name=f.name, node_path=f.node_path, sha256=f.sha256, groups=tuple(f.groups))
        for f in sorted(result.files.values(), key=lambda f: f.name)
    )
