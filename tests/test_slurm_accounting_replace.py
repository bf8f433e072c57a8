"""A replaced controller keeps its jobs and its ``sacct`` history, against the real daemons
(Debian 12: Slurm 22.05's slurmctld, slurmdbd and slurmd, MariaDB 10.11; issue 15, item 6).

``examples/p5-training.yaml`` keeps slurmctld's state and accounting's MariaDB on a retained EBS
volume (``state_storage: {type: ebs}``, ``accounting.storage_host: localhost``). Its render for
22.05 gives slurm.conf, slurmdbd.conf and, in the manifest, StateSaveLocation and MariaDB's datadir,
both below the volume's mount. Here one private folder plays that volume: the paths below the mount
are rewritten into it (the way tests/test_slurm_failover.py and the check's private copies rewrite
paths), and the datadir is initialised the way roles/slurm/tasks/mariadb.yml does it
(``mariadb-install-db --user=mysql --auth-root-authentication-method=socket``, the role's InnoDB
settings, loopback only, the slurmdbd user created over the socket with a generated password).

The controller is namespace ``cfdb-ctl`` (10.89.0.1, the render's controller name) with a folder of
its own that plays its root volume (configs, logs, /run with MariaDB's socket); the compute node
``cfdb-n1`` (10.89.0.11) runs slurmd and the client commands. Two jobs complete, one runs (until
the test releases it: no job's length is a guess about how long the replacement takes) and one
waits behind it. Then the controller is replaced: slurmctld, slurmdbd and MariaDB stop (``stop``:
SIGTERM, as when Pulumi stops the instance before it detaches the volume; ``kill``: SIGKILL, an
instance that died, which InnoDB must recover from), and the namespace and every file of the
controller but the volume are deleted. A fresh namespace, fresh configs and fresh daemons on the
same volume must then list every earlier job in ``sacct`` with the same JobID, submit time and
state, finish the running and the queued job and record them, and give a new job a higher JobID.

Every wait is bounded; everything started is stopped and every namespace deleted, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

import pytest
import yaml

from clusterforge.clusterspec import load_spec
from clusterforge.clusterspec.models import STATE_VOLUME_MOUNT
from clusterforge.render import render_cluster
from clusterforge.render.manifest import Manifest
from clusterforge.render.writer import render_tree

from .conftest import EXAMPLES, ROOT
from .slurm_netns import add_bridge, add_host, kill_netns_pids, munge_key, munged_argv, sh, wait

BINARIES = ("slurmctld", "slurmd", "slurmdbd", "sacct", "munged", "mariadbd", "mariadb-install-db", "mariadb",
            "mariadb-admin")

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        any(shutil.which(b) is None for b in BINARIES) or os.geteuid() != 0,
        reason="needs Debian 12's slurmctld, slurmd, slurmdbd and mariadb-server (scripts/setup-deps.sh installs "
        "them) and root for network namespaces",
    ),
]

NET = "10.89.0"
BRIDGE_NS = "cfdb-br"
NS = {"ctl": "cfdb-ctl", "n1": "cfdb-n1"}
ADDR = {"ctl": f"{NET}.1", "n1": f"{NET}.11"}
VETH = {"ctl": "cfdbctl", "n1": "cfdbn1"}  # each host's end on the bridge
#: the role's MariaDB settings (roles/slurm/defaults/main.yml), written as its 90-clusterforge.cnf
ROLE_DEFAULTS = ROOT / "roles/slurm/defaults/main.yml"


# ------------------------------------------------------------------------------- the render
class Rendered:
    """What the render of p5-training for 22.05 says about the controller and its accounting."""

    def __init__(self) -> None:
        result = render_cluster(load_spec(EXAMPLES / "p5-training.yaml"), base_dir=EXAMPLES, slurm_version="22.05")
        tree = render_tree(result)
        layout = Manifest.from_text(tree["manifest.json"].decode()).slurm
        assert layout.slurmdbd is not None and layout.mariadb_datadir is not None, layout
        self.state = PurePosixPath(layout.state_save_location)
        self.datadir = PurePosixPath(layout.mariadb_datadir)
        self.db = layout.slurmdbd
        conf = [ln for ln in tree["slurm/slurm.conf"].decode().splitlines() if ln and not ln.startswith("#")]
        keep = ("ClusterName=", "SlurmctldHost=", "AccountingStorageType=", "AccountingStorageHost=")
        self.ctl_lines = [ln for ln in conf if ln.startswith(keep)]
        self.ctl_name = next(ln.split("=", 1)[1] for ln in self.ctl_lines if ln.startswith("SlurmctldHost="))
        assert [ln for ln in conf if ln.startswith("StateSaveLocation=")] == [f"StateSaveLocation={self.state}"]
        self.dbd = dict(
            ln.split("=", 1) for ln in tree["slurm/slurmdbd.conf"].decode().splitlines() if ln and not ln.startswith("#")
        )


def on_volume(path: PurePosixPath, vol: Path) -> Path:
    """``path`` (below the volume's mount in the render) in the folder that plays the volume."""
    return vol / path.relative_to(STATE_VOLUME_MOUNT)


# ------------------------------------------------------------------------------ the cluster
class Cluster:
    """The namespaces, munged and daemons of the test; ``close`` undoes all of it."""

    def __init__(self, w: Path, r: Rendered) -> None:
        self.w, self.r = w, r
        self.vol = w / "volume"  # the retained EBS volume: never deleted by the replacement
        self.procs: list[subprocess.Popen[bytes]] = []
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}
        self.namespaces: list[str] = []
        # the password the role takes from Ansible Vault: the same for the old and the new instance
        self.password = secrets.token_urlsafe(24)
        for d in ("m", "node/run", "node/spool"):
            (w / d).mkdir(parents=True)
        shutil.chown(w / "m", "munge")
        self.state = on_volume(r.state, self.vol)
        self.datadir = on_volume(r.datadir, self.vol)
        self.state.mkdir(parents=True)
        (w / "hosts").write_text(f"127.0.0.1 localhost\n{ADDR['ctl']} {r.ctl_name}\n{ADDR['n1']} n1\n")
        (w / "node/slurm.conf").write_text(self.slurm_conf(w / "node"))

    # --------------------------------------------------------------------------- configs
    def slurm_conf(self, root: Path) -> str:
        # the render's controller and accounting lines, its StateSaveLocation moved into the volume
        # folder; the rest is the private copy's (root as SlurmUser, no cgroups: the test host's)
        return "\n".join(
            [
                *self.r.ctl_lines, "SlurmUser=root", "AuthType=auth/munge", f"AuthInfo=socket={self.w}/m/munge.socket",
                # the munge socket of connections to slurmdbd (slurm.conf(5)); AuthInfo is not used there
                f"AccountingStoragePass={self.w}/m/munge.socket",
                "MailProg=/bin/true", f"StateSaveLocation={self.state}", f"SlurmdSpoolDir={root}/spool",
                f"SlurmctldPidFile={root}/run/ctld.pid", f"SlurmdPidFile={root}/run/slurmd.pid",
                "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core", "ReturnToService=2",
                f"NodeName=n1 NodeAddr={ADDR['n1']} CPUs=2 RealMemory=500 State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", "",
            ]
        )

    def slurmdbd_conf(self, root: Path) -> str:
        d = dict(self.r.dbd)
        assert d["StorageHost"] == "localhost" and d["DbdHost"] == self.r.ctl_name, d
        assert d["StoragePass"].startswith("{{ SECRET:"), "the render must never hold the password"
        # what the role fills in and where this copy keeps its files; the rest is the render's
        d.update(SlurmUser="root", LogFile=f"{root}/log/slurmdbd.log", PidFile=f"{root}/run/slurmdbd.pid",
                 StoragePass=self.password, AuthInfo=f"socket={self.w}/m/munge.socket")
        return "".join(f"{k}={v}\n" for k, v in d.items())

    def mariadb_cnf(self) -> str:
        # roles/slurm/tasks/mariadb.yml's 90-clusterforge.cnf for storage_host: localhost
        settings = yaml.safe_load(ROLE_DEFAULTS.read_text())["slurm_mariadb_settings"]
        return "\n".join(
            ["[mysqld]", *(f"{k} = {v}" for k, v in sorted(settings.items())), f"datadir = {self.datadir}",
             "bind-address = 127.0.0.1", ""]
        )

    # --------------------------------------------------------------------------- plumbing
    def start(self, name: str, cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.daemons[name] = p
        return p

    def munged(self) -> None:
        w = self.w
        self.start("munged", munged_argv(w, munge_key(w)), w / "munged.out")
        wait("munged", lambda: (w / "m/munge.socket").exists())

    def bridge(self) -> None:
        self.namespaces.append(BRIDGE_NS)
        add_bridge(BRIDGE_NS)

    def host(self, name: str) -> None:
        """A fresh namespace for ``name`` with its address on the bridge (a new machine)."""
        self.namespaces.append(NS[name])
        add_host(BRIDGE_NS, NS[name], VETH[name], ADDR[name])

    def in_ctl(self, *cmd: str) -> list[str]:
        # the controller's own /run (MariaDB's socket at the package's /run/mysqld/mysqld.sock,
        # which the mariadb clients and slurmdbd's StorageHost=localhost use) and its name;
        # nsenter, not `ip netns exec`, which would mount a /sys without cgroups
        root = self.w / "ctl"
        return ["nsenter", f"--net=/run/netns/{NS['ctl']}", "unshare", "--uts", "--mount", "sh", "-c",
                f'mount --bind {self.w}/hosts /etc/hosts && mount --bind {root}/run /run && '
                f'hostname {self.r.ctl_name} && exec "$@"', "sh", "env", f"SLURM_CONF={root}/slurm.conf", *cmd]

    def in_node(self, *cmd: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{NS['n1']}", "unshare", "--uts", "--mount", "sh", "-c",
                f'mount --bind {self.w}/hosts /etc/hosts && hostname n1 && exec "$@"', "sh",
                "env", f"SLURM_CONF={self.w}/node/slurm.conf", *cmd]

    def sql(self, query: str) -> str:
        """A query as MariaDB's root over the controller's socket (socket authentication, as the
        role's community.mysql tasks log in); on stdin, so no password is ever in a command line."""
        r = subprocess.run(self.in_ctl("mariadb", "-N", "-B"), input=query, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise AssertionError(f"mariadb: rc={r.returncode} {r.stderr.strip()}")
        return r.stdout

    def cmd(self, *cmd: str, timeout: float = 15, check: bool = True) -> str:
        """A client command on the compute node."""
        return sh(*self.in_node(*cmd), timeout=timeout, check=check)

    def answers(self, *cmd: str) -> bool:
        try:
            self.cmd(*cmd, timeout=10)
            return True
        except (AssertionError, subprocess.TimeoutExpired):
            return False

    # ---------------------------------------------------------------------- the controller
    def controller(self) -> bool:
        """A new controller instance on the volume: its own root folder, the role's MariaDB steps
        (the datadir initialised only when it holds no system tables, as ``creates:`` does), then
        MariaDB, slurmdbd and slurmctld, each waited for. True when it initialised the datadir."""
        root = self.w / "ctl"
        for d in ("run/mysqld", "log"):
            (root / d).mkdir(parents=True)
        shutil.chown(root / "run/mysqld", "mysql", "mysql")
        (root / "slurm.conf").write_text(self.slurm_conf(root))
        dbd = root / "slurmdbd.conf"
        dbd.touch(0o600)  # slurmdbd refuses a slurmdbd.conf others can read (it holds the password)
        dbd.write_text(self.slurmdbd_conf(root))
        cnf = root / "90-clusterforge.cnf"
        cnf.write_text(self.mariadb_cnf())
        fresh = not (self.datadir / "mysql").exists()
        if fresh:
            self.datadir.mkdir(mode=0o750)
            shutil.chown(self.datadir, "mysql", "mysql")
            sh(*self.in_ctl("mariadb-install-db", f"--defaults-extra-file={cnf}", "--user=mysql",
                            f"--datadir={self.datadir}", "--auth-root-authentication-method=socket"), timeout=180)
        self.start("mariadbd", self.in_ctl("mariadbd", f"--defaults-extra-file={cnf}", "--user=mysql"),
                   root / "mariadbd.out")
        self._wait(root / "mariadbd.out", "mariadbd", lambda: self._ok(self.in_ctl("mariadb-admin", "ping")), 120)
        db, user = self.r.db.database, self.r.db.storage_user
        if fresh:
            # the role's "Create the accounting database" and "Create the slurmdbd database user"
            self.sql(f"CREATE DATABASE IF NOT EXISTS {db};\n"
                     f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{self.password}';\n"
                     f"GRANT ALL ON {db}.* TO '{user}'@'localhost';\n")
        # slurmdbd reads the slurmdbd.conf beside $SLURM_CONF
        self.start("slurmdbd", self.in_ctl("slurmdbd", "-D"), root / "slurmdbd.out")
        self._wait(root / "slurmdbd.out", "slurmdbd", lambda: self.answers("sacctmgr", "-n", "-P", "show", "cluster"), 60)
        self.start("slurmctld", self.in_ctl("slurmctld", "-D"), root / "slurmctld.out")
        self._wait(root / "slurmctld.out", "slurmctld", lambda: self.answers("squeue", "-h"), 60)
        return fresh

    def _ok(self, cmd: list[str]) -> bool:
        try:
            return subprocess.run(cmd, capture_output=True, timeout=15).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def _wait(self, log: Path, what: str, cond: Callable[[], bool], limit: float) -> None:
        """``wait`` that gives up at once when the daemon being waited for has exited."""
        p = self.daemons.get(what)

        def ready() -> bool:
            if p is not None and p.poll() is not None:
                raise AssertionError(f"{what} exited with {p.returncode}")
            return cond()

        try:
            wait(what, ready, limit=limit)
        except AssertionError as e:
            raise AssertionError(f"{e}: {_tail(log)}") from None

    def stop_controller(self, how: str) -> None:
        """The old instance goes: its daemons stop (``stop``: SIGTERM, each saving what it holds;
        ``kill``: SIGKILL, nothing saved), then its namespace and every file of it but the volume."""
        for name in ("slurmctld", "slurmdbd", "mariadbd"):
            p = self.daemons.pop(name)
            if how == "kill":
                p.send_signal(signal.SIGKILL)
                p.wait(15)
            else:
                p.send_signal(signal.SIGTERM)
                p.wait(60)  # MariaDB flushes InnoDB on a clean shutdown; bounded all the same
            self.procs.remove(p)
        kill_netns_pids(NS["ctl"])
        # the veth pair goes first, by name: a deleted namespace frees its end (and so the bridge's
        # end, whose name the new instance reuses) only once the last process in it has exited,
        # which a SIGKILLed MariaDB may not have done yet
        sh("ip", "-n", BRIDGE_NS, "link", "del", VETH["ctl"])
        wait("the old instance's processes to exit",
             lambda: not subprocess.run(["ip", "netns", "pids", NS["ctl"]], capture_output=True, text=True,
                                        timeout=10).stdout.split(), limit=30)
        sh("ip", "netns", "del", NS["ctl"])
        self.namespaces.remove(NS["ctl"])
        shutil.rmtree(self.w / "ctl")

    # ----------------------------------------------------------------------------- slurm
    def submit(self, name: str, script: str) -> str:
        out = self.cmd("sbatch", "--parsable", "-J", name, "-c", "2", "-o", "/dev/null", "--chdir=/tmp",
                       f"--wrap={script}")
        return out.strip().split(";")[0]

    def sacct(self) -> dict[str, dict[str, str]]:
        """Every job in the accounting database: JobID -> name, submit and start times, state."""
        keys = ("JobID", "JobName", "Submit", "Start", "State")
        out = self.cmd("sacct", "-a", "-X", "-n", "-P", "-S", "2000-01-01", "-o", ",".join(keys))
        rows = [dict(zip(keys, ln.split("|"), strict=True)) for ln in out.splitlines() if ln]
        return {r["JobID"]: r for r in rows}

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for ns in reversed(self.namespaces):
            kill_netns_pids(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        shutil.rmtree(self.w, ignore_errors=True)


def _tail(p: Path) -> str:
    return p.read_text(errors="replace")[-2000:] if p.exists() else "(no log)"


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    # not tmp_path: its 0700 parents keep munged and mariadbd (other users) out
    w = Path(tempfile.mkdtemp(prefix="cfdb-"))
    w.chmod(0o755)
    c = Cluster(w, Rendered())
    try:
        c.munged()
        c.bridge()
        c.host("ctl")
        c.host("n1")
        yield c
    finally:
        c.close()


# ----------------------------------------------------------------------------------- tests


def test_render_puts_state_and_database_on_the_volume() -> None:
    r = Rendered()
    assert str(r.state).startswith(STATE_VOLUME_MOUNT + "/") and str(r.datadir).startswith(STATE_VOLUME_MOUNT + "/")
    assert "AccountingStorageType=accounting_storage/slurmdbd" in r.ctl_lines
    assert f"AccountingStorageHost={r.ctl_name}" in r.ctl_lines
    assert r.dbd["StorageHost"] == "localhost" and r.dbd["StorageLoc"] == r.db.database


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_replaced_controller_keeps_jobs_and_sacct_history(how: str) -> None:
    with cluster() as c:
        assert c.controller(), "the first instance initialises the volume's datadir"
        c.start("slurmd", c.in_node("slurmd", "-D", "-N", "n1"), c.w / "node/slurmd.out")
        c._wait(c.w / "node/slurmd.out", "slurmd",
                lambda: c.answers("squeue") and "idle" in c.cmd("sinfo", "-h", "-n", "n1", "-o", "%T"), 60)

        done = [c.submit(f"done{i}", "true") for i in (1, 2)]
        wait("the first jobs in sacct as COMPLETED",
             lambda: all(c.sacct().get(j, {}).get("State") == "COMPLETED" for j in done), limit=60)
        # the running job holds both CPUs until the test releases it; the queued one waits behind it
        release = c.w / "release"
        running = c.submit("running", f"timeout 600 sh -c 'until [ -e {release} ]; do sleep 0.5; done'")
        wait("the long job to run", lambda: c.sacct().get(running, {}).get("State") == "RUNNING", limit=60)
        last_change = time.time()
        queued = c.submit("queued", "true")
        wait("the queued job in sacct", lambda: c.sacct().get(queued, {}).get("State") == "PENDING", limit=60)
        before = c.sacct()
        assert [before[j]["State"] for j in (*done, running, queued)] == ["COMPLETED", "COMPLETED", "RUNNING",
                                                                           "PENDING"], before
        # with ``kill`` nothing is saved at the end: wait for slurmctld's background save of the
        # queued job. It saves at most SAVE_MAX_WAIT (5 s, state_save.c) after a change, so a save
        # after the submit with none in the 6 s since is one that holds it
        job_state = c.state / "job_state"
        wait("job_state saved", lambda: job_state.exists() and job_state.stat().st_mtime > last_change
             and time.time() - job_state.stat().st_mtime > 6, limit=30)

        c.stop_controller(how)
        assert sorted(p.name for p in c.w.iterdir() if p.name.startswith("ctl")) == []
        assert (c.datadir / "mysql").is_dir() and job_state.exists()

        c.host("ctl")  # the new instance: a fresh namespace, fresh configs, the same volume
        assert not c.controller(), "the new instance must find the datadir initialised"
        log = (c.w / "ctl/mariadbd.out").read_text(errors="replace")
        # InnoDB says so when it replays its redo log: after SIGKILL, and only then
        assert ("crash recovery" in log) == (how == "kill"), log[-2000:]
        # the user the old instance created is in the volume's mysql.user: slurmdbd logged in with it
        assert c.sql(f"SELECT COUNT(*) FROM mysql.user WHERE user = '{c.r.db.storage_user}'").strip() == "1"
        after = c.sacct()
        for j in (*done, running, queued):
            assert j in after, f"job {j} is missing from sacct after the replacement: {after}"
            assert (after[j]["JobName"], after[j]["Submit"], after[j]["State"]) == (
                before[j]["JobName"], before[j]["Submit"], before[j]["State"]), (j, before[j], after[j])
        assert after[running]["Start"] == before[running]["Start"], "the running job must not have restarted"

        release.touch()
        wait("the running and the queued job to complete in sacct",
             lambda: all(c.sacct()[j]["State"] == "COMPLETED" for j in (running, queued)), limit=90)
        new = c.submit("new", "true")
        assert int(new) > max(int(j) for j in before), f"JobID {new} reused: the earlier jobs are {sorted(before)}"
        wait("the new job in sacct as COMPLETED", lambda: c.sacct().get(new, {}).get("State") == "COMPLETED", limit=60)
        final = c.sacct()
        assert final[running]["Start"] == before[running]["Start"]
        assert {j: final[j]["Submit"] for j in before} == {j: before[j]["Submit"] for j in before}
