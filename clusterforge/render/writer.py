"""Write a render to a folder atomically: whoever reads ``out`` sees the old set of files or the new one.

Two layouts, chosen by what the filesystem's rename can do:

* ``out`` a real folder (local filesystems: ext4, xfs, btrfs, tmpfs). The new tree is written and
  fsynced into a sibling temp folder ``.out.new-*`` and swapped with ``out`` in one
  ``renameat2(RENAME_EXCHANGE)``; the old tree, now in the temp folder, is removed.
* ``out`` a symlink to a versioned sibling ``.out.v-<sha256 prefix>-<id>``, where that exchange is
  missing (no ``renameat2`` in libc) or refused (EINVAL, ENOSYS, EOPNOTSUPP: NFS, EFS, some FUSE
  filesystems). The new tree becomes a new versioned folder and a temp symlink to it is renamed
  over ``out``: rename(2) of a symlink over a symlink is one atomic step on POSIX filesystems, and
  one RENAME call that the server carries out atomically on NFS, so a lookup of ``out`` resolves to
  one complete version or the other. Versions are siblings of ``out`` (not ``out.d/``): the link
  is a bare name, so it survives the parent being moved or mounted at another path, and every
  rename stays inside one directory. The version just replaced is kept until the next render
  starts: a reader that resolved ``out`` just before the swap, or an NFS client whose cached lookup
  still names the old version, reads a complete old set rather than ENOENT.

A new ``out`` on a filesystem without the exchange starts as a symlink (the exchange is probed
inside the temp folder), so it never needs migrating. A real folder there (left by an older
clusterforge, or copied there) is migrated once: the new version is written, then ``out`` is
renamed aside and the link renamed into its place. Nothing in POSIX replaces a folder with a
symlink in one step, so between those two renames ``out`` does not exist: a reader then gets "no
such folder" (an error, never a mix of two renders), and a render killed right there leaves
``out`` missing with both complete versions beside it; the next render removes them and writes
``out`` afresh.

Every render holds ``fcntl.flock`` on ``.out.lock`` beside ``out`` while it works, and first removes
what killed renders left: ``.out.new-*`` temp folders, ``.out.link-*`` temp links and versions
``out`` no longer points at. A lock rather than an age-and-pid guess: the kernel releases it when
its holder dies (SIGKILL too), so it never goes stale and no age has to be guessed; and Linux's NFS
client turns flock into NFS locks that the other clients see, where a pid means nothing across the
hosts that share a home folder. Under the lock no other render is writing for this ``out``, so
whatever matches those names is a leftover. (Where the filesystem has no locks at all, ENOLCK, the
render goes on unlocked and leaves leftovers alone.)

``out`` holding another cluster's ``manifest.json``, or files but no manifest, is refused unless
``force``: a render only ever replaces a render of its own cluster.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clusterforge.errors import ClusterforgeError
from clusterforge.render.result import RenderResult

MANIFEST = "manifest.json"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# the errors with which a kernel or filesystem says "no RENAME_EXCHANGE here" (NFS: EINVAL)
_NO_EXCHANGE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})
# how long a render waits for another render of the same folder before it gives up
LOCK_WAIT_S = 120.0
_SUFFIX = "[a-z0-9_]+"  # tempfile.mkdtemp's random part


def render_tree(result: RenderResult) -> dict[str, bytes]:
    """Relative path -> bytes of everything a render writes (manifest included)."""
    tree = {name: f.content.encode() for name, f in result.files.items()}
    tree[MANIFEST] = result.manifest().to_text().encode()
    return tree


def _read_tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _tree_hash(tree: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel in sorted(tree):
        h.update(rel.encode() + b"\0" + hashlib.sha256(tree[rel]).digest())
    return h.hexdigest()[:12]


# ------------------------------------------------------------------------ renameat2 (the seam)


@functools.cache
def _libc_renameat2() -> Any:
    import ctypes  # only when a folder is replaced: a first write into a new one needs no exchange

    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)  # glibc >= 2.28
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def _renameat2(a: Path, b: Path, flags: int) -> int:
    """0, or the errno of ``renameat2(a, b, flags)`` (ENOSYS when libc has no renameat2).

    The one place that calls the kernel: tests replace it to act as NFS does."""
    fn = _libc_renameat2()
    if fn is None:
        return errno.ENOSYS
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return 0
    import ctypes

    return ctypes.get_errno()


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one step; False where the filesystem cannot (then nothing moved)."""
    err = _renameat2(a, b, _RENAME_EXCHANGE)
    if err == 0:
        return True
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(b))


def _exchange_works(tmp: Path) -> bool:
    """Whether this filesystem swaps folders (tried on two empty folders inside the temp folder)."""
    a, b = tmp / ".probe-a", tmp / ".probe-b"
    a.mkdir()
    b.mkdir()
    try:
        return _exchange(a, b)
    finally:
        a.rmdir()
        b.rmdir()


# ------------------------------------------------------------------------ names of our siblings


def _version_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(name)}\.v-[0-9a-f]{{12}}-{_SUFFIX}")


def _version_of(out: Path) -> str | None:
    """The version folder ``out`` links to, when ``out`` is our symlink (else None)."""
    if not out.is_symlink():
        return None
    target = os.readlink(out)
    return target if _version_re(out.name).fullmatch(target) else None


def _locate(out: Path) -> Path:
    """``out`` made absolute, with the user's own symlinks followed and ours kept."""
    out = Path(os.path.abspath(out))
    for _ in range(40):  # the kernel's own bound on a symlink chain
        out = out.parent.resolve() / out.name
        if not out.is_symlink() or _version_of(out) is not None:
            return out
        out = Path(os.path.abspath(out.parent / os.readlink(out)))
    raise ClusterforgeError(f"--out {str(out)!r}: too many levels of symlinks; give the folder itself")


def _remove_leftovers(out: Path) -> None:
    """Remove what killed renders of ``out`` left beside it (call with the lock held)."""
    name, keep = out.name, _version_of(out)
    temp = re.compile(rf"\.{re.escape(name)}\.new-{_SUFFIX}")
    link = re.compile(rf"\.{re.escape(name)}\.link-{_SUFFIX}")
    version = _version_re(name)
    for entry in os.scandir(out.parent):
        if link.fullmatch(entry.name) and entry.is_symlink():
            os.unlink(entry.path)
        elif (temp.fullmatch(entry.name) or (version.fullmatch(entry.name) and entry.name != keep)) and entry.is_dir(
            follow_symlinks=False
        ):
            shutil.rmtree(entry.path)


@contextmanager
def _locked(out: Path) -> Iterator[bool]:
    """Hold the render lock of ``out``; yields False where the filesystem has no locks."""
    path = out.parent / f".{out.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                    raise ClusterforgeError(
                        f"--out {str(out)!r}: another render of this folder is still running (it holds "
                        f"{path}, pid {holder}) after {LOCK_WAIT_S:.0f} s; wait for it to finish or stop it, "
                        "then render again"
                    ) from None
                time.sleep(0.1)
            except OSError as exc:
                if exc.errno != errno.ENOLCK:
                    raise
                locked = False
                break
        if locked:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield locked
    finally:
        os.close(fd)  # releases the flock


# ------------------------------------------------------------------------ whose folder it is


def _refuse_foreign(out: Path, cluster: str) -> None:
    """Refuse a folder that is not empty and not a render of ``cluster``."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ClusterforgeError(f"--out {str(out)!r} is a file; give a folder")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    fix = "choose an empty or new folder, or pass --force to replace what it holds"
    manifest = out / MANIFEST
    if not manifest.is_file():
        raise ClusterforgeError(
            f"--out {str(out)!r} holds files ({', '.join(map(repr, entries[:3]))}"
            f"{', ...' if len(entries) > 3 else ''}) but no {MANIFEST}: it is not a clusterforge render, "
            f"so it is left alone; {fix}"
        )
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        other = data.get("cluster") if isinstance(data, dict) else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ClusterforgeError(
            f"--out {str(out)!r}: its {MANIFEST} cannot be read ({exc}), so whose render it is is not known "
            f"and the folder is left alone; {fix}"
        ) from None
    if other == cluster:
        return
    if not isinstance(other, str):
        raise ClusterforgeError(
            f"--out {str(out)!r}: its {MANIFEST} names no cluster (it was not written by clusterforge), so "
            f"the folder is left alone; {fix}"
        )
    raise ClusterforgeError(
        f"--out {str(out)!r} holds the render of cluster {other!r} ({MANIFEST}: cluster = {other!r}), not of "
        f"cluster {cluster!r} that this spec renders: writing here would replace the other cluster's files; "
        f"give cluster {cluster!r} its own folder (an empty or new one), or pass --force to replace them"
    )


# ------------------------------------------------------------------------ writing


def write_render(result: RenderResult, out: Path, *, force: bool = False) -> bool:
    """Write ``result`` to ``out``. Returns False when ``out`` already held identical bytes.

    A folder that cannot be written (read-only, a file in the way, no space), or that holds
    something else than a render of this cluster (without ``force``), is the user's to fix: a
    ``ClusterforgeError`` naming it and the reason, never a traceback."""
    try:
        return _write_render(result, out, force)
    except OSError as exc:
        raise ClusterforgeError(
            f"--out {str(out)!r}: cannot write the render there ({exc.strerror or exc}"
            f"{': ' + str(exc.filename) if exc.filename else ''}); choose a writable folder"
        ) from None


def _write_render(result: RenderResult, out: Path, force: bool) -> bool:
    tree = render_tree(result)
    out = _locate(out)
    if out.exists() and not out.is_dir():
        raise ClusterforgeError(f"--out {str(out)!r} is a file; give a folder")
    if not force:
        _refuse_foreign(out, result.cluster)  # before anything is created beside it
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out) as locked:
        if not force:
            _refuse_foreign(out, result.cluster)  # again: another render may have written it meanwhile
        if locked:
            _remove_leftovers(out)
        if out.is_dir() and _read_tree(out) == tree:
            return False
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
        try:
            symlinked = _version_of(out) is not None
            fresh = not symlinked and not os.path.lexists(out)
            # only a new `out` needs the probe: an existing folder finds out from the swap itself
            exchange = not symlinked and (not fresh or _exchange_works(tmp))
            _write_tree(result, tree, tmp)
            if fresh and exchange:
                os.rename(tmp, out)
            elif exchange and _exchange(tmp, out):
                shutil.rmtree(tmp)  # tmp now holds the previous output
            else:
                _link(tmp, out, tree, migrate=not symlinked and not fresh)
            _fsync_dir(out.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return True


def _write_tree(result: RenderResult, tree: dict[str, bytes], tmp: Path) -> None:
    for rel, data in sorted(tree.items()):
        dest = tmp / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        mode = result.files[rel].mode if rel in result.files else "0644"
        os.chmod(dest, int(mode, 8))
    os.chmod(tmp, 0o755)
    # the entries of every sub-folder, deepest first, then the top: what a crash keeps is then
    # what a kill keeps
    for d in sorted({tmp} | {(tmp / rel).parent for rel in tree}, key=lambda p: -len(p.parts)):
        _fsync_dir(d)


def _link(tmp: Path, out: Path, tree: dict[str, bytes], *, migrate: bool) -> None:
    """Point ``out`` at ``tmp``'s tree as a new version (the layout without RENAME_EXCHANGE)."""
    suffix = tmp.name.rsplit("-", 1)[1]
    version = out.parent / f".{out.name}.v-{_tree_hash(tree)}-{suffix}"
    os.rename(tmp, version)
    link = out.parent / f".{out.name}.link-{suffix}"
    os.symlink(version.name, link)  # relative: resolves wherever the parent is mounted
    _fsync_dir(out.parent)
    if migrate:
        # a real folder cannot be replaced by a symlink in one step: renamed aside as the previous
        # version (kept until the next render), then the link takes its place
        old = out.parent / f".{out.name}.v-{_tree_hash(_read_tree(out))}-{suffix}o"
        os.rename(out, old)
    os.replace(link, out)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
