"""Every example, rendered for its own Slurm release, loaded by the real slurmctld and slurmd -G
of that release's family (the host's 22.05, or a cached Debian root filesystem's 24.11 / 26.05),
and tree and block topologies compared with ``scontrol show topology`` on each family.

Examples whose target is 22.05 are checked straight from their golden folder (the reviewed
text is what the daemon loads). A test pins that newer targets' golden text differs from a 22.05
render only in version-gated lines.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from clusterforge import hostlist
from clusterforge.check import ProblemKind, check_dir, format_report
from clusterforge.clusterspec import load_spec
from clusterforge.render import render_cluster
from clusterforge.render.manifest import Manifest
from clusterforge.render.writer import render_tree, write_render

from .check_fixture import release_daemons
from .conftest import EXAMPLE_SPECS, EXAMPLES, ROOT

__all__ = ["release_daemons"]  # the session fixture, imported for the tests below

GOLDEN = ROOT / "tests" / "golden"
needs_slurm = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, mounts); CI runs as root")
# Which slurm-wlm loads a render for each target (by hand, from packages.debian.org and each
# root filesystem's `slurmctld -V`; not from clusterforge.check.releases).
STANDS_IN = {
    "22.05": "slurm-wlm 22.05.8", "23.02": "slurm-wlm 24.11.5", "23.11": "slurm-wlm 24.11.5",
    "24.05": "slurm-wlm 24.11.5", "24.11": "slurm-wlm 24.11.5", "25.05": "slurm-wlm 26.05.5",
    "25.11": "slurm-wlm 26.05.5", "26.05": "slurm-wlm 26.05.5",
}
def target(name: str) -> str:
    return load_spec(EXAMPLES / name).slurm.version


@needs_slurm
@pytest.mark.slurm
@pytest.mark.parametrize("name", EXAMPLE_SPECS)
def test_real_daemons_of_its_family_accept_example(
    name: str, tmp_path: Path, release_daemons: Callable[[str], None]
) -> None:
    version = target(name)
    release_daemons(version)
    if version == "22.05":
        folder = GOLDEN / Path(name).stem
    else:
        folder = tmp_path / "out"
        write_render(render_cluster(load_spec(EXAMPLES / name), base_dir=EXAMPLES), folder)
    report = check_dir(folder, timeout_s=60)
    print(format_report(report))
    assert report.daemons is not None and report.daemons.startswith(STANDS_IN[version] + " ")
    # no problem at all: an option the release removed (23.11's cloud_reg_addrs, render/versions.py
    # cloud_reg_addrs_default) is an error line in slurmctld's log, and fails here
    assert report.problems == [], format_report(report)
    # the daemon saw every rendered node with its GRES
    assert len(report.nodes) >= 2
    if "Gres=gpu" in (folder / "slurm/slurm.conf").read_text():
        assert report.gres, "slurmd -G was not run for a GPU node"


# '"slurm_version": ' is cloud/agent.json's copy of the version (the agent's topology.conf header)
VERSION_GATED = ("CgroupAutomount", "(Slurm ", "# mount missing v1 controllers", "# GPUs as consumable resources", "PrivateData=cloud", "# before 23.02 sinfo hides", '"slurm_version": ',
                 "cloud_reg_addrs", "# cgroup v2 where the host runs it, else v1")  # + "(deprecated since 25.05 ...)" from 25.05  # 23.11 made it the default (render/versions.py cloud_reg_addrs_default)


@pytest.mark.parametrize("name", [n for n in EXAMPLE_SPECS if target(n) != "22.05"])
def test_newer_golden_differs_only_in_gated_lines(name: str) -> None:
    cluster = load_spec(EXAMPLES / name)
    gdir = GOLDEN / Path(name).stem
    old = render_tree(render_cluster(cluster, base_dir=EXAMPLES, slurm_version="22.05"))
    assert set(old) == {str(p.relative_to(gdir)) for p in gdir.rglob("*") if p.is_file()}
    for rel, data in old.items():
        if rel == "manifest.json":
            continue
        new_lines = (gdir / rel).read_text().splitlines()
        diff = [
            ln for ln in difflib.unified_diff(data.decode().splitlines(), new_lines, lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
        ]
        unexpected = [ln for ln in diff if not any(g in ln for g in VERSION_GATED)]
        assert unexpected == [], f"{rel}: {unexpected}"


@needs_slurm
@pytest.mark.slurm
@pytest.mark.parametrize("version", ["22.05", "24.05", "25.05"])
def test_a_wrong_expectation_in_the_manifest_fails_the_real_check(
    version: str, tmp_path: Path, release_daemons: Callable[[str], None]
) -> None:
    """The check compares the daemons with the manifest's expect, not with the rendered text: a
    render whose expect.nodes[0].cpus is off by one (the config text untouched) fails, on the
    host's daemons and on the chrooted ones of each root filesystem."""
    release_daemons(version)
    name = next(n for n in EXAMPLE_SPECS if target(n) == "22.05")
    folder = tmp_path / "out"
    if version == "22.05":
        shutil.copytree(GOLDEN / Path(name).stem, folder)
    else:
        write_render(render_cluster(load_spec(EXAMPLES / name), base_dir=EXAMPLES, slurm_version=version), folder)
    manifest = Manifest.read(folder)
    node = manifest.expect.nodes[0]
    wrong = manifest.model_copy(
        update={
            "expect": manifest.expect.model_copy(
                update={"nodes": (node.model_copy(update={"cpus": node.cpus + 1}), *manifest.expect.nodes[1:])}
            )
        }
    )
    (folder / "manifest.json").write_text(wrong.to_text())
    report = check_dir(folder, timeout_s=60)
    first = hostlist.expand(node.names)[0]
    mismatches = [p for p in report.problems if p.kind is ProblemKind.NODE_MISMATCH]
    assert report.kinds() == {ProblemKind.NODE_MISMATCH}, format_report(report)
    assert f"node {first}: CPUTot={node.cpus} (expected {node.cpus + 1})" in [p.message for p in mismatches]
    assert report.daemons is not None and report.daemons.startswith(STANDS_IN[version] + " ")


# --- topologies: tree and block, per family ------------------------------------------------------

# onprem-dgx's nodes (dgx-[001-032] under leaf-a/leaf-b by rack, cpu-[01-08] under leaf-c) with
# its topology section replaced by each of these
TREE = """topology:
  plugin: tree
  switches:
    - {name: spine}
    - {name: leaf-a, parent: spine}
    - {name: leaf-b, parent: spine}
    - {name: leaf-c, parent: spine}
"""
BLOCK = """topology:
  plugin: block
  blocks:
    - {name: nvl-a, hosts: "dgx-[001-016]"}
    - {name: nvl-b, hosts: "dgx-[017-032]"}
  block_sizes: [16, 32]
"""


def render_topology(tmp_path: Path, topology: str, version: str) -> Path:
    text = (EXAMPLES / "onprem-dgx.yaml").read_text()
    text = text[: text.index("\ntopology:") + 1] + topology + text[text.index("\nstorage:") + 1 :]
    assert re.search(r'(?m)^  version: "[0-9.]+"$', text)
    spec = tmp_path / "spec.yaml"
    spec.write_text(re.sub(r'(?m)^  version: "[0-9.]+"$', f'  version: "{version}"', text))
    folder = tmp_path / "out"
    write_render(render_cluster(load_spec(spec), base_dir=EXAMPLES), folder)
    return folder


# what `scontrol show topology` printed for these specs (tree: 22.05.8, 24.11.5 and 26.05.5 alike
# but for LinkSpeed, which 26.05 prints as 0; block: 24.11.5 and 26.05.5 alike)
TREE_SEEN = {
    "leaf-a": ("dgx-[001-016]", None),
    "leaf-b": ("dgx-[017-032]", None),
    "leaf-c": ("cpu-[01-08]", None),
    "spine": ("cpu-[01-08],dgx-[001-032]", "leaf-a,leaf-b,leaf-c"),
}
BLOCKS_SEEN = {
    "nvl-a": ("dgx-[001-016]", "16"),
    "nvl-b": ("dgx-[017-032]", "16"),
}
AGGREGATES_SEEN = {"nvl-a,nvl-b": ("dgx-[001-032]", "32")}  # AggregatedBlock: BlockSizes' 32 joins the two


@needs_slurm
@pytest.mark.slurm
@pytest.mark.parametrize("version", ["22.05", "24.11", "25.05", "26.05"])
def test_tree_topology_matches_scontrol(version: str, tmp_path: Path, release_daemons: Callable[[str], None]) -> None:
    release_daemons(version)
    folder = render_topology(tmp_path, TREE, version)
    conf = "topology.yaml" if version >= "25.05" else "topology.conf"
    assert (folder / "slurm" / conf).is_file()
    report = check_dir(folder, timeout_s=60)
    assert report.ok, format_report(report)
    assert report.daemons is not None and report.daemons.startswith(STANDS_IN[version] + " ")
    got = {k: (v.get("Nodes"), v.get("Switches")) for k, v in report.topology.items()}
    assert got == TREE_SEEN
    assert report.blocks == report.aggregated_blocks == {}


@needs_slurm
@pytest.mark.slurm
@pytest.mark.parametrize("version", ["24.11", "25.05", "26.05"])
def test_block_topology_matches_scontrol(version: str, tmp_path: Path, release_daemons: Callable[[str], None]) -> None:
    release_daemons(version)
    folder = render_topology(tmp_path, BLOCK, version)
    conf = "topology.yaml" if version >= "25.05" else "topology.conf"
    assert "block" in (folder / "slurm" / conf).read_text().lower()
    report = check_dir(folder, timeout_s=60)
    assert report.ok, format_report(report)
    assert report.daemons is not None and report.daemons.startswith(STANDS_IN[version] + " ")
    got = {k: (v.get("Nodes"), v.get("BlockSize")) for k, v in report.blocks.items()}
    assert got == BLOCKS_SEEN
    got = {k: (v.get("Nodes"), v.get("BlockSize")) for k, v in report.aggregated_blocks.items()}
    assert got == AGGREGATES_SEEN
    assert report.topology == {}


def _edit_manifest(folder: Path, edit: Callable[[dict[str, typing.Any]], None]) -> None:
    data = Manifest.read(folder).model_dump(mode="json")
    edit(data)
    (folder / "manifest.json").write_text(Manifest.model_validate(data).to_text())


@needs_slurm
@pytest.mark.slurm
@pytest.mark.parametrize("version", ["24.11", "25.05"])
def test_block_expectations_that_differ_fail(
    version: str, tmp_path: Path, release_daemons: Callable[[str], None]
) -> None:
    """A block with other nodes, BlockSizes whose base differs, and (25.05+: the plugin comes from
    `scontrol show topoconf`) another plugin are each a TOPOLOGY_MISMATCH."""
    release_daemons(version)
    folder = render_topology(tmp_path, BLOCK, version)

    def edit(data: dict[str, typing.Any]) -> None:
        data["expect"]["topology"]["blocks"][1]["nodes"] = "dgx-[017-031]"
        data["expect"]["topology"]["plugin"] = "topology/tree"
        data["config"]["block_sizes"] = [8, 32]

    _edit_manifest(folder, edit)
    report = check_dir(folder, timeout_s=60)
    assert report.kinds() == {ProblemKind.TOPOLOGY_MISMATCH}, format_report(report)
    got = sorted(p.message for p in report.problems)
    assert got == sorted([
        "TopologyPlugin=topology/block (expected topology/tree)",
        "block nvl-a: BlockSize=16 (expected 8, the first BlockSizes)",
        "block nvl-b: Nodes=dgx-[017-032] (expected dgx-[017-031]); BlockSize=16 (expected 8, the first BlockSizes)",
        "aggregated block nvl-a,nvl-b: Nodes=dgx-[001-032] (expected dgx-[001-031])",
    ])
