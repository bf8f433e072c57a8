"""CPU lists (``0-47,96-143``) and the logical-CPU -> core-index numbering gres.conf needs.

CPU numbering assumption (used for gres.conf ``Cores=``): the GPU tools report affinity as
logical CPU (hardware *thread*) ids, Slurm wants *core* indices (hwloc ``Core L#``). With S
sockets x C cores x T threads, x86 Linux numbers the first thread of every core 0..S*C-1,
socket by socket, and the SMT siblings after that in the same order (CPU ``i + k*S*C`` is thread
``k`` of core ``i``). So core index = CPU id for ids below S*C. :func:`threads_to_cores` checks
that a CPU list is consistent with this numbering, and :func:`.apply.apply_facts` checks every
NUMA node lscpu reports, so a host that numbers its CPUs otherwise (siblings adjacent, sockets
interleaved) is refused instead of getting wrong ``Cores=``.

The range syntax is Slurm's hostlist range set, so the codec is :mod:`clusterforge.hostlist`'s
(a bare ``0-3,8`` is the inside of ``[0-3,8]``); this module only bounds the input first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from clusterforge import hostlist
from clusterforge.catalog.facts.models import FactsError
from clusterforge.catalog.facts.text import NUM

_MAX_SPAN = 1_000_000  # hostlist.expand_ints refuses larger lists; no host has that many CPUs
_CPU_LIST = re.compile(rf"\s*{NUM}(?:-{NUM})?\s*(?:,\s*{NUM}(?:-{NUM})?\s*)*")


def parse_cpu_list(text: str, source: str = "CPU list") -> list[int]:
    """``0-47,96-143`` -> sorted ids. Raises FactsError on anything else."""
    body = text.strip()
    if not body:
        raise FactsError(f"{source}: empty CPU list")
    # Checked here, not left to hostlist: only ASCII digits of bounded length, and no brackets
    # that would turn the list into a different hostlist expression.
    if not _CPU_LIST.fullmatch(body):
        raise FactsError(f"{source}: bad CPU list {text!r}: expected ranges like 0-47,96-143")
    for part in body.split(","):
        lo, _, hi = part.strip().partition("-")
        if hi and not 0 <= int(hi) - int(lo) < _MAX_SPAN:
            raise FactsError(f"{source}: bad CPU range {part.strip()!r} in {text!r}: low-high, under a million CPUs")
    try:
        # expand_ints, not expand("[...]"): a host range stops at Slurm's 65536, a CPU list does not
        ids = set(hostlist.expand_ints(body, field=source))
    except hostlist.HostlistError as exc:  # not reached after the checks above; kept as a guard
        raise FactsError(f"{source}: bad CPU list {text!r}: {exc}") from exc
    return sorted(ids)


def format_ranges(nums: Iterable[int]) -> str:
    """Sorted, de-duplicated ids as Slurm ranges: [0,1,2,3,8] -> ``0-3,8``."""
    values = sorted(set(nums))
    if not values:
        return ""
    # hostlist.compress writes a prefix-less name set as "[0-3,8]" (one id: "8", no brackets).
    return hostlist.compress(str(v) for v in values).strip("[]")


def threads_to_cores(
    cpu_ids: Iterable[int],
    sockets: int,
    cores_per_socket: int,
    threads_per_core: int,
    source: str = "CPU list",
) -> list[int]:
    """Logical CPU (thread) ids -> Slurm core indices, under the numbering in the module docstring.

    CPU ``c + k*S*C`` is thread k of core c, so the answer is the ids below S*C. Every thread of
    a listed core must be listed too (affinity masks cover whole cores); a list that is not
    consistent with that numbering raises FactsError rather than yield wrong ``Cores=``.
    """
    ncores = sockets * cores_per_socket
    total = ncores * threads_per_core
    ids = sorted(set(cpu_ids))
    if ncores <= 0 or threads_per_core <= 0:
        raise FactsError(f"{source}: CPU layout {sockets}x{cores_per_socket}x{threads_per_core} is empty")
    if ids and ids[-1] >= total:
        raise FactsError(
            f"{source}: CPU {ids[-1]} is beyond the {total} CPUs of a "
            f"{sockets}x{cores_per_socket}x{threads_per_core} (sockets x cores x threads) host"
        )
    by_thread: dict[int, set[int]] = {k: set() for k in range(threads_per_core)}
    for cpu in ids:
        by_thread[cpu // ncores].add(cpu % ncores)
    cores = by_thread[0]
    for k in range(1, threads_per_core):
        if by_thread[k] != cores:
            raise FactsError(
                f"{source}: CPUs {format_ranges(ids)} do not hold whole cores when CPU i and "
                f"i+{ncores * k} are threads of core i; this host numbers its CPUs differently, "
                "so gres.conf Cores= cannot be derived: set the affinity by hand"
            )
    return sorted(cores)
