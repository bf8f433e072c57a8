#!/usr/bin/env python3
"""Scale-in (issue 13): terminate exactly the named, drained nodes' instances and free their names.

Stdlib + boto3 only: shipped verbatim to the controller next to nodename.py (whose helpers it
imports) and run there as ``python3 retire.py --config /etc/clusterforge/cloud-agent.json --nodes
gpu-[003-004] [--requeue] [--drain-timeout S]``. Steps (:func:`retire`):

1. drain the nodes in Slurm (reason :data:`REASON`) and wait, bounded, until they run no job
   (``--requeue``: requeue their requeueable jobs). On timeout it stops naming the busy nodes and
   their jobs, and AWS is left untouched (the nodes stay drained).
2. each node's holder instance: the names table (``<cluster>-node-names``, nodename.py), cross-checked
   with the instance's ``clusterforge:hostname`` and ``clusterforge:cluster`` tags.
3. per instance: if its Auto Scaling group still wants more instances than will be left
   (retire before ``pulumi up``), MinSize is lowered to what is left and the instance terminated with
   ShouldDecrementDesiredCapacity=True (AWS refuses a decrement below MinSize); else (``pulumi up``
   already lowered the desired capacity: the surplus is kept only by scale-in protection) its
   protection is lifted and it is terminated without decrement. Either way nothing is replaced.
   AWS: TerminateInstanceInAutoScalingGroup is not blocked by scale-in protection ("Instance
   scale-in protection does not protect Auto Scaling instances from ... Manual termination through
   ... the TerminateInstanceInAutoScalingGroup action", EC2 Auto Scaling User Guide, "Use instance
   scale-in protection"). A group has one subnet (infra/node_group.py), so a decrement triggers no
   AZ rebalancing that could take other instances.
4. the names are released (conditional DeleteItem: only if that instance still holds the name); a
   name whose holder is gone is just released; a second run finds nothing to do.

Exit: 0 done, 2 bad config/arguments/tags, 3 nodes still busy at the drain timeout, 4 Slurm/AWS.

Observed with moto 5.2.1 in server mode (tests/test_retire.py keeps these true):

* Lowering DesiredCapacity (and MinSize) of a group whose instances are all protected terminates
  none: the group stays above its desired capacity, as AWS documents. With unprotected instances
  it terminates instances of its own choosing at once.
* TerminateInstanceInAutoScalingGroup on a protected instance terminates it; with
  ShouldDecrementDesiredCapacity=False and the group above desired, no replacement is launched.
* A decrement below MinSize is accepted (desired 4 -> 3 with MinSize 4): moto does not enforce what
  AWS rejects, so the tests check MinSize was lowered first rather than relying on an error.
* TerminateInstanceInAutoScalingGroup on an instance that is no longer a member answers HTTP 500
  (an HTML page: botocore.parsers.ResponseParserError); DescribeAutoScalingInstances lists a
  terminated instance no more (hence the membership check before any termination).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

try:  # in the package (tests, controller tooling) or next to nodename.py on the controller
    from clusterforge.aws import nodename, slurmcmd
except ImportError:  # pragma: no cover - the host layout
    import nodename  # type: ignore[import-not-found,no-redef]
    import slurmcmd  # type: ignore[import-not-found,no-redef]

REASON = "scale-in: retired by clusterforge"  # the contract's string (the e2e test greps it)
TAG_CLUSTER = "clusterforge:cluster"
BUSY_STATES = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED"  # jobs that hold a node
SLURM_TIMEOUT_S = 30.0
LIVE = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")  # lifecycle states still counted


class RetireError(Exception):
    def __init__(self, msg: str, code: int = 4) -> None:
        super().__init__(msg)
        self.code = code  # the exit status


class Runner(Protocol):
    """How Slurm commands run: ``run(argv, timeout) -> stdout``; a failure raises
    :class:`SlurmError` (tests inject one replaying scontrol/squeue output)."""

    def __call__(self, argv: list[str], timeout: float) -> str: ...


class SlurmError(RetireError):
    def __init__(self, argv: list[str], why: str) -> None:
        super().__init__(f"{' '.join(argv)}: {why}", 4)
        self.why = why


def run(argv: list[str], timeout: float) -> str:
    """The default :class:`Runner`: the agents' bounded wrapper (slurmcmd), its failure as this
    module's :class:`SlurmError` (an exit status the CLI maps)."""
    try:
        return slurmcmd.run(*argv, timeout=timeout)
    except slurmcmd.SlurmError as e:
        raise SlurmError(argv, str(e).removeprefix(" ".join(argv) + ": ")) from None


# --------------------------------------------------------------------------------- Slurm


@dataclass(frozen=True)
class Job:
    job_id: str
    user: str
    name: str
    nodes: str  # the job's Slurm hostlist


def drain(slurm: Runner, nodes: list[str]) -> list[str]:
    """Drain each node with :data:`REASON`; return the nodes Slurm knows (one already removed from
    slurm.conf, e.g. on a re-run after configure, runs nothing and is skipped)."""
    known = []
    for n in nodes:
        try:
            slurm(["scontrol", "update", f"NodeName={n}", "State=DRAIN", f"Reason={REASON}"], SLURM_TIMEOUT_S)
            known.append(n)
        except SlurmError as e:
            if "Invalid node name" not in e.why:
                raise
    return known


def busy_jobs(slurm: Runner, nodes: list[str]) -> list[Job]:
    if not nodes:
        return []
    out = slurm(["squeue", "--noheader", f"--nodelist={','.join(nodes)}", f"--states={BUSY_STATES}",
                 "--format=%A|%u|%j|%N"], SLURM_TIMEOUT_S)
    jobs = []
    for line in out.splitlines():
        if line.strip():
            job_id, user, *name, hosts = line.strip().split("|")  # a job name may contain '|'
            jobs.append(Job(job_id, user, "|".join(name), hosts))
    return jobs


def requeueable(slurm: Runner, job_id: str) -> bool:
    fields = slurm(["scontrol", "--oneliner", "show", "job", job_id], SLURM_TIMEOUT_S).split()
    return "Requeue=1" in fields


def wait_idle(slurm: Runner, nodes: list[str], *, timeout_s: float, requeue: bool, poll_s: float = 5.0,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """Bounded wait until ``nodes`` run no job; requeue requeueable ones (once each) if asked."""
    deadline, asked = clock() + timeout_s, set()
    while jobs := busy_jobs(slurm, nodes):
        if requeue:
            for j in jobs:
                if j.job_id not in asked and requeueable(slurm, j.job_id):
                    slurm(["scontrol", "requeue", j.job_id], SLURM_TIMEOUT_S)
                    asked.add(j.job_id)
        if clock() >= deadline:
            mine = set(nodes)
            per = {n: [j.job_id for j in jobs if n in nodename.expand(j.nodes)] for n in sorted(mine)}
            names = "; ".join(f"{n} runs job {', '.join(ids)}" for n, ids in per.items() if ids)
            ids = " ".join(sorted({j.job_id for j in jobs}))
            raise RetireError(
                f"scale-in stopped after {timeout_s:.0f} s: {names}; nothing in AWS was changed (the nodes stay "
                f"drained). Wait for the jobs, cancel them (scancel {ids}), or re-run with --requeue (requeues "
                "requeueable jobs) or a longer --drain-timeout", 3)
        sleep(poll_s)


# ----------------------------------------------------------------------------------- AWS


@dataclass(frozen=True)
class Holder:
    node: str
    instance_id: str | None  # None: the name is not claimed
    live: bool
    asg: str | None = None
    lifecycle: str | None = None


def holder(ddb: Any, ec2: Any, autoscaling: Any, *, table: str, cluster: str, node: str, deadline: float) -> Holder:
    item = _aws(ddb.get_item, deadline, TableName=table, Key={"name": {"S": node}}, ConsistentRead=True).get("Item")
    if not item:
        return Holder(node, None, False)
    iid = item["instance_id"]["S"]
    pages = _aws(ec2.describe_instances, deadline, Filters=[{"Name": "instance-id", "Values": [iid]}])
    found = [x for r in pages["Reservations"] for x in r["Instances"] if x["State"]["Name"] not in nodename.GONE]
    if not found:
        return Holder(node, iid, False)
    tags = {t["Key"]: t["Value"] for t in found[0].get("Tags", [])}
    if tags.get(TAG_CLUSTER) != cluster:
        raise RetireError(f"{node}: its holder {iid} is tagged {TAG_CLUSTER}={tags.get(TAG_CLUSTER)!r}, not "
                          f"{cluster!r}: wrong --config or names table? nothing was terminated", 2)
    if tags.get(nodename.TAG_HOSTNAME, node) != node:  # absent: the claim died before tagging
        raise RetireError(f"{node}: the names table says {iid} holds it, but {iid} is tagged "
                          f"{nodename.TAG_HOSTNAME}={tags[nodename.TAG_HOSTNAME]}; check both before retiring "
                          "(nothing was terminated)", 2)
    member = _aws(autoscaling.describe_auto_scaling_instances, deadline, InstanceIds=[iid])["AutoScalingInstances"]
    if not member:
        raise RetireError(f"{node}: its holder {iid} is running but in no Auto Scaling group; terminate it by hand "
                          f"(aws ec2 terminate-instances --instance-ids {iid}) and re-run", 2)
    return Holder(node, iid, True, member[0]["AutoScalingGroupName"], member[0]["LifecycleState"])


def _group(autoscaling: Any, name: str, deadline: float) -> dict[str, Any]:
    groups = _aws(autoscaling.describe_auto_scaling_groups, deadline, AutoScalingGroupNames=[name])
    if not groups["AutoScalingGroups"]:
        raise RetireError(f"Auto Scaling group {name} no longer exists; re-run after `pulumi refresh`", 4)
    g: dict[str, Any] = groups["AutoScalingGroups"][0]
    return g


def _live_count(g: dict[str, Any]) -> int:
    return sum(1 for i in g["Instances"] if i["LifecycleState"] in LIVE)


def terminate(autoscaling: Any, h: Holder, *, deadline: float) -> str:
    """Terminate ``h``'s instance with no replacement: decrement the desired capacity when the
    group still wants the instance (MinSize must already allow it), else lift its protection."""
    assert h.asg and h.instance_id
    g = _group(autoscaling, h.asg, deadline)
    desired = g["DesiredCapacity"]
    if desired > _live_count(g) - 1:  # the group wants more than will be left: retire before `pulumi up`
        _aws(autoscaling.terminate_instance_in_auto_scaling_group, deadline, InstanceId=h.instance_id,
             ShouldDecrementDesiredCapacity=True)
        return f"terminated {h.instance_id} ({h.asg}: desired {desired} -> {desired - 1})"
    # `pulumi up` came first: only the protection keeps the surplus; lift it for this one instance
    _aws(autoscaling.set_instance_protection, deadline, AutoScalingGroupName=h.asg, InstanceIds=[h.instance_id],
         ProtectedFromScaleIn=False)
    _aws(autoscaling.terminate_instance_in_auto_scaling_group, deadline, InstanceId=h.instance_id,
         ShouldDecrementDesiredCapacity=False)
    return f"terminated {h.instance_id} ({h.asg}: desired stays {desired})"


def _aws(fn: Any, deadline: float, **kw: Any) -> Any:
    try:
        return nodename._call(fn, deadline, **kw)
    except nodename.ClaimError as e:
        raise RetireError(str(e), 4) from None


# ------------------------------------------------------------------------------- retire


def retire(nodes: list[str], *, cluster: str, region: str, autoscaling: Any, ec2: Any, dynamodb: Any, table: str,
           slurm: Runner | None = None, drain_timeout_s: float, requeue: bool, poll_s: float = 5.0,
           deadline_s: float = 300) -> dict[str, str]:
    """Drain, wait, terminate and release ``nodes`` (see the module docstring); node -> what was done.
    ``region`` is the clients' (kept for the log line and for symmetry with the config)."""
    slurm = slurm or run
    known = drain(slurm, nodes)
    wait_idle(slurm, known, timeout_s=drain_timeout_s, requeue=requeue, poll_s=poll_s)
    deadline = time.monotonic() + deadline_s
    # every holder first: a bad tag or an unmanaged instance stops the run before any termination
    held = [holder(dynamodb, ec2, autoscaling, table=table, cluster=cluster, node=n, deadline=deadline) for n in nodes]
    done: dict[str, str] = {}
    going: dict[str, list[Holder]] = {}
    for h in held:
        if h.instance_id is None:
            done[h.node] = "not claimed (nothing to do)"
        elif not h.live or (h.lifecycle or "").startswith("Terminating"):
            done[h.node] = f"holder {h.instance_id} already gone"
        else:
            going.setdefault(str(h.asg), []).append(h)
    for asg, hs in going.items():
        g = _group(autoscaling, asg, deadline)
        keep = _live_count(g) - len(hs)
        if g["DesiredCapacity"] > keep and g["MinSize"] > keep:
            # a decrement below MinSize fails on AWS (ValidationError): lower it to what is left first
            _aws(autoscaling.update_auto_scaling_group, deadline, AutoScalingGroupName=asg, MinSize=keep)
        for h in hs:
            done[h.node] = terminate(autoscaling, h, deadline=deadline)
    for h in held:
        if h.instance_id and nodename.release(dynamodb, table=table, name=h.node, instance_id=h.instance_id):
            done[h.node] += "; name released"
    return {n: done[n] for n in nodes}


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            cfg: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as e:
        raise RetireError(f"cannot read {path}: {e}; the renderer writes it (cloud/agent.json): run configure",
                          2) from None
    if lack := [k for k in ("cluster", "region", "names_table") if not cfg.get(k)]:
        raise RetireError(f"{path} lacks {', '.join(lack)}: written by an older clusterforge? run configure", 2)
    return cfg


def main(argv: list[str] | None = None, *, slurm: Runner | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clusterforge-retire", description="Drain and terminate exactly these nodes.")
    ap.add_argument("--config", default="/etc/clusterforge/cloud-agent.json")
    ap.add_argument("--nodes", required=True, help="Slurm hostlist, e.g. gpu-[003-004]")
    ap.add_argument("--requeue", action="store_true", help="requeue the nodes' requeueable jobs instead of waiting")
    ap.add_argument("--drain-timeout", type=float, default=3600, help="seconds to wait for jobs (default 3600)")
    ap.add_argument("--poll", type=float, default=5.0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        try:
            nodes = list(dict.fromkeys(nodename.expand(a.nodes)))
        except nodename.ClaimError as e:
            raise RetireError(f"--nodes: {e}", 2) from None
        if not nodes or a.drain_timeout < 0:
            raise RetireError("--nodes names no node" if not nodes else "--drain-timeout must be >= 0", 2)
        cfg = _load(a.config)
        import boto3
        from botocore.config import Config

        kw: dict[str, Any] = {"region_name": cfg["region"], "config": Config(
            retries={"mode": "standard", "max_attempts": 6}, connect_timeout=5, read_timeout=20)}
        endpoints = os.path.join(os.path.dirname(a.config), "aws-endpoints.json")
        if os.path.exists(endpoints):  # emulation only (the contract's endpoint file)
            kw["endpoint_url"] = nodename._load(endpoints, "endpoint_url")["endpoint_url"]
        done = retire(nodes, cluster=cfg["cluster"], region=cfg["region"],
                      autoscaling=boto3.client("autoscaling", **kw), ec2=boto3.client("ec2", **kw),
                      dynamodb=boto3.client("dynamodb", **kw),
                      table=cfg["names_table"], slurm=slurm, drain_timeout_s=a.drain_timeout, requeue=a.requeue,
                      poll_s=a.poll)
        for n, what in done.items():
            print(f"{n}: {what}")
        return 0
    except (RetireError, nodename.ClaimError) as e:
        err, code = str(e), e.code
    except Exception as e:  # never a traceback: one line the operator can act on
        err, code = f"unexpected {type(e).__name__}: {e}", 4
    print(f"clusterforge-retire: error: {err}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
