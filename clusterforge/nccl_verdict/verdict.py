"""Judge nccl-tests runs against the published figure and name the slow nodes.

What counts (documented in the README and ``--help``):

* the large-message busbw of a run is the highest row busbw (mean of out-of-place and in-place)
  among the sizes >= ``min_bytes`` (1 GiB by default): the plateau published figures quote;
* it passes at >= ``tolerance`` x the expected figure (0.90 by default, nccl-tests' own
  ``-check_avg_bw`` factor);
* any ``#wrong`` > 0 fails the run (or node) whatever its bandwidth: NCCL returned wrong data;
* a node is slow when its single-node figure is below its threshold, or (3 or more nodes) below
  (1 - ``outlier``) x the median of all the single-node figures (0.10 by default).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from clusterforge.nccl_verdict.expected import Expectation
from clusterforge.nccl_verdict.parse import NcclOutputError, NcclRow, NcclRun

__all__ = ["GIB", "Judged", "Verdict", "judge", "large_message"]

GIB = 1 << 30


@dataclass(frozen=True)
class Judged:
    """One run's figure against its threshold (the whole allocation's, or one node's)."""

    name: str  # "all nodes" or the node name
    path: str
    busbw: float
    at_bytes: int
    wrong: int
    hosts: tuple[str, ...]
    threshold: float | None  # None: no expected figure to hold it to
    reasons: tuple[str, ...]  # empty: it passes

    @property
    def ok(self) -> bool:
        return not self.reasons


@dataclass
class Verdict:
    min_bytes: int
    tolerance: float
    outlier: float
    run: Judged | None
    nodes: list[Judged]
    expected: Expectation | None
    node_expected: Expectation | None
    notes: list[str] = field(default_factory=list)

    @property
    def slow_nodes(self) -> list[str]:
        return [n.name for n in self.nodes if not n.ok]

    @property
    def ok(self) -> bool:
        return (self.run is None or self.run.ok) and not self.slow_nodes

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def large_message(run: NcclRun, min_bytes: int) -> NcclRow:
    """The row with the highest busbw among sizes >= min_bytes."""
    large = [r for r in run.rows if r.size >= min_bytes]
    if not large:
        raise NcclOutputError(
            run.path, run.rows[-1].line,
            f"its largest message is {run.rows[-1].size} bytes, below the {min_bytes} bytes the verdict judges",
            "run all_reduce_perf up to -e 16G (the job template does), or lower --min-size")
    return max(large, key=lambda r: r.busbw)


def _judge_one(name: str, run: NcclRun, min_bytes: int, threshold: float | None, what: str) -> Judged:
    row = large_message(run, min_bytes)
    wrong = sum(r.wrong for r in run.rows)
    reasons = []
    if wrong:
        bad = [r.size for r in run.rows if r.wrong]
        reasons.append(f"#wrong = {wrong} at {len(bad)} size(s) from {bad[0]} bytes: NCCL returned wrong results")
    if threshold is not None and row.busbw < threshold:
        reasons.append(f"busbw {row.busbw:.1f} GB/s < {threshold:.1f} GB/s ({what})")
    return Judged(name, run.path, row.busbw, row.size, wrong, tuple(run.hosts), threshold, tuple(reasons))


def judge(
    run: NcclRun | None,
    node_runs: dict[str, NcclRun],
    expected: Expectation | None,
    *,
    expect_gbs: float | None = None,
    node_expect_gbs: float | None = None,
    node_expected: Expectation | None = None,
    min_bytes: int = GIB,
    tolerance: float = 0.90,
    outlier: float = 0.10,
) -> Verdict:
    """Judge the whole-allocation run and each node's single-node run."""
    v = Verdict(min_bytes, tolerance, outlier, None, [], expected, node_expected)
    if run is not None:
        base = expect_gbs
        what = f"{tolerance:.0%} of --expect-gbs {expect_gbs:g}" if expect_gbs is not None else ""
        if base is None and expected is not None and expected.scope == "multi-node":
            base = expected.busbw_gbs
            what = f"{tolerance:.0%} of {expected.name}'s {expected.busbw_gbs:g} GB/s on {expected.nodes} nodes"
            if run.hosts and len(run.hosts) != expected.nodes:
                v.notes.append(
                    f"the run spans {len(run.hosts)} hosts, the published {expected.name} figure {expected.nodes}: "
                    "busbw over a network changes with the node count, so read the verdict with care")
        elif base is None and expected is not None and len(run.hosts) <= 1:
            base = expected.busbw_gbs  # a single-node figure holds a run on one host (or of unknown hosts)
            what = f"{tolerance:.0%} of {expected.name}'s {expected.busbw_gbs:g} GB/s"
        elif base is None and expected is not None:
            v.notes.append(f"{expected.name} is a single-node figure: the {len(run.hosts)}-host run is "
                           "reported, not judged")
        v.run = _judge_one("all nodes", run, min_bytes, None if base is None else tolerance * base, what)
    node_base = node_expect_gbs
    node_what = f"{tolerance:.0%} of --node-expect-gbs {node_expect_gbs:g}" if node_expect_gbs is not None else ""
    if node_base is None and node_expected is not None:
        node_base = node_expected.busbw_gbs
        node_what = f"{tolerance:.0%} of {node_expected.name}'s {node_expected.busbw_gbs:g} GB/s"
    judged = [
        _judge_one(name, r, min_bytes, None if node_base is None else tolerance * node_base, node_what)
        for name, r in sorted(node_runs.items())
    ]
    if len(judged) >= 3:
        median = statistics.median(j.busbw for j in judged)
        floor = (1 - outlier) * median
        judged = [
            j if j.busbw >= floor else Judged(
                j.name, j.path, j.busbw, j.at_bytes, j.wrong, j.hosts, j.threshold,
                (*j.reasons, f"busbw {j.busbw:.1f} GB/s < {floor:.1f} GB/s ({1 - outlier:.0%} of the "
                 f"{len(judged)} nodes' median {median:.1f} GB/s)"))
            for j in judged
        ]
    elif node_runs and node_base is None:
        v.notes.append("fewer than 3 nodes and no expected figure: a slow node cannot be told from its peers")
    v.nodes = judged
    return v
