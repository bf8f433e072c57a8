"""clusterforge.proc: the one subprocess-with-deadline helper (real processes, bounded waits)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from clusterforge import proc
from clusterforge.errors import ClusterforgeError


def test_run_captures_text_and_feeds_input() -> None:
    cp = proc.run(["sh", "-c", "cat; echo err >&2; exit 3"], timeout=10, input="hello\n")
    assert (cp.returncode, cp.stdout, cp.stderr) == (3, "hello\n", "err\n")


def test_run_gives_the_child_no_terminal_stdin() -> None:
    assert proc.run(["cat"], timeout=10).stdout == ""  # /dev/null: returns at once


def test_timeout_is_a_clear_error_and_the_child_is_killed() -> None:
    t0 = time.monotonic()
    with pytest.raises(proc.ProcTimeout, match=r"sh did not finish within 0 s") as info:
        proc.run(["sh", "-c", "echo started; exec sleep 30"], timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert isinstance(info.value, ClusterforgeError)  # the CLI prints it: exit 2, no traceback
    assert info.value.output == "started\n"


def test_missing_binary_is_a_clear_error() -> None:
    with pytest.raises(proc.ProcNotFound, match="no-such-tool-xyz: no such program"):
        proc.run(["no-such-tool-xyz"], timeout=5)


def test_check_true_raises_with_stderr() -> None:
    with pytest.raises(proc.ProcFailed, match=r"sh failed \(rc=2\): boom") as info:
        proc.run(["sh", "-c", "echo boom >&2; exit 2"], timeout=10, check=True)
    assert info.value.completed.returncode == 2


def test_daemon_lines_stop_and_group_kill() -> None:
    # The shell ignores SIGTERM and has a child: stop() must still end both (SIGKILL to the group).
    d = proc.start(["sh", "-c", "trap '' TERM; sleep 60 & echo ready $!; wait"])
    line = d.lines.wait_for(lambda ln: ln.startswith("ready"), time.monotonic() + 10)
    assert line is not None and d.alive()
    child = int(line.split()[1])
    t0 = time.monotonic()
    d.stop(grace=0.3)
    assert time.monotonic() - t0 < 5
    assert not d.alive() and d.returncode is not None
    end = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and time.monotonic() < end:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}")


def test_cpu_seconds_counts_the_childs_work_until_it_is_reaped() -> None:
    d = proc.start(["sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
    assert d.wait_exit(60)
    cpu = d.cpu_seconds()  # an exited, unreaped child still has its figures
    assert cpu is not None and cpu > 0
    d.stop()
    assert d.cpu_seconds() is None  # reaped: nothing to read, and no error


def test_wait_for_gives_up_at_the_deadline() -> None:
    d = proc.start(["sleep", "30"])
    try:
        t0 = time.monotonic()
        assert d.lines.wait_for(lambda ln: True, time.monotonic() + 0.3) is None
        assert 0.2 < time.monotonic() - t0 < 3
        assert not d.wait_exit(0.1)
    finally:
        d.stop(grace=0.2)


def test_run_bytes_keeps_data_as_it_is() -> None:
    # git archives are binary: a text-mode run would replace these bytes
    cp = proc.run_bytes(["printf", "\\000\\377ab"], timeout=10)
    assert (cp.returncode, cp.stdout) == (0, b"\x00\xffab")
    with pytest.raises(proc.ProcNotFound):
        proc.run_bytes(["/nonexistent/prog"], timeout=10)


def test_no_module_runs_programs_but_proc() -> None:
    """One subprocess-with-deadline helper: every other module goes through clusterforge.proc."""
    from clusterforge.aws.bundle import shipped_modules

    root = Path(__file__).resolve().parents[1] / "clusterforge"
    # modules shipped verbatim to hosts (clusterforge/aws/bundle.py) run without the package, so
    # not through proc; slurmcmd.py is their own bounded wrapper with the same timeout contract
    shipped = shipped_modules()
    assert {"aws/slurmcmd.py", "aws/retire.py", "aws/cloud_agent.py"} <= shipped
    offenders = [
        str(p.relative_to(root))
        for p in sorted(root.rglob("*.py"))
        if p.name != "proc.py" and str(p.relative_to(root)) not in shipped
        and re.search(r"subprocess\.(run|Popen|call|check_output|check_call)\(", p.read_text())
    ]
    assert offenders == []
