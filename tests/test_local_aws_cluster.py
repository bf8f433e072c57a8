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
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from clusterforge.local import LocalCluster, missing_prerequisites
from clusterforge.local.aws.flavour import ec2_leaves, slurm_leaves
from tests.local_shell import sh

ROOT = Path(__file__).resolve().parents[1]
# neither the demo's 10.79.0.0/24 nor the on-prem test's 10.81.0.0/24; CLUSTERFORGE_LOCAL_AWS_TEST_NET
# moves it (an A.B.0.0/24: the example's VPC 10.79.0.0/16 becomes A.B.0.0/16)
NET = os.environ.get("CLUSTERFORGE_LOCAL_AWS_TEST_NET", "10.82.0.0/24")
AB = ".".join(NET.split(".")[:2])
GPUS = ["p5-001", "p5-002", "p5-003", "p5-004"]
CB_ID = "cr-0a1b2c3d4e5f60718"
ALL = sorted([*GPUS, "cb-001", "head-001"])
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
    text = (ROOT / "examples" / "local-aws.yaml").read_text().replace("10.79.", f"{AB}.")
    # plus one node of a Capacity Block that started an hour ago (so its group runs at full size)
    # and ends in two days; the capacity-block test moves the agent's clock, not the block
    start, end = ((datetime.now(UTC) + timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ") for h in (-1, 48))
    assert "\n# topology/tree from the start" in text and text.count("partitions:\n") == 1
    text = text.replace("\n# topology/tree from the start", f"""
  - name: cb
    role: compute
    cloud:
      instance_type: p5.48xlarge
      count: 1
      subnet: private-a
      capacity: {{type: capacity_block, reservation_id: {CB_ID}, start: "{start}", end: "{end}"}}
    fabric: {{type: ethernet, socket_ifname: "=eth0"}}
# topology/tree from the start""").replace("partitions:\n", """partitions:
  - {name: cb, node_groups: [cb], max_time: "1-00:00:00"}
""")
    spec.write_text(text)
    lc = LocalCluster(tmp / "state")
    try:
        up = lc.up(spec, net=NET, progress=print)
        assert up.configure is not None and up.configure.ok, up.configure and up.configure.failures
        yield lc, dict(up.seconds)
    finally:
        lc.down()
    # nothing left: no namespace of this network, no cgroup folder a node's slurmd made
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"cf{AB.split('.')[1]}-" not in ns, ns
    left = [c for c in Path("/sys/fs/cgroup").glob("*/slurm_*") if c.name in {f"slurm_{n}" for n in ALL}]
    assert left == [], left


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
    assert sorted(n.name for n in layout.nodes) == ALL
    ids = [n.instance_id for n in layout.nodes]
    assert all(i and i.startswith("i-") for i in ids) and len(set(ids)) == len(ALL)
    assert len({n.address for n in layout.nodes}) == len(ALL)
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


def test_topology_follows_the_instances(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    """The controller's cloud agent asked the (stand-in) DescribeInstanceTopology where each
    instance sits and slurmctld has every compute node under that leaf switch."""
    lc, _ = cluster
    want = ec2_leaves(lc.aws())
    assert sorted(want) == sorted([*GPUS, "cb-001"]), want
    assert len(set(want.values())) > 1, f"the stand-in put every instance under one leaf: {want}"
    wait_for("scontrol show topology to place every node under its EC2 leaf",
             lambda: slurm_leaves(lc.aws()) == want, 120, every=3)
    conf = sh(lc, "head-001", "cat /etc/slurm/topology.conf")
    assert "aws-p5" not in conf, conf  # the per-group fallback leaf is gone once EC2 answered


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
    assert sorted(hosts) == ALL
    assert sorted(data["local_aws_p5"]["hosts"]) == GPUS
    for n in layout.nodes:
        addr = hosts[n.name]["ansible_host"]
        # ansible-core 2.19 marks values from an inventory plugin as unsafe in --list output
        assert (addr.get("__ansible_unsafe") if isinstance(addr, dict) else addr) == n.address


def test_a_terminated_instance_is_replaced_and_its_node_rejoins(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    """Terminate p5-003's instance in its Auto Scaling group (as a spot reclaim or a failed health
    check does) while a requeueable 4-node job runs: the node goes DOWN with the instance's reason,
    the job requeues, the group's replacement claims p5-003, and after `local rejoin` (one host
    configured) p5-003 is back with the new address and the job runs again."""
    from clusterforge.local.cluster import in_netns

    lc, _ = cluster
    layout = lc.layout()
    old = layout.node("p5-003")
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
    assert re.search(rf"p5-003: DOWN, instance {old.instance_id} (terminated|shutting-down)", p.stdout), p.stdout

    print(p.stdout)
    new = lc.layout().node("p5-003")
    assert new.instance_id != old.instance_id and new.address != old.address
    info = node_info(lc, "p5-003")
    assert info["NodeAddr"] == new.address, info
    assert sh(lc, "p5-003", "hostname").strip() == "p5-003"
    # the other nodes were not touched: the same instances as before
    for name in ("p5-001", "p5-002", "p5-004"):
        assert lc.layout().node(name).instance_id == layout.node(name).instance_id

    def rerun() -> bool:
        j = sh(lc, "head-001", f"scontrol show job {job}")
        return "JobState=RUNNING" in j and "Restarts=1" in j

    wait_for("the requeued job to run again on the four nodes", rerun, 300, every=5)
    print(f"\nreplacement to rejoined node: {rejoin_s:.1f} s")
    sh(lc, "head-001", f"scancel {job}")


def test_the_replacement_moves_to_the_leaf_ec2_reports(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    """p5-003's replacement was launched under another network node (the stand-in places
    instances by launch order): the agent moves p5-003 to that leaf, nothing else moves."""
    lc, _ = cluster
    want = ec2_leaves(lc.aws())
    wait_for("p5-003 under the replacement's leaf in scontrol show topology",
             lambda: slurm_leaves(lc.aws()) == want, 120, every=3)
    assert slurm_leaves(lc.aws())["p5-003"] == want["p5-003"]


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
        some_gpu = lc.layout().node("p5-001").instance_id
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
    assert f"instance {bad} lacks tag clusterforge:group=p5" in notes[0], notes
    live = [i for i in lc.status()["instances"].values() if i["state"] != "gone" and i["name"]]
    assert sorted(i["name"] for i in live) == ALL
    with in_netns(aws.bridge_ns):
        ec2.terminate_instances(InstanceIds=[bad])
    wait_for("the hypervisor to stop it", lambda: lc.status()["instances"][bad]["state"] == "gone", 60)


def test_status_names_every_instance(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    lc, _ = cluster
    st = lc.status()
    live = [i for i in st["instances"].values() if i["state"] != "gone"]
    assert sorted(i["name"] for i in live) == ALL
    assert st["notes"] == []


CHECKPOINT_JOB = """#!/bin/bash
#SBATCH --signal=B:USR1@60
#SBATCH --requeue
#SBATCH -N1 -p gpu -o /tmp/cf-spot-%j.out
# a checkpointing job: it asks for USR1 and saves its state when the signal comes
trap 'echo "checkpoint restart=${SLURM_RESTART_COUNT:-0} host=$(hostname)" >> /tmp/cf-spot-ckpt' USR1
while true; do sleep 1; done
"""


def test_a_spot_notice_drains_signals_and_requeues(cluster: tuple[LocalCluster, dict[str, float]]) -> None:
    """A spot notice served by the node's metadata stand-in: the node agent drains the node with
    the notice's reason before its time, the job that asked for USR1 gets it, and the requeueable
    job runs again on another node."""
    import shlex

    from clusterforge.local.aws.flavour import interrupt

    lc, _ = cluster
    job = sh(lc, "head-001", f"printf %s {shlex.quote(CHECKPOINT_JOB)} > /root/ckpt.sh && sbatch --parsable /root/ckpt.sh").strip()
    info = wait_for("the checkpointing job to run", lambda: (lambda j: j if "JobState=RUNNING" in j else None)(
        sh(lc, "head-001", f"scontrol show job {job} -o")), 60)
    node = re.search(r" NodeList=(\S+)", info).group(1)
    when = interrupt(lc.aws(), node, lead_s=120)
    deadline = datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    try:
        reason = f"spot interruption: terminate at {when}"
        wait_for(f"{node} drained with the notice's reason",
                 lambda: reason in sh(lc, "head-001", f"scontrol show node {node} -o"), 60, every=1)
        assert datetime.now(UTC) < deadline, "drained after the instance would have gone"
        wait_for("the USR1 checkpoint on the interrupted node",
                 lambda: "checkpoint restart=0 host=" + node in sh(lc, node, "cat /tmp/cf-spot-ckpt 2>/dev/null || true"),
                 60, every=1)

        def rerun() -> str | None:
            j = sh(lc, "head-001", f"scontrol show job {job} -o")
            return j if "JobState=RUNNING" in j and "Restarts=1" in j else None

        again = wait_for("the requeued job to run again", rerun, 240, every=3)
        assert f" NodeList={node} " not in again, again  # elsewhere: the interrupted node is drained
    finally:
        sh(lc, "head-001", f"scancel {job}")

    # EC2 takes the instance at the notice's time; the group's replacement claims the name, joins,
    # and its node agent lifts the previous instance's drain: the name takes work again by itself
    from clusterforge.local.cluster import in_netns

    aws = lc.aws()
    old = lc.layout().node(node).instance_id
    with in_netns(aws.bridge_ns):
        _ec2, asg, _ddb = aws.clients()
        asg.terminate_instance_in_auto_scaling_group(InstanceId=old, ShouldDecrementDesiredCapacity=False)
    p = subprocess.run([*CLI, "local", "rejoin", "--state", str(lc.state)], capture_output=True, text=True,
                       timeout=1200, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert lc.layout().node(node).instance_id != old

    def serving() -> bool:
        info = node_info(lc, node)
        return "DRAIN" not in info["State"] and info["State"].split("+")[0] == "IDLE"

    wait_for(f"{node}'s replacement to take work without an operator's resume", serving, 60, every=2)


def test_capacity_block_nodes_wait_for_the_block_and_drain_before_its_end(
    cluster: tuple[LocalCluster, dict[str, float]],
) -> None:
    """With the cloud agent's clock set 20 s before the block's start, cb-001 is held in the
    maintenance reservation cb-cb (a job for it waits) until the start; with the clock 5 s before
    the drain time (end - 60 min), the node is drained with the block's reason."""
    lc, _ = cluster
    cfg = json.loads(sh(lc, "head-001", "cat /etc/clusterforge/cloud-agent.json"))
    block = next(b for b in cfg["capacity_blocks"] if b["group"] == "cb")
    start = datetime.fromisoformat(block["start"].replace("Z", "+00:00"))
    drain_at = datetime.fromisoformat(block["drain_at"].replace("Z", "+00:00"))
    iso = "%Y-%m-%dT%H:%M:%SZ"
    sh(lc, "head-001", "clusterforge-svc stop clusterforge-cloud-agent")
    try:
        agent = "clusterforge-cloud-agent --config /etc/clusterforge/cloud-agent.json --interval 1"
        run1 = lc.on("head-001", f"timeout 60 {agent} --clock-start {(start - timedelta(seconds=20)).strftime(iso)} "
                     "--run-for 30 > /tmp/cb-run1.log 2>&1 &", timeout=30)
        assert run1.returncode == 0, run1.stderr
        res = wait_for("the maintenance reservation cb-cb", lambda: (lambda r: r if "Nodes=cb-001" in r else None)(
            sh(lc, "head-001", "scontrol show reservation cb-cb 2>/dev/null || true")), 15, every=0.5)
        assert "MAINT" in res, res
        job = sh(lc, "head-001", "sbatch --parsable -p cb -N1 --wrap 'sleep 300'").strip()
        time.sleep(3)
        assert "JobState=PENDING" in sh(lc, "head-001", f"scontrol show job {job} -o")
        wait_for("the reservation to end at the block's start",
                 lambda: "cb-cb" not in sh(lc, "head-001", "scontrol show reservation 2>&1 || true"), 40, every=1)
        wait_for("the job to start on cb-001 once the block is active",
                 lambda: "JobState=RUNNING" in sh(lc, "head-001", f"scontrol show job {job} -o"), 60, every=2)
        sh(lc, "head-001", f"scancel {job}")
        run2 = lc.on("head-001", f"timeout 40 {agent} --clock-start {(drain_at - timedelta(seconds=5)).strftime(iso)} "
                     "--run-for 20 > /tmp/cb-run2.log 2>&1", timeout=60)
        assert run2.returncode == 0, sh(lc, "head-001", "cat /tmp/cb-run2.log")
        line = sh(lc, "head-001", "scontrol show node cb-001 -o")
        assert f"Reason=capacity block {CB_ID} ends at {block['end']}" in line or "DRAIN" in line, line
        assert f"capacity block {CB_ID} ends at" in line, line
    finally:
        sh(lc, "head-001", "scontrol update nodename=cb-001 state=resume || true; "
                           "scontrol delete reservation=cb-cb 2>/dev/null || true; clusterforge-svc start clusterforge-cloud-agent")


def test_scale_in_by_two_drains_and_terminates_the_same_two_nodes(
    cluster: tuple[LocalCluster, dict[str, float]],
) -> None:
    """`clusterforge local retire p5-[003-004]` (the diff's drain list for count 4 -> 2): those two
    nodes are drained with the scale-in reason, exactly their instances terminate, the group's
    desired capacity is 2 and no replacement is launched; p5-001/002 keep their instances."""
    from clusterforge.aws import nodename
    from clusterforge.aws.outputs import names_table
    from clusterforge.local.cluster import in_netns

    lc, _ = cluster
    before = {n.name: n.instance_id for n in lc.layout().nodes}
    p = subprocess.run([*CLI, "local", "retire", "p5-[003-004]", "--requeue", "--state", str(lc.state)],
                       capture_output=True, text=True, timeout=900, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    for n in ("p5-003", "p5-004"):
        assert "Reason=scale-in: retired by clusterforge" in sh(lc, "head-001", f"scontrol show node {n} -o")
    aws = lc.aws()
    with in_netns(aws.bridge_ns):
        ec2, asg, ddb = aws.clients()
        states = {}
        for r in ec2.describe_instances(Filters=[{"Name": "tag:clusterforge:cluster", "Values": ["local-aws"]}])["Reservations"]:
            for i in r["Instances"]:
                states[i["InstanceId"]] = i["State"]["Name"]
        groups = asg.describe_auto_scaling_groups()["AutoScalingGroups"]
        held = nodename.holders(ddb, table=names_table("local-aws"))
    gone = {iid for iid, st in states.items() if st in ("shutting-down", "terminated")}
    assert {before["p5-003"], before["p5-004"]} <= gone
    for n in ("p5-001", "p5-002", "cb-001", "head-001"):
        assert states[before[n]] == "running", (n, states)
    gpu = next(g for g in groups if any(t["Key"] == "clusterforge:group" and t["Value"] == "p5" for t in g.get("Tags", [])))
    assert gpu["DesiredCapacity"] == 2, gpu
    live = [i for i in gpu["Instances"] if i["LifecycleState"] in ("Pending", "InService")]
    assert sorted(i["InstanceId"] for i in live) == sorted([before["p5-001"], before["p5-002"]]), live
    assert "p5-003" not in held and "p5-004" not in held, held
