"""End to end: ``local up --image baked`` bakes one image per node group, boots nodes on them, and
the cluster they make is the cluster bare nodes make.

``tests/fixtures/local-image.yaml`` (a controller with slurmdbd, MariaDB and Prometheus; two GPU
nodes of one node group) comes up on a /24 of its own with no image of its in the cache: the first
``up`` runs site.yml's image phase (``--tags packages``) on the bare nodes, bakes each node group's
image from one of them, then runs the full site.yml. After ``down``, a second ``up`` boots every node
on its image: nothing is baked and no package is installed, and the nodes are still hosts of their
own (host keys, machine-id) and a working Slurm cluster; a third run changes nothing. Every wait
is bounded; the module fixture tears the cluster down even when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterforge.configure import TextProgress
from clusterforge.local import LocalCluster, missing_prerequisites
from clusterforge.local import image as img
from tests.local_shell import sh
from tests.test_image_phase import _installs

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "tests" / "fixtures" / "local-image.yaml"
#: its own network: neither the demo's (10.79) nor any other test's (scripts/run-tests.sh lists them)
NET = os.environ.get("CLUSTERFORGE_IMAGE_TEST_NET", "10.80.0.0/24")
NODES = ["ctl", "gpu-001", "gpu-002"]

pytestmark = [pytest.mark.local]
_why = missing_prerequisites()
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))


class Runs:
    first: Any
    again: Any
    rerun: Any
    first_lines: list[str]
    again_lines: list[str]


def _drop_own_images() -> None:
    """This spec's images on this network from an earlier run: the first ``up`` must bake."""
    prefix = NET.rsplit(".", 1)[0]
    for p in img.cache_dir().glob("image-*"):
        try:
            info = json.loads((p / "image.json").read_text())
        except (OSError, ValueError):
            continue
        if info.get("cluster") == "imaged" and info.get("net") == prefix:
            shutil.rmtree(p)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Runs]]:
    lc = LocalCluster(tmp_path_factory.mktemp("image") / "state")
    r = Runs()
    r.first_lines, r.again_lines = [], []
    _drop_own_images()
    try:
        r.first = lc.up(SPEC, net=NET, image="baked", ansible_progress=TextProgress(r.first_lines.append))
        print(f"\nfirst up (bakes): {r.first.seconds}")
        lc.down()
        r.again = lc.up(SPEC, net=NET, image="baked", ansible_progress=TextProgress(r.again_lines.append))
        print(f"up on the images: {r.again.seconds}")
        r.rerun = lc.up(SPEC, net=NET, image="baked")
        yield lc, r
    finally:
        lc.down()


def _images(lc: LocalCluster) -> dict[str, Path]:
    return {name: img.cache_dir() / f"image-{key}" for name, key in lc.layout().images.items()}


def test_the_first_up_bakes_one_image_per_node_group(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, r = cluster
    assert r.first.configure.ok and "image" in r.first.seconds, r.first.seconds
    ims = _images(lc)
    assert set(ims) == set(NODES)
    assert ims["gpu-001"] == ims["gpu-002"] != ims["ctl"]
    for name, path in ims.items():
        info = json.loads((path / "image.json").read_text())
        assert (path / ".complete").is_file()
        assert info["node_group"] == ("ctl" if name == "ctl" else "gpu")
        assert info["baked_from"] in (["ctl"] if name == "ctl" else ["gpu-001", "gpu-002"])
    # the image phase installed, and the images hold, each node group's own packages
    assert (ims["ctl"] / "usr/sbin/slurmctld").is_file() and (ims["ctl"] / "usr/sbin/mariadbd").is_file()
    assert (ims["gpu-001"] / "usr/sbin/slurmd").is_file() and not (ims["gpu-001"] / "usr/sbin/slurmctld").exists()
    names = {task for _, _, task, _ in _installs()}  # the image phase ran its installs on bare nodes
    assert any(line.split(": changed ", 1)[-1] in names for line in r.first_lines)


def test_an_image_holds_no_host_identity_and_no_secret(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    key = sh(lc, "ctl", "cat /etc/munge/munge.key | base64 -w0")
    for path in set(_images(lc).values()):
        for rel in ("etc/ssh", "etc/munge", "root", "var/lib/munge", "etc/chrony"):
            left = sorted(str(p.relative_to(path)) for p in (path / rel).rglob("*") if p.is_file()) \
                if (path / rel).is_dir() else []
            assert not [f for f in left if re.search(r"ssh_host_|munge\.key|\.seed|\.ssh/|chrony\.keys", f)], left
        for f in ("etc/machine-id", "etc/hostname", "etc/hosts"):
            assert not (path / f).exists(), f
        private = [str(p) for top in ("etc", "root", "var/lib") if (path / top).is_dir()
                   for p in (path / top).rglob("*") if p.is_file() and not p.is_symlink()
                   and b"PRIVATE KEY-----" in p.read_bytes()]
        assert private == []
        # the munge key the cluster uses is not in the image (a bake happens before the key is set)
        assert not any(key.encode()[:40] in p.read_bytes() for p in (path / "etc").rglob("*")
                       if p.is_file() and not p.is_symlink())


def test_up_on_the_images_bakes_nothing_and_installs_nothing(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, r = cluster
    assert r.again.configure.ok and "image" not in r.again.seconds, r.again.seconds
    # the roles' package installs (every one the image phase runs: tests/test_image_phase.py) all
    # found their packages in the image
    names = {task for _, _, task, _ in _installs()}
    installs = [line for line in r.again_lines if line.split(": changed ", 1)[-1] in names]
    assert installs == []
    # every node's root is an overlay whose lower layers hold its node group's image
    for name, path in _images(lc).items():
        mounts = sh(lc, name, "grep ' / / ' /proc/self/mountinfo")
        assert f"{path}:" in mounts, (name, mounts)


def test_nodes_of_one_image_are_hosts_of_their_own(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    seen = {n: sh(lc, n, "hostname; cat /etc/machine-id; ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub").split()
            for n in ("gpu-001", "gpu-002")}
    assert seen["gpu-001"][0] == "gpu-001" and seen["gpu-002"][0] == "gpu-002"
    assert seen["gpu-001"][1] != seen["gpu-002"][1]  # machine-id
    assert seen["gpu-001"][3] != seen["gpu-002"][3]  # host key fingerprint


def test_the_cluster_on_images_runs_jobs(cluster: tuple[LocalCluster, Runs]) -> None:
    lc, _ = cluster
    deadline = time.monotonic() + 120
    while True:
        rows = sh(lc, "ctl", "sinfo -N -h -o '%N %T'").split()
        if rows.count("idle") == 2 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert rows == ["gpu-001", "idle", "gpu-002", "idle"], rows
    out = sh(lc, "ctl", "srun -N2 -p gpu hostname", timeout=90).split()
    assert sorted(out) == ["gpu-001", "gpu-002"]
    assert sh(lc, "ctl", "stat -c %U:%a /etc/munge/munge.key").strip() == "munge:400"
    cred = sh(lc, "gpu-002", "munge -n").strip()
    assert "Success" in sh(lc, "ctl", f"echo {shlex.quote(cred)} | unmunge")


def test_a_rerun_changes_nothing(cluster: tuple[LocalCluster, Runs]) -> None:
    _, r = cluster
    assert r.rerun.configure.ok and r.rerun.configure.changed == 0, r.rerun.configure.stats
