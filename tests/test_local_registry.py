"""The machine-wide record of slurmd node names (clusterforge/local/registry.py): two local
clusters with a node name in common would share Slurm's cgroup v1 folders (slurm_<node>), so the
second `up` is refused, naming the node and the other cluster's state folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterforge.local import LocalError, registry

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def private_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry of this test's own: the real one (/run) may list clusters another lane runs."""
    reg = tmp_path / "registry"
    monkeypatch.setattr(registry, "REGISTRY", reg)
    return reg


def _state(tmp_path: Path, name: str) -> Path:
    s = tmp_path / name
    s.mkdir()
    return s


def test_a_name_in_use_is_refused_with_the_node_and_the_other_state(tmp_path: Path) -> None:
    a, b = _state(tmp_path, "a"), _state(tmp_path, "b")
    registry.claim(a, "local", ["gpu-001", "gpu-002", "cpu-001"], "examples/local.yaml")
    with pytest.raises(LocalError) as e:
        registry.claim(b, "local-roles", ["mi-01", "cpu-001"], "examples/local-roles.yaml")
    msg = str(e.value)
    assert "node name(s) cpu-001 are in use by local cluster local" in msg
    assert f"state {a}" in msg and "slurm_<node>" in msg
    assert f"clusterforge local down --state {a}" in msg  # the fix
    assert "mi-01" not in msg  # only the names in common


def test_disjoint_names_run_side_by_side_and_a_reclaim_is_no_conflict(tmp_path: Path) -> None:
    a, b = _state(tmp_path, "a"), _state(tmp_path, "b")
    registry.claim(a, "local", ["gpu-001", "cpu-001"], "examples/local.yaml")
    registry.claim(b, "local-aws", ["p5-001", "p5-002"], "examples/local-aws.yaml")
    registry.claim(a, "local", ["gpu-001", "cpu-001"], "examples/local.yaml")  # `up` again on a running one
    entries = sorted(json.loads(f.read_text())["cluster"] for f in registry.REGISTRY.glob("*.json"))
    assert entries == ["local", "local-aws"]


def test_down_frees_the_names(tmp_path: Path) -> None:
    a, b = _state(tmp_path, "a"), _state(tmp_path, "b")
    registry.claim(a, "local", ["cpu-001"], "examples/local.yaml")
    assert registry.release(a) is True
    assert registry.release(a) is False  # a second down has nothing to release
    registry.claim(b, "local-failover", ["cpu-001"], "examples/local-failover.yaml")


def test_a_state_folder_removed_by_hand_is_a_stale_entry(tmp_path: Path) -> None:
    a, b = _state(tmp_path, "a"), _state(tmp_path, "b")
    registry.claim(a, "local", ["cpu-001"], "examples/local.yaml")
    a.rmdir()
    registry.claim(b, "local-failover", ["cpu-001"], "examples/local-failover.yaml")
    assert [json.loads(f.read_text())["cluster"] for f in registry.REGISTRY.glob("*.json")] == ["local-failover"]


def test_a_crashed_up_still_holds_its_names_until_down(tmp_path: Path) -> None:
    """Its state folder is there (namespaces or processes may be left): `down` frees it, not `up`."""
    a, b = _state(tmp_path, "a"), _state(tmp_path, "b")
    registry.claim(a, "local", ["cpu-001"], "examples/local.yaml")
    (a / "pids").write_text("")
    with pytest.raises(LocalError, match="cpu-001"):
        registry.claim(b, "local", ["cpu-001"], "examples/local.yaml")


def test_up_refused_for_a_name_leaves_no_state_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`local up` of examples/local-failover.yaml beside a running examples/local.yaml (both have
    cpu-001): refused before anything is made, the new state folder removed again."""
    from clusterforge.local import LocalCluster, cluster

    monkeypatch.setattr(cluster, "missing_prerequisites", lambda _boot: None)
    a = _state(tmp_path, "a")
    registry.claim(a, "local", ["gpu-001", "gpu-002", "cpu-001", "cpu-002"], str(EXAMPLES / "local.yaml"))
    b = tmp_path / "b"
    with pytest.raises(LocalError, match=r"cpu-001, cpu-002 are in use by local cluster local"):
        LocalCluster(b).up(EXAMPLES / "local-failover.yaml", net="10.90.0.0/24", configure=False)
    assert not b.exists()
