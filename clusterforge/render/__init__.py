"""The one renderer: spec (+ catalog or discovered facts) -> every config file of the cluster.

``render_cluster`` is used by ``clusterforge render``, ``plan``, ``diff``, ``check`` and by the
Ansible roles (through the manifest). Nothing else formats a Slurm or NCCL line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from clusterforge import hostlist
from clusterforge.catalog import HardwareProfile, get_profile
from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.types import version_tuple
from clusterforge.errors import RenderError
from clusterforge.render.alerts import RULES_PATH, alert_groups, alerts_yaml
from clusterforge.render.model import ClusterModel, PartitionModel, build_nodeset
from clusterforge.render.nccl import nccl_plan
from clusterforge.render.result import RenderedFile, RenderResult
from clusterforge.render.slurm import (
    SLURM_CONF,
    cgroup_settings,
    gres_groups,
    node_fields,
    partition_fields,
    slurm_sections,
    slurmdbd_settings,
)
from clusterforge.render.topology import build_topology, topology_yaml
from clusterforge.render.versions import has

__all__ = ["RenderResult", "RenderedFile", "build_model", "render_cluster"]

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
HEALTHCHECK_PATH = "/usr/local/sbin/clusterforge-healthcheck"


def _env() -> jinja2.Environment:
    if not TEMPLATES.is_dir():
        raise RenderError(f"templates folder {TEMPLATES} is missing; install clusterforge from its checkout")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # config files, not HTML
    )
    return env


def _profiles(cluster: Cluster, facts_dir: Path | None) -> dict[str, HardwareProfile]:
    facts: dict[str, Any] = {}
    if facts_dir is not None:
        from clusterforge.catalog.facts import load_facts_dir

        if not facts_dir.is_dir():
            raise RenderError(f"facts folder {str(facts_dir)!r} does not exist")
        facts = load_facts_dir(facts_dir)
    out: dict[str, HardwareProfile] = {}
    for g in cluster.node_groups:
        p = get_profile(g.profile_name)
        if p is None:
            raise RenderError(f"node group {g.name!r}: profile {g.profile_name!r} is not in the catalog")
        found = [facts[h] for h in g.hostnames if h in facts]
        if found:
            from clusterforge.catalog.facts import apply_facts

            p = apply_facts(p, found)
        out[g.name] = p
    return out


def build_model(
    cluster: Cluster, *, base_dir: Path, facts_dir: Path | None = None, slurm_version: str | None = None
) -> ClusterModel:
    version_str = slurm_version or cluster.slurm.version
    if facts_dir is None and cluster.facts_dir is not None:
        facts_dir = base_dir / cluster.facts_dir
    profiles = _profiles(cluster, facts_dir)
    nodesets = tuple(
        build_nodeset(g, profiles[g.name], cluster.slurm.os_memory_reserve_mib) for g in cluster.node_groups
    )
    ctl_group = cluster.groups_with_role("controller")
    if not ctl_group:
        raise RenderError("the spec has no node group with role: controller")
    cg = ctl_group[0]
    addrs = hostlist.expand(cg.onprem.addresses) if cg.onprem and cg.onprem.addresses else [None] * len(cg.hostnames)
    controllers = tuple(zip(cg.hostnames, addrs, strict=True))
    by_group = {n.group: n for n in nodesets}
    parts = cluster.partitions
    specs = (
        [(p.name, p.node_groups, p.default, p.max_time, p.exclusive) for p in parts]
        if parts
        else [("batch", [g.name for g in cluster.groups_with_role("compute")], True, "UNLIMITED", False)]
    )
    partitions = []
    for name, groups, default, max_time, exclusive in specs:
        members = [by_group[g] for g in groups if g in by_group]
        if not members:
            raise RenderError(f"partition {name!r} has no existing node groups")
        names = [h for n in members for h in n.names]
        partitions.append(
            PartitionModel(
                name=name,
                nodes=hostlist.compress(names),
                default=default,
                max_time=max_time,
                exclusive=exclusive,
                # A job without --mem gets memory per CPU instead of the whole node, so small jobs
                # can share a node under CR_Core_Memory.
                def_mem_per_cpu=min(n.real_memory // n.cpus for n in members),
            )
        )
    topology = build_topology(cluster, nodesets, base_dir)
    return ClusterModel(
        cluster=cluster,
        version=version_tuple(version_str),
        version_str=version_str,
        controllers=controllers,
        nodesets=nodesets,
        partitions=tuple(partitions),
        topology=topology,
    )


def _expect(m: ClusterModel) -> dict[str, Any]:
    """What the real daemons must show for this render (``clusterforge check`` compares)."""
    nodes = []
    for n in m.compute:
        nodes.append(
            {
                "names": n.hostlist,
                "group": n.group,
                "cpus": n.cpus,
                "boards": n.boards,
                "sockets": n.sockets,
                "cores_per_socket": n.cores_per_socket,
                "threads_per_core": n.threads_per_core,
                "real_memory": n.real_memory,
                "gres": n.gres,
                "gpu_count": n.gpus.count if n.gpus else 0,
                "gpu_type": n.gpus.type if n.gpus else None,
                "gpu_files": n.gpus.files if n.gpus else None,
                "features": list(n.features),
                "weight": n.weight,
            }
        )
    return {
        "controller": {"name": m.controllers[0][0], "address": m.controllers[0][1]},
        "nodes": nodes,
        "partitions": [
            {"name": p.name, "nodes": p.nodes, "default": p.default, "max_time": p.max_time} for p in m.partitions
        ],
        "topology": {
            "plugin": m.topology.plugin,
            "switches": [{"name": s.name, "nodes": s.nodes, "switches": s.switches} for s in m.topology.switches],
            "blocks": [{"name": b.name, "nodes": b.nodes} for b in m.topology.blocks],
        },
    }


def render_cluster(
    cluster: Cluster,
    *,
    base_dir: Path,
    facts_dir: Path | None = None,
    slurm_version: str | None = None,
) -> RenderResult:
    """Render every file for ``cluster``. ``base_dir`` resolves the spec's relative paths."""
    m = build_model(cluster, base_dir=base_dir, facts_dir=facts_dir, slurm_version=slurm_version)
    env = _env()
    c = cluster
    ver = m.version_str
    all_groups = tuple(g.name for g in c.node_groups)
    ctl_groups = tuple(g.name for g in c.groups_with_role("controller"))
    files: list[RenderedFile] = []

    def add(name: str, template: str, node_path: str, node_groups: tuple[str, ...], daemons: tuple[str, ...] = (),
            mode: str = "0644", secret_refs: tuple[str, ...] = (), **ctx: Any) -> None:
        text = env.get_template(template).render(cluster=c.name, version=ver, **ctx)
        files.append(RenderedFile(name, text, node_path, node_groups, daemons, mode, secret_refs))

    def add_yaml(name: str, text: str, node_path: str, node_groups: tuple[str, ...], daemons: tuple[str, ...]) -> None:
        # YAML is dumped from data (render/yamlfile.py), not printed by a template
        files.append(RenderedFile(name, text, node_path, node_groups, daemons, "0644", ()))

    nodes = [line for n in m.compute for line in node_fields(n)]
    add(
        "slurm/slurm.conf", "slurm.conf.j2", f"{SLURM_CONF}/slurm.conf", all_groups, ("slurmctld", "slurmd"),
        sections=slurm_sections(m), nodes=nodes, node_count=sum(len(n.names) for n in m.compute),
        partitions=partition_fields(m),
    )
    if m.has_gpus:
        add("slurm/gres.conf", "gres.conf.j2", f"{SLURM_CONF}/gres.conf", all_groups, ("slurmctld", "slurmd"),
            groups=gres_groups(m))
    add("slurm/cgroup.conf", "cgroup.conf.j2", f"{SLURM_CONF}/cgroup.conf", all_groups, ("slurmd",),
        settings=cgroup_settings(m))
    t = m.topology
    if t.plugin:
        topo_ctx: dict[str, Any] = {
            "plugin": t.plugin, "switches": t.switches, "blocks": t.blocks, "block_sizes": t.block_sizes
        }
        if has(m.version, "topology_yaml"):
            add_yaml("slurm/topology.yaml", topology_yaml(c.name, ver, t), f"{SLURM_CONF}/topology.yaml", all_groups,
                     ("slurmctld",))
        else:
            add("slurm/topology.conf", "topology.conf.j2", f"{SLURM_CONF}/topology.conf", all_groups,
                ("slurmctld",), **topo_ctx)
    if c.accounting.enabled:
        add("slurm/slurmdbd.conf", "slurmdbd.conf.j2", f"{SLURM_CONF}/slurmdbd.conf", ctl_groups, ("slurmdbd",),
            mode="0600", secret_refs=(c.accounting.password_secret,), settings=slurmdbd_settings(m))
    gs = c.gpu_stack
    for n in m.compute:
        if n.gpus is not None:
            plan = nccl_plan(c, n)
            ofi = gs.aws_ofi_nccl if n.fabric == "efa" else None
            add(f"nccl/{n.group}.conf", "nccl.conf.j2", "/etc/nccl.conf", (n.group,), group=n.group,
                fabric=n.fabric, nccl=gs.nccl, ofi=ofi, variables=plan.conf, not_set=plan.not_set)
            add(f"env/{n.group}.sh", "job-env.sh.j2", "/etc/profile.d/clusterforge-nccl.sh", (n.group,),
                group=n.group, fabric=n.fabric, variables=plan.env)
        if c.health_checks.enabled:
            add(f"health/{n.group}.sh", "healthcheck.sh.j2", c.health_checks.program, (n.group,), mode="0755",
                group=n.group, interval=c.health_checks.interval_s,
                gpu_devices=list(n.gpus.device_paths) if n.gpus else [],
                gpu_vendor=n.gpus.vendor if n.gpus else "", mounts=[s.mount for s in c.storage],
                required_files=[])
    rule_groups = alert_groups(m)
    if rule_groups:
        add_yaml("prometheus/alerts.yml", alerts_yaml(m, rule_groups), RULES_PATH, ctl_groups, ("prometheus",))
    notes = tuple(
        f"{n.group}: {n.profile.name} socket layout unknown, slurm.conf has CPUs={n.cpus} only"
        for n in m.nodesets
        if n.sockets is None
    )
    return RenderResult(
        cluster=c.name,
        slurm_version=ver,
        files={f.name: f for f in files},
        expect=_expect(m),
        notes=notes,
    )
