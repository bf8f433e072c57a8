"""What a verb prints, where it goes: a pipe or a file gets plain lines and tab-separated tables
(and the process imports no rich); a terminal (a real pseudo-terminal here) gets rich's table;
a finding's text is printed as the user wrote it either way."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from clusterforge import cli
from clusterforge.clusterspec import Finding, Level

from .conftest import EXAMPLES, ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _env(**extra: str) -> dict[str, str]:
    # rich's own switches off, so that the test decides what standard output is
    env = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR", "COLUMNS")}
    return {**env, "TERM": "xterm-256color", **extra}


def _on_a_terminal(argv: list[str], tmp_path: Path) -> str:
    """``clusterforge ARGV`` with standard output on a pseudo-terminal of 200 columns; what it printed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    with (tmp_path / "stderr").open("wb") as err:
        p = subprocess.Popen([sys.executable, "-m", "clusterforge.cli", *argv], stdout=slave, stderr=err,
                             stdin=subprocess.DEVNULL, cwd=ROOT, env=_env())
        os.close(slave)
        chunks: list[bytes] = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not data:
                break
            chunks.append(data)
        assert p.wait(timeout=300) == 0, (tmp_path / "stderr").read_text()[-2000:]
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_render_in_a_pipe_prints_a_tab_separated_row_per_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "clusterforge.cli", "render", str(EXAMPLES / "local.yaml"),
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert lines[0] == "file\tnode path\tsha256\tnode groups"
    assert lines[-1].startswith(f"wrote: {out} (") and "\t" not in lines[-1]
    rows = {ln.split("\t")[0]: ln.split("\t") for ln in lines[1:] if "\t" in ln}
    # one row per file the render wrote (the folder, read here), four cells each
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert sorted(rows) == written and all(len(r) == 4 for r in rows.values())
    conf = rows["slurm/slurm.conf"]
    assert conf[1] == "/etc/slurm/slurm.conf"
    assert conf[2] == hashlib.sha256((out / "slurm" / "slurm.conf").read_bytes()).hexdigest()[:12]
    assert conf[3].split(", ") == ["ctl", "login", "gpu", "cpu"]  # examples/local.yaml's groups: every node reads it


def test_render_on_a_terminal_prints_rich_table(tmp_path: Path) -> None:
    text = _on_a_terminal(["render", str(EXAMPLES / "local.yaml"), "--out", str(tmp_path / "out")], tmp_path)
    assert "\t" not in text
    header = text.splitlines()[0]
    assert "\x1b[1m" in header  # the header in bold: rich's table, not the pipe's lines
    plain = [ANSI.sub("", ln).split() for ln in text.splitlines()]
    assert ["file", "node", "path", "sha256", "node", "groups"] in plain
    conf = next(cells for cells in plain if cells[:1] == ["slurm/slurm.conf"])
    assert conf[1] == "/etc/slurm/slurm.conf" and conf[3:] == ["ctl,", "login,", "gpu,", "cpu"]


def test_catalog_in_a_pipe_prints_tab_separated_rows() -> None:
    res = subprocess.run([sys.executable, "-m", "clusterforge.cli", "catalog"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env=_env())
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert lines[0] == "profile\tkind\tcpus\tsockets x cores x threads\tgpu"
    # p5.48xlarge: 192 vCPUs, 2 sockets x 48 cores x 2 threads, 8 H100 (AWS's instance type page)
    assert "p5.48xlarge\taws\t192\t2x48x2\t8x h100" in lines[1:]


def test_a_tty_compatible_pipe_gets_rich_as_rich_decides(tmp_path: Path) -> None:
    # TTY_COMPATIBLE=1 (rich's switch for a pipe that understands escape codes, such as a CI log)
    # still reaches rich: the table, not tab-separated lines
    res = subprocess.run([sys.executable, "-m", "clusterforge.cli", "catalog"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env=_env(TTY_COMPATIBLE="1", COLUMNS="200"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "\t" not in res.stdout and "\x1b[1m" in res.stdout.splitlines()[0]


FINDING = Finding(level=Level.WARNING, code="some-rule", path="node_groups[gpu].count", value="x[/]y [red]z",
                  why="a [b]bold[/b] word", fix="set [/] apart")
FINDING_LINES = ["warning node_groups[gpu].count = 'x[/]y [red]z'", "    why: a [b]bold[/b] word",
                 "    fix: set [/] apart  [some-rule]", "0 error(s), 1 warning(s), 0 info"]


def test_a_finding_prints_its_text_as_it_is_in_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    # rich's markup would drop "[gpu]" and "[red]" and stop at "[/]" with an error
    assert cli._print_findings([FINDING], Level.ERROR) == 0
    assert capsys.readouterr().out.splitlines() == FINDING_LINES


def test_a_finding_prints_its_text_as_it_is_on_a_terminal(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich's console, with its colours
    cli._out.cache_clear()  # rich decides its colours when the console is made
    try:
        assert cli._print_findings([FINDING], Level.ERROR) == 0
        out = capsys.readouterr().out
    finally:
        cli._out.cache_clear()
    assert "\x1b[33mwarning\x1b[0m" in out  # styled by rich, from spans
    assert [ANSI.sub("", ln) for ln in out.splitlines()] == FINDING_LINES
