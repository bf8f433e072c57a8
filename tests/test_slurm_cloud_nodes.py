"""CLOUD nodes of a fixed-size ASG group with the real Slurm daemons (Debian's 22.05).

slurmctld and two slurmds run in network namespaces ``cfcloud-*`` with a private munged. The
config is the renderer's cloud settings (from a rendered example) plus a small node line with the
renderer's ``State=``. Expected values are what the daemons printed by hand in the experiments
(sinfo ``idle~`` before any slurmd, NodeAddr from the registration, requeue with Restarts=1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clusterforge.clusterspec import load_spec
from clusterforge.render import render_cluster
from clusterforge.render.writer import render_tree

from .conftest import EXAMPLES

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        shutil.which("slurmctld") is None or os.geteuid() != 0,
        reason="needs Debian's slurmctld/slurmd and root (CI installs them and runs as root)",
    ),
]
NET = "10.83.0"
NS = ("cfcloud-ctl", "cfcloud-n1", "cfcloud-n2")
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


@pytest.fixture
def cloud_cluster() -> Iterator[dict[str, object]]:
    # not tmp_path: its 0700 parents keep munged and slurmd (other users) out
    w = Path(tempfile.mkdtemp(prefix="cfcloud-"))
    w.chmod(0o755)
    for d in ("state", "log", "spool/c-001", "spool/c-002", "m"):
        (w / d).mkdir(parents=True)
    shutil.chown(w / "m", "munge")
    settings, state = rendered_cloud_lines()
    assert state == "CLOUD"
    (w / "hosts").write_text(f"127.0.0.1 localhost\n{NET}.1 ctl\n")  # no compute node listed
    (w / "slurm.conf").write_text(
        "\n".join(
            [
                "ClusterName=cfc", f"SlurmctldHost=ctl({NET}.1)", "SlurmUser=root", "AuthType=auth/munge",
                f"AuthInfo=socket={w}/m/munge.socket", "MailProg=/bin/true", f"StateSaveLocation={w}/state",
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
        return sh("ip", "netns", "exec", NS[0], "unshare", "--mount", "sh", "-c",
                  'mount --bind "$0" /etc/hosts && exec "$@"', str(w / "hosts"), "env", f"SLURM_CONF={w}/slurm.conf", *cmd, timeout=timeout)

    def slurmd(ns: str, name: str) -> subprocess.Popen[bytes]:
        return start(["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount", "sh", "-c",
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
        sh("ip", "netns", "add", NS[0])
        sh("ip", "-n", NS[0], "link", "set", "lo", "up")
        sh("ip", "-n", NS[0], "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", NS[0], "addr", "add", f"{NET}.1/24", "dev", "br0")
        sh("ip", "-n", NS[0], "link", "set", "br0", "up")
        for i, ns in ((1, NS[1]), (2, NS[2])):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", f"cfcv{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", f"cfcv{i}", "netns", NS[0])
            sh("ip", "-n", NS[0], "link", "set", f"cfcv{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{NET}.1{i}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        start(["ip", "netns", "exec", NS[0], "unshare", "--uts", "--mount", "sh", "-c",
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
        yield {"ctl": ctl, "slurmd": slurmd, "w": w}
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(3)
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        shutil.rmtree(w, ignore_errors=True)


def node(ctl: Callable[..., str], name: str) -> dict[str, str]:
    out = ctl("scontrol", "show", "node", "-o", name)
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def test_cloud_nodes_register_requeue_and_return(cloud_cluster: dict[str, object]) -> None:
    ctl: Callable[..., str] = cloud_cluster["ctl"]  # type: ignore[assignment]
    slurmd: Callable[[str, str], subprocess.Popen[bytes]] = cloud_cluster["slurmd"]  # type: ignore[assignment]
    sinfo = lambda: ctl("sinfo", "-h", "-N", "-o", "%N %T").split()  # noqa: E731
    assert sinfo() == ["c-001", "idle~", "c-002", "idle~"]  # no instance yet: powered down, shown
    first = slurmd(NS[1], "c-001")
    slurmd(NS[2], "c-002")
    wait("both nodes idle", lambda: sinfo() == ["c-001", "idle", "c-002", "idle"])
    assert node(ctl, "c-001")["NodeAddr"] == f"{NET}.11"
    assert node(ctl, "c-002")["NodeAddr"] == f"{NET}.12"
    assert sorted(ctl("srun", "-N2", "hostname", timeout=20).split()) == ["c-001", "c-002"]

    jid = ctl("sbatch", "--parsable", "--requeue", "-w", "c-001", "-o", "/dev/null", "--wrap", "sleep 300").strip()
    job = lambda: dict(f.split("=", 1) for f in ctl("scontrol", "show", "job", "-o", jid).split() if "=" in f)  # noqa: E731
    wait("job running", lambda: job()["JobState"] == "RUNNING")
    first.terminate()  # the instance is gone
    first.wait(5)
    ctl("scontrol", "update", "nodename=c-001", "state=down", "reason=instance i-0abc terminated")
    wait("job requeued", lambda: job()["JobState"] == "PENDING" and job()["Restarts"] == "1")
    assert node(ctl, "c-001")["State"].startswith("DOWN")
    assert "instance i-0abc terminated" in ctl("scontrol", "show", "node", "c-001")

    # the replacement instance: same name, new address
    sh("ip", "-n", NS[1], "addr", "flush", "dev", "eth0")
    sh("ip", "-n", NS[1], "addr", "add", f"{NET}.21/24", "dev", "eth0")
    slurmd(NS[1], "c-001")
    wait("c-001 back", lambda: node(ctl, "c-001")["NodeAddr"] == f"{NET}.21")
    wait("c-001 usable", lambda: node(ctl, "c-001")["State"] in ("IDLE+CLOUD", "ALLOCATED+CLOUD", "MIXED+CLOUD"))
