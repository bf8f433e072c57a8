"""What the daemons need on this machine before the check can start them: root, the release
family's daemons (``preflight``: the host's own when they are of the family, else the family's
cached root filesystem, built on request), each release asked once per process, a munged (the
host's, or a private one on its own socket and key) and the namespaces' ``/etc/hosts``."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from clusterforge import hostlist, proc
from clusterforge.check.daemons import SLURM_TOOLS, Daemons
from clusterforge.check.releases import FAMILIES, Family, family_for
from clusterforge.check.report import CheckReport, ProblemKind
from clusterforge.check.slurmctld import STAND_IN_ADDR
from clusterforge.render.manifest import Manifest

__all__ = [
    "HOST_TOOLS",
    "ROOTFS_BUILD_TIMEOUT_S",
    "address_hostlist",
    "cache_dir",
    "daemon_version",
    "node_address",
    "node_index",
    "preflight",
    "rootfs_command",
    "start_munged",
    "write_hosts",
]

HOST_TOOLS = ("unshare", "nsenter", "ip", "chroot")
CLIENT_TIMEOUT_S = 10.0  # one scontrol/munge call; a missing controller makes them retry for long
ROOTFS_BUILD_TIMEOUT_S = 600.0  # debootstrap of one suite: ~50 s here (benchmarks/rootfs.py)
ROOTFS_SH = Path(__file__).resolve().parents[1] / "local" / "rootfs.sh"
_GRACE_S = 2.0
_VERSIONS: dict[tuple[str, ...], str] = {}


def daemon_version(argv: list[str]) -> str:
    """``slurm-wlm 22.05.8`` from ``argv -V``; asked once per process (the tests run many
    checks), "" if unknown."""
    key = tuple(argv)
    if key not in _VERSIONS:
        try:
            out = proc.run([*argv, "-V"], timeout=CLIENT_TIMEOUT_S).stdout.strip()
        except proc.ProcError:
            return ""  # not remembered: ask again next time
        _VERSIONS[key] = out
    return _VERSIONS[key]


def cache_dir() -> Path:
    """Where the root filesystems are cached (the local cluster's cache too)."""
    return Path(os.environ.get("CLUSTERFORGE_CACHE") or "/var/cache/clusterforge")


def rootfs_command(family: Family) -> str:
    return f"{ROOTFS_SH} {cache_dir()} {family.suite} slurm"


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _build_rootfs(report: CheckReport, family: Family) -> bool:
    """Build the family's root filesystem (``--build-rootfs``): its own time limit, not the
    check's (a download is not a hang of the daemons), timed as the step ``rootfs_build``."""
    t0 = time.monotonic()
    try:
        cp = proc.run([str(ROOTFS_SH), str(cache_dir()), family.suite, "slurm"], timeout=ROOTFS_BUILD_TIMEOUT_S)
    except proc.ProcError as exc:
        report.add(ProblemKind.ENVIRONMENT, f"building the {family.debian} root filesystem failed: {exc}")
        return False
    finally:
        report.timings["rootfs_build"] = round(time.monotonic() - t0, 3)
    if cp.returncode != 0:
        why = " | ".join(cp.stderr.strip().splitlines()[-5:])
        report.add(ProblemKind.ENVIRONMENT, f"`{rootfs_command(family)}` failed (rc={cp.returncode}): {why}")
        return False
    return True


def preflight(report: CheckReport, version: str, tmp: Path, *, build_rootfs: bool = False) -> Daemons | None:
    """The daemons of ``version``'s release family (the host's own when they are of it, else the
    family's cached root filesystem), or None after reporting why the check cannot run here."""
    if os.geteuid() != 0:
        report.add(ProblemKind.ENVIRONMENT, "the real-daemon check needs root (namespaces, mounts)")
        return None
    # Keys come and go between releases: a config is proven only by its release family.
    family = family_for(version)
    if family is None:
        known = ", ".join(f.targets for f in FAMILIES)
        report.add(
            ProblemKind.ENVIRONMENT,
            f"rendered for Slurm {version}, which no release family the check can run covers ({known}); "
            "render for one of those to check it",
        )
        return None
    tools = {t: _which(t) for t in HOST_TOOLS}
    t0 = time.monotonic()
    host_ctld = _which("slurmctld")
    host_version = daemon_version([host_ctld]) if host_ctld else ""
    if host_ctld and family_for(host_version) == family:
        tools |= {t: _which(t) for t in SLURM_TOOLS}
        report.timings["preflight"] = round(time.monotonic() - t0, 3)
        missing = [t for t, p in tools.items() if p is None and t != "chroot"]
        if missing:
            report.add(
                ProblemKind.ENVIRONMENT,
                f"missing {', '.join(missing)}; install slurmctld slurmd slurm-client munge iproute2",
            )
            return None
        return Daemons(family, host_version, {t: p for t, p in tools.items() if p}, None, tmp)
    missing = [t for t, p in tools.items() if p is None]
    if missing:
        report.add(ProblemKind.ENVIRONMENT, f"missing {', '.join(missing)}; install util-linux iproute2 coreutils")
        return None
    root = cache_dir() / f"rootfs-{family.suite}-slurm"
    if not (root / ".complete").is_file():
        if not build_rootfs:
            report.add(
                ProblemKind.ENVIRONMENT,
                f"rendered for Slurm {version}: the check loads it with {family.debian}'s slurm-wlm "
                f"{family.stands_in}, but {root} is not built; build it once (~50 s) with "
                f"`{rootfs_command(family)}` or run `clusterforge check --build-rootfs`",
            )
            return None
        if not _build_rootfs(report, family):
            return None
    paths = {
        t: next((p for p in (f"/usr/sbin/{t}", f"/usr/bin/{t}") if (root / p[1:]).is_file()), None) for t in SLURM_TOOLS
    }
    missing = [t for t, p in paths.items() if p is None]
    if missing:
        report.add(
            ProblemKind.ENVIRONMENT,
            f"{root} has no {', '.join(missing)}: remove it and build it again with `{rootfs_command(family)}`",
        )
        return None
    chroot_tools = {t: p for t, p in tools.items() if p}
    full = daemon_version([chroot_tools["chroot"], str(root), str(paths["slurmctld"])])
    report.timings["preflight"] = round(time.monotonic() - t0, 3)
    if family_for(full) != family:
        report.add(
            ProblemKind.ENVIRONMENT,
            f"{root} runs {full or 'no slurmctld'}, not Slurm {family.targets}: remove it and build it again "
            f"with `{rootfs_command(family)}`",
        )
        return None
    return Daemons(family, full, chroot_tools | {t: p for t, p in paths.items() if p}, root, tmp)


def host_munged_answers(daemons: Daemons, env: Mapping[str, str], timeout: float) -> bool:
    """The host's munged serves the host's daemons; chrooted daemons cannot reach its socket
    (and get a private munged of their own release instead)."""
    if daemons.root is not None:
        return False
    try:
        cp = proc.run([daemons.tools["munge"], "-n"], timeout=min(CLIENT_TIMEOUT_S, timeout), env=env)
        return cp.returncode == 0
    except proc.ProcError:
        return False


def start_munged(
    report: CheckReport, daemons: Daemons, d: Path, env: Mapping[str, str], deadline: float
) -> tuple[proc.Daemon, Path | None]:
    """A private munged in ``d``; returns it and its socket, or None for the socket after
    reporting why it did not start (the daemon is returned either way, for the caller to stop)."""
    sock, key = d / "munge.socket", d / "munged.key"
    key.write_bytes(os.urandom(128))  # munged wants 0600 and owned by its user
    key.chmod(0o600)
    files = [f"--{k}-file={d / f'munged.{k}'}" for k in ("key", "log", "pid", "seed")]
    argv = daemons.isolated("munged", ["--foreground", f"--socket={sock}", *files, "--num-threads=2"])
    daemon = proc.start(argv, env=env)
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


#: Node addresses of the check: 127.0.0.0/8 from 127.1.0.1, 254 to a /24 (no .0 or .255), so
#: 16 million nodes fit; the namespaces route all of IPv4 to their loopback (slurmctld.py), and no
#: address leaves them. (The first scheme, 127.1.<i // 250>.<i % 250 + 1>, ran out at 64,000 nodes.)
NODE_NET = ipaddress.IPv4Network("127.0.0.0/8")
_FIRST_NODE = int(ipaddress.IPv4Address("127.1.0.0"))
MAX_CHECK_NODES = (int(NODE_NET.broadcast_address) - _FIRST_NODE) // 256 * 254


def thread_ceiling() -> tuple[int, str]:
    """About how many threads one process may have here, and the limits that say so: each thread
    is two memory maps (its stack and a guard page) under ``vm.max_map_count``, and one PID under
    ``kernel.pid_max`` and ``kernel.threads-max``."""
    limits: dict[str, int] = {}
    for key in ("vm/max_map_count", "kernel/pid_max", "kernel/threads-max"):
        try:
            limits[key.replace("/", ".")] = int(Path("/proc/sys", key).read_text())
        except (OSError, ValueError):
            continue
    caps = [v // 2 if k == "vm.max_map_count" else v for k, v in limits.items()]
    text = ", ".join(f"{k} {v:,}" for k, v in limits.items()) or "limits unreadable"
    return (min(caps) if caps else 0), text


def node_networks() -> list[ipaddress.IPv4Network]:
    """The prefixes that hold every node address of the check (127.1.0.0 to 127.255.255.255).

    slurmctld's namespace makes them unreachable (``Slurmctld.run``): Slurm retries a refused
    connect once a second for up to ``MessageTimeout`` (``slurm_send_addr_recv_msgs``), while "no
    route to host" fails at once."""
    return list(ipaddress.summarize_address_range(ipaddress.IPv4Address(_FIRST_NODE), NODE_NET.broadcast_address))


def node_address(i: int) -> str:
    """The check's address of its ``i``-th node (from 0): increasing with ``i``."""
    if not 0 <= i < MAX_CHECK_NODES:
        raise ValueError(f"node index {i} is outside the check's {MAX_CHECK_NODES} node addresses")
    return str(ipaddress.IPv4Address(_FIRST_NODE + (i // 254) * 256 + i % 254 + 1))


def address_hostlist(first: int, count: int) -> str:
    """The hostlist of ``node_address(first)`` .. ``node_address(first + count - 1)``, in that
    order: one ``127.a.b.[lo-hi]`` per /24, built from the numbers, never from 65,536 strings
    (``copies.node_addresses`` gives each node line its addresses this way)."""
    if count < 1 or first < 0 or first + count > MAX_CHECK_NODES:
        raise ValueError(f"nodes {first}..{first + count - 1} are outside the check's {MAX_CHECK_NODES} node addresses")
    parts: list[str] = []
    i, end = first, first + count
    while i < end:
        block = i // 254
        hi = min(end, (block + 1) * 254) - 1
        prefix = str(ipaddress.IPv4Address(_FIRST_NODE + block * 256)).rsplit(".", 1)[0]
        lo_host, hi_host = i % 254 + 1, hi % 254 + 1
        parts.append(f"{prefix}.{lo_host}" if lo_host == hi_host else f"{prefix}.[{lo_host}-{hi_host}]")
        i = hi + 1
    return ",".join(parts)


def write_hosts(
    path: Path, manifest: Manifest, nodes: Iterable[str] = (), index: Mapping[str, int] | None = None
) -> None:
    """An /etc/hosts for the namespaces: the controllers (the primary gets its expected address,
    or a documentation address; the namespace's loopback carries both) and ``nodes``.

    Not every node: glibc scans /etc/hosts from the top for each name, and slurmctld looks up
    every node it has no address for, so a file of N nodes made the start O(N²) (17.9 s at 16,384
    nodes). The check's copies give every node line an address instead (``copies.node_addresses``,
    from :func:`node_address`); ``nodes`` are the few names a daemon still looks up (each slurmd
    -G probe's own node), at those same addresses (``index``: ``node_index(manifest)``, worked
    out here when not given)."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
    seen = {"localhost"}
    for i, c in enumerate(manifest.expect.controllers):
        if c.name not in seen:
            lines.append(f"{c.address or (STAND_IN_ADDR if i == 0 else f'127.0.0.{i + 1}')} {c.name}")
            seen.add(c.name)
    wanted = [n for n in nodes if n not in seen]
    if wanted:
        index = node_index(manifest) if index is None else index
        lines += [f"{node_address(index[n])} {n}" for n in dict.fromkeys(wanted) if n in index]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)


def node_index(manifest: Manifest) -> dict[str, int]:
    """Every node of ``expect`` and of the node records, numbered in the order they come (each
    name once): ``node_address`` of the number is the node's address in the check."""
    index: dict[str, int] = {}
    for expr in [n.names for n in manifest.expect.nodes] + [r.names for r in manifest.config.nodes]:
        try:
            names = hostlist.expand(expr)
        except hostlist.HostlistError:
            continue  # expect's were checked before; a bad record is slurmctld's to report
        for n in names:
            if n not in index:
                index[n] = len(index)
    return index
