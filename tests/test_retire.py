"""Scale-in (clusterforge/aws/retire.py) against moto in server mode and a replayed Slurm.

The AWS side: a real moto 5.2.1 server on 127.0.0.1 (a free port), an Auto Scaling group of four
protected instances whose names were claimed with nodename.claim; the Slurm side: a runner that
replays scontrol/squeue output in 22.05's formats and records every command.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterforge.aws import nodename, retire
from clusterforge.local.aws import cloud

REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = cloud.start_moto("127.0.0.1", _free_port(), tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield server.endpoint
    finally:
        server.stop()


class Slurm:
    """Replays Slurm 22.05: ``squeue`` answers come from ``jobs`` (a list per call, the last one
    repeating), ``scontrol show job`` from ``show``; every argv is recorded."""

    def __init__(self, jobs: list[str] | None = None, show: dict[str, str] | None = None,
                 unknown: tuple[str, ...] = ()) -> None:
        self.jobs, self.show, self.unknown = jobs or [""], show or {}, unknown
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> str:
        assert 0 < timeout <= 60, "every Slurm call is bounded"
        self.calls.append(argv)
        if argv[:2] == ["scontrol", "update"] and argv[2].removeprefix("NodeName=") in self.unknown:
            # scontrol's answer for a node not in slurm.conf (exit status 1)
            raise retire.SlurmError(argv, "slurm_update error: Invalid node name specified")
        if argv[0] == "squeue":
            return self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]
        if argv[:3] == ["scontrol", "--oneliner", "show"]:
            return self.show[argv[4]]
        return ""


def _cluster(endpoint: str, cluster: str) -> dict[str, Any]:
    """A VPC, a launch template tagging like the plan's, a 4-instance protected group, the names
    table, and gpu-001..004 claimed by the group's instances (in launch order) and tagged."""
    ec2 = cloud.client("ec2", endpoint, REGION)
    asg = cloud.client("autoscaling", endpoint, REGION)
    ddb = cloud.client("dynamodb", endpoint, REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    tags = [{"Key": "clusterforge:cluster", "Value": cluster}, {"Key": "clusterforge:group", "Value": "gpu"}]
    lt = ec2.create_launch_template(
        LaunchTemplateName=f"{cluster}-gpu-lt",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro",
                            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}]},
    )["LaunchTemplate"]["LaunchTemplateId"]
    name = f"{cluster}-gpu-asg"
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=4, MaxSize=4, DesiredCapacity=4, VPCZoneIdentifier=subnet,
        LaunchTemplate={"LaunchTemplateId": lt, "Version": "$Latest"}, NewInstancesProtectedFromScaleIn=True,
        Tags=[{"Key": t["Key"], "Value": t["Value"], "PropagateAtLaunch": False} for t in tags],
    )
    table = cloud.node_names_table(cluster)
    ddb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "name",
                     "KeyType": "HASH"}], AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}])
    ids = [i["InstanceId"] for i in _group(asg, name)["Instances"]]
    assert len(ids) == 4
    by_name = {}
    for iid in ids:
        n = nodename.claim(ddb, ec2, table=table, group="gpu", names=[f"gpu-{i:03d}" for i in range(1, 5)],
                           instance_id=iid, address="10.0.1.9", deadline_s=30)
        ec2.create_tags(Resources=[iid], Tags=[{"Key": nodename.TAG_HOSTNAME, "Value": n}])
        by_name[n] = iid
    assert sorted(by_name) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    return {"ec2": ec2, "autoscaling": asg, "dynamodb": ddb, "asg": name, "table": table, "ids": by_name,
            "cluster": cluster}


def _group(asg: Any, name: str) -> dict[str, Any]:
    g: dict[str, Any] = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return g


def _states(c: dict[str, Any]) -> dict[str, str]:
    ids = list(c["ids"].values())
    res = c["ec2"].describe_instances(InstanceIds=ids)["Reservations"]
    by_id = {x["InstanceId"]: x["State"]["Name"] for r in res for x in r["Instances"]}
    return {n: by_id[i] for n, i in c["ids"].items()}


def _retire(c: dict[str, Any], nodes: list[str], slurm: Slurm, **kw: Any) -> dict[str, str]:
    return retire.retire(nodes, cluster=c["cluster"], region=REGION, autoscaling=c["autoscaling"], ec2=c["ec2"],
                         dynamodb=c["dynamodb"], table=c["table"], slurm=slurm,
                         drain_timeout_s=kw.pop("drain_timeout_s", 10), requeue=kw.pop("requeue", False), poll_s=0,
                         **kw)


def _names(c: dict[str, Any]) -> dict[str, str]:
    return {n: str(it["instance_id"]) for n, it in nodename.holders(c["dynamodb"], table=c["table"]).items()}


@pytest.mark.parametrize("order", ["retire-first", "pulumi-up-first"])
def test_retire_terminates_exactly_the_named_nodes(moto: str, order: str) -> None:
    c = _cluster(moto, f"r{order[0]}")
    asg = c["autoscaling"]
    if order == "pulumi-up-first":
        # what `pulumi up` with count 2 does to the group: min = max = desired = 2 ...
        asg.update_auto_scaling_group(AutoScalingGroupName=c["asg"], MinSize=2, MaxSize=2, DesiredCapacity=2)
        # ... and, the instances being protected, nothing is terminated (moto, like AWS)
        assert _states(c) == dict.fromkeys(c["ids"], "running")
        assert len(_group(asg, c["asg"])["Instances"]) == 4
    slurm = Slurm()
    done = _retire(c, ["gpu-003", "gpu-004"], slurm)

    assert _states(c) == {"gpu-001": "running", "gpu-002": "running", "gpu-003": "terminated",
                          "gpu-004": "terminated"}
    g = _group(asg, c["asg"])
    assert g["DesiredCapacity"] == 2
    assert g["MinSize"] == 2  # retire-first: lowered before the decrement (AWS refuses one below MinSize)
    assert sorted(i["InstanceId"] for i in g["Instances"]) == sorted([c["ids"]["gpu-001"], c["ids"]["gpu-002"]]), (
        "no replacement launched"
    )
    assert all(i["ProtectedFromScaleIn"] for i in g["Instances"]), "the survivors stay protected"
    assert _names(c) == {"gpu-001": c["ids"]["gpu-001"], "gpu-002": c["ids"]["gpu-002"]}
    assert slurm.calls[:2] == [
        ["scontrol", "update", "NodeName=gpu-003", "State=DRAIN", "Reason=scale-in: retired by clusterforge"],
        ["scontrol", "update", "NodeName=gpu-004", "State=DRAIN", "Reason=scale-in: retired by clusterforge"],
    ]
    assert slurm.calls[2][:2] == ["squeue", "--noheader"] and "--nodelist=gpu-003,gpu-004" in slurm.calls[2]
    desired = "desired 4 -> 3" if order == "retire-first" else "desired stays 2"
    assert done["gpu-003"] == f"terminated {c['ids']['gpu-003']} ({c['asg']}: {desired}); name released"

    # a second run changes nothing: the names are free, the group and the survivors untouched
    again = _retire(c, ["gpu-003", "gpu-004"], Slurm())
    assert again == {"gpu-003": "not claimed (nothing to do)", "gpu-004": "not claimed (nothing to do)"}
    g2 = _group(asg, c["asg"])
    assert (g2["DesiredCapacity"], g2["MinSize"], len(g2["Instances"])) == (2, 2, 2)
    assert _states(c)["gpu-001"] == "running"


def test_a_name_whose_holder_is_gone_is_just_released(moto: str) -> None:
    c = _cluster(moto, "rg")
    gone = c["ids"]["gpu-004"]
    # the holder died (e.g. a spot interruption) before the scale-in: plain EC2 termination
    c["autoscaling"].update_auto_scaling_group(AutoScalingGroupName=c["asg"], MinSize=3, MaxSize=3, DesiredCapacity=3)
    c["autoscaling"].detach_instances(InstanceIds=[gone], AutoScalingGroupName=c["asg"],
                                      ShouldDecrementDesiredCapacity=False)
    c["ec2"].terminate_instances(InstanceIds=[gone])
    done = _retire(c, ["gpu-004"], Slurm())
    assert done == {"gpu-004": f"holder {gone} already gone; name released"}
    assert "gpu-004" not in _names(c)
    assert _group(c["autoscaling"], c["asg"])["DesiredCapacity"] == 3


def test_a_holder_tagged_with_another_name_stops_before_any_termination(moto: str) -> None:
    c = _cluster(moto, "rt")
    c["ec2"].create_tags(Resources=[c["ids"]["gpu-004"]], Tags=[{"Key": nodename.TAG_HOSTNAME, "Value": "gpu-009"}])
    with pytest.raises(retire.RetireError, match="is tagged clusterforge:hostname=gpu-009") as e:
        _retire(c, ["gpu-003", "gpu-004"], Slurm())
    assert e.value.code == 2
    assert _states(c) == dict.fromkeys(c["ids"], "running"), "checked every holder before terminating any"
    assert sorted(_names(c)) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]


def test_cli_reads_the_agent_config_and_the_endpoint_file(moto: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    c = _cluster(moto, "rc")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", cloud.FAKE_CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", cloud.FAKE_CREDENTIALS["aws_secret_access_key"])
    cfg = tmp_path / "cloud-agent.json"
    cfg.write_text(json.dumps({"cluster": "rc", "region": REGION, "names_table": "rc-node-names"}))
    (tmp_path / "aws-endpoints.json").write_text(json.dumps({"endpoint_url": moto}))
    assert retire.main(["--config", str(cfg), "--nodes", "gpu-[003-004]", "--drain-timeout", "5"],
                       slurm=Slurm()) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["gpu-003", "gpu-004"]
    assert _states(c)["gpu-004"] == "terminated" and _states(c)["gpu-002"] == "running"

    cfg.write_text(json.dumps({"cluster": "rc", "region": REGION}))
    assert retire.main(["--config", str(cfg), "--nodes", "gpu-003"], slurm=Slurm()) == 2
    assert capsys.readouterr().err == (f"clusterforge-retire: error: {cfg} lacks names_table: written by an older "
                                       "clusterforge? run configure\n")
    assert retire.main(["--config", str(cfg), "--nodes", "gpu-[003-x]"], slurm=Slurm()) == 2
    assert "--nodes: bad range 003-x" in capsys.readouterr().err


# ------------------------------------------------------------------------------ Slurm side

# `squeue --noheader --format=%A|%u|%j|%N` lines and `scontrol --oneliner show job` (22.05 layout, trimmed)
SHOW_17 = ("JobId=17 JobName=train UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A Priority=4294901757 "
           "Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
           "BatchFlag=1 Reboot=0 ExitCode=0:0 NodeList=gpu-[003-004]")
SHOW_18 = SHOW_17.replace("JobId=17", "JobId=18").replace("Requeue=1", "Requeue=0").replace(
    "NodeList=gpu-[003-004]", "NodeList=gpu-004")


class NoAws:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"AWS touched ({name}) although the nodes were busy")


def test_busy_nodes_at_the_timeout_stop_before_aws() -> None:
    slurm = Slurm(jobs=["17|alice|train|gpu-[003-004]\n18|bob|eval|x|gpu-004\n"], show={"17": SHOW_17, "18": SHOW_18})
    with pytest.raises(retire.RetireError) as e:
        retire.retire(["gpu-003", "gpu-004"], cluster="c", region=REGION, autoscaling=NoAws(), ec2=NoAws(),
                      dynamodb=NoAws(), table="c-node-names", slurm=slurm, drain_timeout_s=0, requeue=False, poll_s=0)
    assert e.value.code == 3
    assert str(e.value) == (
        "scale-in stopped after 0 s: gpu-003 runs job 17; gpu-004 runs job 17, 18; nothing in AWS was changed "
        "(the nodes stay drained). Wait for the jobs, cancel them (scancel 17 18), or re-run with --requeue "
        "(requeues requeueable jobs) or a longer --drain-timeout"
    )
    assert not any(c[:2] == ["scontrol", "requeue"] for c in slurm.calls)


def test_requeue_requeues_only_requeueable_jobs_then_waits_for_the_rest() -> None:
    slurm = Slurm(jobs=["17|alice|train|gpu-[003-004]\n18|bob|eval|gpu-004\n", "18|bob|eval|gpu-004\n", ""],
                  show={"17": SHOW_17, "18": SHOW_18})
    retire.wait_idle(slurm, ["gpu-003", "gpu-004"], timeout_s=60, requeue=True, poll_s=0)
    assert [c for c in slurm.calls if c[:2] == ["scontrol", "requeue"]] == [["scontrol", "requeue", "17"]]
    assert sum(c[0] == "squeue" for c in slurm.calls) == 3


def test_a_node_slurm_no_longer_knows_is_not_waited_for() -> None:
    slurm = Slurm(unknown=("gpu-004",))
    assert retire.drain(slurm, ["gpu-003", "gpu-004"]) == ["gpu-003"]
    slurm.calls.clear()
    retire.wait_idle(slurm, ["gpu-003"], timeout_s=1, requeue=False, poll_s=0)
    assert "--nodelist=gpu-003" in slurm.calls[0]


def test_other_slurm_errors_are_reported() -> None:
    def broken(argv: list[str], timeout: float) -> str:
        raise retire.SlurmError(argv, "Unable to contact slurm controller (connect failure)")

    with pytest.raises(retire.SlurmError, match="connect failure"):
        retire.drain(broken, ["gpu-003"])


def test_default_runner_bounds_and_reports() -> None:
    assert retire.run(["sh", "-c", "echo ok"], 5) == "ok\n"
    with pytest.raises(retire.SlurmError, match="boom"):
        retire.run(["sh", "-c", "echo boom >&2; exit 1"], 5)
    with pytest.raises(retire.SlurmError, match=r"no answer within 0\.2s"):
        retire.run(["sleep", "5"], 0.2)


def test_moto_facts_the_module_docstring_states(moto: str) -> None:
    from botocore.parsers import ResponseParserError

    c = _cluster(moto, "rf")
    asg, name = c["autoscaling"], c["asg"]
    # a decrement below MinSize is accepted by moto (AWS refuses it): retire.py lowers MinSize itself
    asg.terminate_instance_in_auto_scaling_group(InstanceId=c["ids"]["gpu-004"], ShouldDecrementDesiredCapacity=True)
    g = _group(asg, name)
    assert (g["MinSize"], g["DesiredCapacity"], len(g["Instances"])) == (4, 3, 3)
    # a terminated instance is no member any more, and terminating it again is an HTTP 500 (an HTML
    # page botocore cannot parse)
    assert asg.describe_auto_scaling_instances(InstanceIds=[c["ids"]["gpu-004"]])["AutoScalingInstances"] == []
    with pytest.raises(ResponseParserError, match="500 Internal Server Error"):
        cloud.client("autoscaling", moto, REGION).terminate_instance_in_auto_scaling_group(
            InstanceId=c["ids"]["gpu-004"], ShouldDecrementDesiredCapacity=True)
    # unprotected instances: a lowered desired capacity terminates ones the group picks
    ids = [c["ids"][n] for n in ("gpu-001", "gpu-002", "gpu-003")]
    asg.set_instance_protection(AutoScalingGroupName=name, InstanceIds=ids, ProtectedFromScaleIn=False)
    asg.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=1, DesiredCapacity=1)
    assert len(_group(asg, name)["Instances"]) == 1
