"""``clusterforge local up`` for an AWS spec: the stack on an emulated AWS, configured for real.

The steps are the ones a user runs against AWS, with each AWS part replaced by its stand-in:

1. the Pulumi program runs under the engine's mocks (``clusterforge plan``'s recording);
2. moto's server (EC2, Auto Scaling, DynamoDB) on the bridge is populated from that recording:
   the plan's launch templates with their real user data and tags, its fixed-size Auto Scaling
   groups, its head instances and the node-name table (``cloud.populate``);
3. the hypervisor (``hypervisor.py``) boots a node namespace for every instance moto runs, with
   an instance-metadata stand-in inside it, and runs its user data: each instance claims its
   Slurm name exactly as on AWS;
4. ``configure`` runs the production playbook through the real ``amazon.aws.aws_ec2`` inventory,
   which reaches moto through ``AWS_URL`` (the plugin's documented endpoint variable) and the
   stack outputs written from moto's state in the program's own ``StackOutputs`` shape.

``rejoin`` is the departure/replacement path (``clusterforge local rejoin``/``replace``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from clusterforge import proc
from clusterforge.aws import outputs as out
from clusterforge.local.aws import hypervisor as hv
from clusterforge.local.layout import SLURMD_PARAMETERS, LocalError, LocalLayout, LocalNode
from clusterforge.resolve import ResolvedCluster, resolve_file

if TYPE_CHECKING:
    from clusterforge.local.cluster import LocalCluster

#: moto's server on the bridge: what the instances' boto3 and the inventory call AWS
MOTO_PORT = 5000
#: instances to named nodes: apt (python3-boto3 from the local mirror) plus the claim, per instance
BOOT_TIMEOUT_S = 600


def endpoint(net: str) -> str:
    return f"http://{net}.1:{MOTO_PORT}"


def aws_env(net: str, region: str) -> dict[str, str]:
    """Environment that points boto3 and the aws_ec2 plugin at the emulated AWS (and nowhere
    else: fake keys, so nothing could ever authenticate against the real one)."""
    from clusterforge.local.aws.cloud import FAKE_CREDENTIALS as k

    keys = {"AWS_ACCESS_KEY_ID": k["aws_access_key_id"], "AWS_SECRET_ACCESS_KEY": k["aws_secret_access_key"]}
    return {**keys, "AWS_URL": endpoint(net), "AWS_DEFAULT_REGION": region, "AWS_REGION": region}


def is_aws_spec(rc: ResolvedCluster) -> bool:
    return rc.spec.aws is not None and any(g.cloud is not None for g in rc.spec.node_groups)


def plan_aws_layout(rc: ResolvedCluster, spec_path: Path, net: str) -> LocalLayout:
    """What an AWS spec becomes locally; raises ``LocalError`` naming the field when it cannot."""
    import ipaddress

    from clusterforge.local.layout import MAX_NODES, _network

    cluster = rc.spec
    nw = _network(net)
    base = str(nw.network_address).rsplit(".", 1)[0]
    assert cluster.aws is not None
    for gi, g in enumerate(cluster.node_groups):
        if g.cloud is None:
            raise LocalError(
                f"node_groups[{gi}] ({g.name}) is on-prem: the AWS flavour runs cloud groups only "
                "(a hybrid spec cannot run locally yet); see examples/local-aws.yaml"
            )
        from clusterforge.aws.layout import subnet_for

        sub = subnet_for(cluster, g)
        if ipaddress.IPv4Network(sub.cidr) != nw:
            raise LocalError(
                f"node_groups[{gi}] ({g.name}): subnet {sub.name} is {sub.cidr}, not the local network {nw}; "
                f"the emulated EC2 hands out addresses from the subnet, so give the group a subnet of "
                f"cidr {nw} (as examples/local-aws.yaml does) or run with --net {sub.cidr}"
            )
        prof = rc.group(g.name).profile
        if prof is not None and prof.gpu is not None and prof.gpu.vendor != "nvidia":
            raise LocalError(
                f"node_groups[{gi}] ({g.name}): {prof.name} has {prof.gpu.vendor} GPUs; local mode fakes "
                "NVIDIA devices only"
            )
    total = sum(g.cloud.count for g in cluster.node_groups if g.cloud)
    if total > MAX_NODES:
        raise LocalError(f"{spec_path} has {total} instances; a local cluster runs at most {MAX_NODES}")
    data = cluster.model_dump(mode="json", exclude_unset=True, by_alias=True)
    slurm = data.setdefault("slurm", {}) or {}
    data["slurm"] = slurm
    extra = slurm.setdefault("extra_conf", {}) or {}
    slurm["extra_conf"] = extra
    extra["SlurmdParameters"] = SLURMD_PARAMETERS
    overrides = [
        f"slurm.conf SlurmdParameters={SLURMD_PARAMETERS} (nodes register with the profile's hardware, "
        "not this machine's)",
        f"AWS = moto's EC2/Auto Scaling/DynamoDB server on {endpoint(base)}; instance metadata = a stand-in "
        "at 169.254.169.254 in each node's namespace; instances = node namespaces booted by the hypervisor",
        "Ansible: clusterforge_service_manager=direct, sysctl/chrony written not applied, metadata firewall off "
        "(no iptables in the node image), vendor repositories "
        f"= stand-ins on http://{base}.1:8081",
    ]
    return LocalLayout(
        cluster=cluster.name, net=base, nodes=[], spec=data, overrides=overrides,
        source=str(Path(spec_path).resolve()), flavour="aws",
        # the instances are chroot nodes: the hypervisor runs their user data as cloud-init would,
        # and their daemons under clusterforge-svc (the one case that keeps the supervisor)
        boot="chroot",
    )


def gpus_by_type(rc: ResolvedCluster) -> dict[str, int]:
    outm: dict[str, int] = {}
    for g in rc.spec.node_groups:
        prof = rc.group(g.name).profile
        if g.cloud is not None and prof is not None and prof.gpu is not None:
            outm[g.cloud.instance_type] = prof.gpu.count
    return outm


def expected_instances(rc: ResolvedCluster) -> int:
    return sum(g.cloud.count for g in rc.spec.node_groups if g.cloud)


class AwsFlavour:
    """The AWS parts of one local cluster (its state folder is the LocalCluster's)."""

    def __init__(self, lc: LocalCluster, layout: LocalLayout) -> None:
        self.lc = lc
        self.layout = layout
        self.state = lc.state
        self.region = (layout.spec.get("aws") or {}).get("region", "us-east-1")

    @property
    def endpoint(self) -> str:
        return endpoint(self.layout.net)

    @property
    def bridge_ns(self) -> str:
        return f"{self.layout.prefix}-br"

    def clients(self) -> Any:
        """(ec2, autoscaling, dynamodb) clients of the emulated AWS (call inside the bridge namespace)."""
        from clusterforge.local.aws.cloud import client

        return tuple(client(svc, self.endpoint, self.region) for svc in ("ec2", "autoscaling", "dynamodb"))

    # ------------------------------------------------------------------------------ up
    def start_cloud(self, rc: ResolvedCluster, say: Callable[[str], Any]) -> None:
        from clusterforge.local.aws import cloud
        from clusterforge.local.cluster import in_netns
        from clusterforge.plan.mocks import run_program

        nodes_sh = str(self.lc_nodes_sh())
        say(f"emulated AWS: moto server on {self.endpoint}")
        proc.run(
            [nodes_sh, "spawn", str(self.state), str(self.state / "moto.pid"), self.bridge_ns,
             str(self.state / "moto.log"), sys.executable, "-m", "clusterforge.local.aws.ec2server",
             "-H", f"{self.layout.net}.1", "-p", str(MOTO_PORT),
             "--placements", str(self.state / "ec2-placements.json")],
            timeout=30, check=True,
        )
        with in_netns(self.bridge_ns):
            cloud.wait_ready(self.endpoint, timeout=60, log=self.state / "moto.log")
            say("emulated AWS: populating it from the plan (Pulumi program under mocks)")
            recording = run_program(rc, preview=False)
            result = cloud.populate(self.endpoint, rc, recording, net=self.layout.net)
        (self.state / "cloud.json").write_text(json.dumps(asdict(result), indent=1, sort_keys=True))
        for o in result.overrides:
            say(f"local override: {o}")
        say("emulated EC2: the hypervisor boots every instance moto runs")
        proc.run(
            [nodes_sh, "spawn", str(self.state), str(self.state / "hypervisor.pid"), self.bridge_ns,
             str(self.state / "hypervisor.log"), sys.executable, "-m", "clusterforge.local.aws.hypervisor",
             "--state", str(self.state), "--endpoint", self.endpoint, "--cluster", rc.spec.name,
             "--region", self.region, *[f"--gpus={k}={v}" for k, v in gpus_by_type(rc).items()]],
            timeout=30, check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        )

    def lc_nodes_sh(self) -> Path:
        from clusterforge.local.cluster import NODES_SH

        return NODES_SH

    def wait_named(
        self, want: int, *, timeout: float = BOOT_TIMEOUT_S, exclude: set[str] | None = None
    ) -> dict[str, hv.Booted]:
        """Bounded wait until ``want`` live instances have run their user data and claimed a name.

        Returns name -> instance. A failed claim or user data ends the wait at once with the
        instance's own log lines (claim.log), never a silent hang."""
        deadline = time.monotonic() + timeout
        exclude = exclude or set()
        while True:
            live = {i: b for i, b in hv.read_instances(self.state).items() if b.state != "gone" and i not in exclude}
            for iid, b in live.items():
                if b.state in ("user-data-failed", "boot-failed") or b.claim_error:
                    raise LocalError(
                        f"instance {iid} ({b.group}, {b.address}) did not join: "
                        f"{b.claim_error or b.state} (rc={b.user_data_rc})\n" + self.node_log(iid)
                    )
            named = {b.name: b for b in live.values() if b.state == "running" and b.name}
            if len(named) >= want:
                return named
            if time.monotonic() > deadline:
                pending = [f"{i} ({b.state}, name {b.name or 'none'})" for i, b in live.items()]
                raise LocalError(
                    f"{len(named)} of {want} instances named after {timeout:.0f} s; still waiting: "
                    f"{', '.join(pending) or 'no instance booted'}; see {self.state}/hypervisor.log"
                )
            time.sleep(1)

    def node_log(self, iid: str) -> str:
        """The instance's claim and user-data log lines (what an operator reads on the console)."""
        root = self.state / "nodes" / iid / "upper" / "var" / "log"
        lines: list[str] = []
        for f in (root / "clusterforge" / "claim.log", root / "cloud-init-output.log"):
            if f.is_file():
                lines += [f"  {f.name}: {ln}" for ln in f.read_text(errors="replace").splitlines()[-8:]]
        return "\n".join(lines) or "  (no log written)"

    def refresh_layout(self) -> LocalLayout:
        """layout.json's nodes = the live named instances (names from their claims)."""
        nodes = []
        for iid, b in sorted(hv.read_instances(self.state).items(), key=lambda kv: kv[1].name or ""):
            if b.state == "gone" or not b.name:
                continue
            gpus = 0
            nodes.append(LocalNode(b.name, b.address, b.group, b.role, gpus, instance_id=iid))
        rc = resolve_file(self.lc.spec_file)
        types = gpus_by_type(rc)
        gtype = {g.name: g.cloud.instance_type for g in rc.spec.node_groups if g.cloud}
        nodes = [
            LocalNode(n.name, n.address, n.group, n.role, types.get(gtype.get(n.group, ""), 0), n.instance_id)
            for n in nodes
        ]
        self.layout.nodes = nodes
        self.lc.save_layout(self.layout)
        return self.layout

    def write_stack_outputs(self) -> Path:
        """The stack outputs, in the program's typed shape, from the emulated AWS's state: what
        ``pulumi stack output --json`` gives after a real ``up``."""
        from clusterforge.local.aws import cloud
        from clusterforge.local.cluster import in_netns

        with in_netns(self.bridge_ns):
            populated = cloud.Populated(**json.loads((self.state / "cloud.json").read_text()))
            stack = cloud.stack_outputs(self.endpoint, resolve_file(self.lc.spec_file), populated)
        f = self.state / "stack.json"
        f.write_text(json.dumps(stack, indent=1, sort_keys=True))
        return f

    def inventory_notes(self) -> list[str]:
        """Instances the inventory leaves out (no claimed name), and why."""
        notes = []
        for iid, b in hv.read_instances(self.state).items():
            if b.state != "gone" and not b.name:
                notes.append(f"{iid} ({b.group}, {b.address}): no {out.TAG_HOSTNAME} tag"
                             + (f": claim failed: {b.claim_error}" if b.claim_error else f" yet ({b.state})"))
        return notes


def write_spec(lc: LocalCluster, layout: LocalLayout) -> None:
    lc.spec_file.write_text(
        f"# The effective spec of the local cluster: {layout.source} with local mode's overrides.\n"
        + yaml.safe_dump(layout.spec, sort_keys=False)
    )


# ------------------------------------------------------------------------ departure, rejoin
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
#: a new instance to a usable node: its user data, one host's playbook, slurmd registering
REJOIN_TIMEOUT_S = 900


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


class Rejoin:
    """What ``clusterforge local rejoin`` did: nodes taken down (and why), nodes that joined."""

    def __init__(self) -> None:
        self.down: list[tuple[str, str]] = []  # (node, reason)
        self.joined: list[tuple[str, str, str]] = []  # (node, instance id, address)
        self.seconds: dict[str, float] = {}


def departed(aws: AwsFlavour) -> list[tuple[str, str, str]]:
    """(node, instance id, reason) for every claimed name whose instance is gone.

    The reason is what EC2 says (state, and its StateReason when it gives one), so ``sinfo -R``
    tells the operator *why* the node left: a spot reclaim, a scale-in, a failed health check."""
    from clusterforge.aws import nodename
    from clusterforge.local.cluster import in_netns

    table = out.names_table(aws.layout.cluster)
    with in_netns(aws.bridge_ns):
        ec2, _asg, ddb = aws.clients()
        held = nodename.holders(ddb, table=table)
        ids = sorted({str(item["instance_id"]) for item in held.values()})
        known: dict[str, dict[str, Any]] = {}
        if ids:
            for page in ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-id", "Values": ids}]
            ):
                for r in page["Reservations"]:
                    for i in r["Instances"]:
                        known[i["InstanceId"]] = i
    gone = []
    for name, item in sorted(held.items()):
        iid = str(item["instance_id"])
        inst = known.get(iid)
        if inst is None:
            gone.append((name, iid, f"instance {iid} no longer exists in EC2"))
        elif inst["State"]["Name"] in GONE_STATES:
            why = (inst.get("StateReason") or {}).get("Message") or inst.get("StateTransitionReason") or ""
            gone.append((name, iid, f"instance {iid} {inst['State']['Name']}" + (f" ({why})" if why else "")))
    return gone


def rejoin(aws: AwsFlavour, *, say: Callable[[str], Any], timeout: float = REJOIN_TIMEOUT_S) -> Rejoin:
    """Take the nodes of departed instances DOWN (their --requeue jobs requeue), release their
    claims, wait for the Auto Scaling group's replacements to claim the freed names, configure
    those hosts only (``--limit``), and wait until slurmd has registered each with its new address
    and its node agent has lifted the drain this step set (the node takes work)."""
    from clusterforge.aws import nodename
    from clusterforge.local.cluster import in_netns

    res = Rejoin()
    lc, layout = aws.lc, aws.layout
    ctl = layout.first("controller")
    if ctl is None:
        raise LocalError(f"local cluster {layout.cluster} has no controller node to update")
    t = time.monotonic()
    before = {n.name: n.instance_id for n in layout.nodes}
    gone = departed(aws)
    for name, iid, why in gone:
        reason = why[:200]
        # drained first, then DOWN (which keeps the DRAIN flag): EC2 answers "terminated" while the
        # departing host may still run for a while, and with ReturnToService=2 one more answer from
        # its slurmd would return a plain DOWN node to service, so the requeued job would start on
        # it again and be requeued a second time. The replacement's node agent lifts this drain
        # (its reason names the previous instance: node_agent.resume_stale_drain).
        p = lc.on(ctl.name, f"scontrol update nodename={name} state=drain reason={_quote(reason)} && "
                  f"scontrol update nodename={name} state=down reason={_quote(reason)}", timeout=60)
        if p.returncode != 0:
            raise LocalError(f"scontrol could not take {name} down: {p.stderr.strip() or p.stdout.strip()}")
        with in_netns(aws.bridge_ns):
            _ec2, _asg, ddb = aws.clients()
            nodename.release(ddb, table=out.names_table(layout.cluster), name=name, instance_id=iid)
        res.down.append((name, reason))
        say(f"{name}: DOWN, {reason}")
    res.seconds["down"] = time.monotonic() - t
    want = expected_instances(resolve_file(lc.spec_file))
    say(f"waiting for {want} named instances (replacements claim the freed names; at most {timeout:.0f} s)")
    # the departed instances are not counted, even while the hypervisor has not stopped them yet
    aws.wait_named(want, timeout=timeout, exclude={iid for _n, iid, _w in gone})
    layout = aws.refresh_layout()
    res.seconds["claimed"] = time.monotonic() - t
    new = [n for n in layout.nodes if before.get(n.name) != n.instance_id]
    if not new:
        say("every node runs on the instance it was configured on: nothing to join")
        return res
    names = ",".join(n.name for n in new)
    say(f"configuring the new hosts only: --limit {names}")
    result = lc.configure(limit=names)
    if not result.ok:
        raise LocalError(f"configure --limit {names} failed (rc={result.rc}): " + "; ".join(result.failures[:5]))
    res.seconds["configured"] = time.monotonic() - t
    deadline = time.monotonic() + 120
    for n in new:
        while True:
            p = lc.on(ctl.name, f"scontrol show node {n.name} -o", timeout=30)
            line = p.stdout
            state = next((f.split("=", 1)[1] for f in line.split() if f.startswith("State=")), "")
            # the drain this step set, still on: the replacement's node agent has not lifted it yet
            ours = "DRAIN" in state and any(f"Reason={r}" in line for nm, r in res.down if nm == n.name)
            # registered: slurmctld has the instance's own address, and the node takes work
            if (f" NodeAddr={n.address} " in f" {line} " and state.split("+")[0] in ("IDLE", "ALLOCATED", "MIXED")
                    and not ours):
                break
            if time.monotonic() > deadline:
                raise LocalError(f"{n.name} did not register with address {n.address} and take work within 120 s "
                                 f"(its node agent lifts the previous instance's drain): {line.strip()}")
            time.sleep(1)
        res.joined.append((n.name, n.instance_id or "", n.address))
        say(f"{n.name}: joined as {n.instance_id} at {n.address}")
    res.seconds["registered"] = time.monotonic() - t
    return res


def replace(aws: AwsFlavour, node: str, *, reason: str, say: Callable[[str], Any]) -> Rejoin:
    """``clusterforge local replace NODE``: drain-and-replace a node in one command. Its instance
    is terminated through its Auto Scaling group without lowering the desired capacity (the API
    call an operator or a health-check hook makes on AWS), so the group launches a replacement;
    then ``rejoin``."""
    from clusterforge.local.cluster import in_netns

    n = aws.layout.node(node)
    if not n.instance_id:
        raise LocalError(f"{node} is not an instance of an Auto Scaling group")
    if n.role != "compute":
        raise LocalError(f"{node} is a {n.role} node: only compute nodes of an Auto Scaling group are replaced")
    ctl = aws.layout.first("controller")
    assert ctl is not None
    why = f"replaced: {reason}"[:200]
    aws.lc.on(ctl.name, f"scontrol update nodename={node} state=down reason={_quote(why)}", timeout=60)
    with in_netns(aws.bridge_ns):
        _ec2, asg, _ddb = aws.clients()
        asg.terminate_instance_in_auto_scaling_group(InstanceId=n.instance_id, ShouldDecrementDesiredCapacity=False)
    say(f"{node}: instance {n.instance_id} terminated in its Auto Scaling group ({why})")
    return rejoin(aws, say=say)


def interrupt(aws: AwsFlavour, node: str, *, action: str = "terminate", lead_s: float = 120.0) -> str:
    """Serve a spot interruption notice to ``node``'s instance: its metadata stand-in answers
    ``spot/instance-action`` with ``{"action": action, "time": now + lead_s}`` from now on, as EC2
    does two minutes before it reclaims a spot instance. Returns the notice's time (ISO, UTC).

    Only the notice: the instance keeps running (an operator or a test terminates it, as EC2
    would at that time), so what the node agent did before "the instance goes" can be checked."""
    from dataclasses import replace as dc_replace
    from datetime import UTC, datetime, timedelta

    from clusterforge.local.aws import imds

    n = aws.layout.node(node)
    if not n.instance_id:
        raise LocalError(f"{node} is not an instance: no metadata service to serve a notice from")
    f = aws.lc.state / "imds" / f"{n.instance_id}.json"
    if not f.is_file():
        raise LocalError(f"{node}'s instance {n.instance_id} has no metadata data file {f}: is it running?")
    when = (datetime.now(UTC) + timedelta(seconds=lead_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    imds.write_data(f, dc_replace(imds.read_data(f), spot_action=imds.SpotAction(action=action, time=when)))
    return when


def withdraw_notice(aws: AwsFlavour, node: str) -> None:
    """Stop serving ``node``'s spot notice (the metadata path is a 404 again)."""
    from dataclasses import replace as dc_replace

    from clusterforge.local.aws import imds

    n = aws.layout.node(node)
    f = aws.lc.state / "imds" / f"{n.instance_id}.json"
    imds.write_data(f, dc_replace(imds.read_data(f), spot_action=None))


def ec2_leaves(aws: AwsFlavour) -> dict[str, str]:
    """compute node -> bottom network node, as the emulated DescribeInstanceTopology answers for
    the cluster's running instances (names from their ``clusterforge:hostname`` tags): where EC2
    says each node is, for comparing with what slurmctld was told."""
    from clusterforge.local.cluster import in_netns

    with in_netns(aws.bridge_ns):
        ec2, _asg, _ddb = aws.clients()
        names: dict[str, str] = {}
        for page in ec2.get_paginator("describe_instances").paginate(Filters=[
            {"Name": f"tag:{out.TAG_CLUSTER}", "Values": [aws.layout.cluster]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]):
            for r in page["Reservations"]:
                for i in r["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
                    if tags.get(out.TAG_ROLE) == "compute" and out.TAG_HOSTNAME in tags:
                        names[i["InstanceId"]] = tags[out.TAG_HOSTNAME]
        if not names:
            return {}
        topo = ec2.describe_instance_topology(InstanceIds=sorted(names))["Instances"]
    return {names[t["InstanceId"]]: t["NetworkNodes"][-1] for t in topo if t.get("NetworkNodes")}


def slurm_leaves(aws: AwsFlavour) -> dict[str, str]:
    """node -> leaf switch in slurmctld's own view (``scontrol show topology`` on the controller)."""
    from clusterforge import hostlist

    ctl = aws.layout.first("controller")
    if ctl is None:
        raise LocalError(f"local cluster {aws.layout.cluster} has no controller node")
    p = aws.lc.on(ctl.name, "timeout 20 scontrol show topology", timeout=40)
    leaves: dict[str, str] = {}
    for line in p.stdout.splitlines():
        f = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if f.get("Level") == "0" and f.get("Nodes"):
            leaves.update({n: f["SwitchName"] for n in hostlist.expand(f["Nodes"])})
    return leaves
