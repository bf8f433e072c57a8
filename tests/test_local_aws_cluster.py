"""End to end on an emulated AWS: the plan's instances name themselves, run jobs, and a replacement rejoins.

``clusterforge local up`` on the AWS example: moto's server (EC2, Auto Scaling, DynamoDB) is
populated from the Pulumi program's recording (launch templates with their real user data, a
fixed-size Auto Scaling group of 4 GPU instances, the controller instance, the node-name table);
every instance moto runs boots as a node namespace with an instance-metadata stand-in at
169.254.169.254, runs its user data and claims a Slurm name; ``configure`` runs the production
playbook through the real ``amazon.aws.aws_ec2`` inventory. Then an instance is terminated in its
group while a requeueable job runs across all four nodes, and ``clusterforge local rejoin`` must
bring the replacement in under the freed name, with its new address, and the job must run again.

Every wait is bounded; the module fixture tears the cluster down even when a step fails.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterforge.local import LocalCluster, missing_prerequisites

ROOT = Path(__file__).resolve().parents[1]
NET = "10.82.0.0/24"  # neither the demo's 10.79.0.0/24 nor the on-prem test's 10.81.0.0/24
GPUS = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
CLI = [sys.executable, "-c", "from clusterforge.cli import main; main()"]

pytestmark = [pytest.mark.local]
_why = missing_prerequisites()
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, float]]]:
    tmp = tmp_path_factory.mktemp("localaws")
    spec = tmp / "local-aws.yaml"
    # the example's private subnet is the demo network; this test runs on a /24 of its own
    spec.write_text((ROOT / "examples" / "local-aws.yaml").read_text().replace("10.79.", "10.82."))
    lc = LocalCluster(tmp / "state")
    try:
        up = lc.up(spec, net=NET, progress=print)
        assert up.configure is not None and up.configure.ok, up.configure and up.configure.failures
        yield lc, dict(up.seconds)
    finally:
        lc.down()
    # nothing left: no namespace of this network, no cgroup folder a node's slurmd made
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert "cf82-" not in ns, ns
    left = [c for c in Path("/sys/fs/cgroup").glob("*/slurm_*") if c.name in {f"slurm_{n}" for n in [*GPUS, "head-001"]}]
    assert left == [], left


def sh(lc: LocalCluster, node: str, script: str, timeout: float = 60) -> str:
    import shlex

    p = lc.on(node, f"timeout {int(timeout)} bash -c {shlex.quote(script)}", timeout=timeout + 15)
    assert p.returncode == 0, f"{node}: {script}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def wait_for(what: str, probe: Any, timeout: float, every: float = 2.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def node_info(lc: LocalCluster, name: str) -> dict[str, str]:
    line = sh(lc, "head-001", f"scontrol show node {name} -o")
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def test_every_instance_is_one_uniquely_named_node(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    lc, seconds = cluster
    layout = lc.layout()
    assert sorted(n.name for n in layout.nodes) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "head-001"]
    ids = [n.instance_id for n in layout.nodes]
    assert all(i and i.startswith("i-") for i in ids) and len(set(ids)) == 5
    assert len({n.address for n in layout.nodes}) == 5
    # each instance set its own hostname from its claim
    for n in layout.nodes:
        assert sh(lc, n.name, "hostname").strip() == n.name
    print(f"\nphases: {json.dumps({k: round(v, 1) for k, v in seconds.items()})}")


def test_gpu_nodes_register_with_their_gres_and_own_address(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    lc, _ = cluster
    for n in lc.layout().nodes:
        if n.role != "compute":
            continue
        info = node_info(lc, n.name)
        assert info["NodeAddr"] == n.address, info
        # 8 H100 on sockets 0-1: gres.conf's Cores= binding as slurmd reports it
        assert info["Gres"] == "gpu:h100:8(S:0-1)", info
        assert info["State"].split("+")[0] == "IDLE", info


def test_srun_spans_the_four_named_nodes(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    lc, _ = cluster
    out = sh(lc, "head-001", "srun -N4 -p gpu hostname", timeout=90)
    assert sorted(out.split()) == GPUS


def test_inventory_is_the_real_aws_ec2_plugin(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    """The generated aws_ec2.yml, read by ansible-inventory against the emulated EC2: one host per
    instance, named as Slurm names it, in its node group's inventory group."""
    import os
    import shutil

    from clusterforge.local.aws.flavour import aws_env
    from clusterforge.local.cluster import in_netns

    lc, _ = cluster
    layout = lc.layout()
    inv = lc.state / "inventory" / layout.cluster
    assert (inv / "aws_ec2.yml").is_file()
    binary = shutil.which("ansible-inventory")
    assert binary
    with in_netns(f"{layout.prefix}-br"):
        p = subprocess.run(
            [binary, "-i", str(inv / "aws_ec2.yml"), "--list"], capture_output=True, text=True, timeout=120,
            env={**os.environ, **aws_env(layout.net, "us-east-1")}, check=False,
        )
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    hosts = data["_meta"]["hostvars"]
    assert sorted(hosts) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "head-001"]
    assert sorted(data["local_aws_gpu"]["hosts"]) == GPUS
    for n in layout.nodes:
        addr = hosts[n.name]["ansible_host"]
        # ansible-core 2.19 marks values from an inventory plugin as unsafe in --list output
        assert (addr.get("__ansible_unsafe") if isinstance(addr, dict) else addr) == n.address


def test_a_terminated_instance_is_replaced_and_its_node_rejoins(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    """Terminate gpu-003's instance in its Auto Scaling group (as a spot reclaim or a failed health
    check does) while a requeueable 4-node job runs: the node goes DOWN with the instance's reason,
    the job requeues, the group's replacement claims gpu-003, and after `local rejoin` (one host
    configured) gpu-003 is back with the new address and the job runs again."""
    from clusterforge.local.cluster import in_netns

    lc, _ = cluster
    layout = lc.layout()
    old = layout.node("gpu-003")
    job = sh(lc, "head-001", "sbatch --parsable --requeue -N4 -p gpu --wrap 'sleep 900'").strip()
    wait_for("the 4-node job to run", lambda: "JobState=RUNNING" in sh(lc, "head-001", f"scontrol show job {job}"), 60)

    aws = lc.aws()
    with in_netns(aws.bridge_ns):
        _ec2, asg, _ddb = aws.clients()
        asg.terminate_instance_in_auto_scaling_group(InstanceId=old.instance_id, ShouldDecrementDesiredCapacity=False)
    t0 = time.monotonic()
    p = subprocess.run([*CLI, "local", "rejoin", "--state", str(lc.state)], capture_output=True, text=True,
                       timeout=1200, check=False)
    rejoin_s = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(rf"gpu-003: DOWN, instance {old.instance_id} (terminated|shutting-down)", p.stdout), p.stdout

    print(p.stdout)
    new = lc.layout().node("gpu-003")
    assert new.instance_id != old.instance_id and new.address != old.address
    info = node_info(lc, "gpu-003")
    assert info["NodeAddr"] == new.address, info
    assert sh(lc, "gpu-003", "hostname").strip() == "gpu-003"
    # the other nodes were not touched: the same instances as before
    for name in ("gpu-001", "gpu-002", "gpu-004"):
        assert lc.layout().node(name).instance_id == layout.node(name).instance_id

    def rerun() -> bool:
        j = sh(lc, "head-001", f"scontrol show job {job}")
        return "JobState=RUNNING" in j and "Restarts=1" in j

    wait_for("the requeued job to run again on the four nodes", rerun, 300, every=5)
    print(f"\nreplacement to rejoined node: {rejoin_s:.1f} s")
    sh(lc, "head-001", f"scancel {job}")


def test_an_instance_without_its_tags_is_reported_never_named(
    cluster: tuple[LocalCluster, dict[str, float]],
) -> None:
    """An instance launched with the GPU group's user data but without its group tag: the claim
    refuses it (exit 2) and tags why; `local status` reports it, no node gets a second holder."""
    from clusterforge.local.cluster import in_netns

    lc, _ = cluster
    aws = lc.aws()
    cloud = json.loads((lc.state / "cloud.json").read_text())
    with in_netns(aws.bridge_ns):
        ec2, _asg, _ddb = aws.clients()
        some_gpu = lc.layout().node("gpu-001").instance_id
        ud = ec2.describe_instance_attribute(InstanceId=some_gpu, Attribute="userData")["UserData"]["Value"]
        import base64

        bad = ec2.run_instances(
            ImageId=cloud["image_id"], InstanceType="p5.48xlarge", MinCount=1, MaxCount=1,
            SubnetId=cloud["subnet_id"], UserData=base64.b64decode(ud).decode(),
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "clusterforge:cluster", "Value": "local-aws"}, {"Key": "clusterforge:role", "Value": "compute"},
            ]}],
        )["Instances"][0]["InstanceId"]

    def reported() -> list[str]:
        return [n for n in lc.status()["notes"] if n.startswith(bad) and "claim failed" in n]

    notes = wait_for("the untagged instance's failed claim in local status", reported, 240, every=3)
    assert f"instance {bad} lacks tag clusterforge:group=gpu" in notes[0], notes
    live = [i for i in lc.status()["instances"].values() if i["state"] != "gone" and i["name"]]
    assert sorted(i["name"] for i in live) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "head-001"]
    with in_netns(aws.bridge_ns):
        ec2.terminate_instances(InstanceIds=[bad])
    wait_for("the hypervisor to stop it", lambda: lc.status()["instances"][bad]["state"] == "gone", 60)


def test_status_names_every_instance(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    lc, _ = cluster
    st = lc.status()
    live = [i for i in st["instances"].values() if i["state"] != "gone"]
    assert sorted(i["name"] for i in live) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "head-001"]
    assert st["notes"] == []
