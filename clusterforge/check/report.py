"""What ``clusterforge check`` found: problem kinds, problems, the private copy's overrides, the
daemons' parsed answers and timings (``CheckReport``), and its text form (``format_report``)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterforge import hostlist

__all__ = ["CheckReport", "GresDevice", "Override", "Problem", "ProblemKind", "format_report"]


class ProblemKind(enum.StrEnum):
    """What went wrong. ``MANIFEST``, ``ENVIRONMENT`` and ``TIMEOUT`` mean the check could not
    judge the config."""

    MANIFEST = "manifest"  # manifest.json/expect or a rendered file missing or malformed
    ENVIRONMENT = "environment"  # not root, a binary missing, munged or a namespace would not start
    PARSE = "parse"  # client-side parse of slurm.conf failed, or it expands node names differently
    REJECTED = "rejected"  # slurmctld exited instead of running as primary controller
    TIMEOUT = "timeout"  # a daemon neither finished nor failed within the time limit
    LOG_ERROR = "log_error"  # an error:/fatal: line from slurmctld that is not known noise
    SCONTROL = "scontrol"  # a scontrol query failed while slurmctld was up
    CONTROLLER_MISMATCH = "controller_mismatch"  # SlurmctldHost name/address differ from expect
    NODE_MISSING = "node_missing"  # expected node absent from scontrol show node
    NODE_UNEXPECTED = "node_unexpected"  # slurmctld knows a node that expect does not list
    NODE_MISMATCH = "node_mismatch"  # CPUTot, Sockets, RealMemory, Gres, features, ... differ
    GRES_DROPPED = "gres_dropped"  # Gres=(null) where GPUs were expected (missing GresTypes)
    PARTITION_MISSING = "partition_missing"
    PARTITION_MISMATCH = "partition_mismatch"  # Nodes/Default/MaxTime differ, or not expected
    TOPOLOGY_MISMATCH = "topology_mismatch"  # plugin differs; switches missing, extra, other nodes
    GRES_MISMATCH = "gres_mismatch"  # slurmd -G count/type/files differ from expect
    GRES_ERROR = "gres_error"  # slurmd -G printed error/fatal/WARNING lines or failed
    GRES_DEVICE_MISSING = "gres_device_missing"  # gres.conf names a device expect does not have


_INCONCLUSIVE = frozenset({ProblemKind.MANIFEST, ProblemKind.ENVIRONMENT, ProblemKind.TIMEOUT})


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    message: str
    subject: str | None = None  # node, partition, switch or file the problem is about


@dataclass(frozen=True)
class Override:
    """One change the check made to its private copy; ``None`` value = key removed or added."""

    file: str
    key: str
    original: str | None
    value: str | None
    reason: str


@dataclass(frozen=True)
class GresDevice:
    """One ``Gres Name=… Type=… Count=… File=…`` line printed by ``slurmd -G``."""

    name: str
    type: str | None
    count: int
    files: tuple[str, ...]
    fields: dict[str, str]


@dataclass
class CheckReport:
    path: Path
    cluster: str | None = None
    slurm_version: str | None = None  # the release the render targets (manifest slurm_version)
    daemons: str | None = None  # which release loaded it: "slurm-wlm 24.11.5 (Debian 13 trixie root filesystem …)"
    problems: list[Problem] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)
    # Parsed daemon output: scontrol show node -o (by NodeName), show partition -o (by
    # PartitionName), show topology (switches by SwitchName), and slurmd -G (by probed node name).
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    topology: dict[str, dict[str, str]] = field(default_factory=dict)
    # scontrol show topology's blocks (topology/block): by BlockName, and the aggregates a larger
    # BlockSizes entry makes, by AggregatedBlock (the member names)
    blocks: dict[str, dict[str, str]] = field(default_factory=dict)
    aggregated_blocks: dict[str, dict[str, str]] = field(default_factory=dict)
    gres: dict[str, list[GresDevice]] = field(default_factory=dict)
    slurmctld_log: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step, plus "total"

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, kind: ProblemKind, message: str, subject: str | None = None) -> None:
        message = " | ".join(ln.strip() for ln in message.splitlines() if ln.strip())  # one line each
        problem = Problem(kind, message, subject)
        if problem not in self.problems:  # slurmctld logs some errors twice (parse + reconfigure)
            self.problems.append(problem)

    def kinds(self) -> set[ProblemKind]:
        return {p.kind for p in self.problems}

    @property
    def inconclusive(self) -> bool:
        """True when the check could not judge the config (bad input, no daemons, out of time), so
        a CLI can exit differently for "the config is wrong" and "the check could not run"."""
        return bool(self.kinds() & _INCONCLUSIVE)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``clusterforge check --json``)."""
        out = dataclasses.asdict(self)
        out["path"] = str(self.path)
        out["ok"] = self.ok
        out["inconclusive"] = self.inconclusive
        return out


# What to do about each kind of problem (the report's last word, so no failure ends without one).
FIX_CONFIG = (
    "change the spec (or undo the edit to the rendered files), run `clusterforge render` again and re-check"
)
FIXES = {
    ProblemKind.MANIFEST: "render again with `clusterforge render SPEC --out DIR` and check that folder",
    ProblemKind.ENVIRONMENT: "run the check as root on a host with the release family's daemons, or pass "
    "--build-rootfs",
    ProblemKind.TIMEOUT: "give the daemons more time with --timeout, or look at the log lines above",
}


def format_report(report: CheckReport) -> str:
    head = "OK" if report.ok else f"FAILED ({len(report.problems)} problem{'s' * (len(report.problems) != 1)})"
    total = report.timings.get("total")
    lines = [
        f"check {report.path}{f' [{report.cluster}]' if report.cluster else ''}: {head}"
        + (f" in {total:.2f} s" if total is not None else "")
    ]
    if report.daemons:
        lines.append(f"rendered for Slurm {report.slurm_version}; loaded by {report.daemons}")
    if report.problems:
        lines.append("problems:")
        lines += [f"  [{p.kind}] {p.message}" for p in report.problems]
        fixes = dict.fromkeys(FIXES.get(p.kind, FIX_CONFIG) for p in report.problems)
        lines += [f"fix: {f}" for f in fixes]
    if report.overrides:
        lines.append("overrides in the check's private copy (the rendered files are unchanged):")
        for o in report.overrides:
            change = f"{o.original} -> {o.value}" if o.value is not None else f"{o.original} removed"
            lines.append(f"  {o.file}: {o.key}: {change}  ({o.reason})")
    if report.nodes:
        lines.append(
            f"slurmctld: {len(report.nodes)} nodes, {len(report.partitions)} partitions, "
            f"{len(report.topology)} switches" + (f", {len(report.blocks)} blocks" if report.blocks else "")
        )
    for n, devs in report.gres.items():
        gpus = [d for d in devs if d.name == "gpu"]
        files = hostlist.compress(f for d in gpus for f in d.files)
        lines.append(f"slurmd -G -N {n}: {sum(d.count for d in gpus)} GPUs {files}")
    steps = [f"{k} {v:.2f}" for k, v in report.timings.items() if k != "total"]
    if steps:
        lines.append("timings (s): " + ", ".join(steps))
    return "\n".join(lines)
