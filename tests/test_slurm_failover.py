"""The controller's state survives, against the real Slurm 22.05 daemons (issue 15, item 6).

(a) A primary and a backup slurmctld, each in its own network namespace, share one
StateSaveLocation folder (as two controllers share it on FSx/EFS/NFS); one slurmd runs a job and
holds a second one queued. The primary is killed with SIGKILL; the backup must take over (its log
says "Running as primary controller", it answers squeue, which a backup in standby refuses), the
running job must finish and the queued one run after it.
(b) A replaced controller: the only slurmctld stops, everything of its "host" but the state folder
is removed (a new instance with a new root volume, the retained volume reattached), and a fresh
slurmctld in a fresh namespace starts on the same state folder: it knows both jobs.

The HA settings come from the real renderer for a spec with two controllers and
``state_storage: shared`` (SlurmctldHost twice, SlurmctldTimeout, StateSaveLocation); the state path
is then rewritten to the private folder, the way the harness in tests/slurm_netns.py and the check's
private copies do. Namespaces ``cfha-*`` on 10.86.0.0/24; a private munged. Every wait is bounded;
everything started is stopped and every namespace deleted, also on failure.

Not covered here: slurmdbd and the sacct history across a replacement. tests/test_slurm_accounting_replace.py
replaces a controller that runs slurmdbd and MariaDB on the retained volume (scripts/setup-deps.sh
installs them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterforge.aws.slurmcmd import fields
from clusterforge.clusterspec.models import Cluster
from clusterforge.render import render_cluster
from clusterforge.render.writer import render_tree

from .conftest import EXAMPLES
from .slurm_netns import add_bridge, add_host, kill_netns_pids, munge_key, munged_argv, sh, wait

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        shutil.which("slurmctld") is None or shutil.which("slurmd") is None or os.geteuid() != 0,
        reason="needs Debian's slurmctld/slurmd (22.05 on Debian 12) and root for network namespaces",
    ),
]

NET = "10.86.0"
BRIDGE_NS = "cfha-br"
HOSTS = {"ctl-1": f"{NET}.1", "ctl-2": f"{NET}.2", "n1": f"{NET}.11"}
NS = {"ctl-1": "cfha-c1", "ctl-2": "cfha-c2", "n1": "cfha-n1"}
#: short enough for a test; the spec's range starts at 5
TIMEOUT_S = 6
SHARED_STATE = "/shared/slurm/state"


def ha_spec(controllers: int) -> Cluster:
    hosts = "ctl-[1-2]" if controllers == 2 else "ctl-1"
    addrs = f"{NET}.[1-2]" if controllers == 2 else f"{NET}.1"
    return Cluster.model_validate(
        {
            "name": "cfha",
            "os": "debian-12",
            "slurm": {
                "version": "22.05",
                "state_storage": {"type": "shared", "mount": "/shared"},
                "state_save_location": SHARED_STATE,
                "slurmctld_timeout_s": TIMEOUT_S,
            },
            "node_groups": [
                {"name": "ctl", "role": "controller", "onprem": {"hosts": hosts, "addresses": addrs, "profile": "m7i.4xlarge"}},
                {"name": "cpu", "role": "compute", "onprem": {"hosts": "n1", "addresses": f"{NET}.11", "profile": "m7i.4xlarge"}},
            ],
            "storage": [{"name": "shared", "type": "nfs", "mount": "/shared", "server": f"{NET}.100", "export": "/export"}],
            "health_checks": {"enabled": False},
        }
    )


def rendered_ha_lines(controllers: int) -> list[str]:
    """The renderer's controller lines for the spec: SlurmctldHost(s), SlurmctldTimeout, ClusterName."""
    text = render_tree(render_cluster(ha_spec(controllers), base_dir=EXAMPLES))["slurm/slurm.conf"].decode()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    state = [ln for ln in lines if ln.startswith("StateSaveLocation=")]
    # the render puts the state where the spec says (the shared mount); the copy moves it below
    assert state == [f"StateSaveLocation={SHARED_STATE}"], state
    keep = ("SlurmctldHost=", "SlurmctldTimeout=", "ClusterName=")
    return [ln for ln in lines if ln.startswith(keep)]


def conf_text(root: Path, state: Path, ha: list[str]) -> str:
    # the private copy: daemons' paths below the work folder, root as SlurmUser, no cgroups (the
    # test host's), one 2-CPU node; the HA lines are the renderer's, untouched
    return "\n".join(
        [
            *ha, "SlurmUser=root", "AuthType=auth/munge", f"AuthInfo=socket={state.parent}/m/munge.socket",
            "MailProg=/bin/true", f"StateSaveLocation={state}", f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/run/ctld.pid", f"SlurmdPidFile={root}/run/slurmd.pid", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
            f"NodeName=n1 NodeAddr={HOSTS['n1']} CPUs=2 RealMemory=500 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", "",
        ]
    )


class Ha:
    """The namespaces, munged and daemons of one test; ``close`` undoes all of it."""

    def __init__(self, w: Path, ha: list[str]) -> None:
        self.w = w
        self.procs: list[subprocess.Popen[bytes]] = []
        self.namespaces: list[str] = []
        for d in ("state", "m", "node/run", "node/spool"):
            (w / d).mkdir(parents=True)
        shutil.chown(w / "m", "munge")
        (w / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for h, a in HOSTS.items()))
        self.ha = ha
        # the compute node's own copy (a host of its own keeps its own /etc/slurm)
        (w / "node/slurm.conf").write_text(conf_text(w / "node", w / "state", ha))

    # ----------------------------------------------------------------------------- plumbing
    def start(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.procs.append(p)
        return p

    def munged(self) -> None:
        w = self.w
        self.start(munged_argv(w, munge_key(w)), w / "munged.out")
        wait("munged", lambda: (w / "m/munge.socket").exists())

    def bridge(self) -> None:
        self.namespaces.append(BRIDGE_NS)
        add_bridge(BRIDGE_NS)

    def host(self, name: str) -> str:
        """A fresh namespace for ``name`` with its address on the bridge (a new machine)."""
        self.namespaces.append(NS[name])
        add_host(BRIDGE_NS, NS[name], f"cfha{name.replace('-', '')}", HOSTS[name])
        return NS[name]

    def drop_host(self, name: str) -> None:
        kill_netns_pids(NS[name])
        sh("ip", "netns", "del", NS[name])  # its veth pair goes with it
        self.namespaces.remove(NS[name])

    def in_host(self, name: str, root: Path, *cmd: str) -> list[str]:
        # nsenter, not `ip netns exec`: that mounts a fresh /sys without /sys/fs/cgroup, which
        # slurmd's cgroup plugin needs even with proctrack/linuxproc
        return ["nsenter", f"--net=/run/netns/{NS[name]}", "unshare", "--uts", "--mount", "sh", "-c",
                f'mount --bind {self.w}/hosts /etc/hosts && hostname {name} && exec "$@"', "sh",
                "env", f"SLURM_CONF={root}/slurm.conf", *cmd]

    # ------------------------------------------------------------------------------ daemons
    def controller(self, name: str) -> subprocess.Popen[bytes]:
        """slurmctld on host ``name``, from a folder of that host's own (its "root volume")."""
        root = self.w / name
        (root / "run").mkdir(parents=True, exist_ok=True)
        (root / "slurm.conf").write_text(conf_text(root, self.w / "state", self.ha))
        return self.start(self.in_host(name, root, "slurmctld", "-D", "-i"), root / "slurmctld.out")

    def slurmd(self) -> subprocess.Popen[bytes]:
        root = self.w / "node"
        return self.start(self.in_host("n1", root, "slurmd", "-D", "-N", "n1"), root / "slurmd.out")

    def cmd(self, *cmd: str, timeout: float = 10, check: bool = True) -> str:
        """A client command on the compute node (it tries the primary, then the backup)."""
        return sh(*self.in_host("n1", self.w / "node", *cmd), timeout=timeout, check=check)

    def answers(self) -> bool:
        try:
            self.cmd("squeue", "-h", timeout=5)
            return True
        except (AssertionError, subprocess.TimeoutExpired):
            return False

    def job(self, jid: str) -> dict[str, str]:
        return fields(self.cmd("scontrol", "show", "job", "-o", jid).strip())

    def submit(self, seconds: int) -> str:
        out = self.cmd("sbatch", "--parsable", "-c", "2", "-o", "/dev/null", "--chdir=/tmp", f"--wrap=sleep {seconds}")
        return out.strip().split(";")[0]

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for ns in reversed(self.namespaces):
            kill_netns_pids(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        shutil.rmtree(self.w, ignore_errors=True)


@contextlib.contextmanager
def ha_cluster(controllers: int) -> Iterator[Ha]:
    # not tmp_path: its 0700 parents keep munged (another user) out
    w = Path(tempfile.mkdtemp(prefix="cfha-"))
    w.chmod(0o755)
    c = Ha(w, rendered_ha_lines(controllers))
    try:
        c.munged()
        c.bridge()
        for h in HOSTS if controllers == 2 else ("ctl-1", "n1"):
            c.host(h)
        yield c
    finally:
        c.close()


def _tail(p: Path) -> str:
    return p.read_text(errors="replace")[-2000:] if p.exists() else "(no log)"


def running_and_queued(c: Ha) -> tuple[str, str]:
    """A job that runs (both CPUs of n1) and one queued behind it, both saved in the state folder."""
    wait("n1 idle", lambda: c.answers() and "idle" in c.cmd("sinfo", "-h", "-n", "n1", "-o", "%T"), limit=40)
    running = c.submit(30)
    queued = c.submit(1)
    wait("the first job to run", lambda: c.job(running)["JobState"] == "RUNNING", limit=20)
    assert c.job(queued)["JobState"] == "PENDING"
    # slurmctld writes job_state in the background a moment after a change: wait for the file to
    # hold both jobs (its job count is not readable; its mtime after the start is)
    started = time.time()
    wait("job_state saved", lambda: (c.w / "state/job_state").exists()
         and (c.w / "state/job_state").stat().st_mtime >= started - 1 and time.time() - started > 3, limit=15)
    return running, queued


def finishes(c: Ha, running: str, queued: str) -> None:
    wait("the running job to complete", lambda: c.job(running)["JobState"] == "COMPLETED", limit=60)
    wait("the queued job to run and complete", lambda: c.job(queued)["JobState"] == "COMPLETED", limit=40)


# ----------------------------------------------------------------------------------- tests


def test_rendered_ha_lines_are_the_specs() -> None:
    lines = rendered_ha_lines(2)
    assert f"SlurmctldHost=ctl-1({NET}.1)" in lines and f"SlurmctldHost=ctl-2({NET}.2)" in lines
    assert lines.index(f"SlurmctldHost=ctl-1({NET}.1)") < lines.index(f"SlurmctldHost=ctl-2({NET}.2)")
    assert f"SlurmctldTimeout={TIMEOUT_S}" in lines


def test_backup_takes_over_and_keeps_the_jobs() -> None:
    with ha_cluster(2) as c:
        primary = c.controller("ctl-1")
        try:
            wait("the primary", c.answers, limit=20)
        except AssertionError as e:
            raise AssertionError(f"{e}: {_tail(c.w / 'ctl-1/slurmctld.out')}") from None
        backup = c.controller("ctl-2")
        c.slurmd()
        ping = c.cmd("scontrol", "ping")
        wait("the backup", lambda: "Slurmctld(backup) at ctl-2 is UP" in c.cmd("scontrol", "ping"), limit=20)
        assert "Slurmctld(primary) at ctl-1 is UP" in ping
        # the timeout the daemons use is the spec's, through the render
        conf = c.cmd("scontrol", "show", "config")
        assert any(ln.split() == ["SlurmctldTimeout", "=", f"{TIMEOUT_S}", "sec"] for ln in conf.splitlines()), conf
        running, queued = running_and_queued(c)

        os.kill(primary.pid, signal.SIGKILL)  # the primary's instance is gone, no shutdown
        primary.wait(5)
        # the backup pings every SlurmctldTimeout/3 and takes over SlurmctldTimeout after the last
        # answer (src/slurmctld/backup.c); 20 s more for it to load the state and answer
        log = c.w / "ctl-2/slurmctld.out"
        try:
            wait("the backup to take over", lambda: "Running as primary controller" in log.read_text(errors="replace"),
                 limit=TIMEOUT_S + 20)
            wait("the backup to answer as primary", c.answers, limit=20)
        except AssertionError as e:
            raise AssertionError(f"{e}: {_tail(log)}") from None
        assert backup.poll() is None
        ping = c.cmd("scontrol", "ping", check=False)  # exits 1 while one controller is down
        # 22.05's ping labels each SlurmctldHost by its place in slurm.conf, not by its role now
        assert "Slurmctld(primary) at ctl-1 is DOWN" in ping and "Slurmctld(backup) at ctl-2 is UP" in ping, ping
        assert c.job(running)["JobState"] == "RUNNING", "the running job must survive the takeover"
        assert c.job(queued)["JobState"] == "PENDING"
        finishes(c, running, queued)


def test_replaced_controller_finds_the_jobs_in_the_state_folder() -> None:
    with ha_cluster(1) as c:
        ctld = c.controller("ctl-1")
        try:
            wait("slurmctld", c.answers, limit=20)
        except AssertionError as e:
            raise AssertionError(f"{e}: {_tail(c.w / 'ctl-1/slurmctld.out')}") from None
        c.slurmd()
        running, queued = running_and_queued(c)
        before = {j: c.job(j) for j in (running, queued)}

        # the old instance stops (Pulumi stops it before detaching the volume: a clean shutdown),
        # and its root volume goes with it: only the state folder is left
        ctld.send_signal(signal.SIGTERM)
        ctld.wait(15)
        c.drop_host("ctl-1")
        shutil.rmtree(c.w / "ctl-1")
        assert sorted(p.name for p in c.w.iterdir() if p.name.startswith("ctl")) == []
        assert (c.w / "state/job_state").exists()

        # the new instance: a fresh namespace, a fresh copy of the config, the same state folder
        c.host("ctl-1")
        c.controller("ctl-1")
        try:
            wait("the new slurmctld", c.answers, limit=30)
        except AssertionError as e:
            raise AssertionError(f"{e}: {_tail(c.w / 'ctl-1/slurmctld.out')}") from None
        queue = c.cmd("squeue", "-h", "-o", "%i %T")
        assert f"{running} RUNNING" in queue and f"{queued} PENDING" in queue, queue
        for j, was in before.items():
            now = c.job(j)
            assert (now["JobName"], now["SubmitTime"], now["NumCPUs"]) == (was["JobName"], was["SubmitTime"], was["NumCPUs"])
        finishes(c, running, queued)
