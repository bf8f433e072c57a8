"""Topology follows the instances: DescribeInstanceTopology parsing, the saved raw response in
``render``, the cloud agent's file == the renderer's, the agent's write/reconfigure rules, the stand-in.

Responses follow AWS's documented shape (DescribeInstanceTopology API reference: Instances[] with
InstanceId, InstanceType, NetworkNodes top first, AvailabilityZone, ZoneId, CapacityBlockId; NextToken).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from clusterforge.aws import cloud_agent, ec2topology
from clusterforge.render.tree import build_tree

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TOP, MID, LEAF_A, LEAF_B = "nn-0a1b2c3d4e5f60718", "nn-1a1b2c3d4e5f60718", "nn-2a1b2c3d4e5f60718", "nn-3a1b2c3d4e5f60718"


def _inst(iid: str, nodes: list[str], itype: str = "p5.48xlarge") -> dict[str, Any]:
    return {"InstanceId": iid, "InstanceType": itype, "GroupName": "", "NetworkNodes": nodes,
            "AvailabilityZone": "us-east-1a", "ZoneId": "use1-az6", "CapacityBlockId": "cr-0a1b2c3d4e5f67890"}


TOPOLOGY = {"Instances": [
    _inst("i-0000000000000001", [TOP, MID, LEAF_A]),
    _inst("i-0000000000000002", [TOP, MID, LEAF_A]),
    _inst("i-0000000000000003", [TOP, MID, LEAF_B]),
    _inst("i-0000000000000004", []),  # launched, not reported yet
]}


def _tagged(iid: str, name: str) -> dict[str, Any]:
    return {"InstanceId": iid, "Tags": [{"Key": "clusterforge:cluster", "Value": "p5-training"},
                                        {"Key": "clusterforge:hostname", "Value": name}]}


INSTANCES = {"Reservations": [{"Instances": [_tagged(f"i-000000000000000{k}", f"gpu-00{k}") for k in range(1, 5)]}]}

# by hand: gpu-004 (no NetworkNodes yet) and the c7i CPU group (not supported) keep aws-<group>
EXPECTED_LINES = [
    f"SwitchName={LEAF_A} Nodes=gpu-[001-002]",
    f"SwitchName={LEAF_B} Nodes=gpu-003",
    "SwitchName=aws-cpu Nodes=cpu-[001-004]",
    "SwitchName=aws-gpu Nodes=gpu-004",
    f"SwitchName={MID} Switches={LEAF_A},{LEAF_B}",
    f"SwitchName={TOP} Switches=aws-cpu,aws-gpu,{MID}",
]


def _client() -> Any:
    return boto3.client("ec2", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


def test_parser_three_and_four_levels_and_pending() -> None:
    four = _inst("i-0000000000000009", ["nn-a", "nn-b", "nn-c", "nn-d"], "p6-b200.48xlarge")
    got = {i.instance_id: i for i in ec2topology.parse_response({"Instances": [*TOPOLOGY["Instances"], four]})}
    assert got["i-0000000000000001"].network_nodes == (TOP, MID, LEAF_A)
    assert got["i-0000000000000009"].network_nodes == ("nn-a", "nn-b", "nn-c", "nn-d")
    assert got["i-0000000000000001"].capacity_block_id == "cr-0a1b2c3d4e5f67890"
    assert "i-0000000000000004" not in got
    sw = {s.name: s for s in build_tree({"compute": [["gpu", "gpu-[1-2]", True]]},
                                        {"gpu-1": ["nn-a", "nn-b", "nn-c", "nn-d"], "gpu-2": [TOP, MID, LEAF_A]})}
    assert sw["nn-d"].nodes == "gpu-1" and sw["nn-c"].switches == "nn-d" and sw["nn-a"].switches == "nn-b"
    assert sw["ec2-root"].switches == f"{TOP},nn-a"  # two top layers: one synthetic root, names sorted


def test_describe_chunks_of_100_and_follows_next_token() -> None:
    ec2 = _client()
    ids = [f"i-{k:017x}" for k in range(250)]
    with Stubber(ec2) as st:
        # chunk 1 comes in two pages (NextToken), chunks 2 and 3 in one each; i-..0 never reported
        st.add_response("describe_instance_topology", {"Instances": [_inst(i, [TOP, MID, LEAF_A]) for i in ids[1:60]],
                                                       "NextToken": "t1"},
                        {"InstanceIds": ids[:100]})
        st.add_response("describe_instance_topology", {"Instances": [_inst(i, [TOP, MID, LEAF_B]) for i in ids[60:100]]},
                        {"InstanceIds": ids[:100], "NextToken": "t1"})
        st.add_response("describe_instance_topology", {"Instances": [_inst(i, [TOP, MID, LEAF_B]) for i in ids[100:200]]},
                        {"InstanceIds": ids[100:200]})
        st.add_response("describe_instance_topology", {"Instances": [_inst(i, []) for i in ids[200:]]},
                        {"InstanceIds": ids[200:]})
        topo = ec2topology.describe_topology(ec2, reversed(ids))
        st.assert_no_pending_responses()
    assert len(topo.instances) == 199
    assert topo.pending == {ids[0], *ids[200:]}
    assert topo.instances[ids[99]].network_nodes == (TOP, MID, LEAF_B)


def test_names_from_tags_skip_other_clusters_and_unnamed() -> None:
    resp = {"Reservations": [{"Instances": [
        _tagged("i-1", "gpu-001"),
        {"InstanceId": "i-2", "Tags": [{"Key": "clusterforge:cluster", "Value": "other"},
                                       {"Key": "clusterforge:hostname", "Value": "gpu-001"}]},
        {"InstanceId": "i-3", "Tags": [{"Key": "clusterforge:cluster", "Value": "p5-training"}]},
    ]}]}
    assert ec2topology.names_from_reservations(resp, "p5-training") == {"i-1": "gpu-001"}
    with pytest.raises(ec2topology.TopologyFormatError, match="Reservations"):
        ec2topology.names_from_reservations({"Instances": []})


def _spec(tmp: Path, topology: str) -> Path:
    # p5-training targets 23.11: these cases are about topology.conf (25.05's topology.yaml is below)
    spec = (EXAMPLES / "p5-training.yaml").read_text().replace("count: 16", "count: 4") + topology
    (tmp / "s.yaml").write_text(spec)
    return tmp / "s.yaml"


def _render(spec: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "clusterforge.cli", "render", str(spec), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)


def test_render_cli_takes_saved_raw_responses(tmp_path: Path) -> None:
    (tmp_path / "topo.json").write_text(json.dumps(TOPOLOGY))
    (tmp_path / "inst.json").write_text(json.dumps(INSTANCES))
    spec = _spec(tmp_path, "topology:\n  ec2_instance_topology: topo.json\n  ec2_instances: inst.json\n")
    p = _render(spec, tmp_path / "out")
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "out/slurm/topology.conf").read_text()
    assert [ln for ln in text.splitlines() if ln.startswith("SwitchName=")] == EXPECTED_LINES
    assert "TopologyPlugin=topology/tree" in (tmp_path / "out/slurm/slurm.conf").read_text()


def test_raw_response_without_instances_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "topo.json").write_text(json.dumps(TOPOLOGY))
    p = _render(_spec(tmp_path, "topology:\n  ec2_instance_topology: topo.json\n"), tmp_path / "out")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "topology.ec2_instances is not set" in p.stderr and "describe-instances" in p.stderr
    (tmp_path / "topo.json").write_text(json.dumps({"Instances": [{"InstanceId": "i-1", "NetworkNodes": "nn-1"}]}))
    (tmp_path / "inst.json").write_text(json.dumps(INSTANCES))
    p = _render(_spec(tmp_path, "topology:\n  ec2_instance_topology: topo.json\n  ec2_instances: inst.json\n"),
                tmp_path / "out")
    assert p.returncode == 2 and "NetworkNodes" in p.stderr and "Traceback" not in p.stderr


class FakeEc2:
    """DescribeInstances / DescribeInstanceTopology answering the saved responses (one page each)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def describe_instances(self, **kw: Any) -> dict[str, Any]:
        self.calls.append("describe_instances")
        return INSTANCES

    def describe_instance_topology(self, **kw: Any) -> dict[str, Any]:
        self.calls.append("describe_instance_topology")
        return {"Instances": [i for i in TOPOLOGY["Instances"] if i["InstanceId"] in kw["InstanceIds"]]}


def test_agent_file_equals_renderer_file_and_writes_only_on_change(tmp_path: Path) -> None:
    # the renderer from the saved responses ...
    (tmp_path / "topo.json").write_text(json.dumps(TOPOLOGY))
    (tmp_path / "inst.json").write_text(json.dumps(INSTANCES))
    spec = _spec(tmp_path, "topology:\n  ec2_instance_topology: topo.json\n  ec2_instances: inst.json\n")
    assert _render(spec, tmp_path / "with").returncode == 0
    # ... and the agent from the config a render without them ships to the controller
    assert _render(_spec(tmp_path, "topology:\n  plugin: tree\n"), tmp_path / "agent").returncode == 0
    cfg = json.loads((tmp_path / "agent/cloud/agent.json").read_text())
    assert cfg["topology_path"] == "/etc/slurm/topology.conf"
    cfg["topology_path"] = str(tmp_path / "etc/topology.conf")
    (tmp_path / "etc").mkdir()
    ran: list[list[str]] = []
    cloud_agent.tick(cfg, FakeEc2(), str(ROOT / "templates"), lambda argv: ran.append(list(argv)), now=None)  # type: ignore[arg-type]
    written = Path(cfg["topology_path"])
    assert written.read_bytes() == (tmp_path / "with/slurm/topology.conf").read_bytes()
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert ran == [["scontrol", "reconfigure"]]
    before = written.stat().st_mtime_ns, written.stat().st_ino
    cloud_agent.tick(cfg, FakeEc2(), str(ROOT / "templates"), lambda argv: ran.append(list(argv)), now=None)  # type: ignore[arg-type]
    assert ran == [["scontrol", "reconfigure"]]  # unchanged: no write, no reconfigure
    assert (written.stat().st_mtime_ns, written.stat().st_ino) == before
    assert sorted(p.name for p in written.parent.iterdir()) == ["topology.conf"]  # no temp file left


def test_agent_survives_aws_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(FakeEc2):
        def describe_instances(self, **kw: Any) -> dict[str, Any]:
            raise ConnectionError("endpoint unreachable")

    cfg = {"cluster": "c", "region": "us-east-1", "slurm_version": "22.05", "topology_path": str(tmp_path / "t.conf"),
           "topology": {"compute": [["gpu", "gpu-1", True]], "tree_required": True}, "capacity_blocks": []}
    ran: list[Any] = []
    cloud_agent.tick(cfg, Broken(), str(ROOT / "templates"), ran.append, now=None)  # type: ignore[arg-type]
    assert ran == [] and not (tmp_path / "t.conf").exists()
    assert "retrying next tick" in capsys.readouterr().out


def test_write_if_changed_is_atomic_replace(tmp_path: Path) -> None:
    target = tmp_path / "topology.conf"
    target.write_text("old\n")
    ino = target.stat().st_ino
    assert cloud_agent.write_if_changed(str(target), "new\n")
    assert target.read_text() == "new\n" and target.stat().st_ino != ino  # a new file renamed over
    assert not cloud_agent.write_if_changed(str(target), "new\n")


def test_agent_yaml_for_2505_equals_renderer(tmp_path: Path) -> None:
    from clusterforge.clusterspec.loader import load_spec
    from clusterforge.render import render_cluster
    spec = (EXAMPLES / "hybrid.yaml").read_text().replace('version: "23.11"', 'version: "25.05"')
    (tmp_path / "s.yaml").write_text(spec)
    res = render_cluster(load_spec(tmp_path / "s.yaml"), base_dir=EXAMPLES)
    # 25.05 reads topology.yaml instead of topology.conf: the render has it and not the .conf
    assert "slurm/topology.yaml" in res.files and "slurm/topology.conf" not in res.files
    cfg = json.loads(res.files["cloud/agent.json"].content)
    assert cfg["topology_path"] == "/etc/slurm/topology.yaml"
    assert cloud_agent.topology_text(cfg, {}, str(ROOT / "templates")) == res.files["slurm/topology.yaml"].content


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def test_standin_answers_from_moto_with_pagination(tmp_path: Path) -> None:
    pytest.importorskip("moto")
    port = _free_port()
    placements = tmp_path / "placements.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "clusterforge.local.aws.ec2server", "-H", "127.0.0.1", "-p", str(port),
                          "--placements", str(placements)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline and p.poll() is None, "stand-in did not start"
                time.sleep(0.2)
        ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}",
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        ids = [i["InstanceId"] for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=5, MaxCount=5,
                                                           InstanceType="p5.48xlarge")["Instances"]]
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m7i.large")  # not reported
        pages, token = [], None
        while True:
            r = ec2.describe_instance_topology(MaxResults=2, **({"NextToken": token} if token else {}))
            pages.append(r["Instances"])
            token = r.get("NextToken")
            if not token:
                break
        assert [len(pg) for pg in pages] == [2, 2, 1]
        got = {i["InstanceId"]: i["NetworkNodes"] for pg in pages for i in pg}
        assert set(got) == set(ids)
        # default rule: one spine; leaves of 2 by launch order
        assert len({n[0] for n in got.values()}) == 1
        assert got[ids[0]][2] == got[ids[1]][2] != got[ids[2]][2]
        assert all(len(x) == 20 and x.startswith("nn-") for n in got.values() for x in n)
        placements.write_text(json.dumps({ids[4]: ["nn-a", "nn-b", "nn-c", "nn-d"]}))
        assert ec2.describe_instance_topology(InstanceIds=[ids[4]])["Instances"][0]["NetworkNodes"] == [
            "nn-a", "nn-b", "nn-c", "nn-d"]
        with pytest.raises(Exception, match="InvalidParameterCombination"):
            ec2.describe_instance_topology(InstanceIds=[ids[0]], MaxResults=5)
        assert len(ec2.describe_instances()["Reservations"]) == 2  # everything else is moto's

        # a botocore older than the operation (Debian 12's 1.29) has no client method: the same
        # Query request through botocore's signer gives the client's answer, errors included
        from clusterforge.aws import ec2query, ec2topology

        class OldClient:
            """The client as an old botocore builds it: everything but describe_instance_topology."""

            def __init__(self, c: object) -> None:
                self.meta, self._request_signer = c.meta, c._request_signer  # type: ignore[attr-defined]

        old = OldClient(ec2)
        assert not hasattr(old, "describe_instance_topology")
        assert ec2topology.describe_topology(old, ids).instances == ec2topology.describe_topology(ec2, ids).instances
        assert ec2query.describe_instance_topology(old, MaxResults=2)["Instances"] == pages[0]
        assert ec2query.describe_instance_topology(old, MaxResults=2)["NextToken"]
        with pytest.raises(ec2query.Ec2QueryError, match="InvalidParameterCombination"):
            ec2query.describe_instance_topology(old, InstanceIds=[ids[0]], MaxResults=5)
    finally:
        p.terminate()
        p.wait(10)
