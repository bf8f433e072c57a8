#!/usr/bin/env python3
"""``clusterforge-node-agent``: a cloud compute node's watcher for EC2 interruption notices.

Stdlib only (shipped verbatim to /usr/local/lib/clusterforge-agents/, run as a service). Every
``poll_s`` seconds it asks IMDSv2 for

* ``meta-data/spot/instance-action``: 404 until EC2 decides to reclaim a spot instance, then
  ``{"action": "terminate"|"stop"|"hibernate", "time": "2026-12-01T13:02:00Z"}`` two minutes ahead;
* ``meta-data/events/maintenance/scheduled``: a JSON list of ``{"Code", "Description", "EventId",
  "NotBefore", "NotAfter", "State"}`` with times like ``"21 Jan 2019 09:00:43 GMT"``; only
  ``State == "active"`` events are upcoming (EC2 User Guide, "Scheduled events for your
  instances": monitoring-instances-status-check_sched.html).

On a notice (once per notice; handled notices are remembered in ``state_path`` across restarts):

1. drain this node: ``scontrol update NodeName=<node> State=DRAIN Reason=<reason>`` with the
   reasons ``spot interruption: <action> at <time>`` / ``scheduled event <Code>: not before
   <NotBefore>`` (exact strings: operators and tests grep them);
2. signal every job on the node that asked for a signal (``--signal=[{R|B}:]<sig>[@<time>]``) now,
   since its end comes earlier than Slurm thinks. Slurm 22.05 does not report a job's --signal
   request through scontrol/squeue (job_info.c prints no warn_signal), so it is read from the
   leading ``#SBATCH`` block of the batch script (``scontrol write batch_script JOB -``), as
   sbatch parses it. ``B:`` -> ``scancel --batch --signal`` (only the batch shell, like Slurm's
   own B:); otherwise ``scancel --signal`` (all job steps, not the shell: scancel(1) 22.05).
   LIMIT: a --signal given on the sbatch command line (not in the script) is invisible here;
   such a job still gets Slurm's SIGTERM, KillWait, SIGKILL when it is requeued;
3. after ``grace_s`` (cut so the requeue happens ``margin_s`` before the action time), requeue
   the jobs whose ``Requeue=1`` (``scontrol requeue``); a non-requeueable job is left to run
   until the instance goes (logged).

Config (``--config``, default /etc/clusterforge/node-agent.json; written by the renderer from
:func:`config`): ``cluster``, ``region`` (informational), ``grace_s`` (default 60), ``poll_s``
(5), ``margin_s`` (15), ``state_path`` (/var/lib/clusterforge/node-agent-notices.json). One log
line per action on stdout (journald). IMDS errors never stop the agent: it retries next poll.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

try:
    from clusterforge.aws import slurmcmd
except ImportError:  # on a host: the agents' folder is on sys.path
    import slurmcmd  # type: ignore[no-redef,import-not-found]

if TYPE_CHECKING:
    from clusterforge.clusterspec.models import Cluster

CONFIG_PATH = "/etc/clusterforge/node-agent.json"
DEFAULTS: dict[str, Any] = {
    "cluster": "", "region": "", "grace_s": 60, "poll_s": 5, "margin_s": 15,
    "state_path": "/var/lib/clusterforge/node-agent-notices.json",
}
TOKEN_TTL_S = 21600  # EC2's maximum; the token is re-fetched well before it expires
SPOT_PATH = "spot/instance-action"
EVENTS_PATH = "events/maintenance/scheduled"


def config(cluster: Cluster) -> dict[str, Any]:
    """The node-agent.json the renderer ships to the cloud compute groups."""
    region = cluster.aws.region if cluster.aws else ""
    return {**DEFAULTS, "cluster": cluster.name, "region": region}


def log(msg: str) -> None:
    print(f"clusterforge-node-agent: {msg}", flush=True)


class Notice(NamedTuple):
    key: str  # identifies the notice, so one is handled once
    reason: str  # the drain reason
    deadline: datetime  # when the instance goes (spot) or the event may start (scheduled)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """ISO 8601 (spot notices) or RFC 2822-ish ``21 Jan 2019 09:00:43 GMT`` (scheduled events)."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        t = parsedate_to_datetime(text.replace(" GMT", " +0000") if "," not in text else text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


#: the drain reasons this agent writes (the contract's strings), and an EC2 instance id
NOTICE_REASONS = ("spot interruption: ", "scheduled event ")
INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8,17}\b")


class Imds:
    """IMDSv2 client: one session token (PUT, TTL), renewed before expiry or after a 401."""

    def __init__(self, base: str | None = None, timeout: float = 2.0) -> None:
        base = base or os.environ.get("CLUSTERFORGE_IMDS_URL", "http://169.254.169.254")
        self.base = base.rstrip("/") + "/latest/"
        self.timeout = timeout
        self._token = ""
        self._expires = 0.0

    def _fetch_token(self) -> str:
        # urllib is imported where the agent talks to the metadata service, not at the top: the
        # renderer imports this module for config() alone, and urllib.request brings http.client
        # and the email parser with it (about 7 ms of every cloud render)
        import urllib.request as ur

        if not self._token or time.monotonic() > self._expires:
            req = ur.Request(self.base + "api/token", method="PUT",
                             headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
            with ur.urlopen(req, timeout=self.timeout) as r:
                self._token = r.read().decode()
            self._expires = time.monotonic() + TOKEN_TTL_S - 600
        return self._token

    def get(self, path: str) -> str | None:
        """The body at ``meta-data/<path>``, ``None`` on 404; ``OSError`` on anything else."""
        import urllib.error
        import urllib.request as ur

        for attempt in (0, 1):
            req = ur.Request(self.base + "meta-data/" + path, headers={"X-aws-ec2-metadata-token": self._fetch_token()})
            try:
                with ur.urlopen(req, timeout=self.timeout) as r:
                    return str(r.read().decode())
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None
                if e.code == 401 and attempt == 0:
                    self._token = ""  # expired or restarted metadata service: a new token, once
                    continue
                raise
        raise OSError("unreachable")  # pragma: no cover - the loop returns or raises


def notices(imds: Imds) -> list[Notice]:
    """The current notices (may raise OSError/ValueError: the caller retries next poll)."""
    out: list[Notice] = []
    spot = imds.get(SPOT_PATH)
    if spot:
        d = json.loads(spot)
        t = parse_time(str(d["time"]))
        out.append(Notice(f"spot:{d['action']}:{d['time']}", f"spot interruption: {d['action']} at {_iso(t)}", t))
    events = json.loads(imds.get(EVENTS_PATH) or "[]")
    for ev in events:
        if str(ev.get("State", "active")).lower() != "active":
            continue  # completed / canceled events stay listed for a while
        nb = str(ev["NotBefore"])
        out.append(Notice(f"event:{ev.get('EventId', ev['Code'])}:{nb}",
                          f"scheduled event {ev['Code']}: not before {nb}", parse_time(nb)))
    return out


# ----------------------------------------------------------------------------- job signals


def batch_signal(script: str) -> tuple[str, bool] | None:
    """(signal, batch_only) from the last ``--signal`` of the script's leading #SBATCH block, the
    lines sbatch itself reads (src/sbatch/opt.c _opt_batch_script: #SBATCH/#SLURM lines; blank and
    other comment lines are skipped; the first command line ends the block)."""
    found: str | None = None
    for line in script.splitlines():
        if line.startswith(("#SBATCH", "#SLURM")):
            try:
                words = shlex.split(line[7 if line.startswith("#SBATCH") else 6 :], comments=True)
            except ValueError:
                continue
            for i, w in enumerate(words):
                if w.startswith("--signal="):
                    found = w.split("=", 1)[1]
                elif w == "--signal" and i + 1 < len(words):
                    found = words[i + 1]
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    if not found:
        return None
    flag, _, rest = found.partition(":") if found[:2] in ("B:", "R:") else ("", "", found)
    sig = rest.split("@", 1)[0]
    return (sig, flag == "B") if sig else None


class Agent:
    def __init__(self, node: str, cfg: dict[str, Any], imds: Imds, *,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.node, self.cfg, self.imds, self.now, self.sleep = node, {**DEFAULTS, **cfg}, imds, now, sleep
        self.state = Path(self.cfg["state_path"])
        try:
            self.handled: set[str] = set(json.loads(self.state.read_text()))
        except (OSError, ValueError):
            self.handled = set()

    def _remember(self, key: str) -> None:
        self.handled.add(key)
        try:
            self.state.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state.with_suffix(".tmp")
            tmp.write_text(json.dumps(sorted(self.handled)))
            os.replace(tmp, self.state)
        except OSError as e:
            log(f"cannot record handled notices in {self.state}: {e}")

    def poll(self) -> None:
        try:
            current = notices(self.imds)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log(f"instance metadata not readable ({e}); retrying next poll")
            return
        for n in current:
            if n.key not in self.handled:
                self.handle(n)

    def handle(self, n: Notice) -> None:
        log(f"notice {n.key}: draining {self.node}: {n.reason}")
        try:
            slurmcmd.scontrol("update", f"NodeName={self.node}", "State=DRAIN", f"Reason={n.reason}")
            jobs = slurmcmd.squeue("-h", "-w", self.node, "-t", "RUNNING,SUSPENDED", "-o", "%i").split()
        except slurmcmd.SlurmError as e:
            log(f"{e}; retrying next poll")
            return  # not remembered: the next poll tries again
        self._remember(n.key)
        signalled = [j for j in jobs if self._signal(j)]
        left = (n.deadline - self.now()).total_seconds() - float(self.cfg["margin_s"])
        wait = max(0.0, min(float(self.cfg["grace_s"]), left)) if signalled else 0.0
        if wait:
            log(f"grace {wait:.0f}s for {len(signalled)} signalled job(s) before requeue")
            self.sleep(wait)
        for j in jobs:
            self._requeue(j)

    def resume_stale_drain(self) -> bool:
        """At start: a drain this name kept from its previous instance is lifted.

        When an instance is lost its name's node stays DRAIN in slurmctld (a DOWN keeps the flag,
        src/slurmctld/node_mgr.c _make_node_down), so the replacement that claims the name would
        register and never take work. The drain is the previous instance's when its reason names
        another instance id (``instance i-... terminated``, from the rejoin step) or is one of this
        agent's interruption reasons while this instance has no notice. Capacity-block, scale-in,
        health-check and operator drains are left alone. True when the node was resumed."""
        try:
            me = self.imds.get("instance-id") or ""
            current = notices(self.imds)
            rows = slurmcmd.scontrol("show", "node", "-o", self.node).splitlines()
        except (OSError, ValueError, KeyError, TypeError, slurmcmd.SlurmError) as e:
            log(f"cannot check {self.node} for a previous instance's drain: {e}")
            return False
        f = slurmcmd.fields(rows[0]) if rows else {}
        if "DRAIN" not in f.get("State", ""):
            return False
        reason = f.get("Reason", "").split(" [")[0]  # scontrol appends " [user@time]"
        ids = INSTANCE_ID.findall(reason)
        ours = reason.startswith(NOTICE_REASONS) and not current
        if not ((ids and me and me not in ids) or ours):
            return False
        try:
            slurmcmd.scontrol("update", f"NodeName={self.node}", "State=RESUME")
        except slurmcmd.SlurmError as e:
            log(f"{self.node}: could not lift the previous instance's drain ({reason}): {e}")
            return False
        log(f"{self.node}: resumed: the drain was for the name's previous instance ({reason})")
        return True

    def _signal(self, job: str) -> bool:
        try:
            req = batch_signal(slurmcmd.scontrol("write", "batch_script", job, "-"))
        except slurmcmd.SlurmError as e:  # no batch script (salloc/srun job) or already gone
            log(f"job {job}: no batch script to read a --signal from ({e})")
            return False
        if req is None:
            return False
        sig, batch = req
        try:
            slurmcmd.scancel(f"--signal={sig}", *(["--batch"] if batch else []), job)
        except slurmcmd.SlurmError as e:
            log(f"job {job}: signal {sig} failed: {e}")
            return False
        log(f"job {job}: sent {sig} to {'the batch shell' if batch else 'its steps'} (its #SBATCH --signal)")
        return True

    def _requeue(self, job: str) -> None:
        try:
            info = slurmcmd.fields(slurmcmd.scontrol("show", "job", "-o", job).splitlines()[0])
            if info.get("Requeue") != "1":
                log(f"job {job}: not requeueable (Requeue={info.get('Requeue', '?')}); left to run")
                return
            slurmcmd.scontrol("requeue", job)
            log(f"job {job}: requeued")
        except (slurmcmd.SlurmError, IndexError) as e:
            log(f"job {job}: requeue failed: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clusterforge-node-agent", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=CONFIG_PATH)
    ap.add_argument("--node", default=None, help="Slurm node name (default: this host's claimed hostname)")
    ap.add_argument("--once", action="store_true", help="poll once and exit")
    ap.add_argument("--poll", type=float, default=None, help="seconds between polls (default: config poll_s)")
    args = ap.parse_args(argv)
    try:
        cfg = {**DEFAULTS, **json.loads(Path(args.config).read_text())}
    except FileNotFoundError:
        cfg = dict(DEFAULTS)
        log(f"{args.config} not found; using the defaults")
    except (OSError, ValueError) as e:
        print(f"clusterforge-node-agent: {args.config}: not a JSON object ({e})", file=sys.stderr)
        return 2
    node = args.node or socket.gethostname().split(".")[0]
    agent = Agent(node, cfg, Imds())
    poll_s = args.poll if args.poll is not None else float(cfg["poll_s"])
    log(f"watching instance metadata for {node} every {poll_s:g}s")
    agent.resume_stale_drain()
    while True:
        agent.poll()
        if args.once:
            return 0
        time.sleep(poll_s)


if __name__ == "__main__":
    sys.exit(main())
