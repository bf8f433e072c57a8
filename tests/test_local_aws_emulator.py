"""The emulated AWS of the local AWS flavour, on loopback only: the IMDSv2 stand-in (checked with
botocore's own credential and region fetchers) and moto in server mode filled from the plan."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterforge.local.aws import cloud
from clusterforge.local.aws.imds import InstanceData, SpotAction, make_server, read_data, write_data
from clusterforge.plan.mocks import run_program
from clusterforge.resolve import resolve
from tests.pulumi_helpers import example_data, spec

NET = "10.79.0"

# ----------------------------------------------------------------------------------- IMDS


@pytest.fixture
def imds(tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    data = tmp_path / "imds.json"
    write_data(
        data,
        InstanceData(
            instance_id="i-0abc", instance_type="p5.48xlarge", local_ipv4="10.79.0.7", region="us-east-1",
            availability_zone="us-east-1a", tags={"clusterforge:group": "gpu", "Name": "t-gpu"},
            user_data="#!/bin/bash\necho hello\n", role="t-node",
        ),
    )
    server = make_server("127.0.0.1", 0, data)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_address[1], data
    finally:
        server.shutdown()
        server.server_close()


def _req(port: int, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def _token(port: int, ttl: str = "60") -> str:
    status, body = _req(port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": ttl})
    assert status == 200
    return body


def test_imds_token_ttl_bounds_and_proxy_refusal(imds: tuple[str, int, Path]) -> None:
    _, port, _ = imds
    put = "/latest/api/token"
    ttl = "X-aws-ec2-metadata-token-ttl-seconds"
    assert _req(port, "PUT", put)[0] == 400  # no TTL header
    assert _req(port, "PUT", put, {ttl: "0"})[0] == 400
    assert _req(port, "PUT", put, {ttl: "21601"})[0] == 400
    assert _req(port, "PUT", put, {ttl: "abc"})[0] == 400
    assert _req(port, "PUT", put, {ttl: "1"})[0] == 200
    assert _req(port, "PUT", put, {ttl: "21600"})[0] == 200
    assert _req(port, "PUT", put, {ttl: "60", "X-Forwarded-For": "203.0.113.9"})[0] == 403
    assert _req(port, "POST", "/latest/meta-data/")[0] == 405


def test_imds_get_needs_a_valid_token(imds: tuple[str, int, Path]) -> None:
    _, port, _ = imds
    assert _req(port, "GET", "/latest/meta-data/instance-id") == (401, "")
    assert _req(port, "GET", "/latest/meta-data/instance-id", {"X-aws-ec2-metadata-token": "forged"})[0] == 401
    tok = {"X-aws-ec2-metadata-token": _token(port)}
    assert _req(port, "GET", "/latest/meta-data/instance-id", tok) == (200, "i-0abc")
    assert _req(port, "GET", "/latest/meta-data/local-ipv4", tok) == (200, "10.79.0.7")
    assert _req(port, "GET", "/latest/meta-data/placement/region", tok) == (200, "us-east-1")
    assert _req(port, "GET", "/latest/meta-data/tags/instance", tok) == (200, "Name\nclusterforge:group")
    assert _req(port, "GET", "/latest/meta-data/tags/instance/clusterforge:group", tok) == (200, "gpu")
    assert _req(port, "GET", "/latest/meta-data/events/maintenance/scheduled", tok) == (200, "[]")
    assert _req(port, "GET", "/latest/meta-data/iam/security-credentials/", tok) == (200, "t-node")
    assert _req(port, "GET", "/latest/user-data", tok) == (200, "#!/bin/bash\necho hello\n")
    assert _req(port, "GET", "/latest/meta-data/no-such-thing", tok)[0] == 404
    status, body = _req(port, "GET", "/latest/dynamic/instance-identity/document", tok)
    doc = json.loads(body)
    assert status == 200
    assert (doc["instanceId"], doc["region"], doc["availabilityZone"], doc["privateIp"], doc["instanceType"],
            doc["accountId"]) == ("i-0abc", "us-east-1", "us-east-1a", "10.79.0.7", "p5.48xlarge", "123456789012")


def test_imds_serves_a_spot_notice_and_new_tags_once_written(imds: tuple[str, int, Path]) -> None:
    _, port, data = imds
    tok = {"X-aws-ec2-metadata-token": _token(port)}
    assert _req(port, "GET", "/latest/meta-data/spot/instance-action", tok)[0] == 404
    before = read_data(data)
    write_data(data, dataclasses.replace(
        before, tags={"clusterforge:hostname": "gpu-003"},
        spot_action=SpotAction(action="terminate", time="2026-01-01T00:02:00Z"),
    ))
    status, body = _req(port, "GET", "/latest/meta-data/spot/instance-action", tok)
    assert (status, json.loads(body)) == (200, {"action": "terminate", "time": "2026-01-01T00:02:00Z"})
    assert _req(port, "GET", "/latest/meta-data/tags/instance/clusterforge:hostname", tok) == (200, "gpu-003")
    assert _req(port, "GET", "/latest/meta-data/tags/instance/Name", tok)[0] == 404


def test_botocore_gets_credentials_and_region_from_the_stand_in(imds: tuple[str, int, Path]) -> None:
    from botocore.credentials import InstanceMetadataProvider
    from botocore.utils import InstanceMetadataFetcher, InstanceMetadataRegionFetcher

    _, port, _ = imds
    url = f"http://127.0.0.1:{port}"
    creds = InstanceMetadataProvider(
        iam_role_fetcher=InstanceMetadataFetcher(base_url=url, timeout=2, num_attempts=1)
    ).load()
    assert creds is not None
    frozen = creds.get_frozen_credentials()
    assert (frozen.access_key, frozen.secret_key, frozen.token) == (
        "EMULATEDLOCALACCESSKEY", "emulated-local-secret-access-key", "emulated-local-session-token"
    )
    assert InstanceMetadataRegionFetcher(base_url=url, timeout=2, num_attempts=1).retrieve_region() == "us-east-1"


# ----------------------------------------------------------------------------------- moto


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _small_p5() -> dict[str, object]:
    """p5-training with 3 GPU and 2 CPU instances (the program's resources are the same)."""
    data = example_data("p5-training")
    for g in data["node_groups"]:
        if g["name"] == "gpu":
            g["cloud"]["count"] = 3
            # a block already running at the pinned now (tests/conftest.py), so the ASG starts full
            g["cloud"]["capacity"].update(start="2026-11-30T11:30:00Z", end="2026-12-14T11:30:00Z")
        if g["name"] == "cpu":
            g["cloud"]["count"] = 2
    return data


def test_moto_runs_the_plans_groups_and_replaces_a_terminated_instance(tmp_path: Path) -> None:
    from tests.pulumi_helpers import EXAMPLES

    rc = resolve(spec(_small_p5()), base_dir=EXAMPLES)
    recording = run_program(rc, preview=True)
    lt_gpu = next(r for r in recording.of_type(cloud.LT) if r.name == "p5-training-gpu-lt")
    gpu_user_data = base64.b64decode(lt_gpu.inputs["userData"]).decode()
    assert gpu_user_data.startswith("#!/bin/bash\n")

    log = tmp_path / "moto.log"
    server = cloud.start_moto("127.0.0.1", _free_port(), log)
    try:
        populated = cloud.populate(server.endpoint, rc, recording, net=NET)
        assert populated.asg_names == {"gpu": "p5-training-gpu-asg", "cpu": "p5-training-cpu-asg"}
        assert set(populated.head_instance_ids) == {"head-001", "login-001"}
        assert populated.table == "p5-training-node-names"

        found = cloud.instances(server.endpoint, "p5-training", region="us-east-1")
        # 2 heads, 3 GPU, 2 CPU, addresses from NET.4 in launch order: heads first.
        assert sorted(int(i.private_ip.rsplit(".", 1)[1]) for i in found if i.private_ip) == [4, 5, 6, 7, 8, 9, 10]
        by_id = {i.instance_id: i for i in found}
        assert by_id[populated.head_instance_ids["head-001"]].private_ip == f"{NET}.4"
        assert by_id[populated.head_instance_ids["head-001"]].role == "controller"
        assert by_id[populated.head_instance_ids["head-001"]].user_data.startswith(
            "#!/bin/bash\n# clusterforge: prepare a controller node of p5-training/head"
        )
        gpu = [i for i in found if i.group == "gpu" and i.state == "running"]
        assert len(gpu) == 3
        assert sorted(i.private_ip for i in gpu) == [f"{NET}.6", f"{NET}.7", f"{NET}.8"]  # after head, login
        for i in gpu:
            assert i.tags["clusterforge:cluster"] == "p5-training"
            assert i.tags["clusterforge:group"] == "gpu"
            assert i.tags["clusterforge:role"] == "compute"
            assert i.tags["aws:autoscaling:groupName"] == "p5-training-gpu-asg"
            assert i.instance_type == "p5.48xlarge"
            assert i.user_data == gpu_user_data

        autoscaling = cloud.client("autoscaling", server.endpoint, "us-east-1")
        # the plan's scale-in protection reached the group: only retire picks who leaves
        group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["p5-training-gpu-asg"])
        members = group["AutoScalingGroups"][0]["Instances"]
        assert len(members) == 3 and all(m["ProtectedFromScaleIn"] for m in members), members
        gone = gpu[0].instance_id
        autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=gone, ShouldDecrementDesiredCapacity=False)
        after = cloud.instances(server.endpoint, "p5-training", region="us-east-1")
        running = [i for i in after if i.group == "gpu" and i.state == "running"]
        assert len(running) == 3
        assert gone not in {i.instance_id for i in running}
        new = {i.instance_id for i in running} - {i.instance_id for i in gpu}
        assert len(new) == 1
        replacement = next(i for i in running if i.instance_id in new)
        assert replacement.private_ip == f"{NET}.11"
        assert replacement.user_data == gpu_user_data
        assert replacement.tags["clusterforge:role"] == "compute"
        assert next(i for i in after if i.instance_id == gone).state == "terminated"
    finally:
        server.stop()
    assert not server.daemon.alive()


def test_start_moto_names_the_log_when_the_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        log = tmp_path / "moto.log"
        with pytest.raises(cloud.EmulatorError, match=str(log)):
            cloud.start_moto("127.0.0.1", port, log, timeout=20)
