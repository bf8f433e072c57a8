"""Every example, as rendered for Slurm 22.05, loaded by Debian's real slurmctld and slurmd -G.

Examples whose target is 22.05 are checked straight from their golden folder (the reviewed
text is what the daemon loads). Newer targets are rendered for 22.05 too and checked, and a test
pins that their golden text differs from that only in version-gated lines.
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import pytest

from clusterforge import hostlist
from clusterforge.check import ProblemKind, check_dir, format_report
from clusterforge.clusterspec import load_spec
from clusterforge.render import render_cluster
from clusterforge.render.manifest import Manifest
from clusterforge.render.writer import render_tree, write_render

from .conftest import EXAMPLE_SPECS, EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
needs_slurm = pytest.mark.skipif(
    shutil.which("slurmctld") is None or os.geteuid() != 0,
    reason="needs Debian's slurmctld/slurmd and root (CI installs them and runs as root)",
)


def target(name: str) -> str:
    return load_spec(EXAMPLES / name).slurm.version


@needs_slurm
@pytest.mark.slurm
@pytest.mark.parametrize("name", EXAMPLE_SPECS)
def test_real_daemons_accept_example(name: str, tmp_path: Path) -> None:
    if target(name) == "22.05":
        folder = GOLDEN / Path(name).stem
    else:
        folder = tmp_path / "out"
        write_render(render_cluster(load_spec(EXAMPLES / name), base_dir=EXAMPLES, slurm_version="22.05"), folder)
    report = check_dir(folder, timeout_s=60)
    assert report.ok, format_report(report)
    # the daemon saw every rendered node with its GRES
    expect_nodes = sum(1 for _ in report.nodes)
    assert expect_nodes >= 2
    if "Gres=gpu" in (folder / "slurm/slurm.conf").read_text():
        assert report.gres, "slurmd -G was not run for a GPU node"


# '"slurm_version": ' is cloud/agent.json's copy of the version (the agent's topology.conf header)
VERSION_GATED = ("CgroupAutomount", "(Slurm ", "# mount missing v1 controllers", "# GPUs as consumable resources", "PrivateData=cloud", "# before 23.02 sinfo hides", '"slurm_version": ',
                 "cloud_reg_addrs")  # 23.11 made it the default (render/versions.py cloud_reg_addrs_default)


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
def test_a_wrong_expectation_in_the_manifest_fails_the_real_check(tmp_path: Path) -> None:
    """The check compares the daemons with the manifest's expect, not with the rendered text: a
    render whose expect.nodes[0].cpus is off by one (the config text untouched) fails."""
    name = next(n for n in EXAMPLE_SPECS if target(n) == "22.05")
    folder = tmp_path / "out"
    shutil.copytree(GOLDEN / Path(name).stem, folder)
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
