#!/usr/bin/env python3
"""Bounded calls to Slurm's client commands (scontrol, squeue, scancel) for the host agents.

Stdlib only: shipped verbatim next to the agents in /usr/local/lib/clusterforge-agents/. Every
call has a timeout (a hung slurmctld must not hang an agent), and any failure (non-zero exit,
timeout, missing binary) is a :class:`SlurmError` naming the command and Slurm's stderr, so a
caller can log one line and retry on its next poll.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

DEFAULT_TIMEOUT_S = 20.0


class SlurmError(Exception):
    """A Slurm command failed; ``cmd`` and ``stderr`` say which and why."""

    def __init__(self, cmd: Sequence[str], why: str, stderr: str = "") -> None:
        self.cmd = list(cmd)
        self.stderr = stderr.strip()
        super().__init__(f"{' '.join(self.cmd)}: {why}" + (f": {self.stderr}" if self.stderr else ""))


def run(*cmd: str, timeout: float = DEFAULT_TIMEOUT_S, env: dict[str, str] | None = None) -> str:
    """Run ``cmd`` (e.g. ``run("scontrol", "ping")``) and return its stdout."""
    try:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **env} if env else None, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise SlurmError(cmd, f"no answer within {timeout:g}s", err) from None
    except OSError as e:  # binary missing or not executable
        raise SlurmError(cmd, str(e)) from None
    if r.returncode != 0:
        raise SlurmError(cmd, f"exit {r.returncode}", r.stderr)
    return r.stdout


def fields(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value2`` (one ``scontrol show ... -o`` line) -> dict. A value with spaces
    (Reason=...) keeps its words until the next ``Key=``."""
    out: dict[str, str] = {}
    key = ""
    for word in line.split():
        k, eq, v = word.partition("=")
        if eq and k and (k[0].isupper() or k[0].isdigit()) and "/" not in k:
            key = k
            out[key] = v
        elif key:
            out[key] += " " + word
    return out


def scontrol(*args: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    return run("scontrol", *args, timeout=timeout)


def squeue(*args: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    return run("squeue", *args, timeout=timeout)


def scancel(*args: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    return run("scancel", *args, timeout=timeout)
