"""Prove a rendered Slurm config with the real daemons: ``clusterforge check DIR``.

Slurm has no config-test mode (local-cluster.md §1), so the check starts the real daemons on a
private copy of the rendered files and compares what they report with what the renderer meant
(``manifest.json`` → ``expect``):

1. client-side parse: ``scontrol show hostnames`` on the copy (unknown keys, bad numbers, bad enums);
2. a throw-away ``slurmctld -D -c`` in private UTS, mount and network namespaces, whose hostname is
   the SlurmctldHost name, whose ``/etc/hosts`` (bind-mounted) resolves the controller and every
   node, and whose loopback carries the controller's address. It either runs as primary controller
   or exits (= rejected). While it runs, ``scontrol show node/topology/partition`` are compared
   with ``expect`` and every ``error:``/``fatal:`` log line that is not known noise is a problem;
3. ``slurmd -G -N <first node>`` per GPU node line, in a private mount namespace whose ``/dev`` is
   an overlay holding fake character devices for the expected GPU files: its parsed GRES (count,
   type, files) must equal ``expect``.

The copies differ from the rendered files only in paths, log levels, the munge socket and
accounting storage (no slurmdbd runs here); every change is listed in the report. Node, partition,
GRES and topology lines are never touched. Everything the check starts is a child of
this process, stopped by PID; the namespaces, and the mounts in them, die with those children.
Needs root and Debian's ``slurmctld``/``slurmd``/``slurm-client``/``munge``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from clusterforge import hostlist

__all__ = [
    "CTLD_NOISE",
    "CTLD_NO_DBD_NOISE",
    "SLURMD_NOISE",
    "CheckReport",
    "GresDevice",
    "Override",
    "Problem",
    "ProblemKind",
    "check_dir",
    "format_report",
]


class ProblemKind(enum.StrEnum):
    """What went wrong. ``MANIFEST`` and ``ENVIRONMENT`` mean the check could not judge the config."""

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
    TOPOLOGY_MISMATCH = "topology_mismatch"  # switches missing, extra, or with other nodes/children
    GRES_MISMATCH = "gres_mismatch"  # slurmd -G count/type/files differ from expect
    GRES_ERROR = "gres_error"  # slurmd -G printed error/fatal/WARNING lines or failed
    GRES_DEVICE_MISSING = "gres_device_missing"  # gres.conf names a device expect does not have


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
    problems: list[Problem] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)
    # Parsed daemon output: scontrol show node -o (by NodeName), show partition -o (by
    # PartitionName), show topology (by SwitchName), and slurmd -G (by probed node name).
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    topology: dict[str, dict[str, str]] = field(default_factory=dict)
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


_INCONCLUSIVE = frozenset({ProblemKind.MANIFEST, ProblemKind.ENVIRONMENT, ProblemKind.TIMEOUT})

# error:/fatal: lines from slurmctld that say nothing about the config under test. Each entry is
# (regex, why). Keep it short: every entry is a class of real errors the check can no longer see.
CTLD_NOISE: tuple[tuple[str, str], ...] = (
    (r"mpi/pmix|MPI: Cannot create context", "Debian's slurm-wlm cannot load libpmix; logged on every start"),
    (r"Configured MailProg is invalid", "the production MailProg (/usr/bin/mail) is not installed here"),
    (
        r"Could not open (job|reservation|node|trigger|assoc\w*|qos|resv|fed\w*) state file"
        r"|NOTE: Trying backup state save file|No (job|reservation) state file",
        "the check starts from an empty state directory (slurmctld -c)",
    ),
)
# Only when the check turned accounting off (no slurmdbd runs during the check).
CTLD_NO_DBD_NOISE: tuple[tuple[str, str], ...] = (
    (
        r"Job accounting information gathered, but not stored"
        r"|Even though we are collecting accounting information",
        "the check stores no accounting: JobAcctGatherType without AccountingStorageType",
    ),
)
SLURMD_NOISE: tuple[tuple[str, str], ...] = (
    (r"mpi/pmix|MPI: Cannot create context", "Debian's slurm-wlm cannot load libpmix"),
)

_PRIMARY = "Running as primary controller"
_NS_READY = "clusterforge-check: namespace ready"
_WAITING_FOR_DEVICE = "Waiting for gres.conf file"
_ERRORISH = re.compile(r"\b(error|fatal):", re.IGNORECASE)
_SLURMD_BAD = re.compile(r"\b(error|fatal):|\bWARNING:")

# Paths the daemons write on the host, per copy of slurm.conf. ``always``: set even when slurm.conf
# leaves them out, because the defaults (/var/spool/slurmctld, /run/slurmctld.pid,
# /var/spool/slurmd) are real paths on this machine.
_CTLD_PATHS: tuple[tuple[str, str, bool], ...] = (
    ("StateSaveLocation", "state", True),
    ("SlurmctldPidFile", "run/slurmctld.pid", True),
    ("SlurmctldLogFile", "log/slurmctld.log", False),
    ("SlurmSchedLogFile", "log/sched.log", False),
)
_SLURMD_PATHS: tuple[tuple[str, str, bool], ...] = (
    ("SlurmdSpoolDir", "spool", True),  # slurmd -G writes hwloc_topo_whole.xml there
    ("SlurmdPidFile", "run/slurmd.pid", True),
)
# Levels below ``info`` hide "Running as primary controller" and the Gres lines of slurmd -G.
_QUIET_LEVELS = {"quiet", "fatal", "error", "0", "1", "2"}

# char-device majors for fake GPU files (minor = the file's number): NVIDIA's is 195
# (nvidiactl = 195,255), DRM's (AMD /dev/dri/renderD128+N) is 226.
_DEVICE_KINDS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"/dev/nvidia(\d+)"), 195),
    (re.compile(r"/dev/dri/(?:renderD|card)(\d+)"), 226),
)
_FALLBACK_MAJOR = 240  # "local/experimental use" in the kernel's devices.txt; never opened

_STAND_IN_ADDR = "192.0.2.1"  # TEST-NET-1 (RFC 5737): never a real host; see slurmctld()
_GRACE_S = 2.0  # SIGTERM → SIGKILL
# slurmctld saves its state on SIGTERM and notices the signal only between 1 s background ticks;
# the state is thrown away, so it gets less time before SIGKILL.
_CTLD_GRACE_S = 1.0
_KILL_WAIT_S = 10.0  # after SIGKILL; only a child stuck in uninterruptible I/O takes this long
_CLIENT_TIMEOUT_S = 10.0  # one scontrol/munge call; a missing controller makes them retry for long


# --------------------------------------------------------------------------------------------
# expect (from manifest.json)


@dataclass(frozen=True)
class _ExpNode:
    names: tuple[str, ...]
    hostlist: str
    group: str
    cpus: int | None
    boards: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    real_memory: int | None
    gres: str | None
    gpu_count: int
    gpu_type: str | None
    gpu_files: tuple[str, ...]
    features: tuple[str, ...] | None
    weight: int | None


@dataclass(frozen=True)
class _ExpPartition:
    name: str
    nodes: frozenset[str]
    default: bool | None
    max_time: str | None


@dataclass(frozen=True)
class _ExpSwitch:
    name: str
    switches: tuple[str, ...]
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class _Expect:
    controller: str | None
    controller_addr: str | None
    nodes: tuple[_ExpNode, ...]
    partitions: tuple[_ExpPartition, ...]
    topology_plugin: str | None
    switches: tuple[_ExpSwitch, ...]


class _ManifestError(ValueError):
    pass


def _opt_int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _ManifestError(f"{key} must be an integer or null, not {v!r}")
    return v


def _opt_str(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise _ManifestError(f"{key} must be a string or null, not {v!r}")
    return v


def _expand(expr: str | None, what: str) -> tuple[str, ...]:
    if not expr:
        return ()
    try:
        return tuple(hostlist.expand(expr))
    except hostlist.HostlistError as exc:
        raise _ManifestError(f"{what}: {exc}") from None


def _parse_expect(manifest: dict[str, Any]) -> _Expect:
    exp = manifest.get("expect")
    if not isinstance(exp, dict):
        raise _ManifestError("manifest.json has no 'expect' object")
    ctl = exp.get("controller") or {}
    if not isinstance(ctl, dict):
        raise _ManifestError("expect.controller must be an object")
    nodes: list[_ExpNode] = []
    for raw in exp.get("nodes") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("names"), str):
            raise _ManifestError(f"expect.nodes entry without 'names': {raw!r}")
        files = _expand(_opt_str(raw, "gpu_files"), f"gpu_files of {raw['names']}")
        feats = raw.get("features")
        if feats is not None and not isinstance(feats, list):
            raise _ManifestError(f"features of {raw['names']} must be a list, not {feats!r}")
        nodes.append(
            _ExpNode(
                names=_expand(raw["names"], "expect.nodes names"),
                hostlist=raw["names"],
                group=str(raw.get("group") or raw["names"]),
                cpus=_opt_int(raw, "cpus"),
                boards=_opt_int(raw, "boards"),
                sockets=_opt_int(raw, "sockets"),
                cores_per_socket=_opt_int(raw, "cores_per_socket"),
                threads_per_core=_opt_int(raw, "threads_per_core"),
                real_memory=_opt_int(raw, "real_memory"),
                gres=_opt_str(raw, "gres"),
                gpu_count=_opt_int(raw, "gpu_count") or 0,
                gpu_type=_opt_str(raw, "gpu_type"),
                gpu_files=files,
                features=None if feats is None else tuple(str(f) for f in feats),
                weight=_opt_int(raw, "weight"),
            )
        )
    parts: list[_ExpPartition] = []
    for raw in exp.get("partitions") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise _ManifestError(f"expect.partitions entry without 'name': {raw!r}")
        default = raw.get("default")
        parts.append(
            _ExpPartition(
                name=raw["name"],
                nodes=frozenset(_expand(_opt_str(raw, "nodes"), f"nodes of partition {raw['name']}")),
                default=None if default is None else bool(default),
                max_time=_opt_str(raw, "max_time"),
            )
        )
    topo = exp.get("topology") or {}
    if not isinstance(topo, dict):
        raise _ManifestError("expect.topology must be an object")
    switches: list[_ExpSwitch] = []
    for raw in topo.get("switches") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise _ManifestError(f"expect.topology.switches entry without 'name': {raw!r}")
        name = raw["name"]
        switches.append(
            _ExpSwitch(
                name=name,
                switches=_expand(_opt_str(raw, "switches"), f"switches of switch {name}"),
                nodes=_expand(_opt_str(raw, "nodes"), f"nodes of switch {name}"),
            )
        )
    return _Expect(
        controller=_opt_str(ctl, "name"),
        controller_addr=_opt_str(ctl, "address"),
        nodes=tuple(nodes),
        partitions=tuple(parts),
        topology_plugin=_opt_str(topo, "plugin"),
        switches=tuple(switches),
    )


# --------------------------------------------------------------------------------------------
# slurm.conf: read the few global keys the check needs, and rewrite paths in a private copy


_LINE_KEY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def _conf_values(text: str, key: str) -> list[str]:
    """Values of a global ``Key=value`` line (keys are case-insensitive in Slurm), in order."""
    out: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        m = _LINE_KEY.match(line)
        if m and m.group(1).lower() == key.lower():
            out.append(m.group(2))
    return out


def _conf_value(text: str, key: str) -> str | None:
    vals = _conf_values(text, key)
    return vals[-1] if vals else None  # the last one wins, as in Slurm


def _set_key(text: str, key: str, value: str | None) -> tuple[str, str | None]:
    """Replace (or drop, for ``None``) every ``key=`` line, or append one; returns (text, old)."""
    lines = text.splitlines()
    old: str | None = None
    out: list[str] = []
    for line in lines:
        m = _LINE_KEY.match(line.split("#", 1)[0])
        if m and m.group(1).lower() == key.lower():
            old = m.group(2)
            continue
        out.append(line)
    if value is not None:
        out.append(f"{key}={value}")
    return "\n".join(out) + "\n", old


def _controllers(text: str) -> list[tuple[str, str | None]]:
    """SlurmctldHost entries as (name, address), primary first; ControlMachine for old configs."""
    out: list[tuple[str, str | None]] = []
    for v in _conf_values(text, "SlurmctldHost"):
        m = re.fullmatch(r"([^()\s]+)(?:\(([^)]*)\))?", v)
        if m:
            out.append((m.group(1), m.group(2) or None))
    if not out:
        name = _conf_value(text, "ControlMachine")
        if name:
            out.append((name, _conf_value(text, "ControlAddr")))
    return out


def _conf_node_names(text: str) -> list[str]:
    names: list[str] = []
    for line in text.splitlines():
        m = re.match(r"^\s*NodeName=(\S+)", line.split("#", 1)[0], re.IGNORECASE)
        if m and m.group(1).upper() != "DEFAULT":
            with contextlib.suppress(hostlist.HostlistError):  # slurmctld will say what is wrong
                names.extend(hostlist.expand(m.group(1)))
    return names


# --------------------------------------------------------------------------------------------
# child processes


class _Lines:
    """A child's merged stdout/stderr, read line by line in a thread so every wait has a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[str], bool], deadline: float) -> str | None:
        """The first line matching ``pred``; ``None`` at end of output or at the deadline."""
        i = 0
        with self._cond:
            while True:
                for line in self.lines[i:]:
                    if pred(line):
                        return line
                i = len(self.lines)
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def join(self, timeout: float) -> list[str]:
        self._thread.join(timeout)
        with self._cond:
            return list(self.lines)


@dataclass
class _Probe:
    node: _ExpNode
    proc: subprocess.Popen[str]
    out: _Lines
    t0: float


def _start(argv: Sequence[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], _Lines]:
    """Start a daemon as the leader of its own process group.

    The namespace set-up (``sh -c 'mount …; hostname …; exec daemon'``) runs helpers as children of
    that shell: if the check has to stop it half-way, the group holds them too, so _stop reaches
    every process the check started, and nothing else.
    """
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    return proc, _Lines(proc.stdout)


def _alive(proc: subprocess.Popen[str]) -> bool:
    """Whether ``proc`` still runs, WITHOUT reaping it: while its zombie is unreaped its PID, and so
    its process group's ID, cannot be reused, which makes _stop's killpg() safe."""
    if proc.returncode is not None:
        return False
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def _wait_exit(proc: subprocess.Popen[str], timeout: float) -> bool:
    """Wait up to ``timeout`` for ``proc`` to exit, without reaping it; True if it did."""
    end = time.monotonic() + timeout
    while _alive(proc):
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)
    return True


def _stop(proc: subprocess.Popen[str], grace: float = _GRACE_S) -> None:
    """SIGTERM to the group, SIGKILL after ``grace`` (slurmctld stuck in getaddrinfo() ignores
    SIGTERM, local-cluster.md §1), SIGKILL to what is left of the group, then reap the leader.

    Never raises: a child in uninterruptible sleep is left to Popen, which reaps it later.
    """
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
        _wait_exit(proc, grace)
        os.killpg(proc.pid, signal.SIGKILL)  # the leader if it is still up, and any helper
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(_KILL_WAIT_S)


def _run(argv: Sequence[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a client; on timeout subprocess.run SIGKILLs it (nsenter has exec'd it: same PID)."""
    return subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        env=env,
        timeout=max(timeout, 0.1),
        check=False,
    )


_VERSIONS: dict[str, str] = {}


def _daemon_version(slurmctld: str) -> str:
    """``slurm-wlm 22.05.8``; asked once per process (the tests run many checks), "" if unknown."""
    if slurmctld not in _VERSIONS:
        try:
            out = _run([slurmctld, "-V"], dict(os.environ), _CLIENT_TIMEOUT_S).stdout.strip()
        except subprocess.TimeoutExpired:
            return ""  # not remembered: ask again next time
        _VERSIONS[slurmctld] = out
    return _VERSIONS[slurmctld]


def _noise(line: str, patterns: Iterable[tuple[str, str]]) -> bool:
    return any(re.search(rx, line) for rx, _ in patterns)


# --------------------------------------------------------------------------------------------
# parsing daemon output


_KV_START = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/]*)=")


def _parse_kv(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces`` (scontrol -o) → dict; a value runs to the next key."""
    out: dict[str, str] = {}
    matches = list(_KV_START.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def _records(text: str, first_key: str) -> dict[str, dict[str, str]]:
    recs: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(first_key + "="):
            kv = _parse_kv(line)
            recs[kv[first_key]] = kv
    return recs


def _parse_gres_line(line: str) -> GresDevice | None:
    idx = line.find("Gres Name=")
    if idx < 0:
        return None
    kv = _parse_kv(line[idx + len("Gres ") :])
    files: tuple[str, ...] = ()
    if kv.get("File") and kv["File"] != "(null)":
        try:
            files = tuple(hostlist.expand(kv["File"]))
        except hostlist.HostlistError:
            files = (kv["File"],)
    typ = kv.get("Type")
    return GresDevice(
        name=kv.get("Name", ""),
        type=None if typ in (None, "", "(null)") else typ,
        count=int(kv["Count"]) if kv.get("Count", "").isdigit() else 0,
        files=files,
        fields=kv,
    )


def _hostset(expr: str | None) -> set[str]:
    if not expr or expr == "(null)":
        return set()
    try:
        return set(hostlist.expand(expr))
    except hostlist.HostlistError:
        return {expr}


def _slurm_seconds(v: str | None) -> int | None:
    """Slurm time limits (``3-00:00:00``, ``72:00:00``, ``90``, ``UNLIMITED``) → seconds; None=∞."""
    if v is None:
        return None
    v = v.strip()
    if v.upper() in ("", "INFINITE", "UNLIMITED", "NONE", "-1"):
        return None
    days = 0
    if "-" in v:
        d, v = v.split("-", 1)
        days = int(d)
        parts = [int(p) for p in v.split(":")]  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [int(p) for p in v.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0  # minutes
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]  # minutes:seconds
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def _norm_gres(v: str | None) -> list[str]:
    """``gpu:h100:8(S:0-1),nic:1`` → sorted entries without the socket-affinity suffix."""
    if not v or v == "(null)":
        return []
    return sorted(re.sub(r"\(S:[^)]*\)", "", e).strip() for e in v.split(",") if e.strip())


def _norm_features(v: str | None) -> set[str]:
    if not v or v == "(null)":
        return set()
    return {f.strip() for f in v.split(",") if f.strip()}


# --------------------------------------------------------------------------------------------
# the check


class _Check:
    def __init__(self, path: Path, timeout_s: float) -> None:
        self.src = path
        self.report = CheckReport(path=path)
        self.deadline = time.monotonic() + timeout_s
        self.tmp = Path(tempfile.mkdtemp(prefix="clusterforge-check-"))
        # mkdtemp makes 0700: the slurm user could not reach its state dir (local-cluster.md §1)
        self.tmp.chmod(0o755)
        self.procs: list[subprocess.Popen[str]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.bins: dict[str, str] = {}
        self.hosts = self.tmp / "hosts"
        self.parse_warnings: list[str] = []
        self.accounting_off = False

    # -- helpers ---------------------------------------------------------------------------

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def timed(self, name: str, t0: float) -> None:
        self.report.timings[name] = round(time.monotonic() - t0, 3)

    def override(self, key: str, original: str | None, value: str | None, reason: str, file: str) -> None:
        shown = value.replace(str(self.tmp), "<tmp>") if value else value
        self.report.overrides.append(Override(file, key, original, shown, reason))

    # -- steps -----------------------------------------------------------------------------

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            self._run()
        finally:
            for p in reversed(self.procs):
                _stop(p)
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.timed("total", t0)

    def _run(self) -> None:
        loaded = self.load()
        if loaded is None or not self.preflight(loaded[0]):
            return
        _version, expect, conf_text = loaded
        ctld_conf = self.prepare(conf_text)
        if ctld_conf is None:
            return
        if not self.client_parse(self.tmp / "parse" / "slurm.conf", expect):
            return
        if not self.munge(ctld_conf):
            return
        self.write_hosts(conf_text, expect)
        # slurmd -G needs no controller: run the probes while slurmctld starts (2-core CI box).
        probes = [self.start_probe(node) for node in expect.nodes if node.gpu_count > 0 and node.names]
        ctld_errors = self.slurmctld(ctld_conf, conf_text, expect)
        for probe in probes:
            self.finish_probe(probe, ctld_errors)
        # Client-side warnings are the same lines slurmctld logs; report only the ones it did not.
        for w in self.parse_warnings:
            if w.split("error: ", 1)[-1] not in ctld_errors:
                self.report.add(ProblemKind.PARSE, f"scontrol warns while parsing slurm.conf: {w}", "slurm.conf")

    def load(self) -> tuple[str | None, _Expect, str] | None:
        """(slurm_version, expect, slurm.conf text), or None after reporting why not."""
        r = self.report
        mpath = self.src / "manifest.json"
        try:
            manifest = json.loads(mpath.read_text())
            if not isinstance(manifest, dict):
                raise _ManifestError("manifest.json is not a JSON object")
            r.cluster = manifest.get("cluster")
            version = manifest.get("slurm_version")
            expect = _parse_expect(manifest)
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, UTF-8, digits, _ManifestError
            r.add(ProblemKind.MANIFEST, f"{mpath}: {exc}", "manifest.json")
            return None
        conf = self.src / "slurm" / "slurm.conf"
        try:
            return (str(version) if version else None), expect, conf.read_text()
        except OSError as exc:
            r.add(ProblemKind.MANIFEST, f"cannot read {conf}: {exc}", "slurm/slurm.conf")
            return None

    def preflight(self, version: str | None) -> bool:
        if os.geteuid() != 0:
            self.report.add(ProblemKind.ENVIRONMENT, "the real-daemon check needs root (namespaces, mounts)")
            return False
        missing = []
        for b in ("slurmctld", "slurmd", "scontrol", "munge", "munged", "unshare", "nsenter", "ip"):
            found = shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
            if found is None:
                missing.append(b)
            else:
                self.bins[b] = found
        if missing:
            self.report.add(
                ProblemKind.ENVIRONMENT,
                f"missing {', '.join(missing)}; install slurmctld slurmd slurm-client munge iproute2",
            )
            return False
        # Keys come and go between releases: a config is proven only by the release it targets.
        t0 = time.monotonic()
        full = _daemon_version(self.bins["slurmctld"])
        self.timed("preflight", t0)
        m = re.search(r"(\d+)\.(\d+)", full)
        installed = f"{m.group(1)}.{m.group(2)}" if m else None
        if version and installed and version != installed:
            self.report.add(
                ProblemKind.ENVIRONMENT,
                f"rendered for Slurm {version}, but the daemons here are {full}; "
                f"render for {installed} to check it here",
            )
            return False
        return True

    def prepare(self, conf_text: str) -> Path | None:
        """Private copies of the rendered slurm/ folder, one per reader of slurm.conf:

        * ``parse/``: as rendered (only Include paths point at the copies), for the client parse;
        * ``ctld/``: slurmctld's paths, logging and accounting overridden;
        * ``slurmd/``: slurmd's paths and logging overridden, plus config_overrides.

        gres.conf, topology.conf and cgroup.conf are read from slurm.conf's folder, so each copy
        holds the whole folder. Returns the slurmctld copy's slurm.conf.
        """
        r = self.report
        user = _conf_value(conf_text, "SlurmUser") or "root"
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            r.add(ProblemKind.ENVIRONMENT, f"SlurmUser {user!r} does not exist on this machine")
            return None
        for sub in ("state", "log", "run", "spool", "munge", "parse", "ctld", "slurmd"):
            (self.tmp / sub).mkdir(mode=0o755)
        for sub in ("state", "log", "run"):  # slurmctld writes there after dropping to SlurmUser
            os.chown(self.tmp / sub, pw.pw_uid, pw.pw_gid)
        for sub in ("parse", "ctld", "slurmd"):
            for f in sorted((self.src / "slurm").iterdir()):
                if f.is_file() and f.name != "slurm.conf":
                    shutil.copyfile(f, self.tmp / sub / f.name)
                    (self.tmp / sub / f.name).chmod(0o644)
        base = self.rewrite_includes(conf_text)
        (self.tmp / "parse" / "slurm.conf").write_text(base)

        ctld = "slurm.conf (slurmctld)"
        text = self.paths(base, _CTLD_PATHS, ctld)
        if (_conf_value(text, "JobCompType") or "").lower() == "jobcomp/filetxt":
            new = str(self.tmp / "log" / "jobcomp.txt")
            text, old = _set_key(text, "JobCompLoc", new)
            self.override("JobCompLoc", old, new, "production path", ctld)
        text = self.loud(text, "SlurmctldDebug", ctld)
        text = self.accounting(text, ctld)
        text = self.rewrite_jwt(text, pw, ctld)
        (self.tmp / "ctld" / "slurm.conf").write_text(text)

        sd = "slurm.conf (slurmd -G)"
        text = self.paths(base, _SLURMD_PATHS, sd)
        text = self.loud(text, "SlurmdDebug", sd)
        if _conf_value(text, "SlurmdLogFile") is not None:
            text, old = _set_key(text, "SlurmdLogFile", None)
            self.override("SlurmdLogFile", old, None, "slurmd -G prints to stderr instead", sd)
        # Cores= in gres.conf are checked against the cores of the machine slurmd runs on (2 here:
        # "Invalid GRES data for gpu, Cores=0-55"); with config_overrides slurmd takes the node's
        # layout from slurm.conf, so Cores= are checked against the rendered node instead.
        params = _conf_value(text, "SlurmdParameters")
        merged = ",".join([p for p in (params or "").split(",") if p] + ["config_overrides"])
        text, _ = _set_key(text, "SlurmdParameters", merged)
        self.override("SlurmdParameters", params, merged, "check Cores= against the rendered node, not this host", sd)
        (self.tmp / "slurmd" / "slurm.conf").write_text(text)
        return self.tmp / "ctld" / "slurm.conf"

    def paths(self, text: str, keys: Iterable[tuple[str, str, bool]], file: str) -> str:
        for key, rel, always in keys:
            old = _conf_value(text, key)
            if old is None and not always:
                continue
            new = str(self.tmp / rel)
            text, _ = _set_key(text, key, new)
            self.override(key, old, new, "production path; the check must not touch the host", file)
        return text

    def loud(self, text: str, key: str, file: str) -> str:
        old = _conf_value(text, key)
        if old is not None and old.lower() in _QUIET_LEVELS:
            text, _ = _set_key(text, key, "info")
            self.override(key, old, "info", "the check reads info-level lines", file)
        return text

    def accounting(self, text: str, file: str) -> str:
        """No slurmdbd runs here, and slurmctld with accounting_storage/slurmdbd but neither a
        database nor state files exits ("... we have no TRES from it"): store no accounting. Without
        storage slurmctld also refuses AccountingStorageEnforce and TRES like gres/gpu, so those go
        too; the client parse (step 1) still validates them as rendered."""
        storage = _conf_value(text, "AccountingStorageType")
        if storage is None or storage.endswith("/none"):
            return text
        self.accounting_off = True
        for key in ("AccountingStorageType", "AccountingStorageEnforce", "AccountingStorageTRES"):
            text, old = _set_key(text, key, None)
            if old is not None:
                self.override(key, old, None, "no slurmdbd runs during the check", file)
        return text

    def rewrite_includes(self, text: str) -> str:
        """``Include /etc/slurm/x.conf`` → the rendered file's private copy (by name)."""
        out: list[str] = []
        for line in text.splitlines():
            m = re.match(r"^(\s*include\s+)(\S+)(.*)$", line, re.IGNORECASE)
            if m:
                name = Path(m.group(2)).name
                if (self.src / "slurm" / name).is_file():
                    # each copy holds the same file; the included one carries no paths to rewrite
                    new = str(self.tmp / "parse" / name)
                    self.override("Include", m.group(2), new, "production path", "slurm.conf (all copies)")
                    line = f"{m.group(1)}{new}{m.group(3)}"
            out.append(line)
        return "\n".join(out) + "\n"

    def rewrite_jwt(self, text: str, pw: pwd.struct_passwd, file: str) -> str:
        """auth/jwt needs its key file at start: give the copy a throw-away key."""
        params = _conf_value(text, "AuthAltParameters")
        if not params or "auth/jwt" not in (_conf_value(text, "AuthAltTypes") or ""):
            return text
        m = re.search(r"jwt_key=([^,]+)", params)
        if not m:
            return text
        key = self.tmp / "state" / "jwt_hs256.key"
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        os.chown(key, pw.pw_uid, pw.pw_gid)
        new = params.replace(m.group(0), f"jwt_key={key}")
        text, _ = _set_key(text, "AuthAltParameters", new)
        self.override("AuthAltParameters", params, new, "throw-away JWT key", file)
        return text

    def client_parse(self, conf: Path, expect: _Expect) -> bool:
        """Step 1: every Slurm client parses all of slurm.conf; unknown keys fail here in ms."""
        t0 = time.monotonic()
        names = [n for node in expect.nodes for n in node.names]
        env = dict(self.env, SLURM_CONF=str(conf))
        arg = ",".join(node.hostlist for node in expect.nodes) or "localhost"
        try:
            cp = _run(
                [self.bins["scontrol"], "show", "hostnames", arg],
                env,
                min(_CLIENT_TIMEOUT_S, self.remaining()),
            )
        except subprocess.TimeoutExpired:
            self.report.add(ProblemKind.TIMEOUT, "scontrol show hostnames did not finish", "slurm.conf")
            return False
        finally:
            self.timed("parse", t0)
        err = cp.stderr.strip()
        if cp.returncode != 0:
            self.report.add(ProblemKind.PARSE, f"scontrol rejects slurm.conf (rc={cp.returncode}): {err}", "slurm.conf")
            return False
        self.parse_warnings = [ln.removeprefix("scontrol: ") for ln in err.splitlines() if ln.strip()]
        got = cp.stdout.split()
        if names and got != names:
            self.report.add(
                ProblemKind.PARSE,
                f"Slurm expands the expected node names to {hostlist.compress(got)}, clusterforge to "
                f"{hostlist.compress(names)}",
                "slurm.conf",
            )
        return True

    def munge(self, conf: Path) -> bool:
        """Use the host's munged if it answers, else a private one on its own socket and key."""
        t0 = time.monotonic()
        try:
            probe = _run([self.bins["munge"], "-n"], self.env, min(_CLIENT_TIMEOUT_S, self.remaining()))
            host_munged = probe.returncode == 0
        except subprocess.TimeoutExpired:
            host_munged = False
        if host_munged:
            self.timed("munge", t0)
            return True
        d = self.tmp / "munge"
        sock, key = d / "munge.socket", d / "munged.key"
        key.write_bytes(os.urandom(128))  # munged wants 0600 and owned by its user
        key.chmod(0o600)
        files = [f"--{k}-file={d / f'munged.{k}'}" for k in ("key", "log", "pid", "seed")]
        argv = [self.bins["munged"], "--foreground", f"--socket={sock}", *files, "--num-threads=2"]
        proc, lines = _start(argv, self.env)
        self.procs.append(proc)
        # Ready = the socket accepts a connection; polling it costs no process start.
        ready = False
        while not ready and self.remaining() > 0 and _alive(proc):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(str(sock))
                    ready = True
                except OSError:
                    time.sleep(0.01)
        if not ready:
            if _alive(proc):
                self.report.add(ProblemKind.TIMEOUT, "private munged did not open its socket in time")
            else:
                why = " | ".join(lines.join(_GRACE_S)[-5:])
                self.report.add(ProblemKind.ENVIRONMENT, f"private munged did not start: {why}")
            return False
        text = conf.read_text()
        old = _conf_value(text, "AuthInfo")
        opts = [o for o in (old or "").split(",") if o and not o.startswith("socket=")] + [f"socket={sock}"]
        # Slurm's auth/munge talks to munged's default socket unless AuthInfo names another.
        new_text, _ = _set_key(text, "AuthInfo", ",".join(opts))
        conf.write_text(new_text)
        self.override(
            "AuthInfo",
            old,
            ",".join(opts),
            "no munged on the host: the check's own",
            "slurm.conf (slurmctld)",
        )
        self.timed("munge", t0)
        return True

    def write_hosts(self, conf_text: str, expect: _Expect) -> None:
        """An /etc/hosts for the namespaces: every name resolves, so nothing waits 5 s on DNS."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
        seen = {"localhost"}
        for i, (name, addr) in enumerate(_controllers(conf_text)):
            if name not in seen:
                lines.append(f"{addr or (_STAND_IN_ADDR if i == 0 else f'127.0.0.{i + 1}')} {name}")
                seen.add(name)
        names = [n for node in expect.nodes for n in node.names] + _conf_node_names(conf_text)
        i = 0
        for n in names:
            if n in seen:
                continue
            seen.add(n)
            i += 1
            lines.append(f"127.1.{i // 250}.{i % 250 + 1} {n}")
        self.hosts.write_text("\n".join(lines) + "\n")
        self.hosts.chmod(0o644)

    # -- slurmctld -------------------------------------------------------------------------

    def slurmctld(self, conf: Path, conf_text: str, expect: _Expect) -> set[str]:
        """Step 2; returns the messages of the error lines slurmctld logged (for de-duplication)."""
        r = self.report
        ctls = _controllers(conf_text)
        if not ctls:
            r.add(ProblemKind.PARSE, "slurm.conf has no SlurmctldHost", "slurm.conf")
            return set()
        name = ctls[0][0]
        self.compare_conf(ctls[0], conf_text, expect)
        # The controller's own address must be local, else scontrol cannot reach it: the private
        # network namespace gets it on lo (and nothing there can collide with the host's ports).
        # glibc's getaddrinfo(AI_ADDRCONFIG), which Slurm uses, finds nothing at all in a namespace
        # that has only loopback addresses: a documentation address (RFC 5737) on lo fixes that and
        # stands in for the controller's address when slurm.conf gives none.
        batch = ["link set lo up", f"addr add {_STAND_IN_ADDR}/32 dev lo"]
        for _n, addr in ctls:
            if addr and not addr.startswith("127."):
                batch.append(f"addr add {addr}/{128 if ':' in addr else 32} dev lo")
        ipb = self.tmp / "ip.batch"
        ipb.write_text("\n".join(batch) + "\n")
        script = (
            'mount --bind "$1" /etc/hosts && hostname "$2" && ip -batch "$3" && '
            f'echo "{_NS_READY}" && exec "$4" -D -c -f "$5"'
        )
        argv = [self.bins["unshare"], "--uts", "--mount", "--net", "--", "sh", "-c", script, "sh"]
        argv += [str(self.hosts), name, str(ipb), self.bins["slurmctld"], str(conf)]
        env = dict(self.env, SLURM_CONF=str(conf))
        t0 = time.monotonic()
        proc, out = _start(argv, env)
        self.procs.append(proc)
        exited = False
        try:
            hit = out.wait_for(lambda ln: _PRIMARY in ln or "fatal:" in ln, self.deadline)
            self.timed("slurmctld_start", t0)
            if hit is not None and _PRIMARY in hit and _alive(proc):
                t1 = time.monotonic()
                self.query(proc.pid, env, expect)
                self.timed("scontrol", t1)
            else:
                # A rejected config exits by itself right after its fatal line: let it.
                exited = _wait_exit(proc, min(_GRACE_S, max(self.remaining(), 0.1)))
        finally:
            t2 = time.monotonic()
            _stop(proc, _CTLD_GRACE_S)
            lines = out.join(_GRACE_S)
            self.timed("slurmctld_stop", t2)
        r.slurmctld_log = lines
        if _NS_READY not in lines:
            r.add(ProblemKind.ENVIRONMENT, "namespace setup for slurmctld failed: " + " | ".join(lines[-5:]))
            return set()
        lines = lines[lines.index(_NS_READY) + 1 :]
        noise = CTLD_NOISE + (CTLD_NO_DBD_NOISE if self.accounting_off else ())
        errors = [ln.removeprefix("slurmctld: ") for ln in lines if _ERRORISH.search(ln) and not _noise(ln, noise)]
        if not any(_PRIMARY in ln for ln in lines):
            why = " | ".join(errors[-6:]) or " | ".join(lines[-4:])
            if exited or any("fatal:" in ln for ln in lines):
                r.add(ProblemKind.REJECTED, f"slurmctld exited (rc={proc.returncode}): {why}", "slurmctld")
            else:
                r.add(ProblemKind.TIMEOUT, f"slurmctld did not become primary controller in time: {why}")
            return {e.split("error: ", 1)[-1] for e in errors}
        for e in errors:
            r.add(ProblemKind.LOG_ERROR, e, "slurmctld")
        return {e.split("error: ", 1)[-1] for e in errors}

    def compare_conf(self, ctl: tuple[str, str | None], conf_text: str, expect: _Expect) -> None:
        """What slurmctld runs as, read from the file it ran on: the primary controller (slurmctld
        refuses to start unless its hostname is that name) and the topology plugin."""
        r = self.report
        if expect.controller is not None and ctl[0] != expect.controller:
            r.add(ProblemKind.CONTROLLER_MISMATCH, f"SlurmctldHost is {ctl[0]} (expected {expect.controller})")
        if expect.controller_addr is not None and ctl[1] != expect.controller_addr:
            r.add(
                ProblemKind.CONTROLLER_MISMATCH,
                f"SlurmctldHost address is {ctl[1] or 'not set'} (expected {expect.controller_addr})",
            )
        plugin = _conf_value(conf_text, "TopologyPlugin")
        if plugin in (None, "topology/none", "topology/default"):
            plugin = None
        if plugin != expect.topology_plugin:
            r.add(ProblemKind.TOPOLOGY_MISMATCH, f"TopologyPlugin={plugin} (expected {expect.topology_plugin})")

    def query(self, pid: int, env: dict[str, str], expect: _Expect) -> None:
        """scontrol inside the controller's namespaces (its address, its /etc/hosts), in parallel."""
        r = self.report
        ns = [self.bins["nsenter"], "-t", str(pid), "-u", "-m", "-n", "--", self.bins["scontrol"]]
        queries = {
            "node": ["show", "node", "-o"],
            "partition": ["show", "partition", "-o"],
            "topology": ["show", "topology"],
        }
        timeout = self.remaining()  # the controller is up: a slow answer is load, not a hang
        results: dict[str, subprocess.CompletedProcess[str] | None] = {}

        def one(what: str) -> None:
            try:
                results[what] = _run(ns + queries[what], env, timeout)
            except subprocess.TimeoutExpired:
                results[what] = None

        threads = [threading.Thread(target=one, args=(w,)) for w in queries]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outputs: dict[str, str] = {}
        for what in queries:
            cp = results.get(what)
            if cp is None:
                r.add(ProblemKind.TIMEOUT, f"scontrol show {what} did not answer")
            elif cp.returncode != 0:
                r.add(ProblemKind.SCONTROL, f"scontrol show {what} failed: {cp.stderr.strip()}")
            else:
                outputs[what] = cp.stdout
        if "node" in outputs:
            r.nodes = _records(outputs["node"], "NodeName")
            self.compare_nodes(expect)
        if "partition" in outputs:
            r.partitions = _records(outputs["partition"], "PartitionName")
            self.compare_partitions(expect)
        if "topology" in outputs:
            r.topology = _records(outputs["topology"], "SwitchName")
            self.compare_topology(expect)

    def compare_nodes(self, expect: _Expect) -> None:
        r = self.report
        expected_names: set[str] = set()
        for node in expect.nodes:
            for n in node.names:
                expected_names.add(n)
                got = r.nodes.get(n)
                if got is None:
                    r.add(ProblemKind.NODE_MISSING, f"slurmctld does not know node {n} (group {node.group})", n)
                    continue
                self.compare_node(node, n, got)
        for n in sorted(set(r.nodes) - expected_names):
            r.add(ProblemKind.NODE_UNEXPECTED, f"slurmctld knows node {n}, which expect does not list", n)

    def compare_node(self, node: _ExpNode, n: str, got: dict[str, str]) -> None:
        r = self.report
        # expect.sockets is per board (slurm.conf SocketsPerBoard); scontrol's "Sockets" is the
        # node's total (Boards=2 SocketsPerBoard=2 prints Sockets=4).
        sockets = None if node.sockets is None else node.sockets * (node.boards or 1)
        ints = (
            ("CPUTot", node.cpus),
            ("Boards", node.boards),
            ("Sockets", sockets),
            ("CoresPerSocket", node.cores_per_socket),
            ("ThreadsPerCore", node.threads_per_core),
            ("RealMemory", node.real_memory),
            ("Weight", node.weight),
        )
        diffs = [f"{k}={got.get(k)} (expected {v})" for k, v in ints if v is not None and got.get(k) != str(v)]
        want_gres, got_gres = _norm_gres(node.gres), _norm_gres(got.get("Gres"))
        if want_gres and not got_gres:
            r.add(
                ProblemKind.GRES_DROPPED,
                f"node {n}: Gres=(null) but expected {node.gres}; slurmctld drops GRES silently when "
                "GresTypes does not name them",
                n,
            )
        elif want_gres != got_gres:
            diffs.append(f"Gres={got.get('Gres')} (expected {node.gres})")
        if node.features is not None and _norm_features(got.get("AvailableFeatures")) != set(node.features):
            diffs.append(f"AvailableFeatures={got.get('AvailableFeatures')} (expected {','.join(node.features)})")
        if diffs:
            r.add(ProblemKind.NODE_MISMATCH, f"node {n}: " + "; ".join(diffs), n)

    def compare_partitions(self, expect: _Expect) -> None:
        r = self.report
        for p in expect.partitions:
            got = r.partitions.get(p.name)
            if got is None:
                r.add(ProblemKind.PARTITION_MISSING, f"slurmctld has no partition {p.name}", p.name)
                continue
            diffs: list[str] = []
            if _hostset(got.get("Nodes")) != set(p.nodes):
                diffs.append(f"Nodes={got.get('Nodes')} (expected {hostlist.compress(p.nodes)})")
            if p.default is not None and (got.get("Default") == "YES") != p.default:
                diffs.append(f"Default={got.get('Default')} (expected {'YES' if p.default else 'NO'})")
            if p.max_time is not None:
                try:
                    same = _slurm_seconds(got.get("MaxTime")) == _slurm_seconds(p.max_time)
                except ValueError:
                    same = got.get("MaxTime") == p.max_time
                if not same:
                    diffs.append(f"MaxTime={got.get('MaxTime')} (expected {p.max_time})")
            if diffs:
                r.add(ProblemKind.PARTITION_MISMATCH, f"partition {p.name}: " + "; ".join(diffs), p.name)
        for name in sorted(set(r.partitions) - {p.name for p in expect.partitions}):
            r.add(
                ProblemKind.PARTITION_MISMATCH,
                f"slurmctld has partition {name}, which expect does not list",
                name,
            )

    def compare_topology(self, expect: _Expect) -> None:
        """Switches by name. slurmctld lists under Nodes= every node below a switch, so the expected
        node set of an upper switch is the union over its subtree."""
        r = self.report
        by_name = {s.name: s for s in expect.switches}

        def subtree_nodes(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
            s = by_name.get(name)
            if s is None or name in seen:
                return set()
            out = set(s.nodes)
            for child in s.switches:
                out |= subtree_nodes(child, seen | {name})
            return out

        for s in expect.switches:
            got = r.topology.get(s.name)
            if got is None:
                r.add(ProblemKind.TOPOLOGY_MISMATCH, f"slurmctld has no switch {s.name}", s.name)
                continue
            diffs: list[str] = []
            want_nodes = subtree_nodes(s.name)
            if _hostset(got.get("Nodes")) != want_nodes:
                diffs.append(f"Nodes={got.get('Nodes')} (expected {hostlist.compress(want_nodes) or 'none'})")
            if _hostset(got.get("Switches")) != set(s.switches):
                diffs.append(f"Switches={got.get('Switches', '(none)')} (expected {','.join(s.switches) or 'none'})")
            if diffs:
                r.add(ProblemKind.TOPOLOGY_MISMATCH, f"switch {s.name}: " + "; ".join(diffs), s.name)
        for name in sorted(set(r.topology) - set(by_name)):
            r.add(
                ProblemKind.TOPOLOGY_MISMATCH,
                f"slurmctld has switch {name}, which expect does not list",
                name,
            )

    # -- slurmd -G -------------------------------------------------------------------------

    def fake_devices(self, node: _ExpNode) -> Path:
        """A directory of char devices, laid over /dev: nothing opens them, slurmd only stats them."""
        root = self.tmp / f"dev-{node.names[0]}"
        root.mkdir()
        files = node.gpu_files or tuple(f"/dev/nvidia{i}" for i in range(node.gpu_count))
        extra = ["/dev/nvidiactl"] if any(f.startswith("/dev/nvidia") for f in files) else []
        for f in [*files, *extra]:
            rel = Path(f).relative_to("/dev") if f.startswith("/dev/") else Path(f.lstrip("/"))
            major, minor = _FALLBACK_MAJOR, 0
            if f == "/dev/nvidiactl":
                major, minor = 195, 255
            for rx, maj in _DEVICE_KINDS:
                m = rx.fullmatch(f)
                if m:
                    major, minor = maj, int(m.group(1))
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(dst, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        return root

    def start_probe(self, node: _ExpNode) -> _Probe:
        """Step 3: ``slurmd -G`` for the first node of a GPU node line, over a /dev with fakes."""
        n = node.names[0]
        devdir = self.fake_devices(node)
        conf = self.tmp / "slurmd" / "slurm.conf"
        # One read-only overlay with the fakes on top of the real /dev: a single mount, and the
        # fakes stay invisible outside this mount namespace.
        script = (
            'mount -t overlay overlay -o "lowerdir=$1:/dev" /dev && mount --bind "$2" /etc/hosts && '
            f'echo "{_NS_READY}" && exec "$3" -G -N "$4" -f "$5"'
        )
        argv = [self.bins["unshare"], "--mount", "--", "sh", "-c", script, "sh"]
        argv += [str(devdir), str(self.hosts), self.bins["slurmd"], n, str(conf)]
        proc, out = _start(argv, dict(self.env, SLURM_CONF=str(conf)))
        self.procs.append(proc)
        return _Probe(node, proc, out, time.monotonic())

    def finish_probe(self, probe: _Probe, ctld_errors: set[str]) -> None:
        r, node, proc, out = self.report, probe.node, probe.proc, probe.out
        n = node.names[0]
        # slurmd -G blocks forever on a File= device that does not exist: stop it at once.
        waiting = out.wait_for(lambda ln: _WAITING_FOR_DEVICE in ln, self.deadline)
        timed_out = False
        if waiting is None:
            timed_out = not _wait_exit(proc, max(self.remaining(), 0.1))
        _stop(proc)
        lines = out.join(_GRACE_S)
        self.timed(f"slurmd_G:{n}", probe.t0)
        if _NS_READY not in lines:
            r.add(ProblemKind.ENVIRONMENT, f"namespace setup for slurmd -G failed: {' | '.join(lines[-5:])}", n)
            return
        lines = lines[lines.index(_NS_READY) + 1 :]
        if waiting is not None:
            r.add(
                ProblemKind.GRES_DEVICE_MISSING,
                f"node {n}: gres.conf names a device expect does not have ({waiting.split(': ', 1)[-1]}); "
                f"expected {node.gpu_count} GPU files {hostlist.compress(node.gpu_files)}",
                n,
            )
            return
        if timed_out:
            r.add(ProblemKind.TIMEOUT, f"slurmd -G -N {n} did not finish in time", n)
            return
        devices = [d for d in (_parse_gres_line(ln) for ln in lines) if d is not None]
        r.gres[n] = devices
        for ln in lines:
            msg = ln.split(": ", 1)[-1]  # drop the "slurmd-gpu-001: " prefix
            # slurmd parses all of slurm.conf too: its copies of slurmctld's errors are not news.
            if (
                _SLURMD_BAD.search(ln)
                and not _noise(ln, SLURMD_NOISE)
                and msg.split("error: ", 1)[-1] not in ctld_errors
            ):
                r.add(ProblemKind.GRES_ERROR, f"slurmd -G -N {n}: {msg}", n)
        if proc.returncode != 0:
            r.add(ProblemKind.GRES_ERROR, f"slurmd -G -N {n} exited rc={proc.returncode}", n)
        gpus = [d for d in devices if d.name == "gpu"]
        count = sum(d.count for d in gpus)
        types = sorted({d.type or "(none)" for d in gpus})
        files = sorted(f for d in gpus for f in d.files)
        diffs: list[str] = []
        if count != node.gpu_count:
            diffs.append(f"{count} GPUs (expected {node.gpu_count})")
        if node.gpu_type is not None and gpus and types != [node.gpu_type]:
            diffs.append(f"Type={','.join(types)} (expected {node.gpu_type})")
        if node.gpu_files and files != sorted(node.gpu_files):
            diffs.append(f"File={hostlist.compress(files) or '(none)'} (expected {hostlist.compress(node.gpu_files)})")
        if diffs:
            r.add(ProblemKind.GRES_MISMATCH, f"slurmd -G -N {n}: " + "; ".join(diffs), n)


def check_dir(path: Path, *, timeout_s: float = 30) -> CheckReport:
    """Check a rendered output folder (``manifest.json`` + ``slurm/*.conf``) with the real daemons.

    ``timeout_s`` bounds all waiting together; stopping what was started takes at most a few
    seconds more. Never raises for a bad config: every finding is a ``Problem`` in the report.
    """
    check = _Check(Path(path), timeout_s)
    check.run()
    return check.report


def format_report(report: CheckReport) -> str:
    head = "OK" if report.ok else f"FAILED ({len(report.problems)} problem{'s' * (len(report.problems) != 1)})"
    total = report.timings.get("total")
    lines = [
        f"check {report.path}{f' [{report.cluster}]' if report.cluster else ''}: {head}"
        + (f" in {total:.2f} s" if total is not None else "")
    ]
    if report.problems:
        lines.append("problems:")
        lines += [f"  [{p.kind}] {p.message}" for p in report.problems]
    if report.overrides:
        lines.append("overrides in the check's private copy (the rendered files are unchanged):")
        for o in report.overrides:
            change = f"{o.original} -> {o.value}" if o.value is not None else f"{o.original} removed"
            lines.append(f"  {o.file}: {o.key}: {change}  ({o.reason})")
    if report.nodes:
        lines.append(
            f"slurmctld: {len(report.nodes)} nodes, {len(report.partitions)} partitions, "
            f"{len(report.topology)} switches"
        )
    for n, devs in report.gres.items():
        gpus = [d for d in devs if d.name == "gpu"]
        files = hostlist.compress(f for d in gpus for f in d.files)
        lines.append(f"slurmd -G -N {n}: {sum(d.count for d in gpus)} GPUs {files}")
    steps = [f"{k} {v:.2f}" for k, v in report.timings.items() if k != "total"]
    if steps:
        lines.append("timings (s): " + ", ".join(steps))
    return "\n".join(lines)
