"""The benchmarks' own specs are specs a user could render: no validation errors.

A benchmark measures whatever it is given, and the library functions it calls (``resolve``,
``render``) do not refuse a spec with errors the way ``clusterforge render`` does. So when a new
rule made a benchmark's spec invalid, the benchmark went on printing figures of a cluster nobody
can build. ``render_scale.py`` named Slurm 24.05, which no known OS ships (``slurm-not-shipped``);
the side-by-side scaling table gave p5 groups EFA without a placement group
(``efa-needs-placement``); the plan benchmark mounted EFS over /home without ``purpose: [home]``
(``system-path``); the check benchmark rendered releases its example's OS does not ship. These
tests build each spec the way its benchmark does, at the sizes the README quotes, and fail on any
error finding.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterforge.clusterspec.models import Cluster
from clusterforge.resolve import resolve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import check_scale  # noqa: E402
import plan_scale  # noqa: E402
import render_scale  # noqa: E402
import render_vs_parallelcluster  # noqa: E402


def _errors(data: dict[str, Any], base_dir: Path = ROOT) -> list[tuple[str, str]]:
    rc = resolve(Cluster.model_validate(data), base_dir=base_dir)
    return [(f.code, f.path) for f in rc.errors]


def test_render_scale_spec_validates() -> None:
    assert _errors(render_scale.synthetic_spec()) == []


@pytest.mark.parametrize("nodes,groups", [(2048, 4), (65536, 4), (2048, 256), (65536, 256)])
@pytest.mark.parametrize("onprem,addresses", [(False, False), (True, False), (True, True)],
                         ids=["cloud", "onprem", "addresses"])
def test_scaling_specs_validate(nodes: int, groups: int, onprem: bool, addresses: bool) -> None:
    data = render_vs_parallelcluster.scaling_spec(nodes, groups, onprem, addresses)
    assert _errors(data) == []
    compute = [g for g in data["node_groups"] if g["name"] != "head"]
    assert len(compute) == groups  # the table's row is the cluster it says


def test_side_by_side_spec_validates() -> None:
    data = yaml.safe_load(render_vs_parallelcluster.our_spec())
    assert _errors(data) == []
    counts = {g["name"]: g["cloud"]["count"] for g in data["node_groups"] if g["name"] in ("gpu", "cpu")}
    assert counts == {"gpu": 2048, "cpu": 512}


def test_plan_scale_spec_validates() -> None:
    assert _errors(plan_scale.synthetic_spec()) == []


@pytest.mark.parametrize("groups", [17, 65, 257])
def test_plan_speed_specs_validate(groups: int) -> None:
    # plan_speed.py's groups: 2 head groups, 4 CPU groups and the rest GPU groups of 8
    data = plan_scale.synthetic_spec(gpu_groups=groups - 6, gpu_per_group=8, cpu_groups=4)
    assert len(data["node_groups"]) == groups
    assert _errors(data) == []


@pytest.mark.parametrize("kind", ["cloud", "onprem"])
@pytest.mark.parametrize("slurm", ["22.05", "24.11", "26.05"])  # the releases the README's check rows ran
@pytest.mark.parametrize("nodes", [2048, 65536])
def test_check_scale_specs_validate(kind: str, slurm: str, nodes: int) -> None:
    data = check_scale.scaled_spec(nodes, slurm, kind)
    assert _errors(data, ROOT / "examples") == []
    assert data["slurm"]["version"] == slurm
