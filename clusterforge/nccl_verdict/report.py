"""Inputs and the plain-text report of ``clusterforge nccl-verdict``."""

from __future__ import annotations

import re
from pathlib import Path

from clusterforge.errors import ClusterforgeError
from clusterforge.nccl_verdict.verdict import Verdict

__all__ = ["RUN_FILE", "collect_inputs", "format_verdict", "parse_size"]

RUN_FILE = "all.out"  # what the job template writes for the all-nodes step
_NODE_FILE = re.compile(r"^node-(.+)\.out$")


def parse_size(text: str) -> int:
    """'1G', '512M', '1073741824' -> bytes (K/M/G are powers of 1024, as nccl-tests reads -b/-e)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ClusterforgeError(f"--min-size {text!r}: give bytes or a size such as 1G or 512M")
    return int(m.group(1)) << (10 * "KMGT".find(m.group(2).upper()) + 10 if m.group(2) else 0)


def collect_inputs(args: list[str]) -> tuple[Path | None, dict[str, Path]]:
    """Sort the arguments into the all-nodes run and the per-node runs.

    A folder gives its all.out and node-<name>.out; a file named node-<name>.out is that node's;
    NAME=FILE names a node's file; any other file is the all-nodes run (one at most).
    """
    run: Path | None = None
    nodes: dict[str, Path] = {}

    def add_run(p: Path) -> None:
        nonlocal run
        if run is not None:
            raise ClusterforgeError(
                f"{p}: a second all-nodes run (the first is {run}); give one, and per-node files as "
                "node-<name>.out or NAME=FILE")
        run = p

    for a in args:
        name, sep, file = a.partition("=")
        if sep and name and not Path(a).exists():
            nodes[name] = Path(file)
            continue
        p = Path(a)
        if p.is_dir():
            found = sorted(p.glob("node-*.out"))
            for f in found:
                m = _NODE_FILE.match(f.name)
                if m:
                    nodes[m.group(1)] = f
            if (p / RUN_FILE).exists():
                add_run(p / RUN_FILE)
            if not found and not (p / RUN_FILE).exists():
                raise ClusterforgeError(
                    f"{p}: no {RUN_FILE} and no node-<name>.out in it; give the folder the job wrote "
                    "(examples/jobs/nccl-allreduce.sbatch, NCCL_OUT_DIR)")
        elif (m := _NODE_FILE.match(p.name)) is not None:
            nodes[m.group(1)] = p
        else:
            add_run(p)
    if run is None and not nodes:
        raise ClusterforgeError("nothing to judge: give the job's output folder or nccl-tests output files")
    return run, nodes


def format_verdict(v: Verdict) -> list[str]:
    """The report as plain lines (one table, then the verdict)."""
    lines: list[str] = []
    if v.expected is not None:
        e = v.expected
        lines.append(f"expected: {e.name} {e.busbw_gbs:g} GB/s busbw ({e.scope}, {e.nodes} node(s)); "
                     f"source: {e.sources[0].url} ({e.sources[0].date})")
    if v.node_expected is not None and v.node_expected is not v.expected:
        e = v.node_expected
        lines.append(f"per node: {e.name} {e.busbw_gbs:g} GB/s busbw; source: {e.sources[0].url} ({e.sources[0].date})")
    lines.append(f"judged: the highest busbw among sizes >= {v.min_bytes} bytes, pass at >= {v.tolerance:.0%} "
                 f"of expected; a node also fails below {1 - v.outlier:.0%} of the nodes' median (3+ nodes)")
    rows = ([v.run] if v.run else []) + v.nodes
    head = ("run", "busbw GB/s", "at bytes", "threshold", "#wrong", "result", "file")
    table = [head] + [
        (j.name, f"{j.busbw:.2f}", str(j.at_bytes), "-" if j.threshold is None else f"{j.threshold:.1f}",
         str(j.wrong), "ok" if j.ok else "FAIL", j.path)
        for j in rows
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    for j in rows:
        for reason in j.reasons:
            lines.append(f"  {j.name}: {reason}")
    for note in v.notes:
        lines.append(f"  note: {note}")
    if v.ok:
        lines.append("verdict: PASS")
    else:
        parts = []
        if v.run is not None and not v.run.ok:
            parts.append("the all-nodes run is below expectation")
        if v.slow_nodes:
            parts.append("slow nodes: " + ",".join(v.slow_nodes))
        lines.append("verdict: FAIL (" + "; ".join(parts) + ")")
    return lines
