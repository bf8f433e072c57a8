"""Node images: a node group's packages baked into a layer of its nodes' root file system, as an AMI is.

``clusterforge local up --image baked`` boots each node on an image of its own kind instead of the
bare Debian minbase. An image is made by the production roles themselves: the image phase of
``playbooks/site.yml`` (``--tags packages``: every role's repositories, keys, pins, packages and
holds, none of its configuration) runs on a freshly booted bare node, and that node's overlay
upper layer, scrubbed of everything that identifies the host or would be a secret (``SCRUB``),
becomes a read-only layer between the rootfs and a node's own upper layer. This is how AWS
ParallelCluster (custom AMIs per queue) and Cluster Toolkit (Packer images) shorten a node's way
to usable: the slow part of a first configure is installing packages, and an image has them.

The image is a cache, not a second source of truth. The full ``site.yml`` still runs on every
node and converges it from whatever the image holds (the roles skip what is installed already
and install, pin or hold what differs), so a stale image costs time, never correctness. Its key
(``image_key``) is what decides what the image phase installs on a host: the node OS's rootfs
and the package repository (both keyed by their content), the host's node group variables and
feature groups from the generated inventory, the cluster-wide inventory variables, local mode's
Ansible variables (they name the stand-in repositories' addresses, which an image's apt sources
hold) and the code that installs (roles, playbooks, ansible.cfg, the stand-in and repository
scripts). Two nodes of one node group share one image; a changed spec, network or role bakes anew.

Images live in the rootfs cache (``$CLUSTERFORGE_CACHE``, default ``/var/cache/clusterforge``) as
``image-<key>/`` with ``image.json`` (what it was baked from) and ``.complete`` (its mtime is its
last use); the ``KEEP`` most recently used are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterforge import proc
from clusterforge.local.layout import LocalError, LocalLayout, local_vars

#: bump when what an image holds changes meaning (scrub list, layout of the folder)
IMAGE_FORMAT = 1
#: images kept in the cache; the least recently used beyond this are deleted after a bake
KEEP = 12
IMAGE_MODES = ("bare", "baked")
REPO_ROOT = Path(__file__).resolve().parents[2]
#: the code whose change changes what the image phase installs
CODE = ("roles", "playbooks", "ansible.cfg", "clusterforge/local/packages.txt", "clusterforge/local/standin.sh",
        "clusterforge/local/standin-efa.sh", "clusterforge/local/standin-rocm.sh", "clusterforge/local/repo.sh")

#: Files of a baked node's disk that never go into an image, relative to its root (globs allowed):
#: each host's identity and secrets (what virt-sysprep and ParallelCluster's AMI cleanup remove),
#: what nodes.sh writes anew into every node's own layer before it boots, and caches.
SCRUB_FILES = (
    "etc/machine-id", "var/lib/dbus/machine-id",  # nodes.sh gives every node its own
    "etc/ssh/ssh_host_*",  # every node makes its own host keys at boot (nodes.sh: ssh-keygen -A)
    # munge's postinst made a key and a seed: the munge role installs the cluster's key
    "etc/munge/munge.key", "var/lib/munge/munged.seed*",
    "etc/chrony/chrony.keys",  # chrony's postinst made a per-host NTP key
    "var/lib/systemd/random-seed", "var/lib/systemd/credential.secret",
    "etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/apt/sources.list",
    "usr/sbin/policy-rc.d", "etc/dpkg/dpkg.cfg.d/clusterforge-local-*",
    "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*",
    "var/tmp/*",
)
#: whole folders that never go into an image: Ansible's key and temporary files, the journal
SCRUB_TREES = ("root/.ssh", "root/.ansible", "var/log/journal")
#: folders whose files go (logs of the bake) but whose folders stay: packages made them, with
#: owners and modes their daemons need (munged refuses to start without /var/log/munge)
SCRUB_FILES_UNDER = ("var/log",)


@dataclass(frozen=True)
class NodeImage:
    """The image a node boots on: its key, its folder, and whether it is baked already."""

    key: str
    path: Path
    node_group: str
    features: tuple[str, ...]

    @property
    def ready(self) -> bool:
        return (self.path / ".complete").is_file()


def check_image_mode(mode: str) -> str:
    if mode not in IMAGE_MODES:
        raise LocalError(f"--image {mode!r}: use 'bare' (the Debian minbase; the roles install every package) or "
                         "'baked' (a node image per node group with the roles' packages installed, built once)")
    return mode


def cache_dir() -> Path:
    return Path(os.environ.get("CLUSTERFORGE_CACHE", "/var/cache/clusterforge"))


def code_digest(root: Path = REPO_ROOT) -> str:
    """sha256 over the path and bytes of every file of ``CODE`` (sorted: the same tree, the same digest)."""
    h = hashlib.sha256()
    for rel in CODE:
        p = root / rel
        files = sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _features(hosts_yml: Mapping[str, Any], cluster_group: str, node_group: str, host: str) -> tuple[str, ...]:
    """The inventory's feature groups (slurm_controller, gpu_nvidia, monitoring_server, ...) ``host`` is in."""
    feats = []
    for name, grp in hosts_yml["all"]["children"].items():
        if name == cluster_group:
            continue
        if node_group in (grp.get("children") or {}) or host in (grp.get("hosts") or {}):
            feats.append(name)
    return tuple(sorted(feats))


def node_images(
    layout: LocalLayout, spec_file: Path, rootfs: str, repo: str, cache: Path | None = None,
) -> dict[str, NodeImage]:
    """Node name -> the image it boots on, from the inventory the configure run generates."""
    from clusterforge.inventory.generate import build_inventory, group_name
    from clusterforge.resolve import resolve_file

    inv = build_inventory(resolve_file(spec_file), spec_path=str(spec_file))
    # all but the generator's own note, which names the state folder
    all_vars = {k: v for k, v in inv.all_vars.items() if k != "clusterforge_inventory_generator"}
    base = {
        "format": IMAGE_FORMAT, "rootfs": Path(rootfs).name, "repo": Path(repo).name, "boot": layout.boot,
        "all_vars": all_vars, "local_vars": local_vars(layout.net, layout.boot), "code": code_digest(),
    }
    out = {}
    for n in layout.nodes:
        gname = group_name(layout.cluster, n.group)
        feats = _features(inv.hosts_yml, inv.cluster_group, gname, n.name)
        material = {**base, "group_vars": inv.group_vars[gname], "features": feats, "gpus": n.gpus}
        key = hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:16]
        out[n.name] = NodeImage(key=key, path=(cache or cache_dir()) / f"image-{key}", node_group=n.group,
                                features=feats)
    return out


@contextlib.contextmanager
def _lock(cache: Path, key: str) -> Iterator[None]:
    """One bake of a key at a time (two local clusters may come up side by side)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".image-{key}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _inside(root: Path, p: Path) -> bool:
    return os.path.realpath(p.parent).startswith(os.path.realpath(root) + os.sep)


def scrub(root: Path) -> list[str]:
    """Remove ``SCRUB_*`` from the folder ``root``; returns what it removed (relative paths).
    Symbolic links are removed as links; nothing outside ``root`` is followed."""
    gone: list[str] = []
    for pattern in SCRUB_FILES:
        for p in sorted(root.glob(pattern)):
            if _inside(root, p) and (p.is_symlink() or not p.is_dir()):
                p.unlink()
                gone.append(str(p.relative_to(root)))
            elif _inside(root, p) and p.is_dir():
                shutil.rmtree(p)
                gone.append(str(p.relative_to(root)) + "/")
    for rel in SCRUB_TREES:
        p = root / rel
        if p.is_symlink():
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)
        else:
            continue
        gone.append(rel + "/")
    for rel in SCRUB_FILES_UNDER:
        top = root / rel
        if top.is_dir() and not top.is_symlink():
            for dirpath, _dirs, files in os.walk(top):
                for f in files:
                    fp = Path(dirpath) / f
                    if not fp.is_char_device():  # an overlay whiteout: the lower file stays hidden
                        fp.unlink()
                        gone.append(str(fp.relative_to(root)))
    return gone


def bake(image: NodeImage, upper: Path, meta: Mapping[str, Any], keep: Iterable[Path] = ()) -> Path:
    """Make ``image`` from a node's overlay upper layer (after the image phase ran on it): a copy
    that keeps owners, modes, devices and extended attributes (overlay whiteouts and opaque
    folders), scrubbed, then renamed into place. Another bake of the same key that finished first
    wins; the older images beyond ``KEEP`` (never those in ``keep``) are deleted."""
    cache = image.path.parent
    with _lock(cache, image.key):
        if image.ready:
            return image.path
        tmp = cache / f".image-{image.key}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        p = proc.run(["cp", "-a", "--", str(upper), str(tmp)], timeout=900)
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise LocalError(f"could not copy {upper} into the image cache {cache}: {p.stderr.strip()[-500:]}")
        removed = scrub(tmp)
        info = {**meta, "format": IMAGE_FORMAT, "key": image.key, "node_group": image.node_group,
                "features": list(image.features), "scrubbed": len(removed),
                "baked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (tmp / "image.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
        (tmp / ".complete").touch()
        if not image.ready:
            shutil.rmtree(image.path, ignore_errors=True)  # an incomplete one a killed bake left
        try:
            os.replace(tmp, image.path)
        except OSError as exc:
            # another bake of this key finished first (it held a lock file an eviction replaced)
            shutil.rmtree(tmp, ignore_errors=True)
            if not image.ready:
                raise LocalError(f"could not move the baked image into {image.path}: {exc}; remove that folder "
                                 "and run `clusterforge local up --image baked` again") from None
    evict(cache, keep=[image.path, *keep])
    return image.path


def used(image: NodeImage) -> None:
    """Mark ``image`` used now (its ``.complete``'s mtime orders eviction)."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(image.path / ".complete")


def evict(cache: Path, keep: Iterable[Path] = (), limit: int = KEEP) -> list[Path]:
    """Delete the least recently used complete images beyond ``limit``, never one in ``keep``."""
    kept = {os.path.realpath(k) for k in keep}
    found = sorted((p for p in cache.glob("image-*") if (p / ".complete").is_file()),
                   key=lambda p: (p / ".complete").stat().st_mtime, reverse=True)
    gone = []
    for p in found[limit:]:
        if os.path.realpath(p) not in kept:
            key = p.name.removeprefix("image-")
            with _lock(cache, key):
                shutil.rmtree(p, ignore_errors=True)
            # its lock file too (a bake that waits on it finds no image and bakes it into place)
            (cache / f".image-{key}.lock").unlink(missing_ok=True)
            gone.append(p)
    return gone
