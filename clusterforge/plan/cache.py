"""The plans of ``clusterforge diff``'s sides, kept between runs in the user cache folder.

A diff plans both sides of every changed spec, and the base side (``main``'s merge-base) is
usually the same commit run after run: re-running its Pulumi program under mocks is most of a
repeated diff's time. An entry holds what the diff reads of a plan (its ``resources``) under a
key that is a sha256 over everything the plan depends on:

* the spec: its bytes and the files it names relative to itself (the side's fingerprint,
  :func:`clusterforge.diff.sides._fingerprint`: spec bytes, then path and bytes of each facts and
  topology file it references);
* the facts folder the side resolved with (``--facts`` or the spec's ``facts_dir``): the relative
  path and bytes of each fact file, sorted;
* the options that shape the plan (the spec path shown, the stack name, no rendering);
* what the program reads from the clock (``infra.node_group.clock_inputs``: a capacity block's
  schedule changes when the block starts and ends);
* the code version (:func:`code_version`): every file of the ``clusterforge`` and ``infra``
  packages and the ``templates`` folder, the installed ``pulumi`` and ``pulumi_aws`` versions and
  the Python version.

Entries live in ``<cache root>/plans/`` (:mod:`clusterforge.cache`: ``$CLUSTERFORGE_CACHE_DIR``,
else ``$XDG_CACHE_HOME/clusterforge``, else ``~/.cache/clusterforge``; ``CLUSTERFORGE_NO_CACHE=1``
turns it off), one ``<key>.json`` each. They are written whole (temporary file, then
``os.replace``), so a reader never sees half an entry; an entry that does not parse or does not
carry its own key is deleted and counts as a miss. Each write keeps the :data:`KEEP` most recently
used entries (a hit refreshes the entry's time) and deletes the rest. Deleting the folder only
costs time: an entry is never an input, and a hit returns exactly what the miss computed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterforge.cache import cache_dir

if TYPE_CHECKING:
    from clusterforge.resolve import ResolvedCluster

#: Entries kept (the most recently used); a diff of every example writes about a dozen.
KEEP = 64
#: Bumped when an entry's layout or the key's composition changes.
FORMAT = "clusterforge-plan-cache/1"
#: The project checkout: the Pulumi program (``infra/``) and the templates sit next to the package.
ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("clusterforge", "infra", "templates")
DISTRIBUTIONS = ("pulumi", "pulumi_aws")
#: A temporary file this old is a killed writer's, not one being written.
STALE_TMP_S = 3600


def _distribution_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def code_version() -> str:
    """A digest of the code a plan comes from: the files of :data:`CODE_FOLDERS` (path and bytes;
    ``__pycache__`` left out), the installed :data:`DISTRIBUTIONS`' versions and Python's."""
    h = hashlib.sha256(FORMAT.encode())
    for folder in CODE_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(ROOT / folder):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = Path(dirpath) / name
                h.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(path.read_bytes()).digest())
    for dist in DISTRIBUTIONS:
        h.update(f"{dist}=={_distribution_version(dist)}\0".encode())
    h.update(sys.version.encode())
    return h.hexdigest()


def facts_digest(folder: Path | None) -> str | None:
    """The fact files a resolution reads from ``folder`` (``<folder>/<host>/<fact file>``): their
    paths relative to it and their bytes, sorted; ``None`` without a folder."""
    if folder is None:
        return None
    from clusterforge.catalog.facts.load import FACT_FILES

    h = hashlib.sha256()
    files = sorted(f for name in FACT_FILES for f in folder.glob(f"*/{name}") if f.is_file())
    for f in files:
        h.update(f.relative_to(folder).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def clock_inputs(rc: ResolvedCluster) -> list[str]:
    """What the Pulumi program reads from the clock for this cluster, as key material (empty
    without capacity blocks: their spec is the only one whose plan changes with the time)."""
    if not any(g.cloud is not None and g.cloud.capacity.type == "capacity_block" for g in rc.spec.node_groups):
        return []
    from clusterforge.plan.mocks import infra_root

    root = str(infra_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    node_group = importlib.import_module("infra.node_group")  # by name: mypy stays out of infra
    return [repr(x) for x in node_group.clock_inputs(rc)]


def plan_key(*, fingerprint: str, facts: str | None, options: Mapping[str, Any], clock: list[str]) -> str:
    """The key of one side's plan (see the module docs for what each part covers)."""
    material = {
        "format": FORMAT,
        "spec": fingerprint,
        "facts": facts,
        "options": dict(options),
        "clock": clock,
        "code": code_version(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


class PlanCache:
    """``<key>.json`` files in one folder; ``folder=None`` is a cache that keeps nothing."""

    def __init__(self, folder: Path | None, *, keep: int = KEEP) -> None:
        self.folder = folder
        self.keep = keep

    @classmethod
    def default(cls) -> PlanCache:
        return cls(cache_dir("plans"))

    def _path(self, key: str) -> Path | None:
        return self.folder / f"{key}.json" if self.folder is not None else None

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        if path is None:
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:  # not there (the usual miss), or unreadable
            return None
        try:
            entry = json.loads(text)
            ok = isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("resources"), dict)
        except ValueError:  # not JSON (a truncated or foreign file)
            ok = False
        if not ok:
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used: kept longest by the pruning
        resources: dict[str, Any] = entry["resources"]
        return resources

    def put(self, key: str, resources: dict[str, Any]) -> None:
        """Store an entry (atomically), then prune to the :attr:`keep` newest; never raises."""
        path = self._path(key)
        if path is None:
            return
        text = json.dumps({"key": key, "resources": resources}, separators=(",", ":"))
        if json.loads(text)["resources"] != resources:  # not plain JSON data: a hit could differ
            return
        tmp = None
        try:
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=path.parent, prefix=".tmp-", suffix=".json", delete=False
            ) as f:
                tmp = f.name
                f.write(text)
            os.replace(tmp, path)
        except OSError:  # a full or read-only disk: the plan is still right, only not kept
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return
        self.prune(keep_path=path)

    def prune(self, *, keep_path: Path | None = None) -> None:
        """Delete all but the :attr:`keep` most recently used entries (``keep_path``, the one just
        written, always stays: file times are coarser than a quick run of writes)."""
        if self.folder is None:
            return
        entries = []
        for p in self.folder.glob("*.json"):
            if p.name.startswith("."):  # a temporary file: a writer's, or one a killed writer left
                with contextlib.suppress(OSError):
                    if time.time() - p.stat().st_mtime > STALE_TMP_S:
                        p.unlink()
                continue
            with contextlib.suppress(OSError):
                entries.append((p == keep_path, p.stat().st_mtime_ns, p.name, p))
        entries.sort(reverse=True)
        for *_, p in entries[self.keep :]:
            with contextlib.suppress(OSError):
                p.unlink()
