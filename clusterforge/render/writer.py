"""Write a render to a folder atomically: readers see the old set of files or the new one.

The new tree is written (and fsynced) into a sibling temp folder, then swapped with the old one
in a single ``renameat2(RENAME_EXCHANGE)`` call, so a render killed at any point leaves the
previous output intact. Where the kernel or libc lacks RENAME_EXCHANGE, each file is replaced
with ``os.replace`` (atomic per file) and manifest.json last.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import tempfile
from pathlib import Path

from clusterforge.errors import ClusterforgeError
from clusterforge.render.result import RenderResult

MANIFEST = "manifest.json"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def render_tree(result: RenderResult) -> dict[str, bytes]:
    """Relative path -> bytes of everything a render writes (manifest included)."""
    tree = {name: f.content.encode() for name, f in result.files.items()}
    tree[MANIFEST] = result.manifest().to_text().encode()
    return tree


def _read_tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _exchange(a: Path, b: Path) -> bool:
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(rc == 0)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_render(result: RenderResult, out: Path) -> bool:
    """Write ``result`` to ``out``. Returns False when ``out`` already held identical bytes.

    A folder that cannot be written (read-only, a file in the way, no space) is the user's to fix:
    a ``ClusterforgeError`` naming it and the reason, never a traceback."""
    try:
        return _write_render(result, out)
    except OSError as exc:
        raise ClusterforgeError(
            f"--out {str(out)!r}: cannot write the render there ({exc.strerror or exc}"
            f"{': ' + str(exc.filename) if exc.filename else ''}); choose a writable folder"
        ) from None


def _write_render(result: RenderResult, out: Path) -> bool:
    tree = render_tree(result)
    out = out.resolve()
    if out.exists():
        if not out.is_dir():
            raise ClusterforgeError(f"--out {str(out)!r} is a file; give a folder")
        if any(out.iterdir()) and not (out / MANIFEST).is_file():
            raise ClusterforgeError(
                f"--out {str(out)!r} is not empty and holds no {MANIFEST}: it is not a clusterforge "
                "render, so it is left alone; choose an empty or new folder"
            )
        if _read_tree(out) == tree:
            return False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
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
        _fsync_dir(tmp)
        if not out.exists():
            os.rename(tmp, out)
        elif _exchange(tmp, out):
            shutil.rmtree(tmp)  # tmp now holds the previous output
        else:
            _replace_files(tmp, out, tree)
            shutil.rmtree(tmp, ignore_errors=True)
        _fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def _replace_files(tmp: Path, out: Path, tree: dict[str, bytes]) -> None:
    names = sorted(tree, key=lambda n: n == MANIFEST)  # manifest last: it names the complete set
    for rel in names:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / rel, out / rel)
    for old in _read_tree(out):
        if old not in tree:
            (out / old).unlink()
