#!/usr/bin/env python3
"""Capacity-block windows on the controller: a Slurm MAINT reservation until the block starts,
a drain before it ends. Stdlib only at runtime (shipped to /usr/local/lib/clusterforge-agents/;
``clusterforge-cloud-agent`` calls :func:`tick` every loop); :func:`blocks_config` runs in the
renderer and writes the ``capacity_blocks`` list of cloud-agent.json.

Timeline of one block (times in UTC; ``S`` start, ``E`` end, ``D = E - drain_minutes_before_end``):

* before ``S``: reservation ``cb-<group>`` (Flags=MAINT,IGNORE_JOBS, Users=root, StartTime=now,
  EndTime=S) holds the group's nodes, so no job is scheduled onto nodes whose instances cannot
  exist yet. Slurm ends it at ``S`` by itself, even when the agent is down.
* at/after ``S``: the reservation is deleted if it is still there (a clock skew, a late start).
* at/after ``D``: the group's nodes are drained, reason ``capacity block <cr-id> ends at <E>``,
  so running jobs finish (or are requeued by the operator) before EC2 begins terminating the
  block's instances 30 minutes before ``E`` (EC2 User Guide, capacity-blocks-monitor; facts 1.4).

Slurm 22.05 reservation flags (scontrol(1)): MAINT "maintenance mode ... permitted to use
resources that are already in another reservation"; IGNORE_JOBS "ignore currently running jobs
when creating the reservation". Times sent to Slurm are in the controller's local time zone,
which is how scontrol reads ``YYYY-MM-DDTHH:MM:SS``.

A :class:`Clock` maps real time to a virtual time (tests compress a 14-day block into minutes):
``tick`` gets virtual ``now``; the EndTime sent to Slurm is converted back to real time.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

try:
    from clusterforge.aws import slurmcmd
except ImportError:  # on a host: the agents' folder is on sys.path
    import slurmcmd  # type: ignore[no-redef,import-not-found]

if TYPE_CHECKING:
    from clusterforge.clusterspec.models import Cluster

Scontrol = Callable[..., str]


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: str) -> datetime:
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def reservation_name(group: str) -> str:
    return f"cb-{group}"


def drain_reason(block: dict[str, Any]) -> str:
    return f"capacity block {block['reservation_id']} ends at {block['end']}"


def blocks_config(cluster: Cluster) -> list[dict[str, Any]]:
    """One entry per capacity_block group: group, nodes (Slurm hostlist), reservation_id, start,
    end, drain_at (ISO 8601 ``Z`` strings); [] when the cluster has none."""
    out: list[dict[str, Any]] = []
    for g in cluster.node_groups:
        cap = g.cloud.capacity if g.cloud else None
        if cap is None or cap.type != "capacity_block":
            continue
        assert cap.start is not None and cap.end is not None  # the spec requires them for blocks
        out.append({
            "group": g.name, "nodes": g.node_hostlist, "reservation_id": cap.reservation_id,
            "start": iso(cap.start), "end": iso(cap.end),
            "drain_at": iso(cap.end - timedelta(minutes=cap.drain_minutes_before_end)),
        })
    return out


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Clock(NamedTuple):
    """virtual = virtual_anchor + (real - real_anchor) * scale (scale 1, anchors equal: real time)."""

    real_anchor: datetime
    virtual_anchor: datetime
    scale: float = 1.0

    @classmethod
    def real_time(cls) -> Clock:
        t = datetime.now(UTC)
        return cls(t, t, 1.0)

    def virtual(self, real: datetime) -> datetime:
        return self.virtual_anchor + (real - self.real_anchor) * self.scale

    def real(self, virtual: datetime) -> datetime:
        return self.real_anchor + (virtual - self.virtual_anchor) / self.scale

    def now(self) -> datetime:
        return self.virtual(datetime.now(UTC))

    @staticmethod
    def add_arguments(ap: argparse.ArgumentParser) -> None:
        """``--clock-scale`` / ``--clock-start`` for the controller agent (tests only)."""
        ap.add_argument("--clock-scale", type=float, default=1.0,
                        help="virtual seconds per real second for capacity-block windows (tests)")
        ap.add_argument("--clock-start", default=None,
                        help="virtual time (ISO 8601, e.g. 2027-01-04T10:30:00Z) at agent start (tests)")

    @classmethod
    def from_args(cls, scale: float = 1.0, start: str | None = None, real_now: datetime | None = None) -> Clock:
        """The clock for ``--clock-scale SCALE --clock-start START``; ValueError on bad values."""
        if not scale > 0:
            raise ValueError(f"--clock-scale {scale}: must be > 0")
        real = real_now or datetime.now(UTC)
        return cls(real, parse(start) if start else real, scale)


def _slurm_time(t: datetime) -> str:
    return t.astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # scontrol reads local time


def _reservations(scontrol: Scontrol) -> dict[str, dict[str, str]]:
    out = scontrol("show", "reservation", "-o")
    rows = [slurmcmd.fields(ln) for ln in out.splitlines() if ln.startswith("ReservationName=")]
    return {r["ReservationName"]: r for r in rows}


def tick(config: dict[str, Any], now: datetime, slurm: Scontrol = slurmcmd.scontrol,
         clock: Clock | None = None) -> list[str]:
    """Bring Slurm in line with every block of ``config["capacity_blocks"]`` at (virtual) ``now``;
    idempotent. Returns one line per action taken (also what the caller logs). Slurm errors are
    raised as slurmcmd.SlurmError: the caller logs and retries on its next tick."""
    clock = clock or Clock(now, now, 1.0)
    blocks = config.get("capacity_blocks") or []
    if not blocks:
        return []
    done: list[str] = []
    res = _reservations(slurm)
    for b in blocks:
        name, start, drain_at = reservation_name(b["group"]), parse(b["start"]), parse(b["drain_at"])
        if now < start and name not in res:
            slurm("create", "reservation", f"ReservationName={name}", "StartTime=now",
                  f"EndTime={_slurm_time(clock.real(start))}", f"Nodes={b['nodes']}",
                  "Flags=MAINT,IGNORE_JOBS", "Users=root")
            done.append(f"reservation {name} holds {b['nodes']} until the block starts at {b['start']}")
        elif now >= start and name in res:
            slurm("delete", "reservation", name)
            done.append(f"reservation {name} deleted: block {b['reservation_id']} started at {b['start']}")
        if now >= drain_at:
            reason = drain_reason(b)
            # scontrol's live node records (not slurm.conf text): one "-o" line per node
            rows = [slurmcmd.fields(ln) for ln in slurm("show", "node", "-o", b["nodes"]).splitlines() if ln.strip()]
            todo = [r.get("NodeName", "") for r in rows
                    if not ("DRAIN" in r.get("State", "") and r.get("Reason", "").split(" [")[0] == reason)]
            todo = [n for n in todo if n]
            if todo:
                slurm("update", f"NodeName={','.join(todo)}", "State=DRAIN", f"Reason={reason}")
                done.append(f"drained {','.join(todo)}: {reason}")
    return done
