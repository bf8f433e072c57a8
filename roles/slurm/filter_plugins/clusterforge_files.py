"""``render_sha256``: the SHA-256 of rendered files in the render folder, on the Ansible host.

tasks/config.yml copies a rendered file only when the node's copy differs from it (bytes, owner,
group or mode), instead of asking the node about each file in turn; this gives the render side of
that comparison in one call, bytes as they are (no text decoding), without reading anything into
a variable.
"""

from __future__ import annotations

import hashlib
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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"render_sha256": render_sha256}
