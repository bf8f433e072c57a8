"""Child processes with deadlines: the one place clusterforge runs a program.

* ``run(argv, *, timeout, ...)``: run a program to completion, capture its output as text and
  return the ``CompletedProcess``; a missing binary raises ``ProcNotFound``, an expired deadline
  ``ProcTimeout`` (the child is SIGKILLed first), ``check=True`` and a non-zero exit ``ProcFailed``.
  All three are ``ProcError``, a ``ClusterforgeError``: the CLI prints them, never a traceback.
* ``run_bytes(argv, *, timeout, cwd=None)``: the same for output that is data (git archives).
* ``start(argv, ...)``: start a long-running daemon as the leader of its own process group with
  its merged stdout/stderr read line by line in a thread (``Daemon.lines``), so every wait on it
  has a deadline; ``Daemon.stop(grace)`` sends SIGTERM to the group, SIGKILL after ``grace``.

Nothing here waits without a bound: a caller that has no natural deadline must still pass one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from clusterforge.errors import ClusterforgeError

__all__ = ["Daemon", "Lines", "ProcError", "ProcFailed", "ProcNotFound", "ProcTimeout", "run", "run_bytes", "start"]

# After SIGKILL: only a child stuck in uninterruptible I/O takes this long to be reaped.
KILL_WAIT_S = 10.0


class ProcError(ClusterforgeError):
    """A program could not be run to completion."""

    def __init__(self, message: str, argv: Sequence[str]) -> None:
        super().__init__(message)
        self.argv = list(argv)


class ProcNotFound(ProcError):
    """The program does not exist (or is not executable)."""


class ProcTimeout(ProcError):
    """The program did not finish within its deadline and was killed."""

    def __init__(self, message: str, argv: Sequence[str], timeout: float, output: str = "") -> None:
        super().__init__(message, argv)
        self.timeout = timeout
        self.output = output  # what it printed (stdout + stderr) before it was killed


class ProcFailed(ProcError):
    """``check=True`` and the program exited non-zero."""

    def __init__(self, message: str, cp: subprocess.CompletedProcess[str]) -> None:
        super().__init__(message, [str(a) for a in cp.args])
        self.completed = cp


def _name(argv: Sequence[str]) -> str:
    return Path(str(argv[0])).name if argv else "?"


def _text(out: str | bytes | None) -> str:
    if isinstance(out, bytes):
        return out.decode(errors="replace")
    return out or ""


def _completed(argv: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` with a deadline, its failures turned into ``ProcError``s."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=max(timeout, 0.1), check=False, **kwargs)
    except FileNotFoundError:
        raise ProcNotFound(f"{argv[0]}: no such program; is it installed and on PATH?", argv) from None
    except PermissionError as exc:
        raise ProcNotFound(f"{argv[0]}: cannot be executed ({exc.strerror})", argv) from None
    except subprocess.TimeoutExpired as exc:  # subprocess.run has SIGKILLed the child
        output = _text(exc.stdout) + _text(exc.stderr)
        raise ProcTimeout(
            f"{_name(argv)} did not finish within {timeout:.0f} s and was stopped", argv, timeout, output
        ) from None


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,  # the name subprocess.run uses
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with a deadline of ``timeout`` seconds; stdout/stderr captured as text.

    stdin is ``input`` or /dev/null (never the caller's terminal: nothing here is interactive).
    Undecodable bytes are replaced, so binary noise in a log cannot raise.
    """
    args = [str(a) for a in argv]
    cp: subprocess.CompletedProcess[str] = _completed(
        args, timeout, input=input, stdin=subprocess.DEVNULL if input is None else None, text=True,
        errors="replace", env=None if env is None else dict(env), cwd=cwd,
    )
    if check and cp.returncode != 0:
        raise ProcFailed(f"{_name(args)} failed (rc={cp.returncode}): {cp.stderr.strip()[-2000:]}", cp)
    return cp


def run_bytes(
    argv: Sequence[str], *, timeout: float, cwd: Path | str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``run`` for programs whose output is data, not text (``git show``, ``git archive``): the
    bytes as they are, stdin /dev/null, the same errors; the caller reads ``returncode``."""
    cp: subprocess.CompletedProcess[bytes] = _completed(
        [str(a) for a in argv], timeout, stdin=subprocess.DEVNULL, cwd=cwd
    )
    return cp


class Lines:
    """A child's output, read line by line in a thread so that every wait has a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[str], bool], deadline: float) -> str | None:
        """The first line matching ``pred``; ``None`` at end of output or at ``deadline``
        (a ``time.monotonic()`` value)."""
        i = 0
        with self._cond:
            while True:
                for line in self.lines[i:]:
                    if pred(line):
                        return line
                i = len(self.lines)
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def join(self, timeout: float) -> list[str]:
        """Every line, after waiting up to ``timeout`` for the end of the output."""
        self._thread.join(timeout)
        with self._cond:
            return list(self.lines)


class Daemon:
    """A started long-running child: its ``Popen``, its output lines, and a bounded stop."""

    def __init__(self, popen: subprocess.Popen[str]) -> None:
        self.popen = popen
        assert popen.stdout is not None
        self.lines = Lines(popen.stdout)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def alive(self) -> bool:
        """Whether it still runs, WITHOUT reaping it: while its zombie is unreaped its PID, and so
        its process group's ID, cannot be reused, which makes stop()'s killpg() safe."""
        if self.popen.returncode is not None:
            return False
        try:
            return os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system, all its threads) the process has used so far, from
        ``/proc/PID/stat``; None when it cannot be read (gone, not Linux). A figure the load of
        the machine does not inflate the way it does wall time."""
        try:
            with open(f"/proc/{self.popen.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def wait_exit(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for it to exit, without reaping it; True if it did."""
        end = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)
        return True

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM to the group, SIGKILL after ``grace`` (to the leader if it ignored SIGTERM and
        to any helper left in the group), then reap the leader.

        Never raises: a child in uninterruptible sleep is left to Popen, which reaps it later.
        """
        if self.popen.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.wait_exit(grace)
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(KILL_WAIT_S)


def start(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | str | None = None) -> Daemon:
    """Start ``argv`` as the leader of a new session (so its own process group), stdin /dev/null,
    stdout and stderr merged into ``Daemon.lines``.

    A wrapper such as ``sh -c 'mount …; exec daemon'`` runs its helpers as children of the shell:
    if the caller has to stop it half-way, the group holds them too, so ``stop`` reaches every
    process it started, and nothing else. Raises ``ProcNotFound`` for a missing binary.
    """
    argv = [str(a) for a in argv]
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ProcNotFound(f"{argv[0]}: no such program; is it installed and on PATH?", argv) from None
    except PermissionError as exc:
        raise ProcNotFound(f"{argv[0]}: cannot be executed ({exc.strerror})", argv) from None
    return Daemon(popen)
