"""``slurm.package_repo``: an apt repository of the site's own Slurm builds.

Its own module so that models.py stays one screenful per section; models.py imports it.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clusterforge.clusterspec.types import one_line


def _is_url(v: str, schemes: tuple[str, ...]) -> bool:
    u = urlsplit(v)
    return u.scheme in schemes and bool(u.hostname) and not any(c.isspace() for c in v)


_APT_WORD = r"^[A-Za-z0-9.][A-Za-z0-9._+~/-]*$"


class PackageRepo(BaseModel):
    """An apt repository of the site's own Slurm builds (docs/slurm-packages.md).

    The fields are apt's deb822 source fields (sources.list(5): URIs, Suites, Components,
    Signed-By), the ones ansible.builtin.deb822_repository takes; the Slurm role adds the source
    and pins the target release family, so apt installs that family from it and nothing else.
    """

    # as models.Model: unknown keys are errors, values immutable once loaded
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    uris: Annotated[list[str], Field(min_length=1)] = Field(
        description="repository base URLs (http or https; apt checks the signature, not the transport)",
        examples=[["https://apt.example.org/slurm"]],
    )
    suites: Annotated[list[Annotated[str, Field(pattern=_APT_WORD)]], Field(min_length=1)] = Field(
        description="suites (distributions), e.g. trixie; a path ending in '/' (e.g. './') is a flat "
        "repository, which takes no components"
    )
    components: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]] = Field(
        default_factory=lambda: ["main"], description="components, e.g. main; empty for a flat repository"
    )
    signed_by: str = Field(
        description="the repository's signing key: an https URL of the key or an absolute path on the nodes "
        "(Signed-By); apt refuses unsigned repositories"
    )
    packaging: Literal["debian", "schedmd"] = Field(
        "debian",
        description="debian: Debian's own package names (slurmctld, slurmd, slurm-client, slurmdbd), "
        "built from the slurm-wlm source package; schedmd: the release tarball's packaging "
        "(slurm-smd-slurmctld, slurm-smd-slurmd, slurm-smd-client, slurm-smd-slurmdbd)",
    )

    @field_validator("*")
    @classmethod
    def _one_line(cls, v: object) -> object:  # as models.Model: no newline reaches the apt source
        return one_line(v)

    @field_validator("uris")
    @classmethod
    def _uris(cls, v: list[str]) -> list[str]:
        for u in v:
            if not _is_url(u, ("http", "https")):
                raise ValueError(f"{u!r} is not an http or https URL; write it like https://apt.example.org/slurm")
        return v

    @field_validator("signed_by")
    @classmethod
    def _key(cls, v: str) -> str:
        if v.startswith("/"):
            if not re.fullmatch(r"/[A-Za-z0-9._/+-]+", v):
                raise ValueError(f"signed_by path {v!r} has characters a key path does not need; use e.g. "
                                 "/etc/apt/keyrings/site-slurm.gpg")
            return v
        if not _is_url(v, ("https",)):
            # a key fetched over plain http could be swapped on the way, and it is what apt trusts
            raise ValueError(
                f"{v!r} is neither an https URL nor an absolute path: apt needs the repository's key, fetched "
                "over https (https://apt.example.org/slurm/key.asc) or placed on the nodes "
                "(/etc/apt/keyrings/site-slurm.gpg)"
            )
        return v

    @model_validator(mode="after")
    def _flat_or_components(self) -> PackageRepo:
        flat = [s for s in self.suites if s.endswith("/")]
        if flat and self.components:
            raise ValueError(
                f"suites {flat} name a flat repository (a path ending in '/'), which has no components, but "
                f"components is {self.components}; set components: [] (sources.list(5): 'if Suites is an "
                "exact path, Components must be omitted')"
            )
        if not flat and not self.components:
            raise ValueError(
                f"suites {self.suites} are distributions, which need components (e.g. [main]); or give a "
                "flat repository's path ending in '/' (e.g. './')"
            )
        return self
