"""``manifest.json``: the typed contract between the renderer and every consumer.

One pydantic model, written by ``clusterforge render`` and read by the same class in the real-daemon
check (``expect``), the diff (``config`` records and each file's ``on_change``) and the Ansible roles
(``files``, ``slurm``, and the restart policy through their filter plugin). Nobody downstream reads
rendered config text back: what they need is here, as data.

Sections:

* ``files``: per rendered file its node path, owner, group and mode, the node groups that get it, the
  daemons that read it, its SHA-256, the secrets it references and what a change of it requires on a
  running cluster (``on_change``, from ``clusterforge.render.restart``).
* ``slurm``: the paths and users the Slurm role creates (state, spool, logs, slurmdbd's storage).
* ``config``: the structured records the Slurm files were printed from (``slurm.conf`` globals, node
  lines, partitions; ``gres.conf`` lines; topology), which the diff compares key by key.
* ``expect``: what the real daemons must show for this render (``clusterforge check``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from clusterforge.errors import ClusterforgeError
from clusterforge.render import jsonfile

MANIFEST_NAME = "manifest.json"
FORMAT = 2


class ManifestError(ClusterforgeError):
    """manifest.json is missing, unreadable or not of this clusterforge's format."""


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Action = Literal["none", "reconfigure", "restart"]


class OnChange(_M):
    """What a change of one file requires on a running cluster (the file-level rule).

    ``by_key`` files (``slurm.conf``, ``gres.conf``) are classified key by key from ``config``;
    their ``action``/``restart`` here is the most disruptive a change of them can need.
    """

    action: Action
    restart: tuple[str, ...] = Field((), description="daemons to restart, in restart order")
    hosts: dict[str, str] = Field(
        {}, description="per restarted daemon (and 'reconfigure'), the hosts that run it (a Slurm hostlist)"
    )
    by_key: bool = False
    why: str
    source: str


class ManifestFile(_M):
    name: str = Field(description="path inside the render folder, e.g. slurm/slurm.conf")
    node_path: str = Field(description="where the file goes on the nodes")
    owner: str
    group: str
    mode: str
    node_groups: tuple[str, ...]
    daemons: tuple[str, ...] = Field(description="services that read the file")
    sha256: str
    secret_refs: tuple[str, ...] = ()
    on_change: OnChange
    kept_on: tuple[str, ...] = Field(
        (),
        description="node groups where a program on the host keeps the file after its first install "
        "(the controller's cloud agent rewrites topology.conf from EC2): Ansible installs it there only "
        "when it is missing",
    )

    @model_serializer(mode="wrap")
    def _omit_empty_kept_on(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # most files are kept by nobody: leave the key out, so manifests only show where it applies
        data: dict[str, Any] = handler(self)
        if not data.get("kept_on"):
            data.pop("kept_on", None)
        return data


class SlurmdbdLayout(_M):
    storage_user: str
    storage_host: str
    database: str
    log_file: str


class SlurmLayout(_M):
    """What the Slurm role creates and runs the daemons as (taken from the settings rendered)."""

    user: str
    state_save_location: str
    slurmd_spool_dir: str
    slurmctld_log_file: str
    slurmd_log_file: str
    slurmdbd: SlurmdbdLayout | None = None
    mariadb_datadir: str | None = None
    """the controller-local MariaDB's datadir when it lives on the state volume (slurm.state_storage
    ebs); None: the package's own (/var/lib/mysql)"""


class NodeRecord(_M):
    """One ``NodeName=`` line: ``names`` is its hostlist, ``params`` every other key in order."""

    group: str
    names: str
    params: dict[str, str]


class GresRecord(_M):
    group: str
    names: str
    lines: tuple[dict[str, str], ...] = Field(description="per gres.conf line its keys but NodeName")


class SwitchRecord(_M):
    name: str
    nodes: str | None = None
    switches: str | None = None


class BlockRecord(_M):
    name: str
    nodes: str


class ConfigRecords(_M):
    """The structured data each Slurm file was printed from."""

    slurm_globals: dict[str, tuple[str, ...]] = Field(description="slurm.conf key -> values (in order)")
    nodes: tuple[NodeRecord, ...]
    partitions: dict[str, dict[str, str]]
    gres_globals: dict[str, str] = {}
    gres: tuple[GresRecord, ...] = ()
    topology_plugin: str | None = None
    switches: tuple[SwitchRecord, ...] = ()
    blocks: tuple[BlockRecord, ...] = ()
    block_sizes: tuple[int, ...] = ()


class ExpectNode(_M):
    names: str
    group: str
    cpus: int
    boards: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    real_memory: int
    gres: str | None
    gpu_count: int
    gpu_type: str | None
    gpu_files: str | None
    gpu_vendor: str | None = None
    features: tuple[str, ...]
    weight: int | None


class ExpectPartition(_M):
    name: str
    nodes: str
    default: bool
    max_time: str


class ExpectController(_M):
    name: str
    address: str | None


class ExpectTopology(_M):
    plugin: str | None
    switches: tuple[SwitchRecord, ...] = ()
    blocks: tuple[BlockRecord, ...] = ()


class Expect(_M):
    """What ``scontrol show node/partition/topology`` must report for this render."""

    controllers: tuple[ExpectController, ...]
    nodes: tuple[ExpectNode, ...]
    partitions: tuple[ExpectPartition, ...]
    topology: ExpectTopology

    @property
    def controller(self) -> ExpectController:
        return self.controllers[0]


class Manifest(_M):
    format: Literal[2] = 2  # FORMAT; bump both when a consumer could misread the old shape
    cluster: str
    slurm_version: str
    files: tuple[ManifestFile, ...]
    slurm: SlurmLayout
    config: ConfigRecords
    expect: Expect
    notes: tuple[str, ...] = ()

    def file(self, name: str) -> ManifestFile | None:
        return next((f for f in self.files if f.name == name), None)

    def to_text(self) -> str:
        """The bytes ``render`` writes: sorted keys, so a second render writes identical bytes."""
        return jsonfile.dumps(self.model_dump(mode="json"), sort_keys=True)

    @classmethod
    def from_text(cls, text: str, where: str = MANIFEST_NAME) -> Manifest:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge integers, absurd nesting
            raise ManifestError(f"{where}: not JSON ({exc}); render again with `clusterforge render`") from None
        if not isinstance(data, dict):
            raise ManifestError(f"{where}: not a JSON object; render again with `clusterforge render`")
        if data.get("format") != FORMAT:
            raise ManifestError(
                f"{where}: format {data.get('format')!r}, this clusterforge reads format {FORMAT}; "
                "render again with this clusterforge (`clusterforge render SPEC --out DIR`)"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ManifestError(
                f"{where}: {loc}: {first['msg']} ({exc.error_count()} problem(s)); the file was not written by "
                "this clusterforge or was edited: render again"
            ) from None

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        path = folder / MANIFEST_NAME
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ManifestError(
                f"{str(folder)!r} holds no {MANIFEST_NAME}; run `clusterforge render SPEC --out {folder}` first"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ManifestError(
                f"cannot read {path}: {exc}; render again with `clusterforge render SPEC --out {folder}`"
            ) from None
        return cls.from_text(text, str(path))
