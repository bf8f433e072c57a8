"""Which of the render's files and folders a host lacks or has otherwise: what a role installs.

The slurm, nccl and dcgm roles copy rendered files from the render folder to the hosts. Each host's
copies are read once (the slurm role's own read, or site.yml's Facts play for the files other roles
write: ``{type, owner, group, mode, sha256}`` per path), and the copy loops over what differs only.
Before, the slurm role looped over every file with a ``when``, and Ansible templated that ``when``
(and, through it, every file's hash and the node's read) once per item and host: 45 items a host at
6 hosts, in an idempotent re-run that copies nothing. The roles reach these through their filter
plugins (``roles/*/filter_plugins/clusterforge_files.py``); the functions live here, once.

* ``render_sha256``: the SHA-256 of rendered files in the render folder, on the Ansible host, bytes
  as they are (no text decoding), without reading anything into a variable.
* ``files_to_copy`` and ``dirs_to_make``: of the files and folders a role manages, those whose copy
  on the node is missing or differs from what the render wants.
* ``manifest_files``: a host's entries of the manifest, those of its node group whose name a role's
  pattern matches: what each role's file list variable (``__slurm_files``, ...) names.

Standard library only: Ansible imports the filter plugins in its controller process (and
``playbooks/callback_plugins/clusterforge_preload.py`` imports this there before the forks).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any


def render_sha256(folder: str, names: Any) -> dict[str, str | None]:
    """``{name: sha256 hex}`` for each of ``names`` under ``folder``; None for a file that is missing
    (the copy then runs and reports it, as it always did)."""
    out: dict[str, str | None] = {}
    for name in names or []:
        path = Path(str(folder)) / str(name)
        try:
            out[str(name)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            out[str(name)] = None
    return out


def _mode(mode: Any) -> str:
    """A file mode as the node read reports it ("0644"), from the manifest's "0644" or 420."""
    return "%04o" % (int(mode, 8) if isinstance(mode, str) else int(mode))


def files_to_copy(entries: Any, node_paths: Any, folder: str, node_group: str) -> list[Any]:
    """The manifest entries the copy must install on this host, in their order: missing on the
    node, or differing from the render folder's file in bytes, owner, group or mode. A file this
    host's group keeps (``kept_on``: a program on the host owns its copy) only when it is missing."""
    entries = list(entries or [])
    have = dict(node_paths or {})
    present = [e for e in entries if e["node_path"] in have]
    sums = render_sha256(folder, [e["name"] for e in present])

    def wanted(e: Any) -> dict[str, Any]:
        return {"type": "file", "owner": e["owner"], "group": e["group"], "mode": _mode(e["mode"]),
                "sha256": sums[e["name"]]}

    def differs(e: Any) -> bool:
        want = wanted(e)
        got = have[e["node_path"]]  # may hold more than the comparison needs (a "+PATH" read's text)
        return {k: got.get(k) for k in want} != want

    return [e for e in entries if e["node_path"] not in have
            or (node_group not in (e.get("kept_on") or []) and differs(e))]


def dirs_to_make(dirs: Any, node_paths: Any, mode: str = "0755") -> list[Any]:
    """The folders to create or fix, in their order: those the node lacks, or has with another
    owner, group or mode. An item is ``{path, owner}`` (the group is the owner) or a path that root
    owns."""
    have = dict(node_paths or {})
    out = []
    for d in dirs or []:
        path, owner = (d["path"], d["owner"]) if isinstance(d, dict) else (d, "root")
        if have.get(path) != {"type": "directory", "owner": owner, "group": owner, "mode": mode}:
            out.append(d)
    return out


def manifest_files(manifest: Any, node_group: str, pattern: str) -> list[Any]:
    """The manifest's ``files`` entries for ``node_group`` whose name ``pattern`` matches (``re.match``,
    as Ansible's ``match`` test), in the manifest's order: what
    ``files | selectattr('node_groups', 'contains', group) | selectattr('name', 'match', pattern) | list``
    gives.

    ``manifest`` is the manifest's JSON text (what the roles pass: site.yml's once-read keeps it),
    parsed once per text in this process, or its ``files`` list. Given the parsed manifest instead,
    each entry's keys would be read through ansible-core's lazy templating, for every host and task
    whose template names the list; Jinja's ``selectattr`` also dispatches each entry's test through
    ansible-core's plugin wrapper, twice per entry (``benchmarks/manifest_read.py``). The entries
    returned are copies, so the parse kept for the next host is never changed."""
    files = _files_of(str(manifest)) if isinstance(manifest, str) else list(manifest or [])
    rx = re.compile(str(pattern))
    return [dict(e) for e in files if node_group in e["node_groups"] and rx.match(e["name"])]


@functools.lru_cache(maxsize=8)
def _files_of(text: str) -> tuple[dict[str, Any], ...]:
    """The ``files`` of a manifest's JSON text: the same text for every host of a run, parsed once."""
    return tuple(json.loads(text)["files"])
