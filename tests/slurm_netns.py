"""The real Slurm 22.05 daemons with CLOUD nodes in network namespaces: one harness for the tests
that need them (tests/test_slurm_cloud_nodes.py, tests/test_slurm_lifecycle.py), each on its own
/24 and namespace prefix so they never meet."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from clusterforge.clusterspec import load_spec
from clusterforge.render import render_cluster
from clusterforge.render.writer import render_tree

from .conftest import EXAMPLES

CLOUD_KEYS = ("SlurmctldParameters", "TreeWidth", "SuspendTime", "PrivateData", "ReturnToService")


def sh(*cmd: str, timeout: float = 10, check: bool = True) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd}: rc={r.returncode} {r.stderr.strip()}")
    return r.stdout


def rendered_cloud_lines() -> tuple[list[str], str]:
    """The cloud settings and the cloud group's State= from the hybrid example rendered for 22.05."""
    tree = render_tree(render_cluster(load_spec(EXAMPLES / "hybrid.yaml"), base_dir=EXAMPLES, slurm_version="22.05"))
    text = tree["slurm/slurm.conf"].decode()
    lines = [ln for ln in text.splitlines() if ln.split("=", 1)[0] in CLOUD_KEYS]
    node = next(ln for ln in text.splitlines() if ln.startswith("NodeName=burst-"))
    return lines, node.rsplit("State=", 1)[1]


def wait(what: str, cond: Callable[[], bool], limit: float = 8) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {limit}s waiting for {what}")


@contextlib.contextmanager
def cloud_slurm(net: str, ns: tuple[str, str, str], *, cluster: str, auth_extra: str = "") -> Iterator[dict[str, object]]:
    """slurmctld in namespace ``ns[0]`` ({net}.1, bridge br0) and two CLOUD nodes c-001/c-002 whose
    slurmds the test starts in ``ns[1]``/``ns[2]`` ({net}.11/.12), a private munged; the cloud
    settings are the renderer's. Yields ``ctl`` (run a command on the controller), ``slurmd``
    (start one), ``start`` (start any daemon, stopped at the end) and ``w`` (the work folder).
    Everything it made (processes, namespaces, folder) is gone afterwards."""
    # not tmp_path: its 0700 parents keep munged and slurmd (other users) out
    w = Path(tempfile.mkdtemp(prefix=f"{ns[0].split('-')[0]}-"))
    w.chmod(0o755)
    for d in ("state", "log", "spool/c-001", "spool/c-002", "m"):
        (w / d).mkdir(parents=True)
    shutil.chown(w / "m", "munge")
    settings, state = rendered_cloud_lines()
    assert state == "CLOUD"
    (w / "hosts").write_text(f"127.0.0.1 localhost\n{net}.1 ctl\n")  # no compute node listed
    (w / "slurm.conf").write_text(
        "\n".join(
            [
                f"ClusterName={cluster}", f"SlurmctldHost=ctl({net}.1)", "SlurmUser=root", "AuthType=auth/munge",
                f"AuthInfo=socket={w}/m/munge.socket{auth_extra}", "MailProg=/bin/true", f"StateSaveLocation={w}/state",
                f"SlurmdSpoolDir={w}/spool/%n", f"SlurmctldPidFile={w}/ctld.pid", f"SlurmdPidFile={w}/d-%n.pid",
                f"SlurmctldLogFile={w}/log/ctld.log", f"SlurmdLogFile={w}/log/d-%n.log",
                "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core", *settings,
                f"NodeName=c-[001-002] CPUs=2 RealMemory=1000 State={state}",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", "",
            ]
        )
    )
    env = {**os.environ, "SLURM_CONF": str(w / "slurm.conf")}
    procs: list[subprocess.Popen[bytes]] = []

    def start(cmd: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(w / log, "ab") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    def ctl(*cmd: str, timeout: float = 10) -> str:
        return sh("ip", "netns", "exec", ns[0], "unshare", "--mount", "sh", "-c",
                  'mount --bind "$0" /etc/hosts && exec "$@"', str(w / "hosts"), "env", f"SLURM_CONF={w}/slurm.conf", *cmd, timeout=timeout)

    def slurmd(node_ns: str, name: str) -> subprocess.Popen[bytes]:
        return start(["nsenter", f"--net=/run/netns/{node_ns}", "unshare", "--uts", "--mount", "sh", "-c",
                      f'mount --bind {w}/hosts /etc/hosts && hostname {name} && exec slurmd -D -N {name}'],
                     f"slurmd-{name}.out")

    try:
        key = w / "munged.key"
        key.write_bytes(os.urandom(128))
        shutil.chown(key, "munge")
        key.chmod(0o600)
        start(["runuser", "-u", "munge", "--", "munged", "--foreground", f"--socket={w}/m/munge.socket",
               f"--key-file={key}", f"--log-file={w}/m/log", f"--pid-file={w}/m/pid", f"--seed-file={w}/m/seed"],
              "munged.out")
        wait("munged", lambda: (w / "m/munge.socket").exists())
        sh("ip", "netns", "add", ns[0])
        sh("ip", "-n", ns[0], "link", "set", "lo", "up")
        sh("ip", "-n", ns[0], "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", ns[0], "addr", "add", f"{net}.1/24", "dev", "br0")
        sh("ip", "-n", ns[0], "link", "set", "br0", "up")
        for i, node_ns in ((1, ns[1]), (2, ns[2])):
            veth = f"{ns[0].split('-')[0]}v{i}"
            sh("ip", "netns", "add", node_ns)
            sh("ip", "-n", node_ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", node_ns)
            sh("ip", "link", "set", veth, "netns", ns[0])
            sh("ip", "-n", ns[0], "link", "set", veth, "master", "br0", "up")
            sh("ip", "-n", node_ns, "addr", "add", f"{net}.1{i}/24", "dev", "eth0")
            sh("ip", "-n", node_ns, "link", "set", "eth0", "up")
        start(["ip", "netns", "exec", ns[0], "unshare", "--uts", "--mount", "sh", "-c",
               f"mount --bind {w}/hosts /etc/hosts && hostname ctl && exec slurmctld -D"], "ctld.out")

        def up() -> bool:
            try:
                return "UP" in ctl("scontrol", "ping", timeout=3)
            except (AssertionError, subprocess.TimeoutExpired):
                return False

        try:
            wait("slurmctld", up)
        except AssertionError as e:
            raise AssertionError(f"{e}: {(w / 'ctld.out').read_text()[-1500:]}") from None
        yield {"ctl": ctl, "slurmd": slurmd, "w": w, "start": start}
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(3)
        for n in ns:
            kill_netns_pids(n)
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=10)
        shutil.rmtree(w, ignore_errors=True)


def kill_netns_pids(n: str) -> None:
    """SIGKILL whatever still runs in namespace ``n``: the slurmstepds of jobs that outlived
    their slurmd (a stepd keeps running without it, waiting for a slurmd that never returns)."""
    r = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True, timeout=10)
    for pid in r.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)


def munge_key(w: Path) -> Path:
    """A fresh 1024-bit key for a private munged, owned by munge, mode 0600 (munged refuses others)."""
    key = w / "munged.key"
    key.write_bytes(os.urandom(128))
    shutil.chown(key, "munge")
    key.chmod(0o600)
    return key


def munged_argv(w: Path, key: Path) -> list[str]:
    """A private munged in the foreground, its socket, log, pid and seed below ``w/m``."""
    return ["runuser", "-u", "munge", "--", "munged", "--foreground", f"--socket={w}/m/munge.socket",
            f"--key-file={key}", f"--log-file={w}/m/log", f"--pid-file={w}/m/pid", f"--seed-file={w}/m/seed"]


def add_bridge(bridge_ns: str) -> None:
    """Namespace ``bridge_ns`` with a bridge br0: the switch the hosts' veths plug into."""
    sh("ip", "netns", "add", bridge_ns)
    sh("ip", "-n", bridge_ns, "link", "set", "lo", "up")
    sh("ip", "-n", bridge_ns, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", bridge_ns, "link", "set", "br0", "up")


def add_host(bridge_ns: str, ns: str, veth: str, addr: str) -> None:
    """A fresh namespace ``ns`` (a new machine) whose eth0 has ``addr``/24 on ``bridge_ns``'s br0."""
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh("ip", "link", "set", veth, "netns", bridge_ns)
    sh("ip", "-n", bridge_ns, "link", "set", veth, "master", "br0", "up")
    sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
