"""Spot notices and capacity-block windows against the real Slurm 22.05 daemons.

The harness is tests/test_slurm_cloud_nodes.py's (slurmctld and two slurmds in network namespaces,
here ``cflife-*`` on 10.84.0.0/24, a private munged); the node agent and capacity.tick run in the
controller's namespace, calling the real scontrol/squeue/scancel. Expected values are what the
daemons print (reasons, Restarts=1, Flags=MAINT), written by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clusterforge.aws import capacity
from clusterforge.local.aws.imds import InstanceData, SpotAction, write_data

from .slurm_netns import cloud_slurm, wait

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        shutil.which("slurmctld") is None or os.geteuid() != 0,
        reason="needs Debian's slurmctld/slurmd and root (CI installs them and runs as root)",
    ),
]
NET = "10.84.0"
NS = ("cflife-ctl", "cflife-n1", "cflife-n2")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def life_cluster() -> Iterator[dict[str, object]]:
    # Slurm 22.05 holds a requeued job for the credential lifetime (cred_expire, 120 s by
    # default) before it starts again: 5 s keeps the requeue test short
    with cloud_slurm(NET, NS, cluster="cfl", auth_extra=",cred_expire=5") as c:
        yield c


def node(ctl: Callable[..., str], name: str) -> dict[str, str]:
    from clusterforge.aws.slurmcmd import fields

    return fields(ctl("scontrol", "show", "node", "-o", name).strip())


def job(ctl: Callable[..., str], jid: str) -> dict[str, str]:
    from clusterforge.aws.slurmcmd import fields

    return fields(ctl("scontrol", "show", "job", "-o", jid).strip())


SCRIPT = """#!/bin/bash
#SBATCH --requeue
#SBATCH --signal=B:USR1@30
#SBATCH -o /dev/null
trap 'echo got USR1 > {w}/usr1-${{SLURM_RESTART_COUNT:-0}}' USR1
sleep 300 &
wait
sleep 300
"""


def test_spot_notice_drains_signals_and_requeues(life_cluster: dict[str, object]) -> None:
    ctl: Callable[..., str] = life_cluster["ctl"]  # type: ignore[assignment]
    slurmd: Callable[[str, str], subprocess.Popen[bytes]] = life_cluster["slurmd"]  # type: ignore[assignment]
    start: Callable[[list[str], str], subprocess.Popen[bytes]] = life_cluster["start"]  # type: ignore[assignment]
    w: Path = life_cluster["w"]  # type: ignore[assignment]
    slurmd(NS[1], "c-001")
    wait("c-001 idle", lambda: node(ctl, "c-001").get("State") == "IDLE+CLOUD")
    (w / "job.sh").write_text(SCRIPT.format(w=w))
    keep = ctl("sbatch", "--parsable", "--no-requeue", "-n1", "-o", "/dev/null", "--wrap", "sleep 300").strip()
    jid = ctl("sbatch", "--parsable", "-n1", str(w / "job.sh")).strip()
    wait("both jobs running on c-001", lambda: all(job(ctl, j).get("JobState") == "RUNNING" for j in (jid, keep)))
    slurmd(NS[2], "c-002")
    wait("c-002 idle", lambda: node(ctl, "c-002").get("State") == "IDLE+CLOUD")

    notice = (datetime.now(UTC) + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = w / "imds.json"
    write_data(data, InstanceData("i-0abc", "c7i.large", f"{NET}.11", "us-east-1", "us-east-1a",
                                  spot_action=SpotAction("terminate", notice)))
    start([*ctl_cmd(w), sys.executable, "-m", "clusterforge.local.aws.imds", "--bind", f"{NET}.1",
           "--port", "8111", "--data", str(data)], "imds.out")
    wait("metadata stand-in", lambda: "serving" in (w / "imds.out").read_text())
    (w / "agent.json").write_text(json.dumps({"grace_s": 3, "margin_s": 0, "state_path": str(w / "agent-state")}))
    out = ctl("env", f"PYTHONPATH={ROOT}", f"CLUSTERFORGE_IMDS_URL=http://{NET}.1:8111", sys.executable, "-m",
              "clusterforge.aws.node_agent", "--once", "--node", "c-001", "--config", str(w / "agent.json"),
              timeout=60)
    n1 = node(ctl, "c-001")
    assert "DRAIN" in n1["State"], out
    assert n1["Reason"].split(" [")[0] == f"spot interruption: terminate at {notice}", out
    assert sorted(p.name for p in w.glob("usr1-*")) == ["usr1-0"], out
    assert (w / "usr1-0").read_text() == "got USR1\n", out
    # a requeued job waits cred_expire (AuthInfo; 120 s by default, 5 s here) before it starts again
    wait("job requeued and running on c-002",
         lambda: (job(ctl, jid).get("Restarts"), job(ctl, jid).get("JobState"), job(ctl, jid).get("NodeList"))
         == ("1", "RUNNING", "c-002"), limit=30)
    k = job(ctl, keep)
    assert (k["JobState"], k["Restarts"], k["NodeList"]) == ("RUNNING", "0", "c-001"), out
    assert f"job {keep}: not requeueable (Requeue=0); left to run" in out


def ctl_cmd(w: Path) -> list[str]:
    return ["ip", "netns", "exec", NS[0], "unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
            str(w / "hosts"), "env", f"SLURM_CONF={w}/slurm.conf"]


def test_capacity_block_reservation_and_drain(life_cluster: dict[str, object]) -> None:
    ctl: Callable[..., str] = life_cluster["ctl"]  # type: ignore[assignment]
    begin = datetime(2027, 1, 4, 11, 30, tzinfo=UTC)
    block = {"group": "c", "nodes": "c-[001-002]", "reservation_id": "cr-0a1b2c3d4e5f67890",
             "start": "2027-01-04T11:30:00Z", "end": "2027-01-18T11:30:00Z", "drain_at": "2027-01-18T10:30:00Z"}
    cfg = {"capacity_blocks": [block]}
    # compressed: 1 real second = 1 virtual minute; the block starts 20 virtual minutes from now
    clock = capacity.Clock.from_args(60.0, "2027-01-04T11:10:00Z")
    scontrol = lambda *a: ctl("scontrol", *a)  # noqa: E731
    assert capacity.tick(cfg, clock.now(), slurm=scontrol, clock=clock) == [
        "reservation cb-c holds c-[001-002] until the block starts at 2027-01-04T11:30:00Z"]
    res = ctl("scontrol", "show", "reservation", "-o", "cb-c")
    from clusterforge.aws.slurmcmd import fields

    r = fields(res.strip())
    assert (r["Nodes"], r["Users"]) == ("c-[001-002]", "root"), res
    assert set(r["Flags"].split(",")) >= {"MAINT", "IGNORE_JOBS"}, res
    assert capacity.tick(cfg, clock.now(), slurm=scontrol, clock=clock) == []  # idempotent
    real_end = datetime.fromisoformat(r["EndTime"]).astimezone(UTC)  # local time, as scontrol prints it
    assert abs((real_end - clock.real(begin)).total_seconds()) <= 1, res
    assert capacity.tick(cfg, begin, slurm=scontrol, clock=clock) in (
        [], ["reservation cb-c deleted: block cr-0a1b2c3d4e5f67890 started at 2027-01-04T11:30:00Z"])
    assert "cb-c" not in ctl("scontrol", "show", "reservation")
    reason = "capacity block cr-0a1b2c3d4e5f67890 ends at 2027-01-18T11:30:00Z"
    assert capacity.tick(cfg, datetime(2027, 1, 18, 10, 29, tzinfo=UTC), slurm=scontrol, clock=clock) == []
    assert capacity.tick(cfg, datetime(2027, 1, 18, 10, 30, tzinfo=UTC), slurm=scontrol, clock=clock) == [
        f"drained c-001,c-002: {reason}"]
    for n in ("c-001", "c-002"):
        got = node(ctl, n)
        assert "DRAIN" in got["State"] and got["Reason"].split(" [")[0] == reason, got
    assert capacity.tick(cfg, datetime(2027, 1, 18, 10, 31, tzinfo=UTC), slurm=scontrol, clock=clock) == []
