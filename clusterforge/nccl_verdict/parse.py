"""Reader of nccl-tests text output (``all_reduce_perf`` and its siblings).

The table is what ``src/util.cu`` of NVIDIA/nccl-tests prints: a header naming the columns
(size, count, type, redop, [root], time, algbw, busbw, #wrong|error for out-of-place, the same four
for in-place), one row per message size, then ``# Out of bounds values`` and ``# Avg bus bandwidth``.
Older releases have no ``root`` column and an ``error`` column (a float) instead of ``#wrong``; a
run with ``-c 0`` prints ``N/A`` for ``#wrong``. Lines may carry a launcher's prefix: ``srun -l``
writes ``0: ``, Open MPI's ``--tag-output`` writes ``[1,0]<stdout>:``; both are stripped.

Only rank 0 prints the table, so a file holds one run; the ``#  Rank  N ... on HOST`` lines name
the hosts that took part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from clusterforge.errors import ClusterforgeError

__all__ = ["NcclOutputError", "NcclRow", "NcclRun", "parse_file", "parse_text"]

# "0: " (srun --label) or "[1,0]<stdout>: " (mpirun --tag-output) before the text
_PREFIX = re.compile(r"^\s*(?:\d+:\s?|\[\d+,\d+\]<std(?:out|err)>:)")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
_HEADER_MAX = re.compile(r"maxBytes\s+(\d+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_TIME_COLS = ("time", "cputime")


class NcclOutputError(ClusterforgeError):
    """The file is not a readable nccl-tests output (exit code 2, one message)."""

    def __init__(self, path: str, line: int | None, why: str, fix: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {why}; fix: {fix}")
        self.path, self.line, self.why, self.fix = path, line, why, fix


@dataclass(frozen=True)
class NcclRow:
    size: int  # bytes
    count: int
    dtype: str
    redop: str
    oop_busbw: float  # GB/s, out-of-place
    ip_busbw: float  # GB/s, in-place
    oop_algbw: float
    ip_algbw: float
    oop_wrong: int | None  # None: not checked (N/A) or an old float "error" column
    ip_wrong: int | None
    line: int

    @property
    def busbw(self) -> float:
        """The row's bus bandwidth: the mean of out-of-place and in-place."""
        return (self.oop_busbw + self.ip_busbw) / 2

    @property
    def wrong(self) -> int:
        return (self.oop_wrong or 0) + (self.ip_wrong or 0)


@dataclass
class NcclRun:
    path: str
    rows: list[NcclRow] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # in rank order, each host once
    ranks: int = 0
    max_bytes: int | None = None  # from the "# nThread ... maxBytes N" header, when present
    avg_busbw: float | None = None  # the "# Avg bus bandwidth" line
    out_of_bounds: int | None = None


def _num(tok: str, path: str, line: int, what: str) -> float:
    try:
        return float(tok)
    except ValueError:
        raise NcclOutputError(path, line, f"{what} {tok!r} is not a number",
                              "give the file nccl-tests wrote, unedited") from None


def _wrong(tok: str, path: str, line: int) -> int | None:
    if tok == "N/A":
        return None
    if re.fullmatch(r"\d+", tok):
        return int(tok)
    _num(tok, path, line, "error column")  # an old release's float error: checked, not counted
    return None


def _columns(tokens: list[str]) -> tuple[dict[str, int], dict[str, int]] | None:
    """Column index of each field of the out-of-place and in-place halves, or None."""
    names = [t for t in tokens if t != "#"]
    if "size" not in names or not any(c in names for c in _TIME_COLS):
        return None
    starts = [i for i, n in enumerate(names) if n in _TIME_COLS]
    if len(starts) < 2:
        return None
    common = {n: i for i, n in enumerate(names[: starts[0]])}
    halves = []
    for s in starts[:2]:
        half = dict(common)
        for j, n in enumerate(names[s : s + 4]):
            half[{"#wrong": "wrong", "error": "wrong"}.get(n, n)] = s + j
        halves.append(half)
    for h in halves:
        if not {"size", "count", "busbw", "algbw", "wrong"} <= h.keys():
            return None
    return halves[0], halves[1]


def parse_text(text: str, path: str = "<text>") -> NcclRun:
    """Parse one nccl-tests output; raise :class:`NcclOutputError` (file, line, why, fix)."""
    run = NcclRun(path=path)
    cols: tuple[dict[str, int], dict[str, int]] | None = None
    width = 0
    seen_start = False
    last_line = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1).rstrip()
        if not line.strip():
            continue
        last_line = n
        s = line.strip()
        if s.startswith("#"):
            if m := _HEADER_MAX.search(s):
                run.max_bytes, seen_start = int(m.group(1)), True
            elif m := _RANK.match(s):
                run.ranks += 1
                if m.group(2) not in run.hosts:
                    run.hosts.append(m.group(2))
            elif m := _AVG.match(s):
                run.avg_busbw = _num(m.group(1), path, n, "Avg bus bandwidth")
            elif m := _OOB.match(s):
                run.out_of_bounds = int(m.group(1))
            elif (c := _columns(s.split())) is not None:
                cols = c
                width = len([t for t in s.split() if t != "#"])
            continue
        if cols is None or not re.match(r"^\d", s):
            continue  # NCCL INFO/WARN lines, the command line, shell prompts
        toks = s.split()
        # a timestamp column (-S 1) adds "YYYY-MM-DD HH:MM:SS" (two tokens) after the header's one
        if len(toks) < width:
            raise NcclOutputError(
                path, n, f"table row has {len(toks)} fields, the header has {width} (a cut or interleaved line)",
                "rerun, or give the whole output of one run (per-node runs go to separate files)")
        oop, ip = cols
        row = NcclRow(
            size=int(_num(toks[oop["size"]], path, n, "size")),
            count=int(_num(toks[oop["count"]], path, n, "count")),
            dtype=toks[oop["type"]] if "type" in oop else "?",
            redop=toks[oop["redop"]] if "redop" in oop else "?",
            oop_busbw=_num(toks[oop["busbw"]], path, n, "out-of-place busbw"),
            ip_busbw=_num(toks[ip["busbw"]], path, n, "in-place busbw"),
            oop_algbw=_num(toks[oop["algbw"]], path, n, "out-of-place algbw"),
            ip_algbw=_num(toks[ip["algbw"]], path, n, "in-place algbw"),
            oop_wrong=_wrong(toks[oop["wrong"]], path, n),
            ip_wrong=_wrong(toks[ip["wrong"]], path, n),
            line=n,
        )
        run.rows.append(row)
    if not run.rows:
        raise NcclOutputError(
            path, None, "no nccl-tests result table (no header with size/count/time/algbw/busbw and no rows)",
            "give the file the job wrote (examples/jobs/nccl-allreduce.sbatch: all.out, node-<name>.out); "
            "a run that failed before its first size has nothing to judge")
    # a complete run ends with the summary; a run cut short (killed, timed out, crashed) does not.
    # A table-only excerpt (no "# nThread" header) is judged on its rows.
    if seen_start and run.avg_busbw is None:
        largest = run.rows[-1].size
        raise NcclOutputError(
            path, last_line,
            f"the run stops at {largest} bytes"
            + (f" of {run.max_bytes}" if run.max_bytes is not None else "")
            + " without its '# Avg bus bandwidth' line (killed, timed out or crashed)",
            "rerun it; look at the job's stderr and the node's dmesg for why it stopped")
    return run


def parse_file(path: Path) -> NcclRun:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise NcclOutputError(str(path), None, f"cannot read it ({exc.strerror})",
                              "give the path of an nccl-tests output file") from None
    return parse_text(text, str(path))
