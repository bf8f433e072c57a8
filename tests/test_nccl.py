"""The NCCL/EFA version gates at their boundaries, and each EFA variable only where the doc lists it.

Expected sets are written by hand from the sources cited in clusterforge/render/nccl_versions.py
(aws-ofi-nccl doc/efa-env-var.md and release notes, NVIDIA/nccl src/misc/tuner.cc).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clusterforge.catalog import get_profile
from clusterforge.clusterspec import load_spec
from clusterforge.render import build_model
from clusterforge.render.nccl import nccl_plan
from clusterforge.render.nccl_versions import DOC_TYPES, GATES
from clusterforge.resolve import resolve

from .conftest import EXAMPLES

BASE = {"NCCL_SOCKET_IFNAME", "NCCL_DEBUG"}
TUNER = {"NCCL_TUNER_PLUGIN"}
LEGACY = {"FI_PROVIDER", "NCCL_PROTO"}
GDR = {"FI_EFA_USE_DEVICE_RDMA"}


def efa_keys(tmp_path: Path, *, itype: str = "p5.48xlarge", ofi: str = "1.14.0", nccl: str = "2.26.2",
             efa: str = "1.40.0") -> set[str]:
    spec = (EXAMPLES / "p5-training.yaml").read_text()
    spec = spec.replace('aws_ofi_nccl: "1.14.0"', f'aws_ofi_nccl: "{ofi}"').replace('nccl: "2.26.2"', f'nccl: "{nccl}"')
    spec = spec.replace('efa_installer: "1.40.0"', f'efa_installer: "{efa}"')
    (tmp_path / "s.yaml").write_text(spec)
    c = load_spec(tmp_path / "s.yaml")
    (n,) = [n for n in build_model(resolve(c, base_dir=tmp_path)).compute if n.group == "gpu"]
    # Swap in the catalog profile rather than the instance type: some types (p6-b200) need --facts
    # to build a node set, and the plan reads only the profile's name and the GPU vendor.
    profile = get_profile(itype)
    assert profile is not None and profile.efa_capable and profile.gpu is not None, itype
    plan = nccl_plan(c, dataclasses.replace(n, profile=profile))
    lines = [s.key for s in plan.conf]
    assert len(lines) == len(set(lines)), lines
    return set(lines)


# (aws-ofi-nccl, NCCL, EFA installer) on p5.48xlarge -> variables; one row each side of a boundary.
P5_CASES = [
    # FI_PROVIDER/NCCL_PROTO "Use for aws-ofi-nccl<=1.5.0"; the next release is 1.6.0.
    ("1.5.0", "2.18.6", "1.40.0", BASE | LEGACY | GDR),
    ("1.6.0", "2.18.6", "1.40.0", BASE | GDR),
    # FI_EFA_USE_DEVICE_RDMA until aws-ofi-nccl 1.7.0 *and* libfabric 1.18.0 (EFA installer 1.23.0).
    ("1.6.0", "2.18.6", "1.23.0", BASE | GDR),
    ("1.7.0", "2.18.6", "1.22.1", BASE | GDR),
    ("1.7.0", "2.18.6", "1.23.0", BASE),
    ("1.7.4", "2.18.6", "1.22.1", BASE | GDR),
    ("1.8.0", "2.18.6", "1.22.1", BASE),  # 1.8.0 requires libfabric >= 1.18 itself
    # NCCL_TUNER_PLUGIN exists from NCCL 2.19; the tuner from aws-ofi-nccl 1.8.0.
    ("1.14.0", "2.18.6", "1.40.0", BASE),
    ("1.14.0", "2.19.1", "1.40.0", BASE | TUNER),
    ("1.7.4", "2.19.4", "1.40.0", BASE),
    ("1.8.0", "2.19.4", "1.40.0", BASE | TUNER),
    # 1.9.0-1.9.1 broke the v1 tuner that NCCL 2.19/2.20 call; fixed in 1.9.2.
    ("1.9.1", "2.20.5", "1.40.0", BASE),
    ("1.9.2", "2.20.5", "1.40.0", BASE | TUNER),
    # NCCL >= 2.21 asks only for ncclTunerPlugin_v2, which the plugin has from 1.9.0.
    ("1.8.1", "2.21.5", "1.40.0", BASE),
    ("1.9.0", "2.21.5", "1.40.0", BASE | TUNER),
    # From 1.16.0 the plugin bundles the tuner and sets NCCL_TUNER_PLUGIN itself.
    ("1.15.0", "2.26.2", "1.40.0", BASE | TUNER),
    ("1.16.0", "2.26.2", "1.40.0", BASE),
]


@pytest.mark.parametrize(("ofi", "nccl", "efa", "expected"), P5_CASES)
def test_p5_gate_boundaries(tmp_path: Path, ofi: str, nccl: str, efa: str, expected: set[str]) -> None:
    assert efa_keys(tmp_path, ofi=ofi, nccl=nccl, efa=efa) == expected


# instance type -> variables with aws-ofi-nccl 1.5.0 (the legacy trio) and with 1.14.0 + NCCL 2.26.
TYPE_CASES = [
    ("p4d.24xlarge", BASE | LEGACY | GDR, BASE),  # the tuner never modelled A100/p4d
    ("p4de.24xlarge", BASE | LEGACY | GDR, BASE),
    ("p5.48xlarge", BASE | LEGACY | GDR, BASE | TUNER),
    ("p5e.48xlarge", BASE | LEGACY, BASE | TUNER),  # the doc's "p4/p5" list predates p5e
    ("p5en.48xlarge", BASE | LEGACY, BASE | TUNER),
    ("p6-b200.48xlarge", BASE | LEGACY, BASE),  # the tuner models p6-b200 from 1.15.0
    ("g5.48xlarge", BASE | LEGACY, BASE),  # "EFA instances without RDMA": no FI_EFA_USE_DEVICE_RDMA
    ("g6e.48xlarge", BASE | LEGACY, BASE),
]


@pytest.mark.parametrize(("itype", "old", "new"), TYPE_CASES)
def test_efa_variables_only_where_documented(tmp_path: Path, itype: str, old: set[str], new: set[str]) -> None:
    assert efa_keys(tmp_path, itype=itype, ofi="1.5.0", nccl="2.18.6") == old
    assert efa_keys(tmp_path, itype=itype, ofi="1.14.0", nccl="2.26.2") == new


def test_tuner_per_type_first_version(tmp_path: Path) -> None:
    assert efa_keys(tmp_path, itype="p5en.48xlarge", ofi="1.12.0") == BASE
    assert efa_keys(tmp_path, itype="p5en.48xlarge", ofi="1.13.0") == BASE | TUNER
    assert efa_keys(tmp_path, itype="p6-b200.48xlarge", ofi="1.14.0") == BASE
    assert efa_keys(tmp_path, itype="p6-b200.48xlarge", ofi="1.15.0") == BASE | TUNER


def test_not_set_says_why(tmp_path: Path) -> None:
    spec = (EXAMPLES / "p5-training.yaml").read_text().replace('aws_ofi_nccl: "1.14.0"', 'aws_ofi_nccl: "1.6.0"')
    spec = spec.replace("instance_type: p5.48xlarge", "instance_type: g5.48xlarge")
    (tmp_path / "s.yaml").write_text(spec)
    c = load_spec(tmp_path / "s.yaml")
    (n,) = [n for n in build_model(resolve(c, base_dir=tmp_path)).compute if n.group == "gpu"]
    not_set = "\n".join(nccl_plan(c, n).not_set)
    assert "FI_EFA_USE_DEVICE_RDMA (g5.48xlarge has no GPUDirect RDMA over EFA" in not_set
    assert "NCCL_TUNER_PLUGIN (the tuner in aws-ofi-nccl 1.6.0" not in not_set  # it fails earlier:
    assert "NCCL_TUNER_PLUGIN (aws-ofi-nccl 1.6.0 ships no tuner (first in 1.8.0))" in not_set


def test_every_gate_cites_a_release() -> None:
    for name, gate in GATES.items():
        assert gate.source and ("@v" in gate.source or "v1." in gate.source or "[1." in gate.source), name
    for var in DOC_TYPES:
        assert var.startswith(("FI_", "NCCL_")), var
