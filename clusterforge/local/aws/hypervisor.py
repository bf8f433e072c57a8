"""The emulated EC2's hypervisor: every instance moto runs is a node namespace on the bridge.

moto keeps the *API* state of EC2 and Auto Scaling (instances, their tags, addresses, user data;
the Auto Scaling group launching a replacement when one is terminated) but runs nothing. This
loop is the part of EC2 that runs instances: it polls ``DescribeInstances`` for the cluster's
instances and

* boots a node namespace for each new pending/running instance, with moto's private address on
  ``eth0``, the instance's metadata served at 169.254.169.254 inside that namespace (the IMDS
  stand-in, ``imds.py``) and its user data run once after boot, as cloud-init runs it;
* kills the namespace of an instance that moto says is shutting down, terminated or stopped (a
  spot reclaim, a scale-in, ``clusterforge local replace``);
* refreshes each node's metadata (its tags change when the claim tags it; a spot notice).

Nothing here knows Slurm names: the instance claims its own name at boot (``aws/nodename.py``),
exactly as on AWS. The node folders are named by instance id; ``instances.json`` in the state
folder maps instance id -> address, state and claimed name for ``clusterforge local`` commands.

Run as ``python3 -m clusterforge.local.aws.hypervisor --state S --endpoint URL --cluster C
--gpus TYPE=N ...`` inside the bridge namespace (``nodes.sh spawn``); it stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clusterforge import proc
from clusterforge.aws import outputs as out

HERE = Path(__file__).resolve().parent
NODES_SH = HERE.parent / "nodes.sh"
GONE = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
#: cloud-init gives user data no deadline; the stand-in does (apt + claim fit well inside)
USER_DATA_TIMEOUT_S = 600


@dataclass
class Booted:
    instance_id: str
    address: str
    group: str
    role: str
    state: str  # booting, running (user data done), user-data-failed, gone
    name: str | None = None  # the claimed Slurm name, from the instance's tag
    claim_error: str | None = None
    user_data_rc: int | None = None
    booted_at: float = 0.0
    ready_at: float | None = None  # user data finished (the claim with it)


def instances_file(state: Path) -> Path:
    return state / "instances.json"


def read_instances(state: Path) -> dict[str, Booted]:
    f = instances_file(state)
    if not f.is_file():
        return {}
    return {k: Booted(**v) for k, v in json.loads(f.read_text()).items()}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _wait_port(ns: str, host: str, port: int, *, timeout: float) -> None:
    """Bounded wait until something listens on host:port inside network namespace ns."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = proc.run(["ip", "netns", "exec", ns, "bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"], timeout=5)
        if p.returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {host}:{port} in {ns} after {timeout:.0f} s")


class Hypervisor:
    def __init__(self, state: Path, endpoint: str, cluster: str, gpus: dict[str, int], region: str) -> None:
        from clusterforge.local.aws.cloud import client

        self.state = state
        self.endpoint = endpoint
        self.cluster = cluster
        self.gpus = gpus
        self.region = region
        self.ec2 = client("ec2", endpoint, region)
        self.booted = read_instances(state)
        self.user_data_runs: dict[str, proc.Daemon] = {}

    def log(self, msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} hypervisor: {msg}", flush=True)

    # ---------------------------------------------------------------------------- EC2 side
    def describe(self) -> list[dict[str, Any]]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{out.TAG_CLUSTER}", "Values": [self.cluster]}]
        )
        return [i for p in pages for r in p["Reservations"] for i in r["Instances"]]

    def user_data(self, instance_id: str) -> str:
        import base64

        a = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        raw = (a.get("UserData") or {}).get("Value") or ""
        return base64.b64decode(raw).decode() if raw else ""

    # --------------------------------------------------------------------------- node side
    def node_dir(self, iid: str) -> Path:
        return self.state / "nodes" / iid

    def metadata(self, inst: dict[str, Any], user_data: str) -> Any:
        """What the instance's metadata service serves: moto's view of it."""
        from clusterforge.local.aws.imds import InstanceData

        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        return InstanceData(
            instance_id=inst["InstanceId"], instance_type=inst.get("InstanceType", ""),
            local_ipv4=inst.get("PrivateIpAddress", ""), region=self.region,
            availability_zone=(inst.get("Placement") or {}).get("AvailabilityZone", f"{self.region}a"),
            tags=tags,
            # the plan's launch templates do not enable InstanceMetadataTags, so EC2 would not
            # serve tags either; the claim reads node.json from the user data instead
            instance_metadata_tags=False,
            user_data=user_data,
        )

    def write_metadata(self, inst: dict[str, Any]) -> None:
        from clusterforge.local.aws import imds

        f = self.state / "imds" / f"{inst['InstanceId']}.json"
        old = imds.read_data(f) if f.is_file() else None
        new = self.metadata(inst, old.user_data if old else "")
        if old is not None:
            from dataclasses import replace

            new = replace(new, spot_action=old.spot_action, maintenance_events=old.maintenance_events)
        if old != new:
            imds.write_data(f, new)

    def boot(self, inst: dict[str, Any]) -> None:
        from clusterforge.local.aws import imds

        iid = inst["InstanceId"]
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        addr = inst.get("PrivateIpAddress", "")
        gpus = self.gpus.get(inst.get("InstanceType", ""), 0)
        b = Booted(
            iid, addr, tags.get(out.TAG_GROUP, "?"), tags.get(out.TAG_ROLE, "?"), "booting", booted_at=time.time()
        )
        self.booted[iid] = b
        self.log(f"{iid}: booting {addr} ({inst.get('InstanceType')}, {gpus} GPUs)")
        (self.state / "imds").mkdir(exist_ok=True)
        ud = self.user_data(iid)
        meta = self.state / "imds" / f"{iid}.json"
        imds.write_data(meta, self.metadata(inst, ud))
        # what this instance's disk starts with beyond the image: the emulated endpoints (the
        # local "AMI"'s one addition) and its user data where cloud-init keeps it
        extra = self.state / "boot" / iid
        (extra / "etc" / "clusterforge").mkdir(parents=True, exist_ok=True)
        (extra / "etc" / "clusterforge" / "aws-endpoints.json").write_text(
            json.dumps({"endpoint_url": self.endpoint}) + "\n"
        )
        (extra / "var" / "lib" / "cloud" / "instance").mkdir(parents=True, exist_ok=True)
        udf = extra / "var" / "lib" / "cloud" / "instance" / "user-data.txt"
        udf.write_text(ud)
        udf.chmod(0o700)
        p = proc.run(
            [str(NODES_SH), "boot", str(self.state), f"{iid}={addr}" + (f":gpu{gpus}" if gpus else "")],
            timeout=120,
            env={**os.environ, "NODE_IMAGE_EXTRA": str(extra)},
        )
        if p.returncode != 0:
            b.state = "boot-failed"
            self.log(f"{iid}: boot failed: {p.stderr.strip()[-500:]}")
            return
        d = self.node_dir(iid)
        ns = (d / "netns").read_text().strip()
        # the link-local metadata address, inside the node's own namespace only
        proc.run(["ip", "-n", ns, "addr", "add", "169.254.169.254/32", "dev", "lo"], timeout=30, check=True)
        proc.run(
            [
                str(NODES_SH), "spawn", str(self.state), str(d / "pid.imds"), ns, str(d / "imds.log"),
                sys.executable, "-m", "clusterforge.local.aws.imds", "--bind", "169.254.169.254", "--port", "80",
                "--data", str(meta),
            ],
            timeout=30,
            check=True,
        )
        _wait_port(ns, "169.254.169.254", 80, timeout=20)
        # cloud-init's part: the user data, once, as root, logged where cloud-init logs it
        script = (
            f"timeout {USER_DATA_TIMEOUT_S} /var/lib/cloud/instance/user-data.txt"
            " >>/var/log/cloud-init-output.log 2>&1"
        )
        self.user_data_runs[iid] = proc.start([str(NODES_SH), "exec", str(self.state), iid, "/bin/bash", "-c", script])

    def _boot_logged(self, inst: dict[str, Any]) -> None:
        try:
            self.boot(inst)
        except Exception as exc:  # one instance that fails to boot must not stop the others
            self.booted[inst["InstanceId"]].state = "boot-failed"
            self.log(f"{inst['InstanceId']}: boot failed: {type(exc).__name__}: {exc}")

    def kill(self, iid: str, why: str) -> None:
        self.log(f"{iid}: {why}: stopping its node")
        run = self.user_data_runs.pop(iid, None)
        if run is not None:
            run.stop()
        proc.run([str(NODES_SH), "kill", str(self.state), iid], timeout=60)
        b = self.booted[iid]
        b.state = "gone"

    # -------------------------------------------------------------------------------- loop
    def reconcile(self) -> None:
        seen = self.describe()
        by_id = {i["InstanceId"]: i for i in seen}
        new: list[dict[str, Any]] = []
        for inst in seen:
            iid, st = inst["InstanceId"], inst["State"]["Name"]
            b = self.booted.get(iid)
            if st in GONE:
                if b is not None and b.state != "gone":
                    self.kill(iid, f"EC2 state {st}")
                continue
            if b is None:
                new.append(inst)
                continue
            if b.state == "gone":
                continue
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
            name = tags.get(out.TAG_HOSTNAME)
            if name and name != b.name:
                # its slurmd names cgroup folders after the node: `nodes.sh kill`/`down` remove them
                (self.node_dir(iid) / "slurm-name").write_text(name + "\n")
                with (self.state / "hostnames").open("a") as fh:
                    fh.write(name + "\n")
            b.name = name
            b.claim_error = tags.get(out.TAG_CLAIM_ERROR)
            self.write_metadata(inst)
        if new:
            # instances boot side by side, as EC2 boots them (each one's sshd host keys alone
            # take seconds on a small machine)
            with ThreadPoolExecutor(max_workers=min(8, len(new))) as pool:
                list(pool.map(self._boot_logged, new))
        for iid, b in list(self.booted.items()):
            if b.state != "gone" and iid not in by_id:
                self.kill(iid, "no longer known to EC2")
        for iid, run in list(self.user_data_runs.items()):
            if run.alive():
                continue
            rc = run.popen.wait(5)  # exited: reap it
            del self.user_data_runs[iid]
            b = self.booted[iid]
            b.user_data_rc = rc
            b.ready_at = time.time()
            b.state = "running" if rc == 0 else "user-data-failed"
            self.log(f"{iid}: user data finished rc={rc} after {b.ready_at - b.booted_at:.1f} s")
        _write_json(instances_file(self.state), {k: asdict(v) for k, v in self.booted.items()})

    def run(self, interval: float) -> None:
        stop = False

        def _term(_sig: int, _frm: Any) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, _term)
        self.log(f"watching {self.cluster}'s instances at {self.endpoint}")
        while not stop:
            try:
                self.reconcile()
            except Exception as exc:  # the loop outlives one failed poll, and says why
                self.log(f"poll failed: {type(exc).__name__}: {exc}")
            time.sleep(interval)
        for run in self.user_data_runs.values():
            run.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clusterforge-hypervisor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--region", required=True)
    ap.add_argument("--gpus", action="append", default=[], help="INSTANCE_TYPE=N fake GPUs per instance")
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args(argv)
    gpus = {k: int(v) for k, v in (g.split("=", 1) for g in a.gpus)}
    Hypervisor(a.state, a.endpoint, a.cluster, gpus, a.region).run(a.interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
