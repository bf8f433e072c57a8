"""capacity.tick with a recorded scontrol, and the compressed clock (the real daemons:
tests/test_slurm_lifecycle.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from clusterforge.aws import capacity

BLOCK = {"group": "gpu", "nodes": "gpu-[001-002]", "reservation_id": "cr-0a1b2c3d4e5f67890",
         "start": "2027-01-04T11:30:00Z", "end": "2027-01-18T11:30:00Z", "drain_at": "2027-01-18T10:30:00Z"}
CFG = {"capacity_blocks": [BLOCK]}
REASON = "capacity block cr-0a1b2c3d4e5f67890 ends at 2027-01-18T11:30:00Z"


def t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


class FakeScontrol:
    def __init__(self, res: bool = False, nodes: str = "") -> None:
        self.res, self.nodes = res, nodes
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str) -> str:
        self.calls.append(args)
        if args[:2] == ("show", "reservation"):
            return "ReservationName=cb-gpu StartTime=x EndTime=y Nodes=gpu-[001-002] Flags=MAINT\n" if self.res else \
                "No reservations in the system\n"
        if args[:2] == ("show", "node"):
            return self.nodes
        return ""


def test_blocks_config_of_the_example() -> None:
    from clusterforge.clusterspec import load_spec
    from tests.conftest import EXAMPLES

    assert capacity.blocks_config(load_spec(EXAMPLES / "p5-training.yaml")) == [
        {"group": "gpu", "nodes": "gpu-[001-016]", "reservation_id": "cr-0a1b2c3d4e5f67890",
         "start": "2027-01-04T11:30:00Z", "end": "2027-01-18T11:30:00Z", "drain_at": "2027-01-18T10:30:00Z"}
    ]
    assert capacity.blocks_config(load_spec(EXAMPLES / "hybrid.yaml")) == []


def test_before_start_creates_the_maint_reservation_once() -> None:
    s = FakeScontrol()
    clock = capacity.Clock(t("2027-01-04T10:00:00Z"), t("2027-01-04T10:00:00Z"))
    capacity.tick(CFG, t("2027-01-04T10:00:00Z"), slurm=s, clock=clock)
    end_local = t("2027-01-04T11:30:00Z").astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    assert s.calls[1] == ("create", "reservation", "ReservationName=cb-gpu", "StartTime=now", f"EndTime={end_local}",
                          "Nodes=gpu-[001-002]", "Flags=MAINT,IGNORE_JOBS", "Users=root")
    s2 = FakeScontrol(res=True)
    assert capacity.tick(CFG, t("2027-01-04T10:00:00Z"), slurm=s2) == []  # already there: nothing
    assert [c[0] for c in s2.calls] == ["show"]


def test_after_start_deletes_it_and_drain_comes_at_drain_at() -> None:
    s = FakeScontrol(res=True)
    assert capacity.tick(CFG, t("2027-01-04T11:30:00Z"), slurm=s) == [
        "reservation cb-gpu deleted: block cr-0a1b2c3d4e5f67890 started at 2027-01-04T11:30:00Z"]
    assert s.calls[1] == ("delete", "reservation", "cb-gpu")
    s = FakeScontrol(nodes="NodeName=gpu-001 State=IDLE+CLOUD Reason=none\n"
                     f"NodeName=gpu-002 State=IDLE+DRAIN Reason={REASON} [root@2027-01-18T10:30:01]\n")
    assert capacity.tick(CFG, t("2027-01-18T10:29:59Z"), slurm=s) == []
    capacity.tick(CFG, t("2027-01-18T10:30:00Z"), slurm=s)
    assert s.calls[-1] == ("update", "NodeName=gpu-001", "State=DRAIN", f"Reason={REASON}")  # 002 already ours


def test_clock_maps_both_ways() -> None:
    c = capacity.Clock.from_args(60.0, "2027-01-04T11:00:00Z", real_now=t("2026-12-01T12:00:00Z"))
    assert c.virtual(t("2026-12-01T12:00:30Z")) == t("2027-01-04T11:30:00Z")  # 30 s real = 30 min
    assert c.real(t("2027-01-04T11:30:00Z")) == t("2026-12-01T12:00:30Z")
    assert capacity.Clock.from_args().scale == 1.0
    with pytest.raises(ValueError, match="must be > 0"):
        capacity.Clock.from_args(0)
    assert abs(capacity.Clock.real_time().now() - datetime.now(UTC)) < timedelta(seconds=5)
