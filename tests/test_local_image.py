"""Baked node images (clusterforge/local/image.py) without booting a node: what an image is keyed
by, what is scrubbed out of it, how it is put into place and evicted, and the refusals.
tests/test_local_image_cluster.py bakes real images and boots nodes on them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clusterforge.local import LocalCluster, missing_prerequisites
from clusterforge.local import image as img
from clusterforge.local.layout import LocalError, plan_layout

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "tests" / "fixtures" / "local-image.yaml"
CLI = [sys.executable, "-c", "from clusterforge.cli import main; main()"]


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_scrub_removes_every_host_identity_and_secret_and_keeps_the_packages(tmp_path: Path) -> None:
    root = tmp_path / "upper"
    outside = tmp_path / "outside-secret"
    outside.write_text("not the image's")
    _tree(root, {
        "etc/ssh/ssh_host_ed25519_key": "k", "etc/ssh/ssh_host_ed25519_key.pub": "k",
        "etc/ssh/sshd_config.d/keep.conf": "kept",
        "etc/munge/munge.key": "k", "var/lib/munge/munged.seed": "s",
        "etc/chrony/chrony.keys": "1 SHA1 HEX:00", "etc/machine-id": "m",
        "root/.ssh/authorized_keys": "ssh-ed25519 AAAA", "root/.ansible/tmp/x": "x",
        "var/lib/apt/lists/deb.debian.org_dists_trixie_InRelease": "l",
        "var/cache/apt/archives/slurmd_24.11_amd64.deb": "d", "var/cache/apt/pkgcache.bin": "b",
        "var/log/munge/munged.log": "log", "var/log/dpkg.log": "log",
        "etc/hosts": "10.80.0.10 ctl", "etc/resolv.conf": "nameserver 127.0.0.1",
        "usr/sbin/slurmd": "ELF", "etc/slurm/plugstack.conf": "include", "var/lib/dpkg/status": "Package: slurmd",
    })
    (root / "etc/ssh/ssh_host_rsa_key").symlink_to(outside)  # a link is removed as a link
    whiteout = root / "var/log/removed-by-a-package"
    os.mknod(whiteout, stat.S_IFCHR | 0o600, 0)  # an overlay whiteout: it must stay
    gone = set(img.scrub(root))
    assert {"etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_rsa_key", "etc/munge/munge.key",
            "var/lib/munge/munged.seed", "etc/chrony/chrony.keys", "etc/machine-id", "root/.ssh/", "root/.ansible/",
            "var/cache/apt/pkgcache.bin", "var/log/munge/munged.log", "etc/hosts"} <= gone
    left = {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}
    assert left == {"etc/ssh/sshd_config.d/keep.conf", "usr/sbin/slurmd", "etc/slurm/plugstack.conf",
                    "var/lib/dpkg/status", "var/log/removed-by-a-package"}
    assert (root / "var/log/munge").is_dir()  # munged refuses to start without its log folder
    assert outside.read_text() == "not the image's"


def test_bake_puts_a_complete_scrubbed_image_into_place_and_the_first_bake_wins(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    _tree(upper, {"usr/bin/sinfo": "ELF", "etc/munge/munge.key": "secret"})
    im = img.NodeImage(key="0123456789abcdef", path=tmp_path / "cache" / "image-0123456789abcdef",
                       node_group="gpu", features=("gpu_nvidia", "slurm_compute"))
    assert not im.ready
    assert img.bake(im, upper, {"baked_from": "gpu-001"}) == im.path
    assert im.ready and (im.path / "usr/bin/sinfo").read_text() == "ELF"
    assert not (im.path / "etc/munge/munge.key").exists()
    info = json.loads((im.path / "image.json").read_text())
    assert (info["key"], info["node_group"], info["features"], info["baked_from"]) == (
        "0123456789abcdef", "gpu", ["gpu_nvidia", "slurm_compute"], "gpu-001")
    assert info["scrubbed"] == 1
    # nothing half-made is left beside it
    assert sorted(p.name for p in im.path.parent.iterdir()) == [".image-0123456789abcdef.lock", im.path.name]
    other = tmp_path / "other"
    _tree(other, {"usr/bin/sinfo": "another"})
    assert img.bake(im, other, {}) == im.path
    assert (im.path / "usr/bin/sinfo").read_text() == "ELF"


def test_a_failed_copy_leaves_no_image(tmp_path: Path) -> None:
    im = img.NodeImage(key="feedfeedfeedfeed", path=tmp_path / "image-feedfeedfeedfeed", node_group="ctl", features=())
    with pytest.raises(LocalError, match="could not copy"):
        img.bake(im, tmp_path / "no-such-upper", {})
    assert not im.path.exists() and [p.name for p in tmp_path.iterdir()] == [".image-feedfeedfeedfeed.lock"]


def test_evict_keeps_the_most_recently_used_and_the_ones_in_use(tmp_path: Path) -> None:
    for i in range(14):
        p = tmp_path / f"image-{i:016x}"
        p.mkdir()
        (p / ".complete").touch()
        os.utime(p / ".complete", (1_000_000 + i, 1_000_000 + i))  # image 0 is the least recently used
    (tmp_path / "image-ffffffffffffffff").mkdir()  # incomplete: not an image, not counted
    gone = img.evict(tmp_path, keep=[tmp_path / f"image-{0:016x}"], limit=12)
    assert [p.name for p in gone] == [f"image-{1:016x}"]
    assert (tmp_path / f"image-{0:016x}").is_dir() and not (tmp_path / f"image-{1:016x}").exists()
    im = img.NodeImage(key=f"{2:016x}", path=tmp_path / f"image-{2:016x}", node_group="g", features=())
    img.used(im)  # now the most recently used
    gone = img.evict(tmp_path, limit=1)
    assert (tmp_path / f"image-{2:016x}").is_dir() and len(gone) == 12  # 13 were left


def test_one_image_per_node_group_keyed_by_what_the_image_phase_installs(tmp_path: Path) -> None:
    lay = plan_layout(SPEC, "10.80.0.0/24")
    ims = img.node_images(lay, SPEC, "/c/rootfs-trixie-node-4cb96741", "/c/apt-repo-trixie-fd7767cadcd0", cache=tmp_path)
    assert ims["gpu-001"].key == ims["gpu-002"].key != ims["ctl"].key
    assert ims["gpu-001"].path == tmp_path / f"image-{ims['gpu-001'].key}"
    assert set(ims["ctl"].features) >= {"slurm_controller", "slurm_dbd", "monitoring_server"}
    assert "gpu_nvidia" in ims["gpu-001"].features and "slurm_controller" not in ims["gpu-001"].features
    again = img.node_images(plan_layout(SPEC, "10.80.0.0/24"), SPEC, "/c/rootfs-trixie-node-4cb96741",
                            "/c/apt-repo-trixie-fd7767cadcd0", cache=tmp_path)
    assert {n: i.key for n, i in again.items()} == {n: i.key for n, i in ims.items()}  # deterministic
    # another network (the stand-in repositories' address is in the image's apt sources), another
    # rootfs or another package repository: other images
    for other in (img.node_images(plan_layout(SPEC, "10.93.0.0/24"), SPEC, "/c/rootfs-trixie-node-4cb96741",
                                  "/c/apt-repo-trixie-fd7767cadcd0", cache=tmp_path),
                  img.node_images(lay, SPEC, "/c/rootfs-trixie-node-00000000", "/c/apt-repo-trixie-fd7767cadcd0",
                                  cache=tmp_path),
                  img.node_images(lay, SPEC, "/c/rootfs-trixie-node-4cb96741", "/c/apt-repo-trixie-000000000000",
                                  cache=tmp_path)):
        assert {i.key for i in other.values()}.isdisjoint({i.key for i in ims.values()})


def test_the_code_digest_follows_the_roles(tmp_path: Path) -> None:
    for rel in img.CODE:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel in ("roles", "playbooks"):
            (p / "x").mkdir(parents=True)
            (p / "x" / "main.yml").write_text("---\n")
        else:
            p.write_text("")
    before = img.code_digest(tmp_path)
    assert img.code_digest(tmp_path) == before
    (tmp_path / "roles" / "x" / "main.yml").write_text("--- \n")
    assert img.code_digest(tmp_path) != before


def test_an_unknown_image_mode_is_refused_before_anything_runs(tmp_path: Path) -> None:
    res = subprocess.run([*CLI, "local", "up", str(SPEC), "--image", "golden", "--state", str(tmp_path / "s")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "--image 'golden'" in res.stderr and "'bare'" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.skipif(bool(missing_prerequisites()), reason=missing_prerequisites() or "")
@pytest.mark.parametrize("spec,kw,says", [
    ("tests/fixtures/local-image.yaml", {"check": True}, "not with --check"),
    ("tests/fixtures/local-image.yaml", {"configure": False}, "--nodes-only"),
    ("examples/local-aws.yaml", {}, "on-prem specs only"),
])
def test_baked_images_are_refused_where_they_cannot_apply(tmp_path: Path, spec: str, kw: dict[str, bool],
                                                          says: str) -> None:
    lc = LocalCluster(tmp_path / "state")
    with pytest.raises(LocalError, match=says):
        lc.up(ROOT / spec, net="10.80.0.0/24", image="baked", **kw)  # type: ignore[arg-type]
    assert not lc.is_up() and not (tmp_path / "state" / "nodes").exists()
