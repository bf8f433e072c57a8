"""Run the Pulumi program in the engine's mock mode and record what it registers.

Two modes share one table of computed attributes:

* ``preview=True`` (the offline plan): like ``pulumi preview``, nothing is created, so every
  value the cloud would assign (ids, ARNs, addresses, DNS names) stays *unknown* and is reported
  as :data:`UNKNOWN`; inputs are recorded exactly as the program gave them.
* ``preview=False`` (unit tests): ids and computed attributes get deterministic fakes
  (``<name>-id``), so tests can check that one resource references another (an EFA rule's
  source group is its own group).

The Pulumi runtime keeps global state (settings, root stack resource, RPC manager, event loop);
:func:`run_program` resets all of it before each run, so it can be called any number of times
in one process (tests, ``clusterforge diff`` planning two specs).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from clusterforge.clusterspec.models import Cluster
from clusterforge.plan.model import SECRET, UNKNOWN
from clusterforge.resolve import ResolvedCluster

__all__ = ["SECRET", "UNKNOWN", "RecordedResource", "Recording", "RecordingMocks", "run_program"]

#: Key pulumi uses to mark a secret value inside deserialized properties.
_SECRET_SIG = "4dabf18193072939515e22adb298388d"

#: Attributes the cloud computes, per type token: (attribute, fake value pattern for tests).
#: ``{name}`` is the logical resource name. Attributes not listed echo their inputs (as in a
#: real preview, where the engine shows inputs as the planned outputs).
COMPUTED: dict[str, dict[str, str]] = {
    "aws:ec2/vpc:Vpc": {"arn": "arn:aws:ec2:::vpc/{name}"},
    "aws:ec2/instance:Instance": {
        "arn": "arn:aws:ec2:::instance/{name}",
        "private_ip": "10.0.0.10",
        "public_ip": "198.51.100.10",
        "primary_network_interface_id": "eni-{name}",
    },
    "aws:ec2/launchTemplate:LaunchTemplate": {
        "arn": "arn:aws:ec2:::launch-template/{name}",
        "latest_version": "1",
    },
    "aws:ec2/placementGroup:PlacementGroup": {"name": "{name}"},
    "aws:ec2/securityGroup:SecurityGroup": {"arn": "arn:aws:ec2:::security-group/{name}", "name": "{name}"},
    "aws:autoscaling/group:Group": {"arn": "arn:aws:autoscaling:::{name}", "name": "{name}"},
    "aws:iam/role:Role": {"arn": "arn:aws:iam::123456789012:role/{name}", "name": "{name}"},
    "aws:iam/instanceProfile:InstanceProfile": {
        "arn": "arn:aws:iam::123456789012:instance-profile/{name}",
        "name": "{name}",
    },
    "aws:iam/rolePolicy:RolePolicy": {"name": "{name}"},
    "aws:fsx/lustreFileSystem:LustreFileSystem": {
        "arn": "arn:aws:fsx:::file-system/{name}",
        "dns_name": "{name}.fsx.example.internal",
        "mount_name": "abcdefgh",
    },
    "aws:efs/fileSystem:FileSystem": {
        "arn": "arn:aws:efs:::{name}",
        "dns_name": "{name}.efs.example.internal",
    },
    "aws:ssm/parameter:Parameter": {"arn": "arn:aws:ssm:::parameter/{name}"},
    "aws:kms/key:Key": {"arn": "arn:aws:kms:::key/{name}", "key_id": "{name}-key-id"},
    "aws:dynamodb/table:Table": {"arn": "arn:aws:dynamodb:::table/{name}"},
    "aws:ec2/natGateway:NatGateway": {"public_ip": "198.51.100.20"},
    "aws:ec2/eip:Eip": {"public_ip": "198.51.100.30"},
}


def _camel(s: str) -> str:
    head, *rest = s.split("_")
    return head + "".join(p.title() for p in rest)


def clean(value: Any) -> Any:
    """Inputs as plain JSON-able data: unknowns -> :data:`UNKNOWN`, secrets -> :data:`SECRET`."""
    if isinstance(value, pulumi.output.Unknown):
        return UNKNOWN
    if isinstance(value, dict):
        if _SECRET_SIG in value:
            return SECRET
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf carries every number as a double
    return value


@dataclass
class RecordedResource:
    """One registered resource: custom resources, components and providers alike."""

    urn: str
    type: str
    name: str
    parent_urn: str | None
    custom: bool
    inputs: dict[str, Any] = field(default_factory=dict)
    protect: bool = False
    """the ``protect`` resource option (the policy pack's stateful-resource rule reads it)"""
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    """input name -> URNs it depends on (the pack links a backup policy to its file system by it)"""

    @property
    def key(self) -> str:
        """Stable, diff-friendly identity: ``type::name`` (names are unique per type here)."""
        return f"{self.type}::{self.name}"


@dataclass
class Recording:
    resources: list[RecordedResource]
    outputs: dict[str, Any]

    def of_type(self, type_: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_]

    def by_urn(self) -> dict[str, RecordedResource]:
        return {r.urn: r for r in self.resources}


class RecordingMocks(pulumi.runtime.Mocks):  # type: ignore[misc]  # pulumi is not followed by mypy
    """Table-driven mocks (see :data:`COMPUTED`)."""

    def __init__(self, *, preview: bool) -> None:
        self.preview = preview
        self.inputs: dict[tuple[str, str], dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.inputs[(args.typ, args.name)] = args.inputs
        state = dict(args.inputs)
        if self.preview:
            # Nothing exists yet: no id, no computed attributes (they resolve as unknown).
            return None, state
        for attr, pattern in COMPUTED.get(args.typ, {}).items():
            state.setdefault(_camel(attr), pattern.format(name=args.name))
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        # The program makes no provider calls (invokes); fail loudly if one appears, since its
        # result would be invented.
        raise NotImplementedError(f"unexpected provider call {args.token} under mocks")


class RecordingMonitor(pulumi_mocks.MockMonitor):  # type: ignore[misc]  # pulumi is not followed by mypy
    """A mock monitor that also records each registration's parent (``MockResourceArgs`` lacks it)."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.recorded: list[RecordedResource] = []
        self._mocks = mocks

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = self._mocks.inputs.get((request.type, request.name), {})
            self.recorded.append(
                RecordedResource(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent_urn=request.parent or None,
                    custom=bool(request.custom),
                    inputs=clean(inputs),
                    protect=bool(request.protect),
                    property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                )
            )
        return response


def infra_root() -> Path:
    """The project root holding ``Pulumi.yaml`` and ``infra/`` (a checkout of clusterforge)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "infra" / "program.py").is_file():
        raise FileNotFoundError(
            f"the Pulumi program infra/program.py is not next to the clusterforge package ({root}); "
            "run clusterforge from its checkout (pip install -e .)"
        )
    return root


class _Program:
    """The two entry points of ``infra.program`` the plan uses (imported by path at run time, so
    static analysis of clusterforge never descends into the Pulumi program and pulumi_aws)."""

    def __init__(self) -> None:
        root = str(infra_root())
        if root not in sys.path:
            sys.path.insert(0, root)
        module = importlib.import_module("infra.program")

        self.required_secrets: Callable[[Cluster], tuple[str, ...]] = module.required_secrets
        self.deploy: Callable[..., dict[str, Any]] = module.deploy

async def _resolve(value: Any) -> Any:
    """Stack outputs as plain data; an unknown leaf becomes :data:`UNKNOWN`."""
    if isinstance(value, pulumi.Output):
        if not await value.is_known():
            return UNKNOWN
        if await value.is_secret():
            return SECRET
        return await _resolve(await value.future())
    if isinstance(value, dict):
        return {str(k): await _resolve(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [await _resolve(v) for v in value]
    if value == "" or isinstance(value, pulumi.output.Unknown):
        return UNKNOWN  # an id the mock left empty
    return value


def run_program(
    rc: ResolvedCluster,
    *,
    preview: bool,
    secrets: Mapping[str, str] | None = None,
    project: str = "clusterforge",
    stack: str | None = None,
) -> Recording:
    """Run ``infra.program.deploy`` for ``cluster`` under fresh mocks and return what it registered.

    ``secrets`` default to placeholders for every secret the spec needs (their values never
    matter offline). Raises whatever the program raises (spec/layout errors name the field).
    """
    cluster = rc.spec
    stack = stack or cluster.name
    mocks = RecordingMocks(preview=preview)
    monitor = RecordingMonitor(mocks)
    # Fresh global runtime state: no root stack left over from an earlier run, a new RPC manager.
    pulumi_settings.reset_options(project=project, stack=stack, preview=preview)
    _ensure_loop()
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=preview, monitor=monitor)
    pulumi_settings.SETTINGS.outputs.clear()
    program_module = _Program()  # after set_mocks: pulumi_aws must see the mock runtime

    values = {s: pulumi.Output.secret(SECRET) for s in program_module.required_secrets(cluster)}
    if secrets:
        values.update({k: pulumi.Output.secret(v) for k, v in secrets.items()})
    captured: dict[str, Any] = {}

    def program() -> None:
        outputs = program_module.deploy(rc, secrets=values)
        captured.update(_sync_await(_resolve(outputs)))

    _sync_await(run_pulumi_func(program))
    return Recording(resources=list(monitor.recorded), outputs=captured)


def _ensure_loop() -> None:
    """Pulumi's sync helpers need a current, open event loop on this thread."""
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
        if loop.is_closed():
            raise RuntimeError
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())
