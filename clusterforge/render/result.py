"""What a render produces: files with their place on the nodes, and what the daemons should show.

This is the contract between the renderer and everything downstream (``check``, ``plan``,
``diff``, the Ansible ``slurm``/``nccl`` roles): they read a ``RenderResult`` or the
``manifest.json`` it writes, and never format a config line themselves.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RenderedFile:
    """One rendered file.

    ``name`` is its path inside the output folder (``slurm/slurm.conf``, ``nccl/gpu.conf``);
    ``node_path`` where it goes on the nodes; ``groups`` the node groups that get it; ``daemons``
    the services that read it (the diff's impact analysis and the Ansible handlers use them).
    """

    name: str
    content: str
    node_path: str
    groups: tuple[str, ...]
    daemons: tuple[str, ...] = ()
    mode: str = "0644"
    secret_refs: tuple[str, ...] = ()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "node_path": self.node_path,
            "groups": list(self.groups),
            "daemons": list(self.daemons),
            "mode": self.mode,
            "sha256": self.sha256,
            "secret_refs": list(self.secret_refs),
        }


@dataclass(frozen=True)
class RenderResult:
    cluster: str
    slurm_version: str
    files: dict[str, RenderedFile]
    expect: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def manifest(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "slurm_version": self.slurm_version,
            "files": [self.files[k].manifest_entry() for k in sorted(self.files)],
            "expect": self.expect,
            "notes": list(self.notes),
        }
