#!/usr/bin/env python3
"""Boot-time claim of a unique Slurm node name (issue 12). Stdlib + boto3 only: user data ships
this file verbatim; controller tooling imports claim/release/holders. Registry: DynamoDB, key
"name", items {name, group, instance_id, address, claimed_at}; every write is conditional, so a
name never has two holders. Exit: 2 bad config/tags, 3 no free name, 4 metadata/API/deadline."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
import urllib.request as ur
from typing import Any

TAG_HOSTNAME, TAG_CLAIM_ERROR = "clusterforge:hostname", "clusterforge:claim-error"
TAGS = ("clusterforge:cluster", "clusterforge:group")  # the launch template's, checked against node.json
GONE = ("shutting-down", "terminated", "stopped")  # and ids AWS no longer lists


class ClaimError(Exception):
    def __init__(self, msg: str, code: int = 4) -> None:
        super().__init__(msg)
        self.code = code  # the exit status


def expand(expr: str) -> list[str]:
    """Slurm hostlist -> names in order (``gpu-[001-003],a1``), zero padding kept."""
    out: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", expr):
        res = [""]
        for lit, body in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item.strip()):
            vals = [] if body else [""]
            for lo, _, hi in (p.strip().partition("-") for p in body.split(",") if body):
                if not (lo + hi).isdigit() or int(hi or lo) - int(lo) > 99999:
                    raise ClaimError(f"bad range {lo}-{hi} in hostlist {expr!r}", 2)
                vals += [str(i).zfill(len(lo) if lo[0] == "0" else 0) for i in range(int(lo), int(hi or lo) + 1)]
            res = [r + lit + v for r in res for v in vals]
        out += res
    return out


def imds(paths: list[str], tries: int = 3, timeout: float = 2.0) -> list[str]:
    """IMDSv2: a session token (PUT), then one GET per path; every request bounded."""
    base = os.environ.get("CLUSTERFORGE_IMDS_URL", "http://169.254.169.254").rstrip("/") + "/latest/"
    for attempt in range(tries):
        try:
            ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
            with ur.urlopen(ur.Request(base + "api/token", method="PUT", headers=ttl), timeout=timeout) as r:
                tok = {"X-aws-ec2-metadata-token": r.read().decode()}
            return [ur.urlopen(ur.Request(base + "meta-data/" + p, headers=tok), timeout=timeout).read().decode()
                    for p in paths]
        except OSError as e:  # URLError, HTTPError and timeouts are all OSError
            err = e
            time.sleep(0.5 * attempt)
    raise ClaimError(f"instance metadata {base} unreachable after {tries} tries: {err}")


def _call(fn: Any, deadline: float, tries: int = 5, **kw: Any) -> Any:
    """fn(**kw), errors retried with backoff on top of botocore's own (throttling) retries, never
    past the deadline. A failed condition is an answer, not an error: re-raised at once."""
    from botocore.exceptions import BotoCoreError, ClientError

    for attempt in range(tries):
        if time.monotonic() > deadline:
            raise ClaimError("deadline passed before the name claim finished")
        try:
            return fn(**kw)
        except ClientError as e:
            why = "{Code}: {Message}".format_map({"Code": "?", "Message": "", **e.response.get("Error", {})})
            if why.startswith("ConditionalCheckFailed"):
                raise
        except BotoCoreError as e:  # endpoint unreachable, timeouts
            why = str(e)
        time.sleep(min(0.2 * 2**attempt, 5.0))
    raise ClaimError(f"AWS API still failing after {tries} tries: {why}")


def holders(ddb: Any, *, table: str, deadline: float = 0) -> dict[str, dict[str, Any]]:
    """name -> item of every claimed name (one consistent scan)."""
    pages = _call(lambda: list(ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)),
                  deadline or time.monotonic() + 60)
    return {it["name"]["S"]: {k: int(v["N"]) if "N" in v else v.get("S") for k, v in it.items()}
            for p in pages for it in p["Items"]}


def _live(ec2: Any, ids: list[str], deadline: float) -> set[str]:
    # A filter, not InstanceIds: an id AWS no longer knows is absent instead of failing the call.
    pag = ec2.get_paginator("describe_instances")
    pages = [p for i in range(0, len(ids), 100) for p in _call(lambda i=i: list(pag.paginate(
        Filters=[{"Name": "instance-id", "Values": ids[i : i + 100]}])), deadline)]
    return {x["InstanceId"] for p in pages for r in p["Reservations"] for x in r["Instances"]
            if x["State"]["Name"] not in GONE}


def claim(ddb: Any, ec2: Any, *, table: str, group: str, names: list[str], instance_id: str, address: str,
          deadline_s: float = 240, rounds: int = 5) -> str:
    """Claim a name of ``names`` for ``instance_id`` and return it: the one it holds, else the
    first free one, else the first whose holder is gone (compare-and-swap on that holder)."""
    from botocore.exceptions import ClientError

    deadline = time.monotonic() + deadline_s

    def put(name: str, cond: str, holder: str) -> bool:
        item = {"name": name, "group": group, "instance_id": instance_id, "address": address}
        try:
            _call(ddb.put_item, deadline, TableName=table, ConditionExpression=cond,
                  ExpressionAttributeNames={"#n": "name"}, ExpressionAttributeValues={":v": {"S": holder}},
                  Item={**{k: {"S": v} for k, v in item.items()}, "claimed_at": {"N": str(int(time.time()))}})
            return True
        except ClientError:  # ConditionalCheckFailed: another instance got it first
            return False

    for _ in range(rounds):
        held = holders(ddb, table=table, deadline=deadline)
        mine = [n for n in names if held.get(n, {}).get("instance_id") == instance_id]
        free = [n for n in names if n not in held]
        for n in mine + free:
            if put(n, "attribute_not_exists(#n) OR instance_id = :v", instance_id):
                return n
        # Every name was held at scan time: only now pay for DescribeInstances.
        others = {n: str(held[n]["instance_id"]) for n in names if n in held and n not in mine}
        live = _live(ec2, sorted(set(others.values())), deadline)
        stale = [(n, old) for n, old in others.items() if old not in live]
        if not (mine or free or stale):
            ids = ", ".join(sorted(live)[:4]) + (", ..." if len(live) > 4 else "")
            raise ClaimError(f"all {len(names)} names of group {group} are held by live instances: {ids}; the "
                             "group has more instances than hostnames: raise its hostlist or lower its count", 3)
        for n, old in stale:
            if put(n, "attribute_exists(#n) AND instance_id = :v", old):
                return n
    raise ClaimError(f"group {group}: lost the race for every candidate name {rounds} times; re-run the claim")


def release(ddb: Any, *, table: str, name: str, instance_id: str) -> bool:
    """Free ``name`` if ``instance_id`` still holds it; False when it does not."""
    from botocore.exceptions import ClientError

    try:
        _call(ddb.delete_item, time.monotonic() + 60, TableName=table, Key={"name": {"S": name}},
              ConditionExpression="instance_id = :v", ExpressionAttributeValues={":v": {"S": instance_id}})
        return True
    except ClientError:
        return False


def _load(path: str, need: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            cfg: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as e:
        raise ClaimError(f"cannot read {path}: {e}; user data writes it: re-create the instance", 2) from None
    if lack := [k for k in need.split() if not cfg.get(k)]:
        raise ClaimError(f"{path} lacks {', '.join(lack)}: user data from an older clusterforge? run pulumi up", 2)
    return cfg


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:  # tmp + rename: readers see the old file or the new one
        f.write(text + "\n")
    os.replace(path + ".tmp", path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clusterforge-claim-name")
    ap.add_argument("--root", default="/")  # tests: a directory standing in for /
    ap.add_argument("--no-hostname", action="store_true")
    ap.add_argument("--deadline", type=float, default=240)
    a = ap.parse_args(argv)
    etc = os.path.join(a.root, "etc/")
    ec2 = iid = None
    try:
        cfg = _load(etc + "clusterforge/node.json", "cluster group role region")
        head = cfg.get("hostname")
        names = [] if head else expand(_load(etc + "clusterforge/node.json", "table hostlist")["hostlist"])
        iid, addr = imds(["instance-id", "local-ipv4"])
        import boto3
        from botocore.config import Config

        kw: dict[str, Any] = {"region_name": cfg["region"], "config": Config(
            retries={"mode": "standard", "max_attempts": 6}, connect_timeout=5, read_timeout=10)}
        if os.path.exists(ep := etc + "clusterforge/aws-endpoints.json"):  # emulation only
            kw["endpoint_url"] = _load(ep, "endpoint_url")["endpoint_url"]
        ec2 = boto3.client("ec2", **kw)
        deadline = time.monotonic() + a.deadline
        page = _call(ec2.describe_instances, deadline, InstanceIds=[iid])
        tags = {t["Key"]: t["Value"] for r in page["Reservations"] for x in r["Instances"] for t in x.get("Tags", [])}
        if bad := [f"{k}={cfg[k.split(':')[1]]}" for k in TAGS if tags.get(k) != cfg[k.split(":")[1]]]:
            raise ClaimError(f"instance {iid} lacks tag {', '.join(bad)}: the launch template must tag instances", 2)
        name = head or claim(boto3.client("dynamodb", **kw), ec2, table=cfg["table"], group=cfg["group"],
                             names=names, instance_id=iid, address=addr, deadline_s=a.deadline)
        # Head nodes keep the Name tag Pulumi gave them (another one would show as drift).
        new = {TAG_HOSTNAME: name, **({} if head else {"Name": f"{cfg['cluster']}-{name}"})}
        _call(ec2.create_tags, deadline, Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in new.items()])
        _call(ec2.delete_tags, deadline, Resources=[iid], Tags=[{"Key": TAG_CLAIM_ERROR}])
        _write(etc + "clusterforge/node-name", name)
        if not a.no_hostname:
            _write(etc + "hostname", name)
            socket.sethostname(name)  # what hostname(1) does: sethostname(2)
        print(name)
        return 0
    except ClaimError as e:
        err, code = str(e), e.code
    except Exception as e:  # never a traceback at boot: one line in claim.log
        err, code = f"unexpected {type(e).__name__}: {e}", 4
    print(f"clusterforge-claim: error: {err}", file=sys.stderr)
    try:
        if ec2 and iid:
            ec2.create_tags(Resources=[iid], Tags=[{"Key": TAG_CLAIM_ERROR, "Value": err[:255]}])
    except Exception:  # the API may be what failed; the log line above is the record
        pass
    return code


if __name__ == "__main__":
    sys.exit(main())
