"""The check's private copies of a render: the ONE place outside ``clusterforge.render`` that
reads rendered config text.

Slurm has no config-test mode, so the check runs the real daemons on copies of the rendered
``slurm/`` folder in which only what would touch this machine is changed: state, spool, pid and
log paths (to a private folder), quiet log levels (to ``info``, the level the check reads),
``Include`` paths (to the copies), the munge socket, a throw-away JWT key, accounting storage
(no slurmdbd runs here), on node lines that give no address ``NodeAddr=`` with the nodes'
check addresses (``environment.node_address``: IP literals, so no daemon looks a node name up;
each lookup scans /etc/hosts, which made a start O(nodes²)). ``MaxNodeCount``, which sizes the
node table before the nodes are read, is the render's own (``render.slurm.node_table_setting``), so
the daemons here start from the very line production starts from. Partition, GRES and topology lines,
and every other key of a node line, are never touched. Every change is recorded as an
``Override`` in the report.

Reading keys here is the rewrite's own business (which value to replace); what the check
*compares* with comes from ``manifest.json`` (``clusterforge.render.manifest``), never from here.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from clusterforge import hostlist
from clusterforge.check.environment import address_hostlist, node_address
from clusterforge.check.report import CheckReport, Override

__all__ = ["Copies", "make_copies", "set_key", "set_munge_socket"]

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

_LINE_KEY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_INCLUDE = re.compile(r"^(\s*include\s+)(\S+)(.*)$", re.IGNORECASE)
_NODE_LINE = re.compile(r"^(\s*NodeName\s*=\s*)(\S+)(.*)$", re.IGNORECASE)

CTLD_FILE = "slurm.conf (slurmctld)"
SLURMD_FILE = "slurm.conf (slurmd -G)"


def _conf_value(text: str, key: str) -> str | None:
    """The value of a global ``Key=value`` line (keys are case-insensitive; the last one wins)."""
    value: str | None = None
    for line in text.splitlines():
        m = _LINE_KEY.match(line.split("#", 1)[0])
        if m and m.group(1).lower() == key.lower():
            value = m.group(2)
    return value


def set_key(text: str, key: str, value: str | None) -> tuple[str, str | None]:
    """Replace (or drop, for ``None``) every ``key=`` line, or append one; returns (text, old)."""
    old: str | None = None
    out: list[str] = []
    for line in text.splitlines():
        m = _LINE_KEY.match(line.split("#", 1)[0])
        if m and m.group(1).lower() == key.lower():
            old = m.group(2)
            continue
        out.append(line)
    if value is not None:
        out.append(f"{key}={value}")
    return "\n".join(out) + "\n", old


def _addresses(names: list[str], index: Mapping[str, int]) -> str | None:
    """The NodeAddr hostlist giving each of ``names`` its check address, paired by position, or
    None when a name has no number in ``index``. Names numbered in a row (every node line the
    renderer writes: ``node_index`` numbers the names in their order) take their addresses from
    ``environment.address_hostlist`` in O(/24 blocks); others are compressed when that keeps the
    order, else listed one by one."""
    if not names or any(n not in index for n in names):
        return None
    first = index[names[0]]
    if [index[n] for n in names] == list(range(first, first + len(names))):
        return address_hostlist(first, len(names))
    addrs = [node_address(index[n]) for n in names]
    compressed = hostlist.compress(addrs)  # sorted: only when that keeps each name's own address
    return compressed if hostlist.expand(compressed) == addrs else ",".join(addrs)


@dataclass(frozen=True)
class Copies:
    """The three copies' ``slurm.conf``, each in a folder holding the whole rendered slurm/ folder
    (gres.conf, topology.conf and cgroup.conf are read from slurm.conf's folder)."""

    parse: Path  # as rendered but Include paths: for the client-side parse
    ctld: Path  # slurmctld's paths, logging and accounting overridden
    slurmd: Path  # slurmd's paths and logging overridden, plus config_overrides
    accounting_off: bool  # accounting storage was removed from the slurmctld copy


class _Rewriter:
    def __init__(self, src: Path, tmp: Path, report: CheckReport) -> None:
        self.src, self.tmp, self.report = src, tmp, report
        # (numbering, node expression) -> NodeAddr: the slurmctld and slurmd copies share the work
        self.addresses: dict[tuple[int, str], str | None] = {}

    def record(self, file: str, key: str, original: str | None, value: str | None, reason: str) -> None:
        shown = value.replace(str(self.tmp), "<tmp>") if value else value
        self.report.overrides.append(Override(file, key, original, shown, reason))

    def includes(self, text: str) -> str:
        """``Include /etc/slurm/x.conf`` → the rendered file's private copy (by name)."""
        out: list[str] = []
        for line in text.splitlines():
            m = _INCLUDE.match(line)
            if m:
                name = Path(m.group(2)).name
                if (self.src / "slurm" / name).is_file():
                    # each copy holds the same file; the included one carries no paths to rewrite
                    new = str(self.tmp / "parse" / name)
                    self.record("slurm.conf (all copies)", "Include", m.group(2), new, "production path")
                    line = f"{m.group(1)}{new}{m.group(3)}"
            out.append(line)
        return "\n".join(out) + "\n"

    def paths(self, text: str, keys: Iterable[tuple[str, str, bool]], file: str) -> str:
        for key, rel, always in keys:
            old = _conf_value(text, key)
            if old is None and not always:
                continue
            new = str(self.tmp / rel)
            text, _ = set_key(text, key, new)
            self.record(file, key, old, new, "production path; the check must not touch the host")
        return text

    def loud(self, text: str, key: str, file: str) -> str:
        old = _conf_value(text, key)
        if old is not None and old.lower() in _QUIET_LEVELS:
            text, _ = set_key(text, key, "info")
            self.record(file, key, old, "info", "the check reads info-level lines")
        return text

    def accounting(self, text: str) -> tuple[str, bool]:
        """No slurmdbd runs here, and slurmctld with accounting_storage/slurmdbd but neither a
        database nor state files exits ("... we have no TRES from it"): store no accounting. Without
        storage slurmctld also refuses AccountingStorageEnforce and TRES like gres/gpu, so those go
        too; the client parse still validates them as rendered."""
        storage = _conf_value(text, "AccountingStorageType")
        if storage is None or storage.endswith("/none"):
            return text, False
        for key in ("AccountingStorageType", "AccountingStorageEnforce", "AccountingStorageTRES"):
            text, old = set_key(text, key, None)
            if old is not None:
                self.record(CTLD_FILE, key, old, None, "no slurmdbd runs during the check")
        return text, True

    def jwt(self, text: str, pw: pwd.struct_passwd) -> str:
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
        text, _ = set_key(text, "AuthAltParameters", new)
        self.record(CTLD_FILE, "AuthAltParameters", params, new, "throw-away JWT key")
        return text

    def jobcomp(self, text: str) -> str:
        if (_conf_value(text, "JobCompType") or "").lower() != "jobcomp/filetxt":
            return text
        new = str(self.tmp / "log" / "jobcomp.txt")
        text, old = set_key(text, "JobCompLoc", new)
        self.record(CTLD_FILE, "JobCompLoc", old, new, "production path")
        return text

    def node_addresses(self, text: str, index: Mapping[str, int], file: str) -> str:
        """``NodeAddr=`` of the check's addresses on each node line that has neither NodeAddr nor
        NodeHostname (cloud groups, on-prem groups without addresses): Slurm pairs the two
        hostlists by position, and the addresses rise with ``index``, in the names' order."""
        out: list[str] = []
        changed = 0
        for line in text.splitlines():
            m = _NODE_LINE.match(line)
            keys = {w.split("=", 1)[0].lower() for w in line.split("#", 1)[0].split()}
            if m and m.group(2).lower() != "default" and not keys & {"nodeaddr", "nodehostname"}:
                key = (id(index), m.group(2))
                if key not in self.addresses:
                    try:
                        names = hostlist.expand(m.group(2))
                    except hostlist.HostlistError:
                        names = []  # slurmctld's to report
                    self.addresses[key] = _addresses(names, index)
                addrs = self.addresses[key]
                if addrs is not None:
                    line = f"{m.group(1)}{m.group(2)} NodeAddr={addrs}{m.group(3)}"
                    changed += 1
            out.append(line)
        if changed:
            self.record(file, "NodeAddr", None, f"the check's addresses on {changed} node line(s)",
                        "IP literals: no daemon looks a node name up in /etc/hosts")
        return "\n".join(out) + "\n"

    def slurmd(self, base: str) -> str:
        text = self.paths(base, _SLURMD_PATHS, SLURMD_FILE)
        text = self.loud(text, "SlurmdDebug", SLURMD_FILE)
        if _conf_value(text, "SlurmdLogFile") is not None:
            text, old = set_key(text, "SlurmdLogFile", None)
            self.record(SLURMD_FILE, "SlurmdLogFile", old, None, "slurmd -G prints to stderr instead")
        # Cores= in gres.conf are checked against the cores of the machine slurmd runs on (2 here:
        # "Invalid GRES data for gpu, Cores=0-55"); with config_overrides slurmd takes the node's
        # layout from slurm.conf, so Cores= are checked against the rendered node instead.
        params = _conf_value(text, "SlurmdParameters")
        merged = ",".join([p for p in (params or "").split(",") if p] + ["config_overrides"])
        text, _ = set_key(text, "SlurmdParameters", merged)
        self.record(
            SLURMD_FILE, "SlurmdParameters", params, merged, "check Cores= against the rendered node, not this host"
        )
        return text


def make_copies(
    src: Path, tmp: Path, pw: pwd.struct_passwd, report: CheckReport, nodes: Mapping[str, int] | None = None
) -> Copies:
    """Write ``tmp/{parse,ctld,slurmd}/`` from ``src/slurm/`` and the private state/log/run/spool
    folders (``state``, ``log`` and ``run`` owned by the Slurm user ``pw``, who writes there after
    slurmctld drops root). ``nodes`` numbers the nodes (``environment.node_index``) for the
    slurmctld and slurmd copies' node addresses. Raises ``OSError`` when the render cannot be read."""
    rw = _Rewriter(src, tmp, report)
    for sub in ("state", "log", "run", "spool", "munge", "parse", "ctld", "slurmd"):
        (tmp / sub).mkdir(mode=0o755)
    for sub in ("state", "log", "run"):
        os.chown(tmp / sub, pw.pw_uid, pw.pw_gid)
    for sub in ("parse", "ctld", "slurmd"):
        for f in sorted((src / "slurm").iterdir()):
            if f.is_file() and f.name != "slurm.conf":
                shutil.copyfile(f, tmp / sub / f.name)
                (tmp / sub / f.name).chmod(0o644)
    base = rw.includes((src / "slurm" / "slurm.conf").read_text())
    (tmp / "parse" / "slurm.conf").write_text(base)

    text = rw.paths(base, _CTLD_PATHS, CTLD_FILE)
    text = rw.jobcomp(text)
    text = rw.loud(text, "SlurmctldDebug", CTLD_FILE)
    text, accounting_off = rw.accounting(text)
    text = rw.jwt(text, pw)
    slurmd_text = rw.slurmd(base)
    if nodes:
        text = rw.node_addresses(text, nodes, CTLD_FILE)
        slurmd_text = rw.node_addresses(slurmd_text, nodes, SLURMD_FILE)
    (tmp / "ctld" / "slurm.conf").write_text(text)
    (tmp / "slurmd" / "slurm.conf").write_text(slurmd_text)
    return Copies(
        tmp / "parse" / "slurm.conf", tmp / "ctld" / "slurm.conf", tmp / "slurmd" / "slurm.conf", accounting_off
    )


def set_munge_socket(conf: Path, sock: Path, tmp: Path, report: CheckReport, file: str = CTLD_FILE) -> None:
    """Point a copy at a private munged: Slurm's auth/munge talks to munged's default socket
    unless ``AuthInfo`` names another. (slurmd -G of 24.11+ creates a munge credential at start.)"""
    text = conf.read_text()
    old = _conf_value(text, "AuthInfo")
    opts = [o for o in (old or "").split(",") if o and not o.startswith("socket=")] + [f"socket={sock}"]
    new_text, _ = set_key(text, "AuthInfo", ",".join(opts))
    conf.write_text(new_text)
    _Rewriter(conf.parent, tmp, report).record(
        file, "AuthInfo", old, ",".join(opts), "no munged on the host: the check's own"
    )


def unreadable_slurm_files(src: Path, names: list[str]) -> list[str]:
    """Problems with the render's Slurm files before the copy is made: the daemons read each as
    text, so a folder in a file's place or bytes that are not UTF-8 stop the check here with the
    file named, not as a traceback in the copy. (A missing slurm.conf is reported by the caller.)"""
    bad: list[str] = []
    for name in names:
        path = src / name
        if not name.startswith("slurm/") or (name == "slurm/slurm.conf" and not path.is_file()):
            continue
        if not path.is_file():
            bad.append(f"{path} is missing or not a file: render again")
            continue
        try:
            path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            bad.append(f"{path} cannot be read as text ({exc}): render again")
    return bad
