"""The node agent against the IMDS stand-in, with Slurm's commands recorded (no daemons here;
tests/test_slurm_lifecycle.py runs the same agent against real slurmctld/slurmd)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from clusterforge.aws import node_agent, slurmcmd
from clusterforge.local.aws.imds import InstanceData, SpotAction, make_server, write_data

SCRIPT_B = "#!/bin/bash\n#SBATCH --requeue\n# a comment\n\n#SBATCH --signal=B:USR1@90\nsleep 300\n"


class FakeSlurm:
    def __init__(self, jobs: dict[str, tuple[str, str]]) -> None:
        self.jobs = jobs  # job id -> (batch script or "" for none, Requeue value)
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *cmd: str, timeout: float = 0) -> str:
        self.calls.append(cmd)
        if cmd[:2] == ("squeue", "-h"):
            return "\n".join(self.jobs) + "\n"
        if cmd[1:3] == ("write", "batch_script"):
            script = self.jobs[cmd[3]][0]
            if not script:
                raise slurmcmd.SlurmError(cmd, "exit 1", "job has no batch script")
            return script
        if cmd[1:3] == ("show", "job"):
            return f"JobId={cmd[4]} JobName=x Requeue={self.jobs[cmd[4]][1]} Restarts=0\n"
        return ""


@pytest.fixture
def imds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, InstanceData]]:
    data = InstanceData("i-0abc", "c7i.large", "10.0.0.5", "us-east-1", "us-east-1a")
    path = tmp_path / "imds.json"
    write_data(path, data)
    srv = make_server("127.0.0.1", 0, path)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("CLUSTERFORGE_IMDS_URL", f"http://127.0.0.1:{srv.server_address[1]}")
    yield path, data
    srv.shutdown()
    srv.server_close()


def agent(tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch, sleeps: list[float],
          now: str = "2026-12-01T13:00:00Z") -> node_agent.Agent:
    monkeypatch.setattr(slurmcmd, "run", fake)
    cfg: dict[str, Any] = {"grace_s": 60, "margin_s": 15, "state_path": str(tmp_path / "state.json")}
    t = datetime.fromisoformat(now.replace("Z", "+00:00"))
    return node_agent.Agent("c-001", cfg, node_agent.Imds(), now=lambda: t, sleep=sleeps.append)


def test_no_notice_no_action(imds: tuple[Path, InstanceData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm({})
    agent(tmp_path, fake, monkeypatch, []).poll()
    assert fake.calls == []


def test_spot_notice_drains_signals_waits_and_requeues(
    imds: tuple[Path, InstanceData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = imds
    from dataclasses import replace

    write_data(path, replace(data, spot_action=SpotAction("terminate", "2026-12-01T13:02:00Z")))
    fake = FakeSlurm({"7": (SCRIPT_B, "1"), "8": ("#!/bin/sh\nsleep 1\n", "0"), "9": ("", "1")})
    sleeps: list[float] = []
    a = agent(tmp_path, fake, monkeypatch, sleeps)
    a.poll()
    assert fake.calls[0] == ("scontrol", "update", "NodeName=c-001", "State=DRAIN",
                             "Reason=spot interruption: terminate at 2026-12-01T13:02:00Z")
    assert ("scancel", "--signal=USR1", "--batch", "7") in fake.calls
    assert not [c for c in fake.calls if c[0] == "scancel" and c[-1] != "7"]
    assert sleeps == [60.0]  # grace 60 s < 120 s to the action minus the 15 s margin
    assert [c for c in fake.calls if c[1] == "requeue"] == [("scontrol", "requeue", "7"), ("scontrol", "requeue", "9")]
    n = len(fake.calls)
    a.poll()  # the same notice: handled once
    assert len(fake.calls) == n
    again = agent(tmp_path, fake, monkeypatch, sleeps)  # a restarted agent remembers it too
    again.poll()
    assert len(fake.calls) == n


def test_grace_is_cut_before_the_action_time(
    imds: tuple[Path, InstanceData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = imds
    from dataclasses import replace

    write_data(path, replace(data, spot_action=SpotAction("terminate", "2026-12-01T13:02:00Z")))
    fake = FakeSlurm({"7": ("#!/bin/bash\n#SBATCH --signal=USR2\nsrun x\n", "1")})
    sleeps: list[float] = []
    agent(tmp_path, fake, monkeypatch, sleeps, now="2026-12-01T13:01:30Z").poll()
    assert ("scancel", "--signal=USR2", "7") in fake.calls  # no B: -> the steps
    assert sleeps == [15.0]  # 30 s left - 15 s margin


def test_scheduled_event_reason_and_inactive_events_ignored(
    imds: tuple[Path, InstanceData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = imds
    from dataclasses import replace

    events = [
        {"Code": "system-reboot", "Description": "[Canceled] scheduled reboot", "EventId": "instance-event-1",
         "NotBefore": "21 Jan 2027 09:00:43 GMT", "NotAfter": "21 Jan 2027 09:17:23 GMT", "State": "canceled"},
        {"Code": "instance-retirement", "Description": "scheduled retirement", "EventId": "instance-event-2",
         "NotBefore": "22 Jan 2027 09:00:00 GMT", "NotAfter": "22 Jan 2027 11:00:00 GMT", "State": "active"},
    ]
    write_data(path, replace(data, maintenance_events=events))
    fake = FakeSlurm({})
    agent(tmp_path, fake, monkeypatch, []).poll()
    drains = [c for c in fake.calls if c[1] == "update"]
    assert drains == [("scontrol", "update", "NodeName=c-001", "State=DRAIN",
                       "Reason=scheduled event instance-retirement: not before 22 Jan 2027 09:00:00 GMT")]


def test_imds_down_is_retried_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERFORGE_IMDS_URL", "http://127.0.0.1:9")  # discard port: refused
    fake = FakeSlurm({})
    a = agent(tmp_path, fake, monkeypatch, [])
    a.imds.timeout = 0.5
    a.poll()
    assert fake.calls == []


def test_slurm_down_leaves_the_notice_for_the_next_poll(
    imds: tuple[Path, InstanceData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = imds
    from dataclasses import replace

    write_data(path, replace(data, spot_action=SpotAction("stop", "2026-12-01T13:02:00Z")))

    def down(*cmd: str, timeout: float = 0) -> str:
        raise slurmcmd.SlurmError(cmd, "exit 1", "Unable to contact slurm controller")

    a = agent(tmp_path, FakeSlurm({}), monkeypatch, [])
    monkeypatch.setattr(slurmcmd, "run", down)
    a.poll()
    assert a.handled == set()


@pytest.mark.parametrize(
    ("script", "want"),
    [
        ("#!/bin/bash\n#SBATCH --signal=B:USR1@90\n", ("USR1", True)),
        ("#!/bin/bash\n#SBATCH --signal R:10@30 # comment\n", ("10", False)),
        ("#!/bin/bash\n#SBATCH -N1\n\n#SBATCH --signal=TERM\n", ("TERM", False)),
        ("#!/bin/bash\necho hi\n#SBATCH --signal=USR1\n", None),  # after a command: sbatch ignores it
        ("#!/bin/bash\n#SBATCH --signal=B:USR1\n#SBATCH --signal=USR2@5\n", ("USR2", False)),  # last wins
        ("#!/bin/bash\n  #SBATCH --signal=USR1\n", None),  # indented: not a directive
    ],
)
def test_batch_signal(script: str, want: tuple[str, bool] | None) -> None:
    assert node_agent.batch_signal(script) == want


def test_slurmcmd_errors_name_the_command() -> None:
    with pytest.raises(slurmcmd.SlurmError) as e:
        slurmcmd.run("sh", "-c", "echo oops >&2; exit 3")
    assert str(e.value) == "sh -c echo oops >&2; exit 3: exit 3: oops"
    with pytest.raises(slurmcmd.SlurmError, match=r"no answer within 0\.2s"):
        slurmcmd.run("sleep", "5", timeout=0.2)
    with pytest.raises(slurmcmd.SlurmError, match="no-such-binary"):
        slurmcmd.run("no-such-binary-cf")


class NodeSlurm(FakeSlurm):
    """FakeSlurm that also answers `scontrol show node -o` with one node line as 22.05 prints it."""

    def __init__(self, state: str, reason: str) -> None:
        super().__init__({})
        self.line = (f"NodeName=c-001 Arch=x86_64 CoresPerSocket=1 State={state} ThreadsPerCore=1 "
                     f"Reason={reason} [root@2026-12-01T12:59:00]\n")

    def __call__(self, *cmd: str, timeout: float = 0) -> str:
        if cmd[1:3] == ("show", "node"):
            self.calls.append(cmd)
            return self.line
        return super().__call__(*cmd, timeout=timeout)


RESUME = ("scontrol", "update", "NodeName=c-001", "State=RESUME")
MINE = "i-0aaaabbbbcccc1111"  # this instance's id, as its metadata serves it


@pytest.mark.parametrize(
    ("state", "reason", "resumed"),
    [
        # the rejoin step's DOWN reason names the departed instance: not this one (i-0abc)
        ("IDLE+DRAIN", "instance i-0123456789abcdef0 terminated", True),
        # the previous instance's spot drain, and this instance has no notice
        ("IDLE+DRAIN", "spot interruption: terminate at 2026-12-01T12:58:00Z", True),
        ("DOWN+DRAIN", "scheduled event instance-stop: not before 1 Dec 2026 12:00:00 GMT", True),
        # drains that are not about an earlier instance stay
        ("IDLE+DRAIN", f"instance {MINE} terminated", False),
        ("IDLE+DRAIN", "capacity block cr-0a1b2c3d4e5f60718 ends at 2026-12-03T12:00:00Z", False),
        ("IDLE+DRAIN", "scale-in: retired by clusterforge", False),
        ("IDLE+DRAIN", "gpu health check failed", False),
        ("IDLE", "none", False),
    ],
)
def test_a_replacement_lifts_the_previous_instances_drain(
    imds: tuple[Path, InstanceData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    state: str, reason: str, resumed: bool,
) -> None:
    from dataclasses import replace

    path, data = imds
    write_data(path, replace(data, instance_id=MINE))
    fake = NodeSlurm(state, reason)
    a = agent(tmp_path, fake, monkeypatch, [])
    assert a.resume_stale_drain() is resumed
    assert (RESUME in fake.calls) is resumed


def test_a_drain_for_this_instances_own_notice_stays(
    imds: tuple[Path, InstanceData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    path, data = imds
    write_data(path, replace(data, spot_action=SpotAction("terminate", "2026-12-01T13:02:00Z")))
    fake = NodeSlurm("IDLE+DRAIN", "spot interruption: terminate at 2026-12-01T13:02:00Z")
    assert agent(tmp_path, fake, monkeypatch, []).resume_stale_drain() is False
    assert RESUME not in fake.calls
