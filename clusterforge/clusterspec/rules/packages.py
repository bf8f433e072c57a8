"""Rules on where the hosts get the target Slurm: the OS's own archive or the site's repository.

The Slurm role installs exactly the target release family (major.minor) and fails when the
daemons say otherwise, so a target the OS does not ship (clusterforge/catalog/os_slurm.yaml)
would only fail on the hosts: it is an error here unless ``slurm.package_repo`` names the site's
own builds. The AMI is the other half of the pair: an AMI of another OS than ``os`` would get
the packages (and apt suites) of the wrong release.
"""

from __future__ import annotations

import re
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


# The OS an AMI parameter names. AWS's Deep Learning AMIs: .../base-oss-nvidia-driver-gpu-ubuntu-24.04/...;
# Canonical's own: /aws/service/canonical/ubuntu/server/24.04/... or .../server/noble/... (Ubuntu's
# "Finding Ubuntu images with the AWS SSM Parameter Store"). A plain ami-... id says nothing.
_DLAMI_UBUNTU = re.compile(r"ubuntu-(\d\d\.\d\d)(?![\d.])")
_CANONICAL_UBUNTU = re.compile(r"/canonical/ubuntu/[a-z-]+/([a-z]+|\d\d\.\d\d)/")
# Debian's own: /aws/service/debian/release/bookworm/latest/amd64 (or .../release/12/...)
_DEBIAN = re.compile(r"/debian/release/([a-z]+|\d+)/")


def ami_os(ami: str) -> str | None:
    """The spec ``os`` an AMI parameter is built from (``ubuntu-24.04``), or None when it does not say."""
    if not ami.startswith("resolve:ssm:"):
        return None
    m = _DLAMI_UBUNTU.search(ami)
    if m:
        return f"ubuntu-{m.group(1)}"
    by_codename = {d.codename: d.name for d in load_table().distributions.values()}
    for pattern, distro in ((_CANONICAL_UBUNTU, "ubuntu"), (_DEBIAN, "debian")):
        m = pattern.search(ami)
        if m is not None:
            rel = m.group(1)
            if rel[0].isdigit():
                return f"{distro}-{rel}"
            return by_codename.get(rel, f"{distro} ({rel})")
    return None


@rule
def ami_matches_os(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    if c.aws is None:
        return
    amis = [("aws.ami", c.aws.ami)] + [
        (f"node_groups[{i}].cloud.ami", g.cloud.ami)
        for i, g in enumerate(c.node_groups) if g.cloud is not None and g.cloud.ami is not None
    ]
    for path, ami in amis:
        built = ami_os(ami)
        if built is None or built == c.os:
            continue
        have = shipped(c.os)
        yield Finding(
            Level.ERROR, "ami-os-mismatch", path, ami,
            f"the AMI is {built} but os is {c.os} ({have.codename}): the roles would install {have.codename}'s "
            f"packages (apt suites, Slurm, drivers) on a {built} host.",
            f"set os: {built} (and a slurm.version it ships), or an AMI of {c.os}"
            + (f" (for example resolve:ssm:{_dlami(c.os)})" if c.os.startswith("ubuntu-") else "") + ".",
        )


def _dlami(os_name: str) -> str:
    return f"/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-{os_name}/latest/ami-id"
