"""Rules on where the hosts get the target Slurm: the OS's own archive or the site's repository.

The Slurm role installs exactly the target release family (major.minor) and fails when the
daemons say otherwise, so a target the OS does not ship (clusterforge/catalog/os_slurm.yaml)
would only fail on the hosts: it is an error here unless ``slurm.package_repo`` names the site's
own builds.
"""

from __future__ import annotations

from collections.abc import Iterator

from clusterforge.catalog.os_slurm import load_table, oses_shipping, release_family, shipped
from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, rule

DOC = "docs/slurm-packages.md"


@rule
def slurm_packages(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    target = release_family(c.slurm.version)
    have = shipped(c.os)
    if have.family == target or c.slurm.package_repo is not None:
        return
    others = oses_shipping(target)
    if others:
        way_os = " or ".join(f"set os: {o.name}, which ships {o.family} ({o.slurm})" for o in others)
    else:
        ships = ", ".join(f"{d.name} ships {d.family}" for d in load_table().distributions.values())
        way_os = (
            f"no OS clusterforge knows ships {target} ({ships}: clusterforge/catalog/os_slurm.yaml): "
            "set slurm.version and os to one of those pairs"
        )
    yield Finding(
        Level.ERROR, "slurm-not-shipped", "slurm.version", c.slurm.version,
        f"os {c.os} ({have.codename}) ships Slurm {have.slurm}, not {target}, and slurm.package_repo is "
        f"not set: the Slurm role installs exactly the {target} family, so the hosts would have no "
        "package to install.",
        f"{way_os}; or name your own builds of {target} in slurm.package_repo{_build_source(target)}: see {DOC}.",
    )


def _build_source(family: str) -> str:
    """Where a site can take the source package of ``family`` from, when a release carries it."""
    srcs = [b for b in load_table().build_sources.values() if b.family == family]
    return "".join(f" (Debian {b.codename}'s slurm-wlm {b.slurm} is one to build them from)" for b in srcs)
