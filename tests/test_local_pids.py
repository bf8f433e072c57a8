"""`nodes.sh down` and `nodes.sh kill` signal a recorded PID only while it is still the process
that was recorded (its start time in STATE/pids.start), never a PID the kernel has handed to
another process since: pid_max is 32768 on these machines, a busy one wraps it within a CI run,
and a local cluster's `down` once took the repository server of another cluster running beside
it. Real processes (`sleep`) stand in for the recorded daemons; a wrong start time in the record
is what a reused PID looks like. Runs as any user: no namespace is made."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODES_SH = ROOT / "clusterforge" / "local" / "nodes.sh"


def start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat (after the command name, which may hold blanks)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(10)


def sleeper(procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(["sleep", "300"])
    procs.append(p)
    return p


def gone(p: subprocess.Popen[bytes], within: float = 20) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if p.poll() is not None:
            return True
        time.sleep(0.1)
    return False


def nodes_sh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(NODES_SH), *args], capture_output=True, text=True, timeout=120, check=False)


def test_down_signals_only_the_processes_it_recorded(tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    mine, reused, legacy = sleeper(sleepers), sleeper(sleepers), sleeper(sleepers)
    (state / "pids").write_text(f"{mine.pid}\n{reused.pid}\n{legacy.pid}\n")
    # `reused` was recorded for a process that started at another time: the PID now belongs to
    # someone else. `legacy` has no start time (a state folder from before they were kept)
    wrong = str(int(start_time(reused.pid)) - 1)
    (state / "pids.start").write_text(f"{mine.pid} {start_time(mine.pid)}\n{reused.pid} {wrong}\n")
    r = nodes_sh("down", str(state))
    assert r.returncode == 0, r.stderr
    assert gone(mine), "down must stop the process it recorded"
    assert gone(legacy), "a PID recorded without a start time is stopped as before"
    assert reused.poll() is None, "down signalled a PID that now belongs to another process"
    assert not (state / "pids").exists() and not (state / "pids.start").exists()


def test_kill_leaves_a_reused_pid_alone(tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    state = tmp_path / "state"
    node = state / "nodes" / "i-0abc"
    node.mkdir(parents=True)
    reused, imds = sleeper(sleepers), sleeper(sleepers)
    (node / "pid").write_text(f"{reused.pid}\n")
    (node / "pid.imds").write_text(f"{imds.pid}\n")
    (state / "pids").write_text(f"{reused.pid}\n{imds.pid}\n")
    wrong = str(int(start_time(reused.pid)) + 7)
    (state / "pids.start").write_text(f"{reused.pid} {wrong}\n{imds.pid} {start_time(imds.pid)}\n")
    r = nodes_sh("kill", str(state), "i-0abc")
    assert r.returncode == 0, r.stderr
    assert gone(imds), "kill must stop the node's recorded IMDS stand-in"
    assert reused.poll() is None, "kill signalled a PID that now belongs to another process"
    assert not node.exists()
    assert (state / "pids").read_text().split() == []  # both forgotten


def test_a_process_recorded_after_it_ended_is_never_signalled(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """record_pid of a process already gone writes no start time ('-'): nothing may match it."""
    state = tmp_path / "state"
    state.mkdir()
    other = sleeper(sleepers)
    (state / "pids").write_text(f"{other.pid}\n")
    (state / "pids.start").write_text(f"{other.pid} \n")  # what record_pid writes for a gone PID
    assert nodes_sh("down", str(state)).returncode == 0
    assert other.poll() is None
