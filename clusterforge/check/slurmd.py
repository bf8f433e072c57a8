"""Step 3 of the check: ``slurmd -G -N <first node>`` per GPU node line of ``expect``, in a private
mount namespace whose ``/dev`` is an overlay holding fake character devices for the expected GPU
files; its parsed GRES (count, type, files) must equal ``expect``. slurmd -G needs no controller,
so the probes run while slurmctld starts."""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clusterforge import hostlist, proc
from clusterforge.check import compare
from clusterforge.check.daemons import Daemons
from clusterforge.check.report import CheckReport, GresDevice, ProblemKind
from clusterforge.check.slurmctld import NS_READY, noise
from clusterforge.render.manifest import ExpectNode

__all__ = ["SLURMD_NOISE", "Probe", "fake_devices", "finish_probe", "parse_gres_line", "probe_node", "start_probe"]

SLURMD_NOISE: tuple[tuple[str, str], ...] = (
    (r"mpi/pmix|MPI: Cannot create context", "Debian's slurm-wlm cannot load libpmix"),
)
_WAITING_FOR_DEVICE = "Waiting for gres.conf file"
_SLURMD_BAD = re.compile(r"\b(error|fatal):|\bWARNING:")
_GRACE_S = 2.0

# char-device majors for fake GPU files (minor = the file's number): NVIDIA's is 195
# (nvidiactl = 195,255), DRM's (AMD /dev/dri/renderD128+N) is 226.
_DEVICE_KINDS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"/dev/nvidia(\d+)"), 195),
    (re.compile(r"/dev/dri/(?:renderD|card)(\d+)"), 226),
)
_FALLBACK_MAJOR = 240  # "local/experimental use" in the kernel's devices.txt; never opened


def gpu_files(node: ExpectNode) -> list[str]:
    return compare.names(node.gpu_files) or [f"/dev/nvidia{i}" for i in range(node.gpu_count)]


def fake_devices(root: Path, node: ExpectNode) -> Path:
    """A directory of char devices, laid over /dev: nothing opens them, slurmd only stats them."""
    root.mkdir()
    files = gpu_files(node)
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


def parse_gres_line(line: str) -> GresDevice | None:
    idx = line.find("Gres Name=")
    if idx < 0:
        return None
    kv = compare.parse_kv(line[idx + len("Gres ") :])
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


@dataclass
class Probe:
    node: ExpectNode
    name: str  # the probed node: the first of the line
    daemon: proc.Daemon
    t0: float


def probe_node(node: ExpectNode) -> str:
    """The node a GPU node line's ``slurmd -G`` runs as: its first."""
    return compare.names(node.names)[0]


def start_probe(
    node: ExpectNode, *, daemons: Daemons, tmp: Path, hosts: Path, conf: Path, env: Mapping[str, str]
) -> Probe:
    """``slurmd -G`` for the first node of a GPU node line, over a /dev with fakes."""
    n = probe_node(node)
    # One read-only overlay with the fakes on top of the real /dev: a single mount, and the
    # fakes stay invisible outside this mount namespace.
    devdir = fake_devices(tmp / f"dev-{n}", node)
    script = daemons.mounts(hosts, dev_lower=devdir) + f'echo "{NS_READY}" && ' + daemons.exec("slurmd")
    script += ' -G -N "$1" -f "$2"'
    argv = [daemons.tools["unshare"], "--mount", "--", "sh", "-c", script, "sh", n, str(conf)]
    return Probe(node, n, proc.start(argv, env=dict(env, SLURM_CONF=str(conf))), time.monotonic())


def finish_probe(report: CheckReport, probe: Probe, ctld_errors: set[str], deadline: float) -> None:
    r, node, daemon, n = report, probe.node, probe.daemon, probe.name
    # slurmd -G blocks forever on a File= device that does not exist: stop it at once.
    waiting = daemon.lines.wait_for(lambda ln: _WAITING_FOR_DEVICE in ln, deadline)
    timed_out = False
    if waiting is None:
        timed_out = not daemon.wait_exit(max(deadline - time.monotonic(), 0.1))
    cpu = daemon.cpu_seconds()  # readable until stop() reaps it
    daemon.stop(_GRACE_S)
    lines = daemon.lines.join(_GRACE_S)
    r.timings[f"slurmd_G:{n}"] = round(time.monotonic() - probe.t0, 3)
    if cpu is not None:
        r.timings[f"slurmd_G_cpu:{n}"] = round(cpu, 3)
    if NS_READY not in lines:
        r.add(ProblemKind.ENVIRONMENT, f"namespace setup for slurmd -G failed: {' | '.join(lines[-5:])}", n)
        return
    lines = lines[lines.index(NS_READY) + 1 :]
    want_files = gpu_files(node) if node.gpu_files else []
    if waiting is not None:
        r.add(
            ProblemKind.GRES_DEVICE_MISSING,
            f"node {n}: gres.conf names a device expect does not have ({waiting.split(': ', 1)[-1]}); "
            f"expected {node.gpu_count} GPU files {hostlist.compress(want_files)}",
            n,
        )
        return
    if timed_out:
        r.add(ProblemKind.TIMEOUT, f"slurmd -G -N {n} did not finish in time", n)
        return
    devices = [d for d in (parse_gres_line(ln) for ln in lines) if d is not None]
    r.gres[n] = devices
    for ln in lines:
        msg = ln.split(": ", 1)[-1]  # drop the "slurmd-gpu-001: " prefix
        # slurmd parses all of slurm.conf too: its copies of slurmctld's errors are not news.
        if _SLURMD_BAD.search(ln) and not noise(ln, SLURMD_NOISE) and msg.split("error: ", 1)[-1] not in ctld_errors:
            r.add(ProblemKind.GRES_ERROR, f"slurmd -G -N {n}: {msg}", n)
    if daemon.returncode != 0:
        r.add(ProblemKind.GRES_ERROR, f"slurmd -G -N {n} exited rc={daemon.returncode}", n)
    gpus = [d for d in devices if d.name == "gpu"]
    count = sum(d.count for d in gpus)
    types = sorted({d.type or "(none)" for d in gpus})
    files = sorted(f for d in gpus for f in d.files)
    diffs: list[str] = []
    if count != node.gpu_count:
        diffs.append(f"{count} GPUs (expected {node.gpu_count})")
    if node.gpu_type is not None and gpus and types != [node.gpu_type]:
        diffs.append(f"Type={','.join(types)} (expected {node.gpu_type})")
    if want_files and files != sorted(want_files):
        diffs.append(f"File={hostlist.compress(files) or '(none)'} (expected {hostlist.compress(want_files)})")
    if diffs:
        r.add(ProblemKind.GRES_MISMATCH, f"slurmd -G -N {n}: " + "; ".join(diffs), n)
