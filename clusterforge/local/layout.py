"""What a spec becomes on one machine: its nodes, their local addresses, and what local mode overrides.

Local mode runs the production spec, renderer and roles. It changes only what cannot hold on one
machine, and says so (``LocalLayout.overrides``):

* addresses: each host keeps its spec address when that lies in the local network, otherwise it
  gets the next free one there (the nodes sit on one bridge);
* ``SlurmdParameters=config_overrides``: a local node has a few CPUs and GiB, not the catalog
  profile's 224 cores and 2 TiB; with it slurmd registers with the configured hardware;
* Ansible variables for hosts without an init or a kernel of their own (``LOCAL_VARS``) and the
  vendor repositories, which are stand-ins served on the bridge.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterforge import hostlist
from clusterforge.errors import ClusterforgeError
from clusterforge.resolve import resolve_file

#: the default local network: NET.1 is the bridge (repository, Ansible side), nodes from NET.10
DEFAULT_NET = "10.79.0.0/24"
#: one machine runs each node as sshd + munged + slurmd (+ more on the controller): past this many,
#: a 2-core machine spends the whole run in Ansible's SSH round trips
MAX_NODES = 24
#: slurmd registers with the configured hardware, not the small node's (slurm.conf(5) SlurmdParameters)
SLURMD_PARAMETERS = "config_overrides"
REPO_PORT = 8081


class LocalError(ClusterforgeError):
    """The spec cannot run as a local cluster, or the local cluster is not in the state asked for."""


@dataclass(frozen=True)
class LocalNode:
    name: str
    address: str
    group: str
    role: str  # controller, compute, login
    gpus: int  # fake /dev/nvidiaN devices
    #: AWS flavour: the emulated instance this node runs as (its node folder); None on-prem
    instance_id: str | None = None

    @property
    def node_id(self) -> str:
        """The node's folder and namespace name in nodes.sh: its instance id, else its name."""
        return self.instance_id or self.name


@dataclass
class LocalLayout:
    cluster: str
    net: str  # e.g. 10.79.0 (a /24)
    nodes: list[LocalNode]
    spec: dict[str, Any]  # the effective spec (the original with the overrides applied)
    overrides: list[str] = field(default_factory=list)
    source: str = ""  # the spec file it came from
    #: "onprem": nodes from the spec's hosts; "aws": instances of an emulated AWS that name themselves
    flavour: str = "onprem"

    @property
    def prefix(self) -> str:
        """Name prefix of the namespaces and links: one per local network, so two can coexist."""
        return "cf" + self.net.split(".")[1]

    @property
    def bridge(self) -> str:
        return f"{self.net}.1"

    def node(self, name: str) -> LocalNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise LocalError(f"no node {name!r} in local cluster {self.cluster}; nodes: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def first(self, role: str) -> LocalNode | None:
        return next((n for n in self.nodes if n.role == role), None)


def local_vars(net: str) -> dict[str, Any]:
    """Ansible variables of local nodes, layered over the generated inventory.

    Production leaves every one at its default; each is here because a local node shares the
    machine's kernel and clock and has no init, or because the vendor repository is a stand-in.
    """
    repo = f"http://{net}.1:{REPO_PORT}"
    return {
        "ansible_user": "root",
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        # six nodes' sshd on a 2-core machine can miss the 10 s banner timeout while dpkg runs
        "ansible_ssh_timeout": 60,
        "ansible_ssh_retries": 3,
        # no init in a local node: daemons run under the roles' clusterforge-svc supervisor
        "clusterforge_service_manager": "direct",
        # the nodes share this machine's kernel and clock: write the files, do not apply them
        "common_sysctl_apply": False,
        "common_chrony_service_enabled": False,
        # vendor repositories: the stand-ins on the bridge (same package names, a throw-away key)
        "nvidia_driver_repo_url": f"{repo}/nvidia/",
        "nvidia_driver_repo_key_url": f"{repo}/nvidia/standin-key.asc",
        "nvidia_driver_load_modules": False,
        "monitoring_grafana_repo_url": f"{repo}/grafana/",
        "monitoring_grafana_repo_suite": "./",
        "monitoring_grafana_repo_components": "",
        "monitoring_grafana_repo_key_url": f"{repo}/grafana/standin-key.asc",
        # the cloud agent's pass every 5 s, not 60: a replacement reaches topology.conf while a
        # test waits (each pass is two API calls to the emulator; AWS would throttle this rate)
        "cloud_agents_interval_s": 5,
    }


def _network(net: str) -> ipaddress.IPv4Network:
    try:
        nw = ipaddress.IPv4Network(net, strict=True)
    except ValueError as exc:
        raise LocalError(f"--net {net!r} is not a network ({exc}); give a /24 such as {DEFAULT_NET}") from None
    if nw.prefixlen != 24 or not nw.is_private:
        raise LocalError(f"--net {net!r} must be a private /24 such as {DEFAULT_NET}")
    return nw


def plan_layout(spec_path: Path, net: str = DEFAULT_NET) -> LocalLayout:
    """The local cluster a spec becomes; raises ``LocalError`` naming the field when it cannot."""
    spec_path = Path(spec_path)
    rc = resolve_file(spec_path)  # the spec's own errors come first, with their own messages
    cluster = rc.spec
    # the spec as the user wrote it (only the keys they set), from the model: the YAML is read once
    data = cluster.model_dump(mode="json", exclude_unset=True, by_alias=True)
    nw = _network(net)
    base = str(nw.network_address).rsplit(".", 1)[0]
    reserved = {str(nw.network_address), f"{base}.1", str(nw.broadcast_address)}
    overrides: list[str] = []

    wanted: list[tuple[int, str, str, str | None]] = []  # (group index, host, role, spec address)
    for gi, g in enumerate(cluster.node_groups):
        if g.onprem is None:
            raise LocalError(
                f"node_groups[{gi}] ({g.name}) has no onprem hosts: local mode runs on-prem groups only; "
                "give it onprem.hosts/profile (see examples/local.yaml) or leave it out of the local spec"
            )
        hosts = hostlist.expand(g.onprem.hosts)
        addrs: list[str | None] = [None] * len(hosts)
        if g.onprem.addresses:
            addrs = list(hostlist.expand(g.onprem.addresses))
        wanted += [(gi, h, g.role, a) for h, a in zip(hosts, addrs, strict=True)]
    if len(wanted) > MAX_NODES:
        raise LocalError(
            f"{spec_path} has {len(wanted)} hosts; a local cluster runs at most {MAX_NODES} on one machine. "
            "Use examples/local.yaml, or a copy of your spec with fewer hosts per group"
        )

    taken = {a for _, _, _, a in wanted if a and ipaddress.IPv4Address(a) in nw and a not in reserved}
    free = (f"{base}.{i}" for i in range(10, 255) if f"{base}.{i}" not in taken)
    nodes: list[LocalNode] = []
    new_addrs: dict[int, list[str]] = {}
    moved: list[str] = []
    for gi, host, role, addr in wanted:
        if addr is None or addr not in taken:
            # the same host number in the local network when it is free, else the next free one
            same = f"{base}.{addr.rsplit('.', 1)[1]}" if addr else ""
            new = same if same and same not in taken and same not in reserved else next(free)
            moved.append(f"{host} {addr or '(none)'} -> {new}")
            addr = new
            taken.add(new)
        new_addrs.setdefault(gi, []).append(addr)
        g = cluster.node_groups[gi]
        prof = rc.group(g.name).profile if g.onprem else None
        # nodes.sh fakes /dev/nvidiaN; AMD device files come from standin_hw.py after boot
        gpus = prof.gpu.count if prof and prof.gpu and prof.gpu.vendor == "nvidia" else 0
        nodes.append(LocalNode(host, addr, g.name, role, gpus))
    if moved:
        overrides.append(f"addresses (not in {nw}): " + ", ".join(moved))
        for gi, group_addrs in new_addrs.items():
            data["node_groups"][gi]["onprem"]["addresses"] = ",".join(group_addrs)

    slurm = data.setdefault("slurm", {}) or {}
    data["slurm"] = slurm
    extra = slurm.setdefault("extra_conf", {}) or {}
    slurm["extra_conf"] = extra
    if extra.get("SlurmdParameters") != SLURMD_PARAMETERS:
        extra["SlurmdParameters"] = SLURMD_PARAMETERS
        overrides.append(
            f"slurm.conf SlurmdParameters={SLURMD_PARAMETERS} (nodes register with the profile's hardware, "
            "not this machine's)"
        )
    if cluster.facts_dir:  # the effective spec lives in the state folder: keep facts reachable
        data["facts_dir"] = str((spec_path.parent / cluster.facts_dir).resolve())
    overrides.append(
        "Ansible: clusterforge_service_manager=direct, sysctl/chrony written not applied, vendor repositories "
        f"= stand-ins on http://{base}.1:{REPO_PORT}"
    )
    return LocalLayout(
        cluster=cluster.name, net=base, nodes=nodes, spec=data, overrides=overrides, source=str(spec_path.resolve())
    )
