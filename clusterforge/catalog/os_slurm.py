"""Which Slurm each distribution ships (``os_slurm.yaml``), typed.

The spec's ``os`` names a row of ``distributions``; ``build_sources`` are releases that carry a
Slurm but are no spec OS (Debian sid: a site builds its own packages from it). A Slurm *release
family* is ``major.minor`` (``"24.11"``): the spec targets one, and the Slurm role pins it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

TABLE_FILE = Path(__file__).with_name("os_slurm.yaml")


class ShippedSlurm(BaseModel):
    """One distribution release's own Slurm (the ``slurm-wlm`` source package)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    codename: str
    slurm: str = Field(pattern=r"^\d{2}\.\d{2}\.\d+$", description="upstream version, e.g. 24.11.5")
    package: str = Field(description="the Debian package version, e.g. 24.11.5-4+deb13u1")
    proven: Literal["daemons", "lint"]
    source: str

    @property
    def family(self) -> str:
        return release_family(self.slurm)


class OsSlurmTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    distributions: dict[str, ShippedSlurm]
    build_sources: dict[str, ShippedSlurm]


def release_family(version: str) -> str:
    """``"24.11.5"`` or ``"24.11"`` -> ``"24.11"`` (Slurm's major.minor release)."""
    m = re.match(r"^(\d+)\.(\d+)", version)
    if not m:
        raise ValueError(f"{version!r} is not a Slurm version such as 24.11 or 24.11.5")
    return f"{int(m.group(1)):02d}.{int(m.group(2)):02d}"


@cache
def load_table(path: Path = TABLE_FILE) -> OsSlurmTable:
    # the data file shipped beside this module: libyaml when PyYAML has it (the catalog's way)
    raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return OsSlurmTable(
        distributions={k: ShippedSlurm(name=k, **v) for k, v in raw["distributions"].items()},
        build_sources={k: ShippedSlurm(name=k, **v) for k, v in raw["build_sources"].items()},
    )


def shipped(os_name: str) -> ShippedSlurm:
    """The Slurm ``os_name``'s archive ships; KeyError for an OS the table lacks."""
    return load_table().distributions[os_name]


def oses_shipping(family: str) -> list[ShippedSlurm]:
    """The spec OSes whose archive ships release ``family``, in table order."""
    return [d for d in load_table().distributions.values() if d.family == family]
