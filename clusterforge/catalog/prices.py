"""Typed loader for ``prices.yaml``: the price table beside the hardware catalog.

The plan multiplies these by what the spec asks for. Every price is an estimate unless its row
says otherwise; read the header of ``prices.yaml`` for sources and dates.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

PRICES_FILE = Path(__file__).with_name("prices.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstancePrice(_Strict):
    on_demand: float = Field(gt=0, description="USD per hour, on-demand")
    spot: float | None = Field(None, gt=0, description="USD per hour, typical spot; None: no spot market")
    estimate: bool = True


class PriceTable(_Strict):
    currency: str
    region: str
    as_of: str
    hours_per_month: int = Field(gt=0)
    instances: dict[str, InstancePrice]
    fsx_lustre_persistent_2_gib_month: dict[int, float]
    efs_standard_gib_month: float
    ebs_gp3_gib_month: float
    nat_gateway_hour: float

    def instance(self, instance_type: str) -> InstancePrice | None:
        return self.instances.get(instance_type)

    def per_hour(self, monthly: float) -> float:
        return monthly / self.hours_per_month


@cache
def load_prices(path: Path = PRICES_FILE) -> PriceTable:
    # the data file shipped beside this module: libyaml when PyYAML has it (the catalog's way)
    return PriceTable.model_validate(yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
