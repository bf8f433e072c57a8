"""The renderer: golden files, determinism, atomic writes, version gates, content rules.

Golden files live in tests/golden/<example>/ and are reviewed by reading them; regenerate with
``CLUSTERFORGE_UPDATE_GOLDEN=1 pytest tests/test_render.py``. tests/test_slurm_daemons.py loads
every golden file that Slurm 22.05 can read into the real daemons.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterforge.clusterspec import load_spec, parse_spec
from clusterforge.errors import ClusterforgeError
from clusterforge.render import build_model, render_cluster
from clusterforge.render.model import BlockModel, TopologyModel
from clusterforge.render.topology import topology_yaml
from clusterforge.render.versions import FEATURES, has
from clusterforge.render.writer import MANIFEST, render_tree, write_render
from clusterforge.resolve import resolve

from .conftest import EXAMPLE_SPECS, EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("CLUSTERFORGE_UPDATE_GOLDEN") == "1"


def rendered(name: str, version: str | None = None) -> dict[str, bytes]:
    cluster = load_spec(EXAMPLES / name)
    return render_tree(render_cluster(cluster, base_dir=EXAMPLES, slurm_version=version))


@pytest.mark.parametrize("name", EXAMPLE_SPECS)
def test_golden(name: str) -> None:
    tree = rendered(name)
    gdir = GOLDEN / Path(name).stem
    if UPDATE:
        for old in gdir.rglob("*"):
            if old.is_file():
                old.unlink()
        for rel, data in tree.items():
            (gdir / rel).parent.mkdir(parents=True, exist_ok=True)
            (gdir / rel).write_bytes(data)
    golden = {str(p.relative_to(gdir)): p.read_bytes() for p in gdir.rglob("*") if p.is_file()}
    assert sorted(golden) == sorted(tree), "rendered file set differs from the golden set"
    for rel in tree:
        assert tree[rel].decode() == golden[rel].decode(), f"{name}: {rel} differs from tests/golden"


@pytest.mark.parametrize("name", EXAMPLE_SPECS)
def test_render_is_deterministic(name: str) -> None:
    assert rendered(name) == rendered(name)


def test_compiled_template_cache_renders_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Templates compiled in an earlier run (the user cache) give the bytes a fresh compile gives;
    a changed template is compiled again, not taken from the cache."""
    import clusterforge.render as render_mod

    monkeypatch.setenv("CLUSTERFORGE_CACHE_DIR", str(tmp_path / "cache"))
    render_mod._env.cache_clear()
    monkeypatch.setattr(render_mod, "_env", render_mod._env)  # the cached Environment is put back after
    try:
        first = rendered("hybrid.yaml")  # compiles and stores
        stored = sorted(tmp_path.glob("cache/jinja-*/*.cache"))
        assert len(stored) >= 5, stored
        render_mod._env.cache_clear()
        assert rendered("hybrid.yaml") == first  # loads what it stored
        monkeypatch.setenv("CLUSTERFORGE_NO_CACHE", "1")
        render_mod._env.cache_clear()
        assert rendered("hybrid.yaml") == first  # no cache at all
        monkeypatch.delenv("CLUSTERFORGE_NO_CACHE")
        # a template whose text changed at the same path: the code stored for the old text is not used
        tpl = tmp_path / "templates"
        tpl.mkdir()
        for p in render_mod.TEMPLATES.iterdir():
            (tpl / p.name).write_text(p.read_text())
        monkeypatch.setattr(importlib.import_module("clusterforge.render.build"), "TEMPLATES", tpl)
        render_mod._env.cache_clear()
        assert rendered("hybrid.yaml") == first  # stores the copies' code
        (tpl / "cgroup.conf.j2").write_text((tpl / "cgroup.conf.j2").read_text() + "# changed\n")
        render_mod._env.cache_clear()
        changed = rendered("hybrid.yaml")
        assert changed[next(k for k in changed if k.endswith("cgroup.conf"))].endswith(b"# changed\n")
        assert {k: v for k, v in changed.items() if not k.endswith(("cgroup.conf", "manifest.json"))} == {
            k: v for k, v in first.items() if not k.endswith(("cgroup.conf", "manifest.json"))}
    finally:
        render_mod._env.cache_clear()


def test_second_write_changes_nothing(tmp_path: Path) -> None:
    cluster = load_spec(EXAMPLES / "onprem-dgx.yaml")
    result = render_cluster(cluster, base_dir=EXAMPLES)
    out = tmp_path / "out"
    assert write_render(result, out) is True
    first = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    mtimes = {p: p.stat().st_mtime_ns for p in first}
    assert write_render(result, out) is False
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == first
    assert {p: p.stat().st_mtime_ns for p in first} == mtimes
    assert oct((out / "slurm/slurmdbd.conf").stat().st_mode & 0o777) == "0o600"
    assert oct((out / "health/dgx.sh").stat().st_mode & 0o777) == "0o755"


def test_write_replaces_whole_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_render(render_cluster(load_spec(EXAMPLES / "onprem-dgx.yaml"), base_dir=EXAMPLES), out)
    # another cluster's render is only replaced with force (tests/test_writer.py has the refusal)
    write_render(render_cluster(load_spec(EXAMPLES / "p5-training.yaml"), base_dir=EXAMPLES), out, force=True)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["cluster"] == "p5-training"
    assert not (out / "slurm/topology.conf").exists(), "a file of the previous render survived"
    assert not list(tmp_path.glob(".out.new-*")), "temp folder left behind"


def test_refuses_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ClusterforgeError, match="not a clusterforge render"):
        write_render(render_cluster(load_spec(EXAMPLES / "local.yaml"), base_dir=EXAMPLES), tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_killed_render_leaves_previous_output(tmp_path: Path) -> None:
    """SIGKILL a render half-way through writing: the old output must be intact and complete."""
    out = tmp_path / "out"
    write_render(render_cluster(load_spec(EXAMPLES / "onprem-dgx.yaml"), base_dir=EXAMPLES), out)
    before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        import clusterforge.render.writer as w
        from clusterforge.render import render_cluster
        from clusterforge.clusterspec import load_spec
        real_fsync = os.fsync
        count = 0
        def fsync(fd):
            global count
            count += 1
            if count == 3:  # some files of the new tree are written, not all
                sys.stdout.write("mid-write\\n"); sys.stdout.flush()
                os.kill(os.getpid(), 9)
            real_fsync(fd)
        w.os.fsync = fsync
        r = render_cluster(load_spec({str(EXAMPLES / 'p5-training.yaml')!r}), base_dir=Path({str(EXAMPLES)!r}))
        w.write_render(r, Path({str(out)!r}), force=True)  # another cluster's render: replaced on purpose
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL and "mid-write" in proc.stdout
    after = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


# ----------------------------------------------------------------------- content rules


def test_slurm_conf_grows_with_groups_not_nodes() -> None:
    text = rendered("onprem-dgx.yaml")["slurm/slurm.conf"].decode()
    node_lines = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert node_lines == [ln for ln in node_lines if "[" in ln] and len(node_lines) == 2


@pytest.mark.parametrize(
    ("name", "nodes"),
    # counted by hand from each example's node groups (onprem-dgx: dgx-[001-032] and cpu-[01-08])
    [("local.yaml", 4), ("hybrid.yaml", 12), ("onprem-dgx.yaml", 40), ("p5-training.yaml", 20)],
)
def test_node_table_sized_to_the_node_count(name: str, nodes: int) -> None:
    # slurmctld and slurmd grow the node table 100 records at a time, rehashing every node, unless
    # MaxNodeCount says its size first; 24.11 refuses to create a node past it, so it is the count
    lines = rendered(name)["slurm/slurm.conf"].decode().splitlines()
    assert [ln for ln in lines if ln.startswith("MaxNodeCount=")] == [f"MaxNodeCount={nodes}"]
    # after SelectType: Slurm takes MaxNodeCount with select/cons_tres only
    assert lines.index("SelectType=select/cons_tres") < lines.index(f"MaxNodeCount={nodes}")


def test_node_table_at_slurms_node_limit() -> None:
    # Slurm refuses a MaxNodeCount above MAX_SLURM_NODES (65,536); the spec refuses more compute
    # hosts than that, so its largest cluster renders the limit itself
    spec = yaml.safe_load((EXAMPLES / "p5-training.yaml").read_text())
    counts = {"gpu": 32768, "cpu": 32768}
    for g in spec["node_groups"]:
        if g["name"] in counts:
            g["cloud"]["count"] = counts[g["name"]]
    cluster = parse_spec(spec)
    text = render_cluster(cluster, base_dir=EXAMPLES).files["slurm/slurm.conf"].content
    assert [ln for ln in text.splitlines() if ln.startswith("MaxNodeCount=")] == ["MaxNodeCount=65536"]


def test_missing_gres_types_never_rendered() -> None:
    for name in EXAMPLE_SPECS:
        text = rendered(name)["slurm/slurm.conf"].decode()
        if "Gres=gpu:" in text:
            assert "\nGresTypes=gpu\n" in text, name


def test_cgroup_constrains_devices_and_version_gates() -> None:
    old = rendered("onprem-dgx.yaml", "22.05")["slurm/cgroup.conf"].decode()
    new = rendered("onprem-dgx.yaml", "24.05")["slurm/cgroup.conf"].decode()
    assert "ConstrainDevices=yes" in old and "ConstrainDevices=yes" in new
    assert "CgroupAutomount=yes" in old and "CgroupAutomount" not in new


def test_gres_cores_follow_numa_affinity() -> None:
    text = rendered("onprem-dgx.yaml")["slurm/gres.conf"].decode()
    assert "File=/dev/nvidia3 Cores=0-55 " in text and "File=/dev/nvidia4 Cores=56-111 " in text
    assert "AutoDetect=off" in text
    p5 = rendered("p5-training.yaml")["slurm/gres.conf"].decode()
    assert "File=/dev/nvidia0 Cores=0-47 Links=-1,18,18,18,18,18,18,18" in p5


def test_unknown_affinity_leaves_cores_out() -> None:
    cluster = load_spec(EXAMPLES / "p5-training.yaml")
    data = cluster.model_dump()
    data["node_groups"][2]["cloud"]["instance_type"] = "g5.48xlarge"
    data["node_groups"][2]["cloud"]["capacity"] = {"type": "on_demand"}
    data["node_groups"][2]["cloud"]["placement_group"] = True
    from clusterforge.clusterspec import parse_spec

    text = render_tree(render_cluster(parse_spec(data), base_dir=EXAMPLES))["slurm/gres.conf"].decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert lines == ["NodeName=gpu-[001-016] Name=gpu Type=a10g File=/dev/nvidia[0-7]"]


def test_topology_has_one_root_and_leaves_first() -> None:
    text = rendered("onprem-dgx.yaml")["slurm/topology.conf"].decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("SwitchName=")]
    assert lines[-1] == "SwitchName=spine Switches=leaf-a,leaf-b,leaf-c"
    assert "SwitchName=leaf-a Nodes=dgx-[001-016]" in lines


def test_no_topology_plugin_without_topology() -> None:
    tree = rendered("p5-training.yaml")
    assert "slurm/topology.conf" not in tree
    assert "TopologyPlugin" not in tree["slurm/slurm.conf"].decode()


def test_hybrid_cloud_group_gets_its_own_leaf() -> None:
    text = rendered("hybrid.yaml")["slurm/topology.conf"].decode()
    assert "SwitchName=aws-burst Nodes=burst-[001-004]" in text
    assert "SwitchName=site Switches=aws-burst,leaf-1" in text


def test_ec2_topology_file_builds_tree(tmp_path: Path) -> None:
    (tmp_path / "topo.json").write_text(
        json.dumps(
            {
                "gpu-001": ["nn-a", "nn-b1", "nn-c1"],
                "gpu-002": ["nn-a", "nn-b1", "nn-c1"],
                "gpu-003": ["nn-a", "nn-b2", "nn-c2"],
                "gpu-004": ["nn-z", "nn-b3", "nn-c3"],
            }
        )
    )
    spec = (EXAMPLES / "p5-training.yaml").read_text().replace("count: 16", "count: 4")
    spec += "topology:\n  ec2_instance_topology: topo.json\n"
    (tmp_path / "s.yaml").write_text(spec)
    cluster = load_spec(tmp_path / "s.yaml")
    m = build_model(resolve(cluster, base_dir=tmp_path))
    sw = {s.name: s for s in m.topology.switches}
    assert sw["nn-c1"].nodes == "gpu-[001-002]"
    assert sw["nn-a"].switches == "nn-b1,nn-b2"
    # two top-layer nodes -> one synthetic root above them
    assert sw["ec2-root"].switches == "aws-cpu,nn-a,nn-z"
    # the CPU group has no EC2 topology data (c7i is not supported by the API): its nodes keep the
    # cloud group's fallback leaf, as the cloud agent does for instances not reported yet
    assert sw["aws-cpu"].nodes == "cpu-[001-004]"
    assert "unplaced" not in sw
    assert m.topology.plugin == "topology/tree"


def test_topology_yaml_for_2505() -> None:
    tree = rendered("onprem-dgx.yaml", "25.05")
    assert "slurm/topology.conf" not in tree
    text = tree["slurm/topology.yaml"].decode()
    assert "- topology: default" in text and "switch: spine" in text
    assert "TopologyPlugin" not in tree["slurm/slurm.conf"].decode()


def test_block_topology_for_2405(tmp_path: Path) -> None:
    spec = (EXAMPLES / "onprem-dgx.yaml").read_text().replace('version: "22.05"', 'version: "24.05"')
    spec = spec.replace(
        "topology:\n",
        "topology:\n  plugin: block\n  block_sizes: [8, 16]\n  blocks:\n"
        "    - {name: nvl1, hosts: 'dgx-[001-008]'}\n    - {name: nvl2, hosts: 'dgx-[009-016]'}\n",
    )
    (tmp_path / "s.yaml").write_text(spec)
    tree = render_tree(render_cluster(load_spec(tmp_path / "s.yaml"), base_dir=tmp_path))
    text = tree["slurm/topology.conf"].decode()
    assert "BlockName=nvl1 Nodes=dgx-[001-008]" in text and "BlockSizes=8,16" in text
    assert "TopologyPlugin=topology/block" in tree["slurm/slurm.conf"].decode()


@pytest.mark.parametrize(
    ("version", "feature", "expected"),
    [
        ("22.05", "topology_block", False), ("23.11", "topology_block", True),
        ("23.11", "block_sizes", False), ("24.05", "block_sizes", True),
        ("24.11", "topology_yaml", False), ("25.05", "topology_yaml", True),
        ("23.02", "no_cgroup_automount", False), ("23.11", "no_cgroup_automount", True),
        ("23.02", "cons_tres_default", False), ("23.11", "cons_tres_default", True),
    ],
)
def test_version_gates(version: str, feature: str, expected: bool) -> None:
    from clusterforge.clusterspec.types import version_tuple

    assert feature in FEATURES
    assert has(version_tuple(version), feature) is expected


# --------------------------------------------------------------------------------- NCCL


def test_efa_nccl_sets_only_what_the_plugin_needs() -> None:
    text = rendered("p5-training.yaml")["nccl/gpu.conf"].decode()
    keys = {ln.split("=", 1)[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    # aws-ofi-nccl 1.14.0 keeps its tuner in libnccl-ofi-tuner.so, which NCCL 2.26 does not look for
    assert keys == {"NCCL_SOCKET_IFNAME", "NCCL_TUNER_PLUGIN", "NCCL_DEBUG"}
    for forbidden in ("FI_PROVIDER=", "NCCL_PROTO=", "NCCL_BUFFSIZE=", "FI_EFA_FORK_SAFE="):
        assert f"\n{forbidden}" not in text
    # every variable carries a comment saying why
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln and not ln.startswith("#"):
            assert lines[i - 1].startswith("# "), ln
    env = rendered("p5-training.yaml")["env/gpu.sh"].decode()
    assert "/opt/amazon/ofi-nccl/lib" in env


def test_old_ofi_plugin_gets_legacy_variables(tmp_path: Path) -> None:
    spec = (EXAMPLES / "p5-training.yaml").read_text().replace('aws_ofi_nccl: "1.14.0"', 'aws_ofi_nccl: "1.5.0"')
    spec = spec.replace("instance_type: p5.48xlarge", "instance_type: p4d.24xlarge")
    (tmp_path / "s.yaml").write_text(spec)
    tree = render_tree(render_cluster(load_spec(tmp_path / "s.yaml"), base_dir=tmp_path))
    text = tree["nccl/gpu.conf"].decode()
    assert "\nFI_PROVIDER=efa\n" in text and "\nNCCL_PROTO=simple\n" in text and "\nFI_EFA_USE_DEVICE_RDMA=1\n" in text


def test_nccl_2_19_needs_tuner_plugin(tmp_path: Path) -> None:
    spec = (EXAMPLES / "p5-training.yaml").read_text().replace('nccl: "2.26.2"', 'nccl: "2.19.3"')
    (tmp_path / "s.yaml").write_text(spec)
    text = render_tree(render_cluster(load_spec(tmp_path / "s.yaml"), base_dir=tmp_path))["nccl/gpu.conf"].decode()
    assert "\nNCCL_TUNER_PLUGIN=libnccl-ofi-tuner.so\n" in text


def test_infiniband_hca_list_is_exact_match() -> None:
    text = rendered("onprem-dgx.yaml")["nccl/dgx.conf"].decode()
    assert "\nNCCL_IB_HCA==mlx5_0:1,mlx5_3:1," in text
    roce = rendered("amd-mi300x.yaml")["nccl/mi300x.conf"].decode()
    assert "\nNCCL_IB_GID_INDEX=3\n" in roce


def test_secrets_are_references() -> None:
    for name in EXAMPLE_SPECS:
        tree = rendered(name)
        manifest = json.loads(tree[MANIFEST])
        for f in manifest["files"]:
            text = tree[f["name"]].decode()
            if "StoragePass=" in text:
                assert "StoragePass={{ SECRET:slurmdbd_storage_pass }}" in text
                assert f["secret_refs"] == ["slurmdbd_storage_pass"] and f["mode"] == "0600"


def test_manifest_lists_every_file_with_hash() -> None:
    import hashlib

    tree = rendered("hybrid.yaml")
    manifest = json.loads(tree[MANIFEST])
    names = {f["name"] for f in manifest["files"]}
    assert names == set(tree) - {MANIFEST}
    for f in manifest["files"]:
        assert f["sha256"] == hashlib.sha256(tree[f["name"]]).hexdigest()
        assert f["node_path"].startswith("/") and f["node_groups"]


def test_topology_yaml_is_data_not_template_text() -> None:
    tree = rendered("onprem-dgx.yaml", "25.05")
    text = tree["slurm/topology.yaml"].decode()
    assert text.startswith("# topology.yaml for cluster dgx-pod (Slurm 25.05)\n# Rendered by clusterforge.")
    assert yaml.safe_load(text) == [
        {
            "topology": "default",
            "cluster_default": True,
            "tree": {
                "switches": [
                    {"switch": "leaf-a", "nodes": "dgx-[001-016]"},
                    {"switch": "leaf-b", "nodes": "dgx-[017-032]"},
                    {"switch": "leaf-c", "nodes": "cpu-[01-08]"},
                    {"switch": "spine", "children": "leaf-a,leaf-b,leaf-c"},
                ]
            },
        }
    ]


def test_topology_yaml_quotes_names_yaml_would_misread() -> None:
    # 'no' and 'on' are valid spec names but YAML 1.1 booleans; a template printed them bare.
    t = TopologyModel(
        "topology/block", blocks=(BlockModel("no", "n[1-2]"), BlockModel("on", "n[3-4]")), block_sizes=(2, 4)
    )
    got = yaml.safe_load(topology_yaml("c1", "25.05", t))
    assert got == [
        {
            "topology": "default",
            "cluster_default": True,
            "block": {
                "block_sizes": [2, 4],
                "blocks": [{"block": "no", "nodes": "n[1-2]"}, {"block": "on", "nodes": "n[3-4]"}],
            },
        }
    ]


def test_manifest_says_what_a_change_of_each_file_requires_and_where() -> None:
    m = json.loads(rendered("onprem-dgx.yaml")[MANIFEST])
    on = {f["name"]: f["on_change"] for f in m["files"]}
    assert (on["slurm/slurm.conf"]["action"], on["slurm/slurm.conf"]["by_key"]) == ("restart", True)
    assert on["slurm/slurm.conf"]["hosts"] == {"slurmctld": "head-01", "slurmd": "cpu-[01-08],dgx-[001-032]"}
    assert on["slurm/gres.conf"]["hosts"] == {"slurmd": "cpu-[01-08],dgx-[001-032]"}
    assert (on["slurm/topology.conf"]["action"], on["slurm/topology.conf"]["hosts"]) == (
        "reconfigure", {"reconfigure": "head-01"}
    )
    assert on["slurm/slurmdbd.conf"]["restart"] == ["slurmdbd"]
    assert on["slurm/slurmdbd.conf"]["hosts"] == {"slurmdbd": "head-01"}
    for name in ("nccl/dgx.conf", "env/dgx.sh", "health/dgx.sh", "prometheus/alerts.yml"):
        assert (on[name]["action"], on[name]["hosts"]) == ("none", {}), name
    owners = {f["name"]: (f["owner"], f["mode"]) for f in m["files"]}
    assert owners["slurm/slurmdbd.conf"] == ("slurm", "0600") and owners["slurm/slurm.conf"] == ("root", "0644")


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
    st.text(max_size=20),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=140),
    st.sampled_from(["", "null", "yes", "on", "1e3", "- a", ": ", "#x", "'", '"', "{{ x }}", "*a", "&a", "a\nb",
                     "sum(rate(x[5m])) > 0.9", " lead", "trail ", "x" * 130, "é", "\u2028", "\x85"]),
)
_YAML_DATA = st.recursive(
    _SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.one_of(st.text(max_size=5), _SCALARS.filter(
        lambda v: isinstance(v, str))), kids, max_size=4), max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(data=_YAML_DATA)
def test_rendered_yaml_is_what_pure_python_pyyaml_writes(data: object) -> None:
    # dump_yaml uses libyaml's emitter only where it writes PyYAML's bytes; anything else, PyYAML's
    from clusterforge.render.yamlfile import WIDTH, dump_yaml

    reference = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=WIDTH)
    assert dump_yaml(["h"], data) == "# h\n" + reference


_JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["", "gpu-[001-016]", 'say "hi"\n\t\\', "é", "\U0001f600", "\u2028", "\x7f", "\x00", "\ud800"]),
)
_JSON_DATA = st.recursive(
    _JSON_SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.lists(kids, max_size=3).map(tuple)
    | st.dictionaries(st.one_of(st.text(max_size=5), st.sampled_from(["a", "b", "é"])), kids, max_size=4),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(data=_JSON_DATA, sort_keys=st.booleans(), ensure_ascii=st.booleans())
def test_rendered_json_is_what_json_dumps_writes(data: object, sort_keys: bool, ensure_ascii: bool) -> None:
    # jsonfile.dumps writes with pydantic-core only where that gives json.dumps's bytes
    from clusterforge.render.jsonfile import dumps

    reference = json.dumps(data, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n"
    assert dumps(data, sort_keys=sort_keys, ensure_ascii=ensure_ascii) == reference


@pytest.mark.parametrize("name", EXAMPLE_SPECS)
def test_hostlists_from_counts_are_the_names_compressed(name: str) -> None:
    """Cloud groups' hostlists come from their counts and partitions' from their groups' own
    (no pass over every name): each is the hostlist of the names themselves."""
    from clusterforge import hostlist

    spec = load_spec(EXAMPLES / name)
    m = build_model(resolve(spec, base_dir=EXAMPLES))
    by_group = {n.group: n for n in m.nodesets}
    for g in spec.node_groups:
        assert g.node_hostlist == hostlist.compress(g.hostnames), g.name
    for n in m.nodesets:
        assert n.hostlist == hostlist.compress(n.names), n.group
        if spec.node_groups[[g.name for g in spec.node_groups].index(n.group)].cloud is not None:
            assert n.known_items is not None, n.group  # a cloud group's from its count
    for p in m.partitions:
        groups = next(x for x in spec.partitions if x.name == p.name).node_groups if spec.partitions else [
            n.group for n in m.compute]
        assert p.nodes == hostlist.compress([h for g in groups for h in by_group[g].names]), p.name


def test_a_large_cluster_is_rendered_without_listing_its_compute_nodes() -> None:
    """65,536 compute nodes, half a cloud group and half an on-prem range with an address range
    per /24: parsing, the rules, resolve and render take every count, check and hostlist from the
    counts and ranges, so no compute group's names or addresses are listed
    (``NodeGroup.hostnames``, ``NodeSet.names`` and ``NodeSet.addresses``, cached properties, stay
    unset), and the hostlists are the names' and addresses' own."""
    from clusterforge import hostlist
    from clusterforge.clusterspec import parse_spec
    from clusterforge.render import render

    data = yaml.safe_load((EXAMPLES / "hybrid.yaml").read_text())
    addresses = ",".join(f"10.50.{i}.[0-255]" for i in range(128))
    for g in data["node_groups"]:
        if g["name"] == "dgx":
            g["onprem"] = {"hosts": "dgx-[00001-32768]", "addresses": addresses, "profile": "dgx-h100"}
        elif g["name"] == "burst":
            g["cloud"]["count"] = 32768
    data["topology"] = {}
    spec = parse_spec(data)
    result = render(resolve(spec, base_dir=EXAMPLES))
    compute = [g for g in spec.node_groups if g.role == "compute"]
    assert [g.name for g in compute if "hostnames" in g.__dict__] == []
    conf = result.files["slurm/slurm.conf"].content
    assert "PartitionName=onprem Nodes=dgx-[00001-32768] " in conf
    assert f"NodeName=dgx-[00001-32768] NodeAddr={hostlist.compress(hostlist.expand(addresses))} " in conf
    assert "PartitionName=burst Nodes=burst-[00001-32768] " in conf
    m = build_model(resolve(spec, base_dir=EXAMPLES))
    assert [n.group for n in m.compute if "names" in n.__dict__ or "addresses" in n.__dict__] == []
    assert [n.count for n in m.compute] == [32768, 32768]
    for g in compute:  # the names, listed only now, are what the hostlists say
        assert hostlist.compress(g.hostnames) == {"dgx": "dgx-[00001-32768]", "burst": "burst-[00001-32768]"}[g.name]
