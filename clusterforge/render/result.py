"""What a render produces: files with their place on the nodes, and the typed manifest.

This is the contract between the renderer and everything downstream (``check``, ``plan``,
``diff``, the Ansible roles): they read a ``RenderResult`` or the ``manifest.json`` it writes
(``clusterforge.render.manifest.Manifest``), and never format or parse a config line themselves.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from clusterforge.render.manifest import ConfigRecords, Expect, Manifest, ManifestFile, SlurmLayout
from clusterforge.render.restart import on_change_for


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class RenderedFile(NamedTuple):
    """One rendered file.

    ``name`` is its path inside the output folder (``slurm/slurm.conf``, ``nccl/gpu.conf``);
    ``node_path`` where it goes on the nodes; ``groups`` the node groups that get it; ``daemons``
    the services that read it (the restart policy and the Ansible handlers use them).
    """

    name: str
    content: str
    node_path: str
    groups: tuple[str, ...]
    daemons: tuple[str, ...] = ()
    mode: str = "0644"
    secret_refs: tuple[str, ...] = ()
    owner: str = "root"
    daemon_hosts: tuple[tuple[str, str], ...] = ()  # (daemon, hostlist) of the hosts that run it for this file
    kept_on: tuple[str, ...] = ()  # node groups whose hosts keep the file after its first install

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()

    def manifest_entry(self) -> ManifestFile:
        return ManifestFile(
            name=self.name,
            node_path=self.node_path,
            owner=self.owner,
            group=self.owner,
            mode=self.mode,
            node_groups=self.groups,
            daemons=self.daemons,
            sha256=self.sha256,
            secret_refs=self.secret_refs,
            on_change=on_change_for(self.name, self.daemons, dict(self.daemon_hosts)),
            kept_on=self.kept_on,
        )


class RenderResult(NamedTuple):
    cluster: str
    slurm_version: str
    files: dict[str, RenderedFile]
    slurm: SlurmLayout
    config: ConfigRecords
    expect: Expect
    notes: tuple[str, ...] = ()

    def manifest(self) -> Manifest:
        return Manifest(
            cluster=self.cluster,
            slurm_version=self.slurm_version,
            files=tuple(self.files[k].manifest_entry() for k in sorted(self.files)),
            slurm=self.slurm,
            config=self.config,
            expect=self.expect,
            notes=self.notes,
        )
