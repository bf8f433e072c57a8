"""Which real Slurm release loads a render made for a target release: the release families.

Slurm has no config-test mode and keys come and go between releases, so a render is proven only
by daemons of (nearly) the release it targets. Debian's archive, which this machine reaches,
carries three releases; each stands in for the targets around it (newest Slurm of the range that
Debian ships, so a key the target has and the stand-in lacks is the rare case, not the rule):

=================  =====================  =====================
targets            Debian release         stands in
=================  =====================  =====================
22.05              12 bookworm            slurm-wlm 22.05.8
23.02 .. 24.11     13 trixie              slurm-wlm 24.11.5
25.05 .. 26.05     sid (unstable)         slurm-wlm 26.05.5
=================  =====================  =====================

Sources: packages.debian.org/bookworm/slurmctld (22.05.8-4+deb12u*), /trixie/slurmctld
(24.11.5-*), /sid/slurmctld (26.05.5-*), and ``slurmctld -V`` of each cached root filesystem
(``clusterforge/local/rootfs.sh CACHE SUITE slurm``). The ranges are by "NN.MM" (Slurm's
release numbering: year.month), so a target added to the spec later (25.11, 26.05) maps by range
without a change here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FAMILIES", "Family", "family_for", "release_of"]


@dataclass(frozen=True)
class Family:
    suite: str  # Debian suite: the rootfs is $CACHE/rootfs-<suite>-slurm
    debian: str  # how the report names the distribution
    stands_in: str  # the slurm-wlm version Debian ships in that suite
    first: tuple[int, int]  # oldest target release it loads (inclusive)
    last: tuple[int, int]  # newest target release it loads (inclusive)

    def covers(self, release: tuple[int, int]) -> bool:
        return self.first <= release <= self.last

    @property
    def targets(self) -> str:
        lo, hi = (f"{y:02d}.{m:02d}" for y, m in (self.first, self.last))
        return lo if lo == hi else f"{lo}..{hi}"


FAMILIES: tuple[Family, ...] = (
    Family("bookworm", "Debian 12 bookworm", "22.05.8", (22, 5), (22, 5)),
    Family("trixie", "Debian 13 trixie", "24.11.5", (23, 2), (24, 11)),
    Family("sid", "Debian sid", "26.05.5", (25, 5), (26, 5)),
)

_RELEASE = re.compile(r"(\d{2})\.(\d{2})")


def release_of(text: str) -> tuple[int, int] | None:
    """``"24.05"`` or ``"slurm-wlm 24.11.5"`` → (24, 5); None when there is no NN.MM in it."""
    m = _RELEASE.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def family_for(version: str) -> Family | None:
    """The family that loads a render for ``version`` ("NN.MM" or a ``-V`` line), or None."""
    release = release_of(version)
    if release is None:
        return None
    return next((f for f in FAMILIES if f.covers(release)), None)
