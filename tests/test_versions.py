"""Every Slurm release gate (clusterforge/render/versions.py) is exercised, per release.

Two kinds of checks, with expectations written by hand from the release notes and man pages each
gate cites (SchedMD/slurm at the ``slurm-YY-MM-0-1`` tags):

* the boundary: the release before a gate's first release does not have it, the first one does;
* the behaviour: the same small spec rendered on both sides of the boundary prints the exact
  lines that release wants (or, for the restart-policy gates, the policy classifies a change as
  that release does: tests/test_restart_policy.py holds those, named in ``BEHAVIOUR`` below).

``test_every_gate_has_a_case`` fails when a gate is added without a boundary case, a behaviour
test and a source.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from clusterforge.clusterspec import parse_spec, validate
from clusterforge.clusterspec.types import SLURM_VERSIONS, version_tuple
from clusterforge.render import render_cluster
from clusterforge.render.versions import FEATURES, has, release
from clusterforge.render.writer import render_tree

from . import test_restart_policy
from .conftest import EXAMPLES

# gate -> (the last release without it, the first with it), from the sources the gate cites
BOUNDARIES: dict[str, tuple[str, str]] = {
    "gres_env_flags": ("21.05", "21.08"),  # older than every target: 22.05, the oldest, has it
    "cloud_nodes_shown": ("22.05", "23.02"),
    "cons_tres_default": ("23.02", "23.11"),
    "no_cgroup_automount": ("23.02", "23.11"),
    "cloud_reg_addrs_default": ("23.02", "23.11"),
    "topology_block": ("23.02", "23.11"),
    "reconfigure_restarts_daemons": ("23.02", "23.11"),
    "stepd_follows_controller": ("23.02", "23.11"),
    "block_sizes": ("23.11", "24.05"),
    "reconfigure_applies_node_changes": ("24.05", "24.11"),
    "topology_yaml": ("24.11", "25.05"),
    "prolog_timeout": ("24.11", "25.05"),
    "cgroup_v1_deprecated": ("24.11", "25.05"),
    "partition_exclusive": ("25.11", "26.05"),
}


def _render(example: str, version: str, edit: Any = None) -> dict[str, str]:
    data = yaml.safe_load((EXAMPLES / example).read_text())
    data["slurm"]["version"] = version
    if edit is not None:
        edit(data)
    tree = render_tree(render_cluster(parse_spec(data, example), base_dir=EXAMPLES))
    return {k: v.decode() for k, v in tree.items() if not k.endswith(".json")}


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _comment_above(text: str, line: str) -> str:
    """The comment line right above ``line`` (each printed setting has one)."""
    lines = _lines(text)
    return lines[lines.index(line) - 1]


# ----------------------------------------------------------------------------- the table itself


def test_every_gate_has_a_case() -> None:
    assert set(BOUNDARIES) == set(FEATURES), "each gate needs a boundary case above"
    assert set(BEHAVIOUR) == set(FEATURES), "each gate needs a behaviour test (BEHAVIOUR)"
    for name, gate in FEATURES.items():
        assert re.search(r"@slurm-\d\d-\d\d-\d-\d", gate.source), f"{name}: source names no file@tag"
        assert gate.what, name
        assert callable(BEHAVIOUR[name]), name


@pytest.mark.parametrize("gate", sorted(BOUNDARIES))
def test_boundary(gate: str) -> None:
    before, first = BOUNDARIES[gate]
    assert not has(version_tuple(before), gate)
    assert has(version_tuple(first), gate)
    assert FEATURES[gate].first == version_tuple(first)


def test_every_target_release_renders() -> None:
    """22.05 through 26.05: the spec takes each, and the render says which it was made for."""
    assert SLURM_VERSIONS == ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
    for v in SLURM_VERSIONS:
        assert _render("local.yaml", v)["slurm/slurm.conf"].startswith(f"# slurm.conf for cluster local (Slurm {v})\n")
    assert release((26, 5)) == "26.05" and release((23, 2)) == "23.02"


# ----------------------------------------------------------------------------- behaviour per gate


def gres_env_flags() -> None:
    text = _render("amd-mi300x.yaml", "22.05")["slurm/gres.conf"]
    assert all(ln.endswith(" Flags=amd_gpu_env") for ln in _lines(text) if ln.startswith("NodeName="))


def cloud_nodes_shown() -> None:
    assert "PrivateData=cloud" in _lines(_render("hybrid.yaml", "22.05")["slurm/slurm.conf"])
    assert "PrivateData" not in _render("hybrid.yaml", "23.02")["slurm/slurm.conf"]


def cons_tres_default() -> None:
    old = _render("local.yaml", "23.02")["slurm/slurm.conf"]
    new = _render("local.yaml", "23.11")["slurm/slurm.conf"]
    assert _comment_above(old, "SelectType=select/cons_tres") == (
        "# GPUs as consumable resources; the default before 23.11 was select/linear"
    )
    assert _comment_above(new, "SelectType=select/cons_tres") == (
        "# GPUs as consumable resources (the default since 23.11, stated for review)"
    )


def no_cgroup_automount() -> None:
    assert "CgroupAutomount=yes" in _lines(_render("local.yaml", "23.02")["slurm/cgroup.conf"])
    assert "CgroupAutomount" not in _render("local.yaml", "23.11")["slurm/cgroup.conf"]


def cloud_reg_addrs_default() -> None:
    old = _lines(_render("hybrid.yaml", "23.02")["slurm/slurm.conf"])
    assert "SlurmctldParameters=cloud_reg_addrs" in old
    for v in ("23.11", "24.11", "26.05"):
        assert "SlurmctldParameters" not in _render("hybrid.yaml", v)["slurm/slurm.conf"], v
    # a site's own SlurmctldParameters still reach slurm.conf, without the defunct option
    new = _render("hybrid.yaml", "24.11", lambda d: d["slurm"].update(extra_conf={"SlurmctldParameters": "idle_on_node_suspend"}))
    assert [ln for ln in _lines(new["slurm/slurm.conf"]) if ln.startswith("SlurmctldParameters")] == [
        "SlurmctldParameters=idle_on_node_suspend"
    ]
    old = _render("hybrid.yaml", "23.02", lambda d: d["slurm"].update(extra_conf={"SlurmctldParameters": "idle_on_node_suspend"}))
    assert [ln for ln in _lines(old["slurm/slurm.conf"]) if ln.startswith("SlurmctldParameters")] == [
        "SlurmctldParameters=idle_on_node_suspend,cloud_reg_addrs"
    ]


def _blocks(d: dict[str, Any]) -> None:
    d["topology"].update(plugin="block", blocks=[{"name": "nvl1", "hosts": "dgx-[001-016]"},
                                                 {"name": "nvl2", "hosts": "dgx-[017-032]"}])


def _findings(example: str, version: str, edit: Any) -> set[str]:
    data = yaml.safe_load((EXAMPLES / example).read_text())
    data["slurm"]["version"] = version
    edit(data)
    return {f.code for f in validate(parse_spec(copy.deepcopy(data)), EXAMPLES)}


def topology_block() -> None:
    assert "block-needs-2311" in _findings("onprem-dgx.yaml", "23.02", _blocks)
    assert "block-needs-2311" not in _findings("onprem-dgx.yaml", "23.11", _blocks)
    tree = _render("onprem-dgx.yaml", "23.11", _blocks)
    assert "TopologyPlugin=topology/block" in _lines(tree["slurm/slurm.conf"])
    assert [ln for ln in _lines(tree["slurm/topology.conf"]) if not ln.startswith("#")] == [
        "BlockName=nvl1 Nodes=dgx-[001-016]", "BlockName=nvl2 Nodes=dgx-[017-032]",
    ]


def block_sizes() -> None:
    def sized(d: dict[str, Any]) -> None:
        _blocks(d)
        d["topology"]["block_sizes"] = [16, 32]

    assert "blocksizes-needs-2405" in _findings("onprem-dgx.yaml", "23.11", sized)
    assert "blocksizes-needs-2405" not in _findings("onprem-dgx.yaml", "24.05", sized)
    assert _lines(_render("onprem-dgx.yaml", "24.05", sized)["slurm/topology.conf"])[-1] == "BlockSizes=16,32"


def topology_yaml() -> None:
    old = _render("onprem-dgx.yaml", "24.11")
    assert "slurm/topology.conf" in old and "slurm/topology.yaml" not in old
    assert "TopologyPlugin=topology/tree" in _lines(old["slurm/slurm.conf"])
    for v in ("25.05", "25.11", "26.05"):
        new = _render("onprem-dgx.yaml", v)
        assert "slurm/topology.conf" not in new and "slurm/topology.yaml" in new, v
        assert "TopologyPlugin" not in new["slurm/slurm.conf"], v


def prolog_timeout() -> None:
    # not rendered yet: no release's render prints either name, so no gate use can be wrong
    for v in ("24.11", "25.05"):
        text = _render("local.yaml", v)["slurm/slurm.conf"]
        assert "PrologTimeout" not in text and "PrologEpilogTimeout" not in text


def cgroup_v1_deprecated() -> None:
    old = _render("local.yaml", "24.11")["slurm/cgroup.conf"]
    new = _render("local.yaml", "25.05")["slurm/cgroup.conf"]
    assert _comment_above(old, "CgroupPlugin=autodetect") == "# cgroup v2 where the host runs it, else v1"
    assert _comment_above(new, "CgroupPlugin=autodetect") == (
        "# cgroup v2 where the host runs it, else v1 (deprecated since 25.05: slurmd warns on a v1 host)"
    )


def partition_exclusive() -> None:
    def parts(v: str) -> list[str]:
        return [ln for ln in _lines(_render("onprem-dgx.yaml", v)["slurm/slurm.conf"]) if ln.startswith("PartitionName=gpu")]

    assert parts("25.11") == [
        "PartitionName=gpu Nodes=dgx-[001-032] Default=YES MaxTime=3-00:00:00 DefMemPerCPU=9091 "
        "OverSubscribe=EXCLUSIVE State=UP"
    ]
    assert parts("26.05") == [
        "PartitionName=gpu Nodes=dgx-[001-032] Default=YES MaxTime=3-00:00:00 DefMemPerCPU=9091 Exclusive=NODE State=UP"
    ]


BEHAVIOUR = {
    "gres_env_flags": gres_env_flags,
    "cloud_nodes_shown": cloud_nodes_shown,
    "cons_tres_default": cons_tres_default,
    "no_cgroup_automount": no_cgroup_automount,
    "cloud_reg_addrs_default": cloud_reg_addrs_default,
    "topology_block": topology_block,
    "block_sizes": block_sizes,
    "topology_yaml": topology_yaml,
    "prolog_timeout": prolog_timeout,
    "cgroup_v1_deprecated": cgroup_v1_deprecated,
    "partition_exclusive": partition_exclusive,
    # the restart policy's gates: the per-release cases there
    "reconfigure_restarts_daemons": test_restart_policy.test_reconfigure_restarts_daemons_from_2311,
    "reconfigure_applies_node_changes": test_restart_policy.test_node_changes_by_reconfigure_from_2411,
    "stepd_follows_controller": test_restart_policy.test_moving_the_controller_drains_before_2311,
}


@pytest.mark.parametrize("gate", sorted(BEHAVIOUR))
def test_gate_behaviour(gate: str) -> None:
    BEHAVIOUR[gate]()
