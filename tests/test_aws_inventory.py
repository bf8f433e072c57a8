"""The generated aws_ec2.yml read by the real ``amazon.aws.aws_ec2`` plugin against moto's EC2.

An Auto Scaling group of 4 is launched from a launch template carrying the plan's tag
specifications; the 4 instances are tagged ``clusterforge:hostname`` gpu-001..gpu-004 as the
boot-time claim does, a 5th instance of the group is left unclaimed. ``ansible-inventory`` must
list exactly the 4 claimed names with their own private IPs, and never the unclaimed one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterforge import proc
from clusterforge.inventory import Ec2Access, build_inventory, write_inventory
from clusterforge.resolve import resolve_file
from tests.pulumi_helpers import EXAMPLES, LT, ROOT, one, run_example

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")
COLLECTION = Path.home() / ".ansible" / "collections" / "ansible_collections" / "amazon" / "aws"
pytestmark = pytest.mark.skipif(
    shutil.which("ansible-inventory") is None or not COLLECTION.is_dir(),
    reason="ansible-core or the amazon.aws collection is not installed",
)

REGION = "us-east-1"  # examples/p5-training.yaml
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _client(service: str, endpoint: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint, **KEYS)


def _boto_tag_specs() -> list[dict[str, Any]]:
    """The gpu launch template's tag specifications exactly as the program registers them."""
    lt = one(run_example("p5-training"), LT, "p5-training-gpu-lt")
    return [
        {"ResourceType": s["resourceType"], "Tags": [{"Key": k, "Value": v} for k, v in sorted(s["tags"].items())]}
        for s in lt.inputs["tagSpecifications"]
    ]


@pytest.fixture(scope="module")
def fleet(endpoint: str) -> dict[str, Any]:
    """4 ASG instances tagged gpu-001..gpu-004 (the claim's tag) plus one unclaimed instance."""
    ec2, asg = _client("ec2", endpoint), _client("autoscaling", endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.16.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    lt = ec2.create_launch_template(
        LaunchTemplateName="p5-training-gpu-lt",
        LaunchTemplateData={"ImageId": ami, "InstanceType": "p5.48xlarge", "TagSpecifications": _boto_tag_specs()},
    )["LaunchTemplate"]["LaunchTemplateId"]
    asg.create_auto_scaling_group(
        AutoScalingGroupName="p5-training-gpu-asg",
        LaunchTemplate={"LaunchTemplateId": lt, "Version": "$Latest"},
        MinSize=4, MaxSize=4, DesiredCapacity=4,
        VPCZoneIdentifier=subnet["SubnetId"],
    )
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["p5-training-gpu-asg"])["AutoScalingGroups"][0]
    ids = sorted(i["InstanceId"] for i in group["Instances"])
    assert len(ids) == 4
    for n, iid in enumerate(ids, start=1):
        ec2.create_tags(Resources=[iid], Tags=[{"Key": "clusterforge:hostname", "Value": f"gpu-{n:03d}"}])
    extra = ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": lt}, MinCount=1, MaxCount=1, SubnetId=subnet["SubnetId"]
    )["Instances"][0]["InstanceId"]
    described = {
        i["InstanceId"]: i
        for r in ec2.describe_instances(InstanceIds=[*ids, extra])["Reservations"]
        for i in r["Instances"]
    }
    tags = {t["Key"]: t["Value"] for t in described[extra].get("Tags", [])}
    # the unclaimed instance is otherwise a full member of the group (the plan's tags), so only
    # the missing hostname tag keeps it out
    assert tags.get("clusterforge:group") == "gpu" and tags.get("clusterforge:cluster") == "p5-training", tags
    return {"ids": ids, "extra": extra, "ips": {iid: described[iid]["PrivateIpAddress"] for iid in ids}}


def _plain(value: Any) -> Any:
    """``ansible-inventory --list`` marks values that came from the cloud as unsafe (not templated)."""
    if isinstance(value, dict) and set(value) == {"__ansible_unsafe"}:
        return value["__ansible_unsafe"]
    return value


def _inventory(tmp_path: Path, endpoint: str, **override: Any) -> dict[str, Any]:
    inv = build_inventory(
        resolve_file(EXAMPLES / "p5-training.yaml"),
        stack_outputs=run_example("p5-training").outputs,
        ec2_access=Ec2Access(endpoint, "testing", "testing"),
    )
    assert inv.aws_ec2 is not None
    inv.aws_ec2.update(override)
    write_inventory(inv, tmp_path)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(Path.home()),
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }
    cp = proc.run(["ansible-inventory", "-i", str(tmp_path), "--list"], timeout=300, env=env, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    data: dict[str, Any] = json.loads(cp.stdout)
    return data


def test_claimed_names_are_the_hosts(tmp_path: Path, endpoint: str, fleet: dict[str, Any]) -> None:
    data = _inventory(tmp_path, endpoint)
    assert data["p5_training_gpu"]["hosts"] == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    hv = data["_meta"]["hostvars"]
    by_name = {f"gpu-{n:03d}": iid for n, iid in enumerate(fleet["ids"], start=1)}
    for name, iid in by_name.items():
        assert (_plain(hv[name]["ansible_host"]), _plain(hv[name]["instance_id"])) == (fleet["ips"][iid], iid)
        assert hv[name]["clusterforge_node_group"] == "gpu", "group_vars of the static tree apply"
    assert fleet["extra"] not in {_plain(v.get("instance_id")) for v in hv.values()}, "the unclaimed instance is no host"
    # the role groups of hosts.yml hold the plugin's group
    assert "p5_training_gpu" in data["slurm_compute"]["children"]


def test_without_claims_there_are_no_hosts_not_one_shared_name(
    tmp_path: Path, endpoint: str, fleet: dict[str, Any]
) -> None:
    ec2 = _client("ec2", endpoint)
    ec2.delete_tags(Resources=fleet["ids"], Tags=[{"Key": "clusterforge:hostname"}])
    try:
        old = _inventory(tmp_path / "old", endpoint, hostnames=["tag:clusterforge:hostname", "tag:Name"])
        # the previous fallback to the group's Name tag: five instances collapse into one host
        assert old["p5_training_gpu"]["hosts"] == ["p5-training-gpu"]
        now = _inventory(tmp_path / "now", endpoint)
        ours = set(fleet["ids"]) | {fleet["extra"]}
        assert not ours & {_plain(v.get("instance_id")) for v in now["_meta"]["hostvars"].values()}
        assert now.get("p5_training_gpu", {}).get("hosts", []) == []
    finally:
        for n, iid in enumerate(fleet["ids"], start=1):
            ec2.create_tags(Resources=[iid], Tags=[{"Key": "clusterforge:hostname", "Value": f"gpu-{n:03d}"}])
