"""What a spec becomes on one machine: its nodes, their local addresses, and what local mode overrides.

Local mode runs the production spec, renderer and roles. It changes only what cannot hold on one
machine, and says so (``LocalLayout.overrides``):

* addresses: each host keeps its spec address when that lies in the local network, otherwise it
  gets the next free one there (the nodes sit on one bridge);
* ``SlurmdParameters=config_overrides``: a local node has a few CPUs and GiB, not the catalog
  profile's 224 cores and 2 TiB; with it slurmd registers with the configured hardware;
* Ansible variables for hosts that share this machine's kernel and clock (``local_vars``) and
  the vendor repositories, which are stand-ins served on the bridge;
* with ``--os``, the node OS (and the Slurm release that OS ships) instead of the spec's;
* shared file systems (``storage[]``): the nodes share this machine's kernel, which has no NFS or
  Lustre client, so each entry is a folder of this machine (``STATE/storage/NAME``) bound at its
  mount on every node: one file system that every node sees, as the spec means;
* with ``--torch``, PyTorch: a read-only layer of the node rootfs, built once (``torch.sh``).

The node OS picks the Debian release the nodes boot (``OS_SUITES``); nodes boot systemd as PID 1
(``systemd-nspawn``, ``boot="systemd"``, the default), or, with ``boot="chroot"``, run sshd as PID 1 and the
daemons under the roles' ``clusterforge-svc`` supervisor (``clusterforge_service_manager=direct``).
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
#: the node OSes a local cluster boots: spec ``os`` -> (Debian suite, the Slurm release it ships).
#: Debian's own packages: bookworm slurm-wlm 22.05.8, trixie 24.11.5 (packages.debian.org/slurm-wlm)
OS_SUITES: dict[str, tuple[str, str]] = {"debian-12": ("bookworm", "22.05"), "debian-13": ("trixie", "24.11")}
#: how a node boots: systemd as PID 1 (systemd-nspawn -b), or sshd as PID 1 in a chroot
BOOT_MODES = ("systemd", "chroot")
DEFAULT_BOOT = "systemd"
#: the PyTorch `clusterforge local up --torch` stacks over the nodes' rootfs (torch.sh)
TORCH_VERSION = "2.13.0"


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
    suite: str = "bookworm"  # the Debian release the nodes boot (OS_SUITES)
    boot: str = "chroot"  # BOOT_MODES (a layout recorded before nodes booted systemd: chroot)
    #: storage[] name -> mount: a folder of this machine bound there on every node (stand-in)
    shared: dict[str, str] = field(default_factory=dict)
    #: the PyTorch version of the read-only layer over the nodes' rootfs (torch.sh), or None
    torch: str | None = None
    #: node name -> the key of the baked image it booted on (``--image baked``: image.py); empty: bare nodes
    images: dict[str, str] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        """Name prefix of the namespaces and links: one per local network, so two can coexist
        (10.81.0.0/24 -> cf81, 10.86.3.0/24 -> cf86x3; at most 15 characters with a link suffix)."""
        _, second, third = self.net.split(".")
        return f"cf{second}" + (f"x{third}" if third != "0" else "")

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


def local_vars(net: str, boot: str = DEFAULT_BOOT) -> dict[str, Any]:
    """Ansible variables of local nodes, layered over the generated inventory.

    Production leaves every one at its default; each is here because a local node shares the
    machine's kernel and clock (and, booted as a chroot, has no init), or because the vendor
    repository is a stand-in.
    """
    repo = f"http://{net}.1:{REPO_PORT}"
    return {
        "ansible_user": "root",
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        # six nodes' sshd on a 2-core machine can miss the 10 s banner timeout while dpkg runs
        "ansible_ssh_timeout": 60,
        "ansible_ssh_retries": 3,
        # a booted node runs the production path (systemd units, handlers, systemctl); a chroot
        # node has no init: its daemons run under the roles' clusterforge-svc supervisor
        "clusterforge_service_manager": "systemd" if boot == "systemd" else "direct",
        # the nodes share this machine's kernel and clock: write the files, do not apply them
        "common_sysctl_apply": False,
        "common_chrony_service_enabled": False,
        # the metadata firewall needs iptables, which the nodes' root file system and the local
        # package mirror lack, and its boot unit needs systemd (the AWS flavour's nodes are chroots)
        "common_imds_firewall": False,
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


def check_boot(boot: str) -> str:
    if boot not in BOOT_MODES:
        raise LocalError(f"--boot {boot!r} is not a boot mode; give one of {', '.join(BOOT_MODES)}")
    return boot


def node_os(spec_os: str, want: str | None, data: dict[str, Any], overrides: list[str]) -> str:
    """The Debian suite the nodes boot: the spec's ``os``, or ``want`` (``--os``), which then also
    sets the effective spec's ``os`` and ``slurm.version`` (the release that OS ships)."""
    os_name = want or spec_os
    if os_name not in OS_SUITES:
        where = f"--os {os_name!r}" if want else f"os: {os_name!r} (spec field `os`)"
        raise LocalError(
            f"{where}: a local cluster boots Debian nodes only ({', '.join(OS_SUITES)}); Ubuntu's archive is not "
            "reachable from here. Give --os debian-13 (Slurm 24.11) or --os debian-12 (Slurm 22.05)"
        )
    suite, slurm = OS_SUITES[os_name]
    if want and want != spec_os:
        data["os"] = want
        overrides.append(f"os {spec_os} -> {want} (--os)")
    if want:
        sl = data.setdefault("slurm", {}) or {}
        data["slurm"] = sl
        if sl.get("version") != slurm:
            overrides.append(f"slurm.version {sl.get('version', '(default)')} -> {slurm} (what {os_name} ships)")
            sl["version"] = slurm
    return suite


def plan_layout(
    spec_path: Path, net: str = DEFAULT_NET, *, os_name: str | None = None, boot: str = DEFAULT_BOOT,
    torch: str | None = None,
) -> LocalLayout:
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
    check_boot(boot)

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
    # after the structural refusals above, which name the group that cannot run locally
    suite = node_os(cluster.os, os_name, data, overrides)
    overrides.append(ansible_override(base, boot))
    shared = {s.name: s.mount for s in cluster.storage}
    for s in cluster.storage:
        overrides.append(
            f"storage {s.name} ({s.type}) at {s.mount}: a folder of this machine (STATE/storage/{s.name}) bound on "
            f"every node, not a {s.type} mount (the nodes share this machine's kernel, which has no {s.type} client)"
        )
    if torch is not None:
        overrides.append(
            f"PyTorch {torch}: a read-only layer of the node rootfs built once (clusterforge/local/torch.sh), "
            "under every node's /usr/local; nothing is installed per node"
        )
    return LocalLayout(
        cluster=cluster.name, net=base, nodes=nodes, spec=data, overrides=overrides, source=str(spec_path.resolve()),
        suite=suite, boot=boot, shared=shared, torch=torch,
    )


def ansible_override(base: str, boot: str) -> str:
    mgr = "systemd (nodes boot systemd as PID 1)" if boot == "systemd" else "direct (clusterforge-svc)"
    return (
        f"Ansible: clusterforge_service_manager={mgr}, sysctl/chrony written not applied, vendor repositories "
        f"= stand-ins on http://{base}.1:{REPO_PORT}"
    )
