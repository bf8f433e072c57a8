"""End to end, for real: bare Debian 13 nodes -> a working GPU Slurm 24.11 cluster -> jobs -> faults -> down.

``clusterforge local`` builds ``examples/local.yaml`` (Debian 13, Slurm 24.11: a controller with
slurmdbd and MariaDB, a login node, two GPU nodes with 8 fake H100 each, two CPU nodes) on a
private /24 of its own, so it does not meet a demo cluster on the default network. The nodes boot
systemd as PID 1 (systemd-nspawn), so the roles' systemd path runs: units, handlers, systemctl;
the handlers' restart order is read back from systemd. ``CLUSTERFORGE_LOCAL_TEST_BOOT=chroot``
runs the same test on sshd-as-PID-1 nodes with the clusterforge-svc supervisor;
``CLUSTERFORGE_LOCAL_TEST_NET`` / ``..._CRASH_NET`` move it to other networks (two runs on one
machine need two). The production ``playbooks/site.yml``
runs on the fresh nodes in check mode first, then for real, and a third time at the end, when it
must change nothing. In between: daemons, GRES registration, jobs across nodes, accounting, the
NCCL job environment, the faults of the issue (slurmd killed, a GPU lost and found by the health
check slurmd runs, an operator's drain it leaves alone, slurmctld restarted), monitoring (Prometheus
scrapes every node; a stopped exporter alerts, and the alert reaches a webhook receiver through
Alertmanager), a layout change rolled out under a running job, and a torchrun job that is
pre-empted, requeued and resumes from its checkpoint. ``down`` must leave no process, namespace,
mount or cgroup folder behind.

Every wait is bounded; the module fixture tears the cluster down even when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterforge.configure import TextProgress
from clusterforge.local import LocalCluster, LocalLayout, missing_prerequisites
from tests.local_shell import sh

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "local.yaml"
NET = os.environ.get("CLUSTERFORGE_LOCAL_TEST_NET", "10.81.0.0/24")  # not the demo's 10.79.0.0/24
CRASH_NET = os.environ.get("CLUSTERFORGE_LOCAL_TEST_CRASH_NET", "10.83.0.0/24")
BOOT = os.environ.get("CLUSTERFORGE_LOCAL_TEST_BOOT", "systemd")
# PyTorch on the nodes (`local up --torch`: a read-only rootfs layer, built once per machine and
# cached; scripts/setup-deps.sh --local-torch builds it for CI); 0 leaves it out and skips the
# torchrun job
TORCH = os.environ.get("CLUSTERFORGE_LOCAL_TEST_TORCH", "1") != "0"
NODES = ["ctl", "login", "gpu-001", "gpu-002", "cpu-001", "cpu-002"]
CLI = [sys.executable, "-c", "from clusterforge.cli import main; main()"]  # the `clusterforge` command

pytestmark = [pytest.mark.local]
_why = missing_prerequisites(BOOT)
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))


class Runs:
    check: Any
    first: Any
    check_lines: list[str]
    first_lines: list[str]
    seconds: dict[str, float]
    state: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Runs]]:
    state = tmp_path_factory.mktemp("local") / "state"
    lc = LocalCluster(state)
    r = Runs()
    r.state = state
    r.check_lines, r.first_lines = [], []
    try:
        up = lc.up(SPEC, net=NET, boot=BOOT, torch=TORCH, configure=False)
        r.seconds = dict(up.seconds)
        r.check = lc.configure(check=True, diff=True, progress=TextProgress(r.check_lines.append))
        print(f"\ncheck mode on fresh nodes: rc={r.check.rc} {r.check.duration_s:.1f} s")
        r.first = lc.configure(progress=TextProgress(r.first_lines.append))
        print(f"first run: rc={r.first.rc} {r.first.duration_s:.1f} s changed={r.first.changed}")
        yield lc, r
    finally:
        lc.down()


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def wait_for(what: str, probe: Any, timeout: float, every: float = 2.0) -> Any:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout, check=False)


def netns_list() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.strip()]


def prometheus(lc: LocalCluster, path: str) -> Any:
    """The ``data`` of a Prometheus API answer from the monitoring server (ctl)."""
    return json.loads(sh(lc, "ctl", f"curl -sf http://localhost:9090/api/v1/{path}"))["data"]


def alerts(lc: LocalCluster, name: str) -> list[dict[str, Any]]:
    """Active (pending or firing) alerts called ``name``."""
    return [a for a in prometheus(lc, "alerts")["alerts"] if a["labels"]["alertname"] == name]


#: clusterforge-svc's names -> the packages' systemd units
UNITS = {"node-exporter": "prometheus-node-exporter"}


def svc(lc: LocalCluster, node: str, action: str, name: str) -> str:
    """start/stop/restart a daemon as the node's service manager does it."""
    if lc.layout().boot == "systemd":
        return sh(lc, node, f"systemctl {action} {UNITS.get(name, name)}")
    return sh(lc, node, f"clusterforge-svc {action} {name}")


def prefix(net: str) -> str:
    return LocalLayout(cluster="", net=net.rsplit(".", 1)[0], nodes=[], spec={}).prefix


def node_state(lc: LocalCluster, node: str) -> str:
    out = sh(lc, "login", f"scontrol show node {node} --oneliner")
    m = re.search(r"State=(\S+)", out)
    return m.group(1) if m else ""


# ----------------------------------------------------------------------------- the runs


def test_check_mode_on_fresh_nodes(cluster: tuple[LocalCluster, Runs]) -> None:
    _, r = cluster
    assert r.check.ok, "\n".join(r.check.failures + r.check_lines[-40:])
    assert set(r.check.stats) - {"localhost"} == set(NODES)  # localhost: the inventory contract play


def test_first_run_builds_the_cluster(cluster: tuple[LocalCluster, Runs]) -> None:
    _, r = cluster
    assert r.first.ok, "\n".join(r.first.failures + r.first_lines[-40:])
    assert set(r.first.stats) - {"localhost"} == set(NODES)
    assert r.first.changed > 0


def test_nodes_are_hosts_of_their_own(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    layout = lc.layout()
    for n in layout.nodes:
        assert sh(lc, n.name, "hostname").strip() == n.name
        assert f"inet {n.address}/24" in sh(lc, n.name, "ip -o -4 addr show eth0")
        gpus = sh(lc, n.name, "ls /dev | grep -c -E '^nvidia[0-9]+$' || true").strip()
        assert int(gpus or 0) == n.gpus, (n.name, gpus)
        # the node's own resolver, not this host's (whose nameserver a node cannot reach: every
        # lookup /etc/hosts cannot answer, such as slurmctld's of 0.0.0.0, waited out 2 x 5 s)
        assert sh(lc, n.name, "cat /etc/resolv.conf") == "nameserver 127.0.0.1\n", n.name
    ids = {n.name: sh(lc, n.name, "cat /etc/machine-id").strip() for n in layout.nodes}
    assert len(set(ids.values())) == len(ids), ids  # each node an identity of its own
    # the addresses were moved into the test's network, and local mode said so
    assert any(o.startswith(f"addresses (not in {NET})") for o in layout.overrides)
    assert "SlurmdParameters=config_overrides" in (lc.state / "inventory" / "local.render" / "slurm" / "slurm.conf").read_text()


def test_daemons_run_where_the_roles_put_them(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    want = {"ctl": {"munged", "slurmctld", "slurmdbd", "mariadbd"}, "login": {"munged"}}
    want |= {n: {"munged", "slurmd"} for n in ("gpu-001", "gpu-002", "cpu-001", "cpu-002")}
    for node, daemons in want.items():
        ps = set(sh(lc, node, "ps -eo comm=").split())
        assert daemons <= ps, f"{node} lacks {sorted(daemons - ps)}"
    assert "slurmd" not in set(sh(lc, "login", "ps -eo comm=").split())
    sums = {n: sh(lc, n, "sha256sum /etc/munge/munge.key").split()[0] for n in want}
    assert len(set(sums.values())) == 1, sums
    cred = sh(lc, "gpu-001", "munge -n").strip()
    assert "Success" in sh(lc, "ctl", f"echo '{cred}' | unmunge")


def test_gpu_nodes_register_with_their_gres(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    rows = sh(lc, "login", "sinfo -N -h -o '%N %P %T %G'").split("\n")
    seen = {}
    for row in filter(None, rows):
        name, part, st, gres = row.split()
        if part.rstrip("*") != "all":  # every node is also in the `all` partition
            seen[name] = (part.rstrip("*"), st, gres)
    for n in ("gpu-001", "gpu-002"):
        assert seen[n][:2] == ("gpu", "idle") and seen[n][2].startswith("gpu:h100:8("), seen  # (S:0-1): sockets
    for n in ("cpu-001", "cpu-002"):
        assert seen[n] == ("cpu", "idle", "(null)"), seen


def test_jobs_run_across_nodes(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    assert sorted(sh(lc, "login", "srun -N2 -p gpu hostname").split()) == ["gpu-001", "gpu-002"]
    assert sorted(sh(lc, "login", "srun -N2 -p cpu hostname").split()) == ["cpu-001", "cpu-002"]
    assert sorted(sh(lc, "login", "srun -N4 -p all hostname").split()) == ["cpu-001", "cpu-002", "gpu-001", "gpu-002"]
    out = sh(lc, "login", "srun -N2 -p gpu --gpus-per-node=2 bash -c 'echo $(hostname) $CUDA_VISIBLE_DEVICES'")
    assert sorted(out.splitlines()) == ["gpu-001 0,1", "gpu-002 0,1"]


def test_nodes_run_debian_13_with_slurm_24_11_under_systemd(cluster: tuple[LocalCluster, Runs]) -> None:
    """The pair examples/local.yaml names is what runs: Debian 13 nodes, Debian's Slurm 24.11, and
    (booted nodes) systemd as PID 1 that started the daemons as its units, none failed."""
    lc, _ = cluster
    for n in NODES:
        assert 'VERSION_ID="13"' in sh(lc, n, "cat /etc/os-release"), n
    assert sh(lc, "ctl", "slurmctld -V").split()[1].startswith("24.11."), "slurmctld -V"
    assert sh(lc, "gpu-001", "slurmd -V").split()[1].startswith("24.11."), "slurmd -V"
    if lc.layout().boot != "systemd":
        pytest.skip("chroot nodes: sshd is PID 1, no systemd")
    units = {"ctl": ["munge", "mariadb", "slurmdbd", "slurmctld", "prometheus", "prometheus-node-exporter"],
             "login": ["munge", "prometheus-node-exporter"],
             "gpu-001": ["munge", "slurmd", "nvidia-dcgm", "nvidia-dcgm-exporter", "nvidia-persistenced"],
             "cpu-001": ["munge", "slurmd"]}
    for node, want in units.items():
        assert sh(lc, node, "cat /proc/1/comm").strip() == "systemd", node
        state = sh(lc, node, "systemctl is-system-running || true").strip()
        failed = sh(lc, node, "systemctl --failed --no-legend --plain")
        assert (state, failed) == ("running", ""), (node, state, failed)
        active = sh(lc, node, f"systemctl is-active {' '.join(want)} || true").split()
        assert active == ["active"] * len(want), (node, dict(zip(want, active, strict=False)))
        enabled = sh(lc, node, f"systemctl is-enabled {' '.join(want)} || true").split()
        assert enabled == ["enabled"] * len(want), (node, dict(zip(want, enabled, strict=False)))
        assert not sh(lc, node, "ls /etc/clusterforge/services 2>/dev/null || true").strip(), node  # no supervisor


def test_gpu_devices_are_confined_by_the_cgroup(cluster: tuple[LocalCluster, Runs]) -> None:
    """ConstrainDevices: a job step opens only the GPUs it was given. Opening a fake /dev/nvidiaN
    gives ENXIO ("No such device or address") when the devices cgroup allows it and EPERM when it
    denies it (local-cluster.md §2)."""
    lc, _ = cluster
    probe = ("for i in 0 1 2 3 4 5 6 7; do if err=$( (exec 3</dev/nvidia$i) 2>&1 ); then r=ok; "
             "else case $err in *'not permitted'*) r=deny ;; *'No such device or address'*) r=ok ;; *) r=other ;; "
             "esac; fi; printf '%s:%s ' $i $r; done; echo")
    out = sh(lc, "login", f"srun -N1 -p gpu -w gpu-001 --gpus-per-node=2 bash -c {_q(probe)}")
    assert out.split() == ["0:ok", "1:ok"] + [f"{i}:deny" for i in range(2, 8)], out
    out = sh(lc, "login", f"srun -N1 -p gpu -w gpu-002 --gpus-per-node=8 bash -c {_q(probe)}")
    assert out.split() == [f"{i}:ok" for i in range(8)], out


def test_tree_topology_is_what_slurmctld_loaded(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    out = sh(lc, "login", "scontrol show topology")
    # examples/local.yaml: one rack switch leaf1 with the four compute nodes
    m = re.search(r"SwitchName=leaf1 Level=0 LinkSpeed=\d+ Nodes=(\S+)", out)
    assert m and m.group(1) == "cpu-[001-002],gpu-[001-002]", out
    # a 3-node job under one switch runs on three of its four nodes
    hosts = sh(lc, "login", "srun -N3 --switches=1 -p all hostname").split()
    assert len(set(hosts)) == 3 and set(hosts) <= {"cpu-001", "cpu-002", "gpu-001", "gpu-002"}, hosts


def test_user_commands_status_run_and_ssh(cluster: tuple[LocalCluster, Runs]) -> None:
    """The commands a user types (`clusterforge local status|run|ssh`), as subprocesses."""
    lc, _ = cluster
    st = cli("local", "status", "--json", "--state", str(lc.state))
    assert st.returncode == 0, st.stderr
    data = json.loads(st.stdout)
    assert data["up"] and {n: v["running"] for n, v in data["nodes"].items()} == dict.fromkeys(NODES, True)
    assert data["nodes"]["gpu-001"]["gpus"] == 8 and data["nodes"]["cpu-001"]["gpus"] == 0
    assert re.search(r"^gpu-001 gpu\*? idle gpu:h100:8", data["sinfo"], re.M), data["sinfo"]
    text = cli("local", "status", "--state", str(lc.state))
    assert text.returncode == 0 and "(up)" in text.stdout and "STOPPED" not in text.stdout, text.stdout
    run = cli("local", "run", "--state", str(lc.state), "--", "srun", "-N2", "-p", "gpu", "hostname")
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.split()) == ["gpu-001", "gpu-002"]
    on = cli("local", "run", "--node", "cpu-002", "--state", str(lc.state), "--", "hostname")
    assert (on.returncode, on.stdout.strip()) == (0, "cpu-002"), on.stderr
    ssh = cli("local", "ssh", "gpu-001", "--state", str(lc.state), "--", "ls /dev | grep -c -E '^nvidia[0-9]+$'")
    assert (ssh.returncode, ssh.stdout.strip()) == (0, "8"), ssh.stderr


def test_gpu_batch_job_gets_the_rendered_nccl_environment(cluster: tuple[LocalCluster, Runs]) -> None:
    """examples/jobs/gpu-nccl-env.sbatch (what `make demo` runs): 2 nodes x 8 GPUs, each rank sees
    its GPUs, the job environment and the rendered /etc/nccl.conf."""
    lc, _ = cluster
    rendered = (lc.state / "inventory" / "local.render" / "nccl" / "gpu.conf").read_text()
    want = [ln for ln in rendered.splitlines() if ln.startswith("NCCL_")]
    assert want, rendered
    script = (ROOT / "examples" / "jobs" / "gpu-nccl-env.sbatch").read_text()
    p = subprocess.run(lc.exec_argv("login", ["sbatch", "--parsable"]), input=script,
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    info = wait_for(f"job {job} to complete", lambda: (lambda o: o if "JobState=COMPLETED" in o else None)(
        sh(lc, "login", f"scontrol show job {job} -o")), 120)
    batch_host = re.search(r"BatchHost=(\S+)", info).group(1)  # type: ignore[union-attr]
    text = sh(lc, batch_host, f"cat /tmp/nccl-env-{job}.out")
    lines = sorted(text.splitlines())
    assert [ln.split()[:3] for ln in lines] == [
        [n, "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "CUDA_DEVICE_ORDER=PCI_BUS_ID"] for n in ("gpu-001", "gpu-002")
    ], text
    for ln in lines:
        for w in want:
            assert w in ln.split(), (w, ln)


def test_accounting_records_jobs(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    assert "local" in sh(lc, "login", "sacctmgr -n -P show cluster format=cluster")
    sh(lc, "login", "srun -N1 -p cpu true")
    wait_for("a COMPLETED job in sacct", lambda: "COMPLETED" in sh(lc, "login", "sacct -n -X -a -P -o JobID,State"), 60)


def test_torchrun_job_checkpoints_on_preemption_and_resumes_after_requeue(cluster: tuple[LocalCluster, Runs]) -> None:
    """examples/jobs/torchrun.sbatch with examples/jobs/train.py on the two CPU nodes: torchrun
    with one worker per node, gloo, a c10d rendezvous on the first node, checkpoints on the spec's
    checkpoint storage (/shared). Half-way it gets what a spot interruption sends it:
    clusterforge-node-agent reads the script's ``--signal=B:USR1@...`` and runs ``scancel --batch
    --signal=USR1`` (Slurm itself sends the same signal at the time limit, and at pre-emption with
    PreemptParameters=send_user_signal). The job must checkpoint, requeue itself, run again
    (SLURM_RESTART_COUNT=1) and go on from the step after its checkpoint: no restart from step 1,
    no step run twice. Periodic checkpoints are off (--ckpt-every past the end), so the only
    checkpoint to resume from is the one the signal made."""
    lc, _ = cluster
    if lc.layout().torch is None:
        pytest.skip("CLUSTERFORGE_LOCAL_TEST_TORCH=0: the nodes have no PyTorch")
    assert sh(lc, "cpu-001", "cat /etc/profile.d/clusterforge-jobs.sh").count('CLUSTERFORGE_CHECKPOINT_DIR="/shared"') == 1
    work, steps = "/shared/torchrun-e2e", 60
    sh(lc, "login", f"rm -rf {work} && mkdir -p {work}")
    p = subprocess.run(lc.exec_argv("login", ["bash", "-c", f"cat > {work}/train.py"]),
                       input=(ROOT / "examples" / "jobs" / "train.py").read_text(), capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    # the template asks for the gpu partition with 8 GPUs a node; the command line moves it to the
    # CPU nodes (one torchrun agent per node, one gloo worker each)
    submit = (f"cd {work} && TRAIN_SCRIPT={work}/train.py TRAIN_ARGS='--steps {steps} --ckpt-every 1000 "
              "--step-seconds 1' sbatch --parsable -p cpu --gpus-per-node=0 -N2 --time=00:30:00")
    p = subprocess.run(lc.exec_argv("login", ["bash", "-lc", submit]),
                       input=(ROOT / "examples" / "jobs" / "torchrun.sbatch").read_text(), capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    logf = f"{work}/torchrun-{job}.log"

    def log() -> str:
        return lc.on("login", f"cat {logf} 2>/dev/null || true").stdout

    def job_info() -> str:
        return sh(lc, "login", f"scontrol show job {job} -o")

    def trained(restart: int) -> list[int]:
        return [int(m.group(1)) for m in re.finditer(rf"^train: restart={restart} step=(\d+) ", log(), re.M)]

    try:
        # starting PyTorch on two nodes of a busy 2-core machine takes a while: bounded waits
        wait_for("5 training steps", lambda: len(trained(0)) >= 5, 420, every=3)
        assert "JobState=RUNNING" in job_info()
        sh(lc, "login", f"scancel --batch --signal=USR1 {job}")
        saved = wait_for("the checkpoint the signal asks for", lambda: re.search(
            r"^train: checkpoint step=(\d+) \(signal\)$", log(), re.M), 180, every=2)
        ckpt = int(saved.group(1))
        info = wait_for(f"job {job} requeued by its batch script", lambda: (
            lambda o: o if re.search(r"\bRestarts=1\b", o) else None)(job_info()), 120)
        info = wait_for(f"job {job} completed after its requeue", lambda: (
            lambda o: o if "JobState=COMPLETED" in o else None)(job_info()), 600, every=3)
    finally:
        lc.on("login", f"scancel {job}")
    text = log()
    assert "Restarts=1" in info, info
    first, second = trained(0), trained(1)
    # the first run stopped at the step it checkpointed; the second began right after it
    assert first == list(range(1, ckpt + 1)) and ckpt < steps, (ckpt, first, text)
    assert second == list(range(ckpt + 1, steps + 1)), (ckpt, second, text)
    assert f"train: resumed from step {ckpt} (restart=1)" in text, text
    assert f"train: checkpoint step={steps} (final)" in text, text
    assert "torchrun.sbatch: SIGUSR1: checkpoint, then requeue" in text, text
    assert len(re.findall(r"^train: backend=gloo world=2 ", text, re.M)) == 2, text  # both runs: 2 nodes
    assert re.search(rf"torchrun.sbatch: job {job} restart 1: 2 nodes x 1, rendezvous cpu-00[12]:29500, "
                     rf"checkpoints in /shared/root/torchrun-{job}$", text, re.M), text


# --------------------------------------------------------------------------------- faults


def test_killed_slurmd_marks_the_node_down_and_requeues_its_job(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    job = sh(lc, "login", "sbatch --parsable --requeue -N1 -p cpu --wrap 'sleep 600'").strip()
    info = wait_for(f"job {job} running", lambda: (lambda o: o if "JobState=RUNNING" in o else None)(
        sh(lc, "login", f"scontrol show job {job} -o")), 60)
    victim = re.search(r" NodeList=(cpu-00[12])", info).group(1)  # type: ignore[union-attr]
    other = "cpu-002" if victim == "cpu-001" else "cpu-001"
    sh(lc, victim, "pkill -KILL -x slurmd")
    # SlurmdTimeout=30 in examples/local.yaml: DOWN within about 30-45 s
    wait_for(f"{victim} DOWN", lambda: "DOWN" in node_state(lc, victim), 120)
    reason = sh(lc, "login", f"sinfo -h -n {victim} -o '%E'")
    assert "not responding" in reason.lower(), reason
    info = wait_for(
        f"job {job} requeued and running on {other}",
        lambda: (lambda o: o if "JobState=RUNNING" in o and f" NodeList={other}" in o else None)(
            sh(lc, "login", f"scontrol show job {job} -o")
        ),
        180,
    )
    assert "Restarts=1" in info, info
    sh(lc, "login", f"scancel {job}")
    # bring the node back: its service manager starts slurmd again and ReturnToService=2 resumes it
    svc(lc, victim, "start", "slurmd")
    wait_for(f"{victim} back to idle", lambda: node_state(lc, victim).startswith("IDLE"), 120)


HC_LOG = "/run/clusterforge-healthcheck/log"  # clusterforge.render.health.STATE_DIR
HC_REASON = "clusterforge-healthcheck: gpu count 7 of 8 (/dev/nvidia3 missing)"


def hc_log(lc: LocalCluster, node: str) -> list[str]:
    """The health check's log on ``node``: one line a run, "<UTC time> <mode> by=<parent> <what>"."""
    return sh(lc, node, f"cat {HC_LOG} 2>/dev/null || true").splitlines()


def node_reason(lc: LocalCluster, node: str) -> str:
    return sh(lc, "login", f"sinfo -h -N -n {node} -o '%E' | head -n 1").strip()


def test_slurmd_runs_the_health_check_which_drains_a_lost_gpu_and_returns_it(
        cluster: tuple[LocalCluster, Runs]) -> None:
    """slurmd runs the program every HealthCheckInterval (15 s in examples/local.yaml): nothing in
    this test runs it. /dev/nvidia3 gone from gpu-002: one failing run counts, the second in a row
    drains with the check and the value; the device back: the next passing run resumes the node."""
    lc, _ = cluster
    # slurmd ran it before this test (its parent process is slurmd), and it passed
    assert any(" periodic by=slurmd pass" in ln for ln in hc_log(lc, "gpu-002")), hc_log(lc, "gpu-002")[-5:]
    seen = len(hc_log(lc, "gpu-002"))
    sh(lc, "gpu-002", "mv /dev/nvidia3 /dev/nvidia3.gone")
    try:
        wait_for("gpu-002 drained by its health check", lambda: "DRAIN" in node_state(lc, "gpu-002"), 120)
        assert node_reason(lc, "gpu-002") == HC_REASON
        runs = [ln.split(" ", 2)[2] for ln in hc_log(lc, "gpu-002")[seen:]]
        # the first failing run only counts (no false drain on one failure), the second drains
        first = runs.index("by=slurmd failing, not draining yet: gpu_count 1 of 2: gpu count 7 of 8 "
                           "(/dev/nvidia3 missing);")
        assert runs[first + 1] == "by=slurmd drain: gpu count 7 of 8 (/dev/nvidia3 missing)", runs
        assert sh(lc, "gpu-002", "cut -d' ' -f1 /run/clusterforge-healthcheck/failures").split() == ["gpu_count"]
        # the same fault reaches monitoring: dcgm-exporter reports 7 GPUs, the rendered rule alerts
        got = wait_for("GpuMissing for gpu-002", lambda: alerts(lc, "GpuMissing"), 60)
        assert [(a["labels"]["instance"], a["labels"]["node_group"]) for a in got] == [("gpu-002", "gpu")], got
        assert got[0]["annotations"]["summary"] == "gpu-002: 7 of 8 h100 GPUs report"
        # a job is not sent to the drained node
        assert sh(lc, "login", "srun -N1 -p gpu hostname").strip() == "gpu-001"
    finally:
        lc.on("gpu-002", "mv /dev/nvidia3.gone /dev/nvidia3")
    seen = len(hc_log(lc, "gpu-002"))
    wait_for("gpu-002 back to idle by its health check", lambda: node_state(lc, "gpu-002") == "IDLE", 120)
    assert node_reason(lc, "gpu-002") in ("", "none"), node_reason(lc, "gpu-002")
    assert f"by=slurmd pass; resume (was drained for: {HC_REASON.split(': ', 1)[1]})" in [
        ln.split(" ", 2)[2] for ln in hc_log(lc, "gpu-002")[seen:]]
    wait_for("GpuMissing resolved", lambda: not alerts(lc, "GpuMissing"), 60)
    assert sorted(sh(lc, "login", "srun -N2 -p gpu hostname").split()) == ["gpu-001", "gpu-002"]


def test_an_operators_drain_stays_across_health_check_runs(cluster: tuple[LocalCluster, Runs]) -> None:
    """A drain an operator set is never undone by the health check, which keeps running and passing."""
    lc, _ = cluster
    sh(lc, "login", "scontrol update NodeName=gpu-001 State=DRAIN Reason=operator-maintenance")
    try:
        seen = len(hc_log(lc, "gpu-001"))
        # four runs after the drain (the first may have read the node before it)
        runs = wait_for("four health check runs on the drained gpu-001", lambda: (
            lambda new: new if len(new) >= 4 else None)(hc_log(lc, "gpu-001")[seen:]), 150)
        assert {ln.split(" ", 2)[2] for ln in runs[1:]} == {
            "by=slurmd pass; left alone, drained by someone else: operator-maintenance"}, runs
        assert "DRAIN" in node_state(lc, "gpu-001")
        assert node_reason(lc, "gpu-001") == "operator-maintenance"
    finally:
        sh(lc, "login", "scontrol update NodeName=gpu-001 State=RESUME")
    wait_for("gpu-001 back to idle", lambda: node_state(lc, "gpu-001") == "IDLE", 60)


def test_restarting_slurmctld_loses_no_job(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    running = sh(lc, "login", "sbatch --parsable -N2 -p gpu --gpus-per-node=8 --wrap 'sleep 300'").strip()
    wait_for(f"job {running} running", lambda: "JobState=RUNNING" in sh(lc, "login", f"scontrol show job {running} -o"), 60)
    queued = sh(lc, "login", "sbatch --parsable -N2 -p gpu --gpus-per-node=8 --wrap 'true'").strip()
    assert "JobState=PENDING" in sh(lc, "login", f"scontrol show job {queued} -o")
    before = sh(lc, "ctl", "pgrep -x slurmctld").split()
    svc(lc, "ctl", "restart", "slurmctld")
    wait_for("slurmctld answering again", lambda: lc.on("login", "timeout 10 scontrol ping").returncode == 0, 60)
    assert sh(lc, "ctl", "pgrep -x slurmctld").split() != before
    assert "JobState=RUNNING" in sh(lc, "login", f"scontrol show job {running} -o")
    assert "JobState=PENDING" in sh(lc, "login", f"scontrol show job {queued} -o")
    sh(lc, "login", f"scancel {running}")
    wait_for(f"queued job {queued} to run after the restart", lambda: "COMPLETED" in sh(
        lc, "login", f"sacct -n -X -j {queued} -o State"), 90)


def test_restarting_slurmdbd_loses_no_accounting_record(cluster: tuple[LocalCluster, Runs]) -> None:
    """slurmdbd restarted while jobs start and end: slurmctld queues the records it could not send
    (its DBD agent queue) and sends them when slurmdbd is back; sacct then has every job, completed."""
    lc, _ = cluster
    ids = [sh(lc, "login", f"sbatch --parsable -N1 -p cpu --wrap 'sleep {2 + i % 3}'").strip() for i in range(8)]
    svc(lc, "ctl", "restart", "slurmdbd")
    ids += [sh(lc, "login", "sbatch --parsable -N1 -p cpu --wrap 'true'").strip() for _ in range(4)]

    def recorded() -> dict[str, str] | None:
        p = lc.on("login", f"timeout 60 sacct -n -X -P -j {','.join(ids)} -o JobID,State", timeout=75)
        if p.returncode != 0 and "Connection refused" in p.stderr:
            return None  # the restarted slurmdbd is up for systemd but not listening yet (seen in CI)
        assert p.returncode == 0, f"sacct: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
        got = dict(ln.split("|", 1) for ln in p.stdout.splitlines() if "|" in ln)
        return got if set(got) == set(ids) and set(got.values()) == {"COMPLETED"} else None

    got = wait_for("every job of the slurmdbd restart COMPLETED in sacct", recorded, 180, every=3)
    assert sorted(got) == sorted(ids)


#: a facts refresh of both GPU nodes (the layout `playbooks/discover.yml` would save after a DIMM
#: swap and a riser move): slurmd -C with less memory, and nvidia-smi topo -m with GPUs 4-7 now on
#: NUMA node 0. The node line's RealMemory and the GRES lines' Cores change.
_FACTS_SLURMD_C = ("NodeName={host} CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2 "
                   "RealMemory=1990000\nUpTime=12-01:10:42\n")
_NEW_REALMEMORY = 1990000 - 8192  # less slurm.os_memory_reserve_mib (examples/local.yaml)


def _facts_change(lc: LocalCluster) -> Path:
    topo = (ROOT / "tests" / "fixtures" / "facts" / "dgx-001" / "nvidia-smi-topo.txt").read_text()
    moved = re.sub(r"^(GPU[4-7]\t.*)56-111,168-223\t1", r"\g<1>0-55,112-167\t0", topo, flags=re.M)
    assert moved.count("0-55,112-167\t0") == 8, "the fixture's layout changed: update this test"
    facts = lc.state / "facts-refresh"
    for host in ("gpu-001", "gpu-002"):
        (facts / host).mkdir(parents=True, exist_ok=True)
        (facts / host / "slurmd-C.txt").write_text(_FACTS_SLURMD_C.format(host=host))
        (facts / host / "nvidia-smi-topo.txt").write_text(moved)
    return facts


def test_a_layout_change_rolls_out_under_a_running_job(cluster: tuple[LocalCluster, Runs]) -> None:
    """Issue 15 item 7: the spec's facts change a node line (RealMemory) and the GRES lines (Cores)
    of both GPU nodes while a job runs on gpu-001 and an operator has drained gpu-002. configure
    (the Slurm plays) follows the restart plan `clusterforge diff` prints: drain, wait for the job,
    stop slurmd, restart slurmctld, restart slurmd one batch at a time (slurm.rollout: gpu-001 is the
    canary batch, the other nodes the next),
    resume. The job completes, the new layout is what slurmctld runs, only the nodes the change
    touches were restarted, and the operator's drain stays. Then the change is reverted the same way."""
    lc, _ = cluster
    spec_before = lc.spec_file.read_text()
    watched = [("gpu-001", "slurmd"), ("gpu-002", "slurmd"), ("cpu-001", "slurmd"), ("ctl", "slurmctld")]
    before = {w: _unit(lc, *w)[0] for w in watched} if lc.layout().boot == "systemd" else {}
    job = sh(lc, "login", "sbatch --parsable -w gpu-001 -p gpu --gpus-per-node=8 --wrap 'sleep 40'").strip()
    wait_for(f"job {job} running", lambda: "JobState=RUNNING" in sh(lc, "login", f"scontrol show job {job} -o"), 60)
    sh(lc, "login", "scontrol update NodeName=gpu-002 State=DRAIN Reason=operator-maintenance")
    facts = _facts_change(lc)
    lc.spec_file.write_text(spec_before + f"facts_dir: {facts}\n")
    lines: list[str] = []
    try:
        run = lc.configure(tags="slurm", progress=TextProgress(lines.append))
        assert run.ok, "\n".join(run.failures + lines[-60:])
        # the job was never touched: it ran to its end (the run waited for it before stopping slurmd)
        state = sh(lc, "login", f"sacct -n -X -P -j {job} -o State,ExitCode").strip()
        assert state == "COMPLETED|0:0", state
        assert any(re.search(r"gpu-001: changed Drain this node before its layout changes", ln) for ln in lines), lines
        # the new layout is live: slurmctld's node line, and the GRES sockets slurmd registered
        for node in ("gpu-001", "gpu-002"):
            info = sh(lc, "login", f"scontrol show node {node} --oneliner")
            assert f"RealMemory={_NEW_REALMEMORY} " in info, info
        wait_for("gpu-001 back in service", lambda: node_state(lc, "gpu-001") == "IDLE", 60, every=1)
        assert sh(lc, "login", "sinfo -h -n gpu-001 -o %G").strip() == "gpu:h100:8(S:0)"
        assert "Cores=0-55" in sh(lc, "gpu-001", "grep -E 'File=/dev/nvidia[4-7] ' /etc/slurm/gres.conf | sort -u | "
                                                 "sed -E 's/.*(Cores=[^ ]+).*/\\1/' | sort -u")
        # the operator's drain stayed, with its reason
        assert "DRAIN" in node_state(lc, "gpu-002")
        # (slurmctld appends " : Not responding" while its slurmd was stopped; the reason stays first)
        info = sh(lc, "login", "scontrol show node gpu-002 --oneliner")
        assert re.search(r" Reason=operator-maintenance( : Not responding)? \[", info), info
        # gpu-001 (the canary) and gpu-002 restarted slurmd in two batches of the compute play
        batch, where = 0, {}
        for ln in lines:
            if ln.startswith("== Slurm compute and login nodes"):
                batch += 1
            m = re.search(r"\] (gpu-00[12]): changed Restart slurmd", ln)
            if m:
                where[m.group(1)] = batch
        assert where == {"gpu-001": 1, "gpu-002": 2}, (where, lines)
        if before:
            after = {w: _unit(lc, *w)[0] for w in watched}
            assert [w for w in watched if after[w] != before[w]] == [watched[0], watched[1], watched[3]]
    finally:
        lc.spec_file.write_text(spec_before)
    back: list[str] = []
    run = lc.configure(tags="slurm", progress=TextProgress(back.append))
    assert run.ok, "\n".join(run.failures + back[-60:])
    sh(lc, "login", "scontrol update NodeName=gpu-002 State=RESUME")
    for node in ("gpu-001", "gpu-002"):
        wait_for(f"{node} idle with its catalog layout", lambda node=node: node_state(lc, node) == "IDLE"
                 and "RealMemory=2036531 " in sh(lc, "login", f"scontrol show node {node} --oneliner"), 60)
    assert sh(lc, "login", "sinfo -h -n gpu-001 -o %G").strip() == "gpu:h100:8(S:0-1)"


def test_prometheus_scrapes_every_node_and_alerts_on_a_lost_one(cluster: tuple[LocalCluster, Runs]) -> None:
    """The monitoring role's Prometheus (on ctl) scrapes every exporter and evaluates the rendered
    rules; a node exporter that stops, and an Xid a GPU reports, each alert for exactly that node."""
    lc, _ = cluster

    def targets() -> dict[tuple[str, str], str]:
        return {(t["labels"]["job"], t["labels"]["instance"]): t["health"]
                for t in prometheus(lc, "targets?state=active")["activeTargets"]}

    def evaluated() -> dict[str, str] | None:
        health = {r["name"]: r["health"] for g in prometheus(lc, "rules")["groups"] for r in g["rules"]}
        return health if health and "unknown" not in health.values() else None

    want = {("node", n): "up" for n in NODES} | {("dcgm", n): "up" for n in ("gpu-001", "gpu-002")}
    wait_for("every exporter scraped", lambda: {k: v for k, v in targets().items() if k[0] != "prometheus"} == want, 60)
    health = wait_for("the rendered rules evaluated", evaluated, 60)
    rendered = (lc.state / "inventory" / "local.render" / "prometheus" / "alerts.yml").read_text()
    assert set(health) == set(re.findall(r"- alert: (\w+)", rendered)) and set(health.values()) == {"ok"}, health

    # Prometheus sends its alerts to the Alertmanager the role runs beside it, which posts them to
    # the spec's webhook receiver: a small HTTP server on ctl's loopback that records each body
    am = prometheus(lc, "alertmanagers")["activeAlertmanagers"]
    assert [a["url"] for a in am] == ["http://localhost:9093/api/v2/alerts"], am
    assert json.loads(sh(lc, "ctl", "curl -sf http://localhost:9093/api/v2/status"))["config"]["original"]
    start_webhook(lc)
    svc(lc, "cpu-002", "stop", "node-exporter")
    try:
        got = wait_for("NodeExporterDown for cpu-002", lambda: alerts(lc, "NodeExporterDown"), 60)
        assert [(a["labels"]["instance"], a["labels"]["node_group"], a["labels"]["severity"]) for a in got] == [
            ("cpu-002", "cpu", "critical")], got
        assert got[0]["state"] in ("pending", "firing")  # firing after three missed scrapes (120 s)
        assert got[0]["annotations"]["summary"] == "cpu-002 (cpu): node exporter has not answered for three scrapes"
        # firing after its `for` (120 s), then Alertmanager's group_wait (30 s): posted within 5 min
        posted = wait_for("the webhook to receive NodeExporterDown", lambda: [
            (body, a) for body in webhook_bodies(lc) for a in body["alerts"]
            if a["labels"]["alertname"] == "NodeExporterDown" and a["status"] == "firing"], 300, every=5)
        body, alert = posted[0]
        assert body["receiver"] == "local-hook" and body["status"] == "firing", body
        assert alert["labels"] == {"alertname": "NodeExporterDown", "cluster": "local", "instance": "cpu-002",
                                   "job": "node", "node_group": "cpu", "severity": "critical"}, alert
        assert alert["annotations"]["action"].startswith("check that the node is up"), alert
        assert body["groupLabels"] == {"alertname": "NodeExporterDown", "cluster": "local", "node_group": "cpu"}, body
        # only that alert: its node's other alerts are inhibited, the other nodes have none
        assert {a["labels"]["alertname"] for b in webhook_bodies(lc) for a in b["alerts"]} == {"NodeExporterDown"}
    finally:
        svc(lc, "cpu-002", "start", "node-exporter")
        lc.on("ctl", "kill $(cat /run/clusterforge-test-webhook.pid) 2>/dev/null; true")
    wait_for("cpu-002 scraped again", lambda: targets().get(("node", "cpu-002")) == "up", 60)
    wait_for("NodeExporterDown resolved", lambda: not alerts(lc, "NodeExporterDown"), 60)

    # Xid 79 on gpu-001's GPU 5 (the stand-in exporter reports what the test writes): the alert
    # fires at once (no `for`), names the GPU and the action
    sh(lc, "gpu-001", "mkdir -p /run/dcgm-standin && echo 79 > /run/dcgm-standin/xid-5")
    try:
        got = wait_for("GpuXidFellOffBus firing", lambda: [a for a in alerts(lc, "GpuXidFellOffBus")
                                                           if a["state"] == "firing"], 60)
        assert [(a["labels"]["instance"], a["labels"]["gpu"]) for a in got] == [("gpu-001", "5")], got
        assert got[0]["annotations"]["action"] == "the GPU fell off the bus: drain the node and reboot it"
        assert not alerts(lc, "GpuXidOther")
    finally:
        lc.on("gpu-001", "rm -f /run/dcgm-standin/xid-5")
    wait_for("GpuXidFellOffBus resolved", lambda: not alerts(lc, "GpuXidFellOffBus"), 60)


#: A webhook receiver for Alertmanager: POSTed bodies, one JSON document a line (loopback only).
WEBHOOK = r"""
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open("/run/clusterforge-test-webhook.jsonl", "a") as f:
            f.write(json.dumps(body) + "\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", 9099), H).serve_forever()
"""


def start_webhook(lc: LocalCluster) -> None:
    """Start the receiver on ctl (127.0.0.1:9099, where examples/local.yaml's receiver points)."""
    sh(lc, "ctl", f"cat > /run/clusterforge-test-webhook.py <<'EOF'\n{WEBHOOK}\nEOF\n"
       "rm -f /run/clusterforge-test-webhook.jsonl\n"
       "setsid python3 /run/clusterforge-test-webhook.py </dev/null >/dev/null 2>&1 &\n"
       "echo $! > /run/clusterforge-test-webhook.pid")
    wait_for("the webhook receiver listening", lambda: lc.on(
        "ctl", "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9099), 2)\"").returncode == 0, 30, 1)


def webhook_bodies(lc: LocalCluster) -> list[dict[str, Any]]:
    out = lc.on("ctl", "cat /run/clusterforge-test-webhook.jsonl 2>/dev/null || true").stdout
    return [json.loads(ln) for ln in out.splitlines() if ln.strip()]


# ------------------------------------------------------------------------------ handlers


def _unit(lc: LocalCluster, node: str, unit: str) -> tuple[str, int]:
    """(InvocationID, ActiveEnterTimestampMonotonic in µs) of a unit, as systemd records them;
    the nodes share this machine's kernel, so the monotonic clock is one across nodes."""
    out = sh(lc, node, f"systemctl show -p InvocationID,ActiveEnterTimestampMonotonic {unit}")
    kv = dict(ln.split("=", 1) for ln in out.splitlines() if "=" in ln)
    return kv["InvocationID"], int(kv["ActiveEnterTimestampMonotonic"])


def test_handlers_restart_in_order_as_systemd_records(cluster: tuple[LocalCluster, Runs]) -> None:
    """A hand-edited munge key on cpu-001 and hand-edited slurm.conf copies on ctl and cpu-001:
    the next run puts the files back and its handlers restart munge, then slurmctld (the
    controller play first), then slurmd, and nothing on cpu-002. The order is read from systemd
    (each unit's invocation and when it became active), not from Ansible's output."""
    lc, _ = cluster
    if lc.layout().boot != "systemd":
        pytest.skip("chroot nodes: no systemd to read the restart order from")
    watched = [("cpu-001", "munge"), ("ctl", "slurmctld"), ("cpu-001", "slurmd"), ("cpu-002", "slurmd"),
               ("cpu-002", "munge")]
    before = {w: _unit(lc, *w) for w in watched}
    sh(lc, "cpu-001", "cp -p /etc/munge/munge.key /root/munge.key.orig && "
       "dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none")
    for n in ("ctl", "cpu-001"):
        sh(lc, n, "echo '# a local edit the next run reverts' >> /etc/slurm/slurm.conf")
    lines: list[str] = []
    run = lc.configure(limit="ctl,cpu-001,cpu-002", progress=TextProgress(lines.append))
    assert run.ok, "\n".join(run.failures + lines[-40:])
    after = {w: _unit(lc, *w) for w in watched}
    restarted = [w for w in watched if after[w][0] != before[w][0]]
    assert restarted == watched[:3], (restarted, before, after)
    t = [after[w][1] for w in watched[:3]]
    assert t == sorted(t) and len(set(t)) == 3, dict(zip(watched, t, strict=False))  # munge < slurmctld < slurmd
    assert sh(lc, "cpu-001", "cmp /etc/munge/munge.key /root/munge.key.orig && echo same").strip() == "same"
    assert "a local edit" not in sh(lc, "cpu-001", "cat /etc/slurm/slurm.conf")
    wait_for("cpu-001 idle after its restart", lambda: node_state(lc, "cpu-001").startswith("IDLE"), 60)
    assert sorted(sh(lc, "login", "srun -N2 -p cpu hostname").split()) == ["cpu-001", "cpu-002"]


# --------------------------------------------------------------------------- idempotence


def test_second_configure_changes_nothing_and_keeps_secrets(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, r = cluster
    lines: list[str] = []
    second = lc.configure(progress=TextProgress(lines.append))
    print(f"\nsecond run: rc={second.rc} {second.duration_s:.1f} s changed={second.changed}")
    assert second.ok, "\n".join(second.failures + lines[-40:])
    assert second.changed == 0, "\n".join(ln for ln in lines if ": changed " in ln)
    assert set(second.stats) - {"localhost"} == set(NODES)
    # the generated slurmdbd password reached slurmdbd.conf (0600, slurm) and nothing else
    secret = lc.secrets()["slurmdbd_storage_pass"]
    st = sh(lc, "ctl", "stat -c '%a %U' /etc/slurm/slurmdbd.conf").split()
    assert st == ["600", "slurm"]
    assert f"StoragePass={secret}" in sh(lc, "ctl", "cat /etc/slurm/slurmdbd.conf")
    for run_lines in (r.check_lines, r.first_lines, lines):
        assert not any(secret in ln for ln in run_lines)
    arts = lc.state / "artifacts"
    assert arts.is_dir()
    for f in arts.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f"secret in {f}"
    with (r.state.parent / "timings.json").open("w") as fh:
        json.dump({"check": r.check.duration_s, "first": r.first.duration_s, "second": second.duration_s,
                   **r.seconds}, fh)


def test_a_configure_under_mitogen_finds_nothing_to_change(cluster: tuple[LocalCluster, Runs]) -> None:
    """``configure --strategy mitogen`` on the running cluster: the same playbook through Mitogen's
    strategy (one Python per host for the whole run) finds the cluster as the linear runs left it,
    fails nothing, and leaves no secret in its output or artifacts."""
    pytest.importorskip("ansible_mitogen", reason="pip install mitogen (requirements-ci.txt)")
    lc, _ = cluster
    lines: list[str] = []
    run = lc.configure(strategy="mitogen", progress=TextProgress(lines.append))
    print(f"\nmitogen run: rc={run.rc} {run.duration_s:.1f} s changed={run.changed}")
    assert run.ok, "\n".join(run.failures + lines[-40:])
    assert run.changed == 0, "\n".join(ln for ln in lines if ": changed " in ln)
    assert set(run.stats) - {"localhost"} == set(NODES)
    secret = lc.secrets()["slurmdbd_storage_pass"]
    assert not any(secret in ln for ln in lines)
    for f in (lc.state / "artifacts").rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f"secret in {f}"


HAND_EDITED = ("/etc/sysctl.d/90-clusterforge.conf", "/etc/security/limits.d/90-clusterforge.conf", "/etc/hosts",
               "/etc/munge/munge.key", "/etc/apt/preferences.d/clusterforge-slurm.pref")
# on a GPU node: what the nvidia_driver, cuda, nccl and dcgm roles write, and the folders they make
GPU_DROPIN = "/etc/systemd/system/nvidia-dcgm-exporter.service.d"
GPU_HAND_EDITED = ("/etc/apt/sources.list.d/clusterforge-nvidia-cuda.list", "/etc/apt/preferences.d/clusterforge-nvidia-driver",
                   "/etc/profile.d/clusterforge-cuda.sh", f"{GPU_DROPIN}/clusterforge.conf",
                   "/etc/dcgm-exporter/clusterforge-counters.csv", "/etc/nccl.conf")
GPU_FOLDERS = ("/etc/apt/keyrings", "/run/dcgm-job-mapping", GPU_DROPIN)


def test_a_configure_repairs_a_stopped_daemon_a_disabled_one_a_released_hold_and_the_name(
        cluster: tuple[LocalCluster, Runs]) -> None:
    """The roles skip a start, an enable, a hold, the host name and the writes of files that
    site.yml's Facts play found done (its one read of dpkg, systemd, /etc/hostname and the files
    the roles write). What an operator undid by hand is not done, so the next configure does it
    again, on that node alone: a file with a line added, one with another mode, the cluster's
    block in /etc/hosts with another address, the munge key owned by root. And on gpu-001 the GPU
    roles' files and folders: lines added, other modes, a folder removed; on ctl, MariaDB stopped.
    With its munge stopped, cpu-001 goes DOWN (Not responding) first: the controller then asks it
    to register only every 20th ping round (200 s here), so the run asks its slurmd to register
    when munge is back, and the node is in service again within the run's 60 s wait."""
    lc, _ = cluster
    gpu_state = f"sha256sum {' '.join(GPU_HAND_EDITED)}; stat -c '%n %U %G %a %F' {' '.join(GPU_HAND_EDITED + GPU_FOLDERS)}"
    gpu_before = sh(lc, "gpu-001", gpu_state)
    sh(lc, "gpu-001", "for f in /etc/apt/sources.list.d/clusterforge-nvidia-cuda.list /etc/profile.d/clusterforge-cuda.sh"
                      f" {GPU_DROPIN}/clusterforge.conf /etc/dcgm-exporter/clusterforge-counters.csv;"
                      " do echo '# by hand' >> $f; done"
                      " && chmod 0600 /etc/apt/preferences.d/clusterforge-nvidia-driver /etc/nccl.conf"
                      f" && chmod 0700 /etc/apt/keyrings {GPU_DROPIN} && rm -rf /run/dcgm-job-mapping")
    assert lc.on("gpu-001", gpu_state).stdout != gpu_before  # (the removed folder fails the stat)
    sh(lc, "ctl", "systemctl stop mariadb")  # slurmdbd's database (the slurm role's start skips a running one)
    sh(lc, "cpu-001", "systemctl stop munge && systemctl disable --quiet prometheus-node-exporter"
                      " && apt-mark unhold slurmd && printf '# by hand\\nrenamed\\n' > /etc/hostname")
    files_before = sh(lc, "cpu-001", f"sha256sum {' '.join(HAND_EDITED)}; stat -c '%n %U %a' {' '.join(HAND_EDITED)}")
    sh(lc, "cpu-001", "echo '# by hand' >> /etc/sysctl.d/90-clusterforge.conf"
                      " && chmod 0600 /etc/security/limits.d/90-clusterforge.conf"
                      " && sed -i 's/^[0-9.]* cpu-002$/10.99.99.99 cpu-002/' /etc/hosts"
                      " && chown root /etc/munge/munge.key"
                      " && echo '# by hand' >> /etc/apt/preferences.d/clusterforge-slurm.pref")
    assert sh(lc, "cpu-001", "systemctl is-active munge || true").strip() == "inactive"
    assert sh(lc, "cpu-001", "systemctl is-enabled prometheus-node-exporter || true").strip() == "disabled"
    assert "slurmd" not in sh(lc, "cpu-001", "apt-mark showhold").split()
    assert "10.99.99.99 cpu-002" in sh(lc, "cpu-001", "cat /etc/hosts")
    # SlurmdTimeout=30 and a ping round every 10 s: DOWN within about 40 s, for slurmctld's own reason
    def line_if_down() -> str:
        line = sh(lc, "login", "scontrol show node cpu-001 --oneliner")
        return line if "State=DOWN" in line else ""

    down = wait_for("cpu-001 DOWN while its munge is stopped", line_if_down, 120)
    assert "Reason=Not responding" in down, down
    lines: list[str] = []
    run = lc.configure(progress=TextProgress(lines.append))
    assert run.ok, "\n".join(run.failures + lines[-40:])
    per_host = {h: s.get("changed", 0) for h, s in run.stats.items() if h != "localhost"}
    changed = "\n".join(ln for ln in lines if ": changed " in ln)
    # the name, the hold, node exporter's enable, the five files (no_log: the key's own task shows
    # no line), munge's restart for its key, which also starts the munge stopped by hand, and the
    # reload that has slurmd register again
    # on gpu-001: the six files and three folders, and dcgm-exporter's restart for its drop-in and
    # counters (the package index refresh a changed repository or pin asks for reports no change)
    # on ctl: MariaDB started again
    assert per_host == {h: {"cpu-001": 10, "gpu-001": 10, "ctl": 1}.get(h, 0) for h in NODES}, changed
    assert "ctl: changed Start MariaDB (systemd)" in changed, changed
    assert sh(lc, "ctl", "systemctl is-active mariadb").strip() == "active"
    for task in ("Create the apt keyring folder", "Add NVIDIA's CUDA repository", "Pin the driver branch",
                 "Put the toolkit on PATH", "Install the rendered NCCL configuration and job environment",
                 "Install the rendered counters file", "Make the job mapping folder",
                 "Make the dcgm-exporter drop-in folder (systemd)", "Pass the counters file to dcgm-exporter (systemd)",
                 "Restart dcgm-exporter"):
        assert f"gpu-001: changed {task}" in changed, changed
    assert sh(lc, "gpu-001", gpu_state) == gpu_before
    for task in ("Write the cluster hosts into /etc/hosts", "Set resource limits for RDMA and MPI jobs",
                 "Write kernel settings", "Pin the Slurm packages to release", "Restart munge",
                 "Ask a running slurmd to register again"):
        assert f"cpu-001: changed {task}" in changed, changed
    # registered within the run's wait, so back in service as soon as the run ends
    assert node_state(lc, "cpu-001").startswith("IDLE"), node_state(lc, "cpu-001")
    assert sh(lc, "cpu-001", "systemctl is-active munge").strip() == "active"
    assert sh(lc, "cpu-001", "systemctl is-enabled prometheus-node-exporter").strip() == "enabled"
    assert "slurmd" in sh(lc, "cpu-001", "apt-mark showhold").split()
    assert sh(lc, "cpu-001", "hostname; grep -v '^#' /etc/hostname").split() == ["cpu-001", "cpu-001"]
    # every file as it was before the hand edits: bytes, owner and mode
    assert sh(lc, "cpu-001", f"sha256sum {' '.join(HAND_EDITED)}; stat -c '%n %U %a' {' '.join(HAND_EDITED)}") \
        == files_before


def test_a_second_cluster_with_the_same_node_names_is_refused(cluster: tuple[LocalCluster, Runs], tmp_path: Path) -> None:
    """Slurm names its cgroup v1 folders slurm_<node> machine-wide: the running cluster's slurmds
    own /sys/fs/cgroup/*/slurm_gpu-001 and the rest, so `local up` of the same names on another
    network is refused (before it makes anything), naming the nodes and the running cluster."""
    lc, _ = cluster
    other = tmp_path / "other"
    p = cli("local", "up", str(SPEC), "--nodes-only", "--net", CRASH_NET, "--boot", BOOT, "--state", str(other))
    assert p.returncode != 0
    assert "node name(s) cpu-001, cpu-002, gpu-001, gpu-002 are in use by local cluster local" in p.stderr, p.stderr
    assert f"clusterforge local down --state {lc.state.resolve()}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not other.exists()
    assert not [n for n in netns_list() if n.startswith(prefix(CRASH_NET) + "-")]


def test_down_removes_everything_and_is_safe_twice(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    from clusterforge.local import registry

    entry = registry._entry(lc.state)
    assert entry.is_file() and "gpu-001" in entry.read_text()
    pids = [int(p) for p in (lc.state / "pids").read_text().split()]
    netns = (lc.state / "netns").read_text().split()
    removed = lc.down()
    assert any(x.startswith(f"netns: {prefix(NET)}-br") for x in removed)
    assert not lc.state.exists()
    for pid in pids:
        wait_for(f"pid {pid} gone", lambda pid=pid: not _alive(pid), 15, every=0.5)
    assert not set(netns) & set(netns_list())
    assert not [c for c in Path("/sys/fs/cgroup").glob("*/slurm_*") if c.name[6:] in NODES]
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(lc.state) not in mounts
    assert not entry.exists()  # its node names are free for the next cluster
    assert lc.down() == []  # a second down finds nothing and does not fail


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


# Where `up` is killed: each is an instant at which the state folder once lagged behind what
# existed (CI caught the first: a namespace made, killed before its name was written).
#   after  the command has run: the second node's namespace exists
#   before the command runs: the first node's PID 1 has left up's session (setsid) and its
#          parent, up, dies before writing its PID
_KILL_AT = {
    "namespace-made": ("ip", "after", "netns add {pre}n2"),
    "node-started": (("systemd-nspawn", "before", "-b -D *") if BOOT == "systemd"
                     else ("unshare", "before", "--pid --fork --kill-child *")),
}


def _kill_shim(tmp_path: Path, pgid_file: Path, command: str, when: str, args: str) -> Path:
    """A folder for the front of PATH holding COMMAND: the real one, with a SIGKILL of up's whole
    process group (its PGID from PGID_FILE) BEFORE or AFTER it when its arguments match ARGS, or
    (WHEN "fail") a failure in its place."""
    real = subprocess.run(["bash", "-c", f"command -v {command}"], capture_output=True, text=True, check=True).stdout.strip()
    shim = tmp_path / "shim"
    shim.mkdir()
    # (the test writes the PGID file just after the Popen: wait for it, 5 s at most)
    kill = f'for _ in $(seq 100); do [ -s {pgid_file} ] && break; sleep 0.05; done; kill -KILL -- "-$(cat {pgid_file})"'
    body = {"before": f'{kill}; exec {real} "$@"', "after": f'{real} "$@"; rc=$?; {kill}; exit $rc',
            "fail": f'echo "{command} $*: injected failure" >&2; exit 1'}[when]
    (shim / command).write_text(f'#!/bin/bash\npat={shlex.quote(args)}\n'  # unquoted in [[ ]]: a glob
                                f'if [[ "$*" == $pat ]]; then {body}; fi\nexec {real} "$@"\n')
    (shim / command).chmod(0o755)
    return shim


@pytest.mark.parametrize("kill_at", sorted(_KILL_AT))
def test_down_after_a_crashed_up_removes_what_it_made(tmp_path: Path, kill_at: str) -> None:
    """`up` killed half-way (its whole process group, as a closed terminal would) at an instant
    the state folder once missed: `down` still removes every namespace and process it had made,
    from the state folder."""
    state = tmp_path / "state"
    pre = prefix(CRASH_NET) + "-"
    pgid = tmp_path / "pgid"
    command, when, args = _KILL_AT[kill_at]
    shim = _kill_shim(tmp_path, pgid, command, when, args.format(pre=pre))
    up = subprocess.Popen([*CLI, "local", "up", str(SPEC), "--nodes-only", "--net", CRASH_NET, "--boot", BOOT,
                           "--state", str(state)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
    pgid.write_text(str(up.pid))  # its own session: its PGID is its PID
    try:
        _, err = up.communicate(timeout=180)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(30)
    assert up.returncode == -signal.SIGKILL, f"up was not killed at {kill_at}: rc={up.returncode}\n{err}"
    left = [n for n in netns_list() if n.startswith(pre)]
    assert 2 <= len(left) < 7, left  # a half-made cluster: something for down to remove
    down = cli("local", "down", "--state", str(state))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [n for n in netns_list() if n.startswith(pre)]
    assert not state.exists()
    assert subprocess.run(["pgrep", "-f", str(state)], capture_output=True, check=False).returncode == 1
    assert str(state) not in Path("/proc/self/mountinfo").read_text()
    assert cli("local", "down", "--state", str(state)).returncode == 0  # and again


def test_a_failed_up_removes_what_it_made_and_frees_its_node_names(tmp_path: Path) -> None:
    """`up` failing half-way (the third namespace cannot be made) removes what it made, says so
    and frees its node names: the same spec comes up again in another state folder, not refused
    for names a cluster that never came up held (it was, until the namespaces' write-ahead fix's
    test injected a failure)."""
    from clusterforge.local import registry

    state = tmp_path / "state"
    pre = prefix(CRASH_NET) + "-"
    shim = _kill_shim(tmp_path, tmp_path / "unused", "ip", "fail", f"netns add {pre}n2")
    p = subprocess.run([*CLI, "local", "up", str(SPEC), "--nodes-only", "--net", CRASH_NET, "--boot", BOOT,
                        "--state", str(state)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
    assert p.returncode != 0
    assert f"netns add {pre}n2: injected failure" in p.stderr, p.stderr
    assert "up removed what it had made and freed its node names" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not [n for n in netns_list() if n.startswith(pre)]
    assert not state.exists()
    assert not registry._entry(state).exists()
    assert subprocess.run(["pgrep", "-f", str(state)], capture_output=True, check=False).returncode == 1
    # the names are free: another state folder's claim of the same spec's nodes is not refused
    other = tmp_path / "other"
    other.mkdir()
    try:
        registry.claim(other, "local", ["gpu-001", "gpu-002", "cpu-001", "cpu-002"], str(SPEC))
    finally:
        registry.release(other)
