"""``clusterforge render``'s writes (clusterforge/render/writer.py): atomic with and without
``renameat2(RENAME_EXCHANGE)``, leftovers of killed renders removed, other folders refused.

Without the exchange (NFS, EFS) ``out`` is a symlink to a versioned sibling; the tests take the
exchange away through the writer's one kernel call, ``_renameat2``, which then answers as NFS does
(EINVAL). What a reader sees is always read through the ``out`` path and compared byte for byte
with the golden trees of tests/golden (the old side onprem-dgx's, the new side p5-training's: two
clusters, so the writes that swap them pass ``force``). Kills are real SIGKILLs of forked
children: at random times while they render over and over (48 kills), and at each filesystem step
of the one-time move from a real folder to the symlink layout.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from clusterforge.clusterspec import load_spec
from clusterforge.errors import ClusterforgeError
from clusterforge.inventory import generate_inventory
from clusterforge.render import render_cluster, writer
from clusterforge.render.manifest import Manifest
from clusterforge.render.result import RenderResult
from clusterforge.render.writer import write_render
from clusterforge.resolve import resolve_file

from .conftest import EXAMPLES, ROOT
from .test_spec import run_cli

GOLDEN = ROOT / "tests" / "golden"
VERSION = re.compile(r"\.out\.v-[0-9a-f]{12}-[a-z0-9_]+")
_REAL_RENAMEAT2 = writer._renameat2


def _golden(name: str) -> dict[str, bytes]:
    d = GOLDEN / name
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


OLD, NEW = _golden("onprem-dgx"), _golden("p5-training")


def _result(name: str) -> RenderResult:
    return render_cluster(load_spec(EXAMPLES / f"{name}.yaml"), base_dir=EXAMPLES)


@pytest.fixture(scope="module")
def results() -> tuple[RenderResult, RenderResult]:
    return _result("onprem-dgx"), _result("p5-training")


def seen(out: Path) -> dict[str, bytes] | None:
    """What a reader of ``out`` gets: every file's bytes through the ``out`` path (None: no folder)."""
    if not out.is_dir():
        return None
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def siblings(out: Path) -> set[str]:
    return {p.name for p in out.parent.iterdir()} - {out.name, f".{out.name}.lock"}


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Bytes, mode and mtime of everything below ``folder`` (symlinks followed at the top)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mode, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


@pytest.fixture
def no_exchange(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The kernel answers RENAME_EXCHANGE as NFS does; the list records each call's flags."""
    calls: list[int] = []

    def renameat2(a: Path, b: Path, flags: int) -> int:
        calls.append(flags)
        return errno.EINVAL

    monkeypatch.setattr(writer, "_renameat2", renameat2)
    return calls


# ----------------------------------------------------------------------------- the two layouts


def test_with_the_exchange_the_folder_stays_a_real_folder(tmp_path: Path, results: tuple[RenderResult, ...]) -> None:
    out = tmp_path / "out"
    assert write_render(results[0], out) is True
    assert write_render(results[1], out, force=True) is True
    assert not out.is_symlink() and seen(out) == NEW
    assert siblings(out) == set(), "the swap left a temp folder or a version"


def test_without_the_exchange_out_is_a_link_to_a_complete_version(
    tmp_path: Path, no_exchange: list[int], results: tuple[RenderResult, ...]
) -> None:
    out = tmp_path / "out"
    assert write_render(results[0], out) is True
    assert no_exchange == [2], "a new folder probes RENAME_EXCHANGE once"
    target = os.readlink(out)
    assert VERSION.fullmatch(target), target  # a bare sibling name: the link survives a moved parent
    assert seen(out) == OLD
    assert Manifest.read(out).cluster == "dgx-pod"  # what `check` and the other consumers read first
    assert oct((out / "slurm/slurmdbd.conf").stat().st_mode & 0o777) == "0o600"
    assert oct((out / "health/dgx.sh").stat().st_mode & 0o777) == "0o755"
    assert write_render(results[0], out) is False and os.readlink(out) == target

    assert write_render(results[1], out, force=True) is True
    assert seen(out) == NEW and os.readlink(out) != target
    # the replaced version stays for readers that resolved `out` before the swap, until the next render
    assert siblings(out) == {target, os.readlink(out)} and seen(tmp_path / target) == OLD
    assert write_render(results[1], out, force=True) is False
    assert siblings(out) == {os.readlink(out)} and seen(out) == NEW


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP])
def test_a_real_folder_moves_to_the_link_layout_where_the_exchange_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, results: tuple[RenderResult, ...], code: int
) -> None:
    out = tmp_path / "out"
    write_render(results[0], out)  # this machine's filesystem swaps: a real folder
    assert out.is_dir() and not out.is_symlink()
    monkeypatch.setattr(writer, "_renameat2", lambda a, b, flags: code)
    assert write_render(results[1], out, force=True) is True
    assert out.is_symlink() and seen(out) == NEW
    (old,) = siblings(out) - {os.readlink(out)}
    assert VERSION.fullmatch(old) and seen(tmp_path / old) == OLD


def test_another_exchange_error_is_reported_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, results: tuple[RenderResult, ...]
) -> None:
    out = tmp_path / "out"
    write_render(results[0], out)
    monkeypatch.setattr(writer, "_renameat2", lambda a, b, flags: errno.EACCES)
    with pytest.raises(ClusterforgeError, match=r"cannot write the render there \(Permission denied"):
        write_render(results[1], out, force=True)
    assert not out.is_symlink() and seen(out) == OLD and siblings(out) == set()


def test_a_symlink_of_the_user_is_followed(tmp_path: Path, no_exchange: list[int], results: tuple[RenderResult, ...]) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "render").symlink_to("data/out")
    write_render(results[0], tmp_path / "render")
    assert os.readlink(tmp_path / "render") == "data/out", "the user's link was replaced"
    assert VERSION.fullmatch(os.readlink(tmp_path / "data" / "out")) and seen(tmp_path / "render") == OLD


# ----------------------------------------------------------------------------- leftovers


def _leftovers(parent: Path) -> tuple[set[str], set[str]]:
    """Leftovers of killed renders of ``out`` (ours), and look-alikes that are not (kept)."""
    ours = {".out.new-ab12cd_9", ".out.link-x1y2z3", ".out.v-0123456789ab-qq7"}
    theirs = {".other.new-ab12cd_9", ".out.newer", "out.new-ab12cd_9", ".out.v-xyz-1", ".out.new-AB"}
    for name in ours | theirs:
        if "link" in name:
            (parent / name).symlink_to(".out.v-0123456789ab-qq7")
        else:
            (parent / name).mkdir()
            (parent / name / "slurm.conf").write_text("half written\n")
    return ours, theirs


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no-exchange"])
def test_the_next_render_removes_what_killed_renders_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, results: tuple[RenderResult, ...], exchange: bool
) -> None:
    if not exchange:
        monkeypatch.setattr(writer, "_renameat2", lambda a, b, flags: errno.EINVAL)
    out = tmp_path / "out"
    write_render(results[0], out)
    current = siblings(out)
    ours, theirs = _leftovers(tmp_path)
    assert write_render(results[0], out) is False  # even a render that changes nothing cleans up
    assert not ours & siblings(out) and siblings(out) == current | theirs
    assert seen(out) == OLD
    for name in theirs:
        assert (tmp_path / name / "slurm.conf").read_text() == "half written\n"


def test_a_render_in_progress_keeps_its_temporaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, results: tuple[RenderResult, ...]
) -> None:
    """Another render holds the lock: its temp folders are not leftovers. This one waits, then says so."""
    out = tmp_path / "out"
    write_render(results[0], out)
    ours, _ = _leftovers(tmp_path)
    monkeypatch.setattr(writer, "LOCK_WAIT_S", 0.3)
    fd = os.open(tmp_path / ".out.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(ClusterforgeError, match=r"another render of this folder is still running"):
            write_render(results[1], out, force=True)
    finally:
        os.close(fd)
    assert ours <= siblings(out) and seen(out) == OLD


# ----------------------------------------------------------------------------- kills


def _fork(body: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        code = 0
        try:
            body()
        except BaseException:
            code = 3
        os._exit(code)
    return pid


def _assert_cleaned_by_next_render(out: Path, result: RenderResult, expected: dict[str, bytes]) -> None:
    write_render(result, out, force=True)
    assert seen(out) == expected
    names = siblings(out)
    assert all(VERSION.fullmatch(n) for n in names), names  # no .new-/.link- left
    assert len(names) <= 2, names  # the current version and the one it replaced


def test_random_kills_leave_the_old_or_the_new_tree(
    tmp_path: Path, no_exchange: list[int], results: tuple[RenderResult, ...]
) -> None:
    """48 children render the two trees over and over into one folder; each is SIGKILLed at a
    random time (starting where the one before it was killed, leftovers and all)."""
    old, new = results
    out = tmp_path / "out"
    write_render(old, out)
    rng = random.Random(15)
    outcomes: list[str] = []
    left = 0

    def loop() -> None:
        while True:
            write_render(new, out, force=True)
            write_render(old, out, force=True)

    for _ in range(48):
        pid = _fork(loop)
        time.sleep(rng.uniform(0.002, 0.25))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "the child died on its own"
        tree = seen(out)
        assert tree in (OLD, NEW), f"kill {len(outcomes) + 1}: {out} shows neither the old nor the new tree"
        outcomes.append("old" if tree == OLD else "new")
        left += any(not VERSION.fullmatch(n) for n in siblings(out))
    assert {"old", "new"} <= set(outcomes), outcomes
    assert left >= 1, "no kill landed while a render had temporaries out"
    _assert_cleaned_by_next_render(out, new, NEW)


_STEPS = ("fsync", "rename", "replace", "symlink", "unlink")


def _kill_at(step: int) -> Callable[[], None]:
    """A child body that SIGKILLs itself just before its ``step``-th filesystem step."""
    def arm() -> None:
        count = 0
        for name in _STEPS:
            real = getattr(os, name)

            def wrapped(*a: object, _real: Callable[..., object] = real, **k: object) -> object:
                nonlocal count
                count += 1
                if count == step:
                    os.kill(os.getpid(), signal.SIGKILL)
                return _real(*a, **k)

            setattr(os, name, wrapped)
    return arm


def test_a_kill_at_each_step_of_the_move_to_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, results: tuple[RenderResult, ...]
) -> None:
    """A real folder from a filesystem that swapped, rendered again where the exchange is refused:
    a SIGKILL before each of its fsyncs, renames and symlinks in turn. Every kill leaves the old or
    the new tree but one: between renaming the folder aside and renaming the link into its place
    (the window writer.py documents) ``out`` is missing, with both complete versions beside it.
    Each time the next render writes ``out`` and removes what the kill left."""
    old, new = results
    states: list[str] = []
    for step in range(1, 200):
        out = tmp_path / f"s{step}" / "out"
        out.parent.mkdir()
        monkeypatch.setattr(writer, "_renameat2", _REAL_RENAMEAT2)
        write_render(old, out)
        assert out.is_dir() and not out.is_symlink()
        monkeypatch.setattr(writer, "_renameat2", lambda a, b, flags: errno.EINVAL)
        arm = _kill_at(step)

        def body(arm: Callable[[], None] = arm, out: Path = out) -> None:
            arm()
            write_render(new, out, force=True)

        _, status = os.waitpid(_fork(body), 0)
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0 and seen(out) == NEW
            break
        assert os.WTERMSIG(status) == signal.SIGKILL
        tree = seen(out)
        if tree is None:
            states.append("missing")
            assert not os.path.lexists(out)
            versions = [seen(out.parent / n) for n in sorted(siblings(out)) if VERSION.fullmatch(n)]
            assert len(versions) == 2 and OLD in versions and NEW in versions
        else:
            assert tree in (OLD, NEW), f"killed before step {step}: {out} shows neither tree"
            states.append("old" if tree == OLD else "new")
        _assert_cleaned_by_next_render(out, new, NEW)
        shutil.rmtree(out.parent)
    else:
        pytest.fail("the render never finished")
    # a kill before each file's and folder's fsync, the rename of the new version, the link: the
    # old tree; before the link's rename: nothing; before the last fsync: the new tree
    assert len(states) >= 20, states
    assert states == ["old"] * (len(states) - 2) + ["missing", "new"], states


# ----------------------------------------------------------------------------- whose folder


def _render_cli(spec: str, out: Path, *extra: str) -> tuple[int, str]:
    return run_cli("render", str(EXAMPLES / spec), "--out", str(out), *extra)


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no-exchange"])
def test_another_clusters_render_is_refused_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    if not exchange:
        monkeypatch.setattr(writer, "_renameat2", lambda a, b, flags: errno.EINVAL)
    out = tmp_path / "out"
    code, text = _render_cli("onprem-dgx.yaml", out)
    assert code == 0 and seen(out) == OLD, text
    before, beside = snapshot(out), siblings(out)
    code, text = _render_cli("p5-training.yaml", out)
    flat = " ".join(text.split())
    assert code == 2 and "Traceback" not in text, text
    assert f"--out {str(out)!r} holds the render of cluster 'dgx-pod'" in flat, flat
    assert "not of cluster 'p5-training' that this spec renders" in flat
    assert "or pass --force to replace them" in flat
    assert snapshot(out) == before and siblings(out) == beside, "a refused render changed the folder"

    code, text = _render_cli("p5-training.yaml", out, "--force")
    assert code == 0 and seen(out) == NEW, text


def test_a_folder_without_a_manifest_is_refused_without_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("mine\n")
    (out / "sub" / "data").write_text("also mine\n")
    before = snapshot(out)
    code, text = _render_cli("onprem-dgx.yaml", out)
    flat = " ".join(text.split())
    assert code == 2 and "Traceback" not in text, text
    assert f"--out {str(out)!r} holds files ('notes.txt', 'sub') but no manifest.json" in flat, flat
    assert "choose an empty or new folder, or pass --force to replace what it holds" in flat
    assert snapshot(out) == before and siblings(out) == set()

    code, text = _render_cli("onprem-dgx.yaml", out, "--force")
    assert code == 0 and seen(out) == OLD, text


@pytest.mark.parametrize(
    ("text", "words"),
    [("{not json", "cannot be read"), (json.dumps({"format": 2}), "names no cluster"), ("[1]", "names no cluster")],
)
def test_a_manifest_that_names_no_cluster_is_refused(tmp_path: Path, text: str, words: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(text)
    code, msg = _render_cli("onprem-dgx.yaml", out)
    assert code == 2 and words in msg and "--force" in msg, msg
    assert (out / "manifest.json").read_text() == text and sorted(p.name for p in out.iterdir()) == ["manifest.json"]


def test_an_empty_or_new_folder_and_our_own_render_are_written(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        code, text = _render_cli("onprem-dgx.yaml", out)
        assert code == 0 and seen(out) == OLD, text
    out = tmp_path / "own"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"format": 1, "cluster": "dgx-pod"}))  # an older render of it
    (out / "stale.conf").write_text("from the older render\n")
    code, text = _render_cli("onprem-dgx.yaml", out)
    assert code == 0 and seen(out) == OLD, text


def test_inventory_refuses_another_clusters_render_folder_without_force(tmp_path: Path) -> None:
    inv, render = tmp_path / "inv", tmp_path / "inv.render"  # the inventory's render goes beside it
    code, text = _render_cli("p5-training.yaml", render)
    assert code == 0, text
    before = snapshot(render)
    code, text = run_cli("inventory", str(EXAMPLES / "onprem-dgx.yaml"), "--out", str(inv))
    flat = " ".join(text.split())
    assert code == 2 and f"--out {str(render)!r} holds the render of cluster 'p5-training'" in flat, flat
    assert "--force" in flat and snapshot(render) == before and not inv.exists()
    code, text = run_cli("inventory", str(EXAMPLES / "onprem-dgx.yaml"), "--out", str(inv), "--force")
    assert code == 0 and seen(render) == OLD, text


def test_an_inventory_names_the_link_not_the_version(tmp_path: Path, no_exchange: list[int]) -> None:
    out = tmp_path / "render"
    write_render(_result("local"), out)
    assert out.is_symlink()
    generate_inventory(resolve_file(EXAMPLES / "local.yaml"), out_dir=tmp_path / "inv", manifest_dir=out)
    allv = yaml.safe_load((tmp_path / "inv" / "group_vars" / "all" / "clusterforge.yml").read_text())
    assert allv["clusterforge_manifest_dir"] == str(out)
