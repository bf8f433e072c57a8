"""What the daemons need on this machine before the check can start them: root and the binaries
(``preflight``), the installed Slurm release (asked once per process), a munged (the host's, or a
private one on its own socket and key) and the namespaces' ``/etc/hosts``."""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from clusterforge import hostlist, proc
from clusterforge.check.report import CheckReport, ProblemKind
from clusterforge.check.slurmctld import STAND_IN_ADDR
from clusterforge.render.manifest import Manifest

__all__ = ["BINARIES", "daemon_version", "preflight", "start_munged", "write_hosts"]

BINARIES = ("slurmctld", "slurmd", "scontrol", "munge", "munged", "unshare", "nsenter", "ip")
CLIENT_TIMEOUT_S = 10.0  # one scontrol/munge call; a missing controller makes them retry for long
_GRACE_S = 2.0
_VERSIONS: dict[str, str] = {}


def daemon_version(slurmctld: str) -> str:
    """``slurm-wlm 22.05.8``; asked once per process (the tests run many checks), "" if unknown."""
    if slurmctld not in _VERSIONS:
        try:
            out = proc.run([slurmctld, "-V"], timeout=CLIENT_TIMEOUT_S).stdout.strip()
        except proc.ProcError:
            return ""  # not remembered: ask again next time
        _VERSIONS[slurmctld] = out
    return _VERSIONS[slurmctld]


def preflight(report: CheckReport, version: str) -> dict[str, str] | None:
    """The binaries' paths, or None after reporting why the check cannot run here."""
    if os.geteuid() != 0:
        report.add(ProblemKind.ENVIRONMENT, "the real-daemon check needs root (namespaces, mounts)")
        return None
    bins: dict[str, str] = {}
    missing = []
    for b in BINARIES:
        found = shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if found is None:
            missing.append(b)
        else:
            bins[b] = found
    if missing:
        report.add(
            ProblemKind.ENVIRONMENT,
            f"missing {', '.join(missing)}; install slurmctld slurmd slurm-client munge iproute2",
        )
        return None
    # Keys come and go between releases: a config is proven only by the release it targets.
    t0 = time.monotonic()
    full = daemon_version(bins["slurmctld"])
    report.timings["preflight"] = round(time.monotonic() - t0, 3)
    m = re.search(r"(\d+)\.(\d+)", full)
    installed = f"{m.group(1)}.{m.group(2)}" if m else None
    if installed and version != installed:
        report.add(
            ProblemKind.ENVIRONMENT,
            f"rendered for Slurm {version}, but the daemons here are {full}; render for {installed} to check it here",
        )
        return None
    return bins


def host_munged_answers(bins: Mapping[str, str], env: Mapping[str, str], timeout: float) -> bool:
    try:
        return proc.run([bins["munge"], "-n"], timeout=min(CLIENT_TIMEOUT_S, timeout), env=env).returncode == 0
    except proc.ProcError:
        return False


def start_munged(
    report: CheckReport, bins: Mapping[str, str], d: Path, env: Mapping[str, str], deadline: float
) -> tuple[proc.Daemon, Path | None]:
    """A private munged in ``d``; returns it and its socket, or None for the socket after
    reporting why it did not start (the daemon is returned either way, for the caller to stop)."""
    sock, key = d / "munge.socket", d / "munged.key"
    key.write_bytes(os.urandom(128))  # munged wants 0600 and owned by its user
    key.chmod(0o600)
    files = [f"--{k}-file={d / f'munged.{k}'}" for k in ("key", "log", "pid", "seed")]
    daemon = proc.start([bins["munged"], "--foreground", f"--socket={sock}", *files, "--num-threads=2"], env=env)
    # Ready = the socket accepts a connection; polling it costs no process start.
    while time.monotonic() < deadline and daemon.alive():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(sock))
                return daemon, sock
            except OSError:
                time.sleep(0.01)
    if daemon.alive():
        report.add(ProblemKind.TIMEOUT, "private munged did not open its socket in time")
    else:
        why = " | ".join(daemon.lines.join(_GRACE_S)[-5:])
        report.add(ProblemKind.ENVIRONMENT, f"private munged did not start: {why}")
    return daemon, None


def write_hosts(path: Path, manifest: Manifest) -> None:
    """An /etc/hosts for the namespaces: the controllers and every node of ``expect`` and of the
    node records resolve, so nothing waits 5 s on DNS. The primary controller gets its expected
    address or a documentation address (the namespace's loopback carries both)."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
    seen = {"localhost"}
    for i, c in enumerate(manifest.expect.controllers):
        if c.name not in seen:
            lines.append(f"{c.address or (STAND_IN_ADDR if i == 0 else f'127.0.0.{i + 1}')} {c.name}")
            seen.add(c.name)
    exprs = [n.names for n in manifest.expect.nodes] + [r.names for r in manifest.config.nodes]
    i = 0
    for expr in exprs:
        try:
            names = hostlist.expand(expr)
        except hostlist.HostlistError:
            continue  # expect's were checked before; a bad record is slurmctld's to report
        for n in names:
            if n in seen:
                continue
            seen.add(n)
            i += 1
            lines.append(f"127.1.{i // 250}.{i % 250 + 1} {n}")
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
