"""What a plan is: the resources the program would create, its outputs, the rendered files and
an estimated cost. Pure data (no Pulumi import), so formatting and diffing need no SDK."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from clusterforge.errors import ClusterforgeError

UNKNOWN = "(known after apply)"
"""How a value the cloud assigns at creation (an id, an address) appears in a plan."""
SECRET = "(secret)"
"""How a secret value appears in a plan."""

PLAN_FORMAT = 1
"""Version of the JSON layout written by ``to_json`` (bump when keys change)."""


class PlanError(ClusterforgeError):
    """The offline plan cannot be built (Pulumi SDK missing, program not found, ...)."""


@dataclass(frozen=True)
class PlannedResource:
    """One resource the program registers.

    ``key`` is ``type::name``: stable between runs and unique in a stack (the program prefixes
    every name with its component's name), so two plans diff resource by resource.
    ``kind``: ``component`` (a ``clusterforge:aws:*`` grouping), ``provider`` or ``resource``.
    ``properties``: the inputs as the program gives them; values the cloud assigns read
    ``(known after apply)``, secrets ``(secret)``, user data its sha256.
    ``protected``: created with ``protect=True`` (`pulumi destroy` stops at it: it holds data).
    """

    key: str
    type: str
    name: str
    parent: str | None
    kind: str
    properties: dict[str, Any] = field(default_factory=dict)
    protected: bool = False


@dataclass(frozen=True)
class PlannedFile:
    name: str
    node_path: str
    sha256: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    unit: str
    unit_price_hour: float | None
    hourly: float
    basis: str
    estimate: bool = True


@dataclass(frozen=True)
class CostEstimate:
    currency: str
    region: str
    as_of: str
    hours_per_month: int
    lines: tuple[CostLine, ...]
    notes: tuple[str, ...] = ()

    @property
    def total_hourly(self) -> float:
        return sum(line.hourly for line in self.lines)

    @property
    def total_monthly(self) -> float:
        return self.total_hourly * self.hours_per_month


@dataclass(frozen=True)
class Plan:
    cluster: str
    spec_path: str
    stack: str
    region: str
    resources: tuple[PlannedResource, ...]
    outputs: dict[str, Any]
    files: tuple[PlannedFile, ...]
    cost: CostEstimate
    notes: tuple[str, ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        """Resources per type token (components and providers included), sorted by type."""
        c = Counter(r.type for r in self.resources)
        return dict(sorted(c.items()))

    @property
    def cloud_resource_count(self) -> int:
        """Resources that exist in AWS (no components, no provider)."""
        return sum(1 for r in self.resources if r.kind == "resource")

    def resource(self, key: str) -> PlannedResource:
        for r in self.resources:
            if r.key == key:
                return r
        raise KeyError(key)
