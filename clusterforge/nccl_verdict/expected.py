"""Typed loader for ``catalog/nccl_expected.yaml``: published all_reduce_perf busbw per type."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

EXPECTED_FILE = Path(__file__).resolve().parent.parent / "catalog" / "nccl_expected.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    title: str
    url: str
    date: str


class Expectation(_Strict):
    name: str
    scope: Literal["multi-node", "single-node"]
    nodes: int = Field(ge=1)
    gpu: str
    busbw_gbs: float = Field(gt=0)
    at_bytes: int | None = None
    single_node: str | None = None
    notes: str = ""
    sources: tuple[Source, ...] = Field(min_length=1)


@cache
def load_expectations(path: Path = EXPECTED_FILE) -> dict[str, Expectation]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    table = {name: Expectation(name=name, **row) for name, row in raw["expectations"].items()}
    for e in table.values():  # a dangling single_node key is a catalog bug: fail on load, in the tests
        target = table.get(e.single_node) if e.single_node is not None else None
        if e.single_node is not None and (target is None or target.scope != "single-node"):
            raise ValueError(f"{path}: {e.name}.single_node {e.single_node!r} is not a single-node entry")
    return table
