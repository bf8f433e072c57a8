"""The renderer's pipeline: a resolved cluster -> the config model -> every file, plus the manifest.

``clusterforge.render`` gives these names (``render``, ``build_model``, ``render_cluster``) on first
use; importing a submodule alone (``manifest``, ``restart``: the Ansible roles' filter plugins, once
per host and task) does not load this one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from pathlib import Path
from typing import Any

import jinja2

from clusterforge import hostlist
from clusterforge.clusterspec.models import Cluster
from clusterforge.clusterspec.types import version_tuple
from clusterforge.errors import RenderError
from clusterforge.render import agents
from clusterforge.render.alertmanager import CONFIG_PATH as ALERTMANAGER_PATH
from clusterforge.render.alertmanager import alertmanager_yaml
from clusterforge.render.alerts import RULES_PATH, alert_groups, alerts_yaml
from clusterforge.render.dashboards import dashboards
from clusterforge.render.dcgm_exporter import COUNTERS_PATH, JOB_MAPPING_DIR, counters_csv
from clusterforge.render.health import (
    EFA_BIN,
    PHASE_SCRIPTS,
    REASON_PREFIX,
    RETRY_PAUSE_S,
    health_plan,
    phase_scripts_wanted,
)
from clusterforge.render.health import STATE_DIR as HEALTH_STATE_DIR
from clusterforge.render.jobs import JOBS_ENV_PATH, job_settings
from clusterforge.render.manifest import (
    BlockRecord,
    ConfigRecords,
    Expect,
    ExpectController,
    ExpectNode,
    ExpectPartition,
    ExpectTopology,
    GresRecord,
    NodeRecord,
    SlurmdbdLayout,
    SlurmLayout,
    SwitchRecord,
)
from clusterforge.render.model import ClusterModel, NodeSet, PartitionModel, build_nodeset
from clusterforge.render.nccl import nccl_plan
from clusterforge.render.result import RenderedFile, RenderResult
from clusterforge.render.slurm import (
    SLURM_CONF,
    Section,
    Setting,
    cgroup_settings,
    gres_groups,
    job_mapping_wanted,
    mariadb_datadir,
    node_fields,
    partition_fields,
    slurm_sections,
    slurmdbd_settings,
)
from clusterforge.render.topology import build_topology, topology_yaml
from clusterforge.render.versions import has
from clusterforge.resolve import ResolvedCluster, resolve

__all__ = ["RenderResult", "RenderedFile", "build_model", "render", "render_cluster"]

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
HEALTHCHECK_PATH = "/usr/local/sbin/clusterforge-healthcheck"


_ENV_OPTIONS: dict[str, Any] = {
    "undefined": jinja2.StrictUndefined,
    "trim_blocks": True,
    "lstrip_blocks": True,
    "keep_trailing_newline": True,
    "autoescape": False,  # config files, not HTML
}


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs (compiling them was a fifth of a render's time).

    Jinja keys an entry by the template's path and checks the source's sha1 and the Python
    version before it uses one; the folder's name adds Jinja's version and the options above,
    which shape the compiled code. A cache that cannot be written is skipped, never an error."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    from clusterforge.cache import cache_dir

    key = hashlib.sha256(repr((jinja2.__version__, sorted(_ENV_OPTIONS.items(), key=str))).encode()).hexdigest()
    d = cache_dir(f"jinja-{key[:16]}")
    return _BytecodeCache(str(d), "%s.cache") if d is not None else None


@functools.cache
def _env() -> jinja2.Environment:
    """One Environment per process: it keeps each template compiled (``diff`` renders twice)."""
    if not TEMPLATES.is_dir():
        raise RenderError(f"templates folder {TEMPLATES} is missing; install clusterforge from its checkout")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), bytecode_cache=_bytecode_cache(), **_ENV_OPTIONS
    )


def build_model(rc: ResolvedCluster) -> ClusterModel:
    """The config model of a resolved cluster (profiles with facts already applied)."""
    cluster = rc.spec
    version_str = cluster.slurm.version
    nodesets = tuple(build_nodeset(g, cluster.slurm.os_memory_reserve_mib) for g in rc.groups)
    ctl_group = rc.with_role("controller")
    if not ctl_group:
        raise RenderError("the spec has no node group with role: controller")
    cg = ctl_group[0]
    addrs: tuple[str | None, ...] = cg.addresses or (None,) * len(cg.hosts)
    controllers = tuple(zip(cg.hosts, addrs, strict=True))
    by_group = {n.group: n for n in nodesets}
    parts = cluster.partitions
    specs = (
        [(p.name, p.node_groups, p.default, p.max_time, p.exclusive) for p in parts]
        if parts
        else [("batch", [g.name for g in rc.with_role("compute")], True, "UNLIMITED", False)]
    )
    partitions = []
    for name, groups, default, max_time, exclusive in specs:
        members = [by_group[g] for g in groups if g in by_group]
        if not members:
            raise RenderError(f"partition {name!r} has no existing node groups")
        partitions.append(
            PartitionModel(
                name=name,
                nodes=_union_hostlist(members),
                default=default,
                max_time=max_time,
                exclusive=exclusive,
                # A job without --mem gets memory per CPU instead of the whole node, so small jobs
                # can share a node under CR_Core_Memory.
                def_mem_per_cpu=min(n.real_memory // n.cpus for n in members),
            )
        )
    topology = build_topology(cluster, nodesets, rc.base_dir)
    return ClusterModel(
        cluster=cluster,
        version=version_tuple(version_str),
        version_str=version_str,
        controllers=controllers,
        nodesets=nodesets,
        partitions=tuple(partitions),
        topology=topology,
    )


def _union_hostlist(members: list[NodeSet]) -> str:
    """The hostlist of several node sets: one set's own (worked out once), else their union's: the
    sets' own items when no name prefix is in two of them (node groups' names are ``<group>-NNN``),
    else the union's names compressed again (on-prem groups that share a prefix)."""
    if len(members) == 1:
        return members[0].hostlist
    items = hostlist.union_items(n.hostlist_items for n in members)
    if items is not None:
        return hostlist.join_items(items)
    return hostlist.compress([h for n in members for h in n.names])


def _expect(m: ClusterModel) -> Expect:
    """What the real daemons must show for this render (``clusterforge check`` compares)."""
    nodes = tuple(
        ExpectNode(
            names=n.hostlist,
            group=n.group,
            cpus=n.cpus,
            boards=n.boards,
            sockets=n.sockets,
            cores_per_socket=n.cores_per_socket,
            threads_per_core=n.threads_per_core,
            real_memory=n.real_memory,
            gres=n.gres,
            gpu_count=n.gpus.count if n.gpus else 0,
            gpu_type=n.gpus.type if n.gpus else None,
            gpu_files=n.gpus.files if n.gpus else None,
            gpu_vendor=n.gpus.vendor if n.gpus else None,
            features=n.features,
            weight=n.weight,
        )
        for n in m.compute
    )
    return Expect(
        controllers=tuple(ExpectController(name=name, address=addr) for name, addr in m.controllers),
        nodes=nodes,
        partitions=tuple(
            ExpectPartition(name=p.name, nodes=p.nodes, default=p.default, max_time=p.max_time) for p in m.partitions
        ),
        topology=ExpectTopology(
            plugin=m.topology.plugin,
            switches=tuple(SwitchRecord(name=s.name, nodes=s.nodes, switches=s.switches) for s in m.topology.switches),
            blocks=tuple(BlockRecord(name=b.name, nodes=b.nodes) for b in m.topology.blocks),
        ),
    )


def _records(
    m: ClusterModel, sections: list[Section], nodes: list[dict[str, Any]], partitions: list[dict[str, Any]],
    gres: list[dict[str, Any]],
) -> ConfigRecords:
    """The structured records the Slurm files are printed from (the diff compares these)."""
    glob: dict[str, tuple[str, ...]] = {}
    for sec in sections:
        for st in sec.settings:
            glob[st.key] = (*glob.get(st.key, ()), st.value)
    t = m.topology
    return ConfigRecords(
        slurm_globals=glob,
        nodes=tuple(
            NodeRecord(group=n["group"], names=n["params"][0][1], params=dict(n["params"][1:])) for n in nodes
        ),
        partitions={p["params"][0][1]: dict(p["params"][1:]) for p in partitions},
        gres_globals={"AutoDetect": "off"} if gres else {},
        gres=tuple(GresRecord(group=g["group"], names=g["names"], lines=tuple(g["records"])) for g in gres),
        topology_plugin=t.plugin,
        switches=tuple(SwitchRecord(name=s.name, nodes=s.nodes, switches=s.switches) for s in t.switches),
        blocks=tuple(BlockRecord(name=b.name, nodes=b.nodes) for b in t.blocks),
        block_sizes=t.block_sizes,
    )


def _layout(sections: list[Section], dbd: list[Setting] | None, mariadb_datadir: str | None) -> SlurmLayout:
    """The paths and users the Slurm role needs, from the settings rendered (never re-derived)."""
    conf = {st.key: st.value for sec in sections for st in sec.settings}
    dbd_conf = {st.key: st.value for st in dbd or []}
    return SlurmLayout(
        user=conf["SlurmUser"],
        state_save_location=conf["StateSaveLocation"],
        slurmd_spool_dir=conf["SlurmdSpoolDir"],
        slurmctld_log_file=conf["SlurmctldLogFile"],
        slurmd_log_file=conf["SlurmdLogFile"],
        slurmdbd=SlurmdbdLayout(
            storage_user=dbd_conf["StorageUser"],
            storage_host=dbd_conf["StorageHost"],
            database=dbd_conf["StorageLoc"],
            log_file=dbd_conf["LogFile"],
        )
        if dbd
        else None,
        mariadb_datadir=mariadb_datadir,
    )


def render_cluster(
    cluster: Cluster,
    *,
    base_dir: Path,
    facts_dir: Path | None = None,
    slurm_version: str | None = None,
) -> RenderResult:
    """Resolve ``cluster`` and render it (``base_dir`` resolves the spec's relative paths).

    For callers holding a spec object (tests, benchmarks); the verbs resolve once and call ``render``."""
    return render(resolve(cluster, base_dir=base_dir, facts_dir=facts_dir, slurm_version=slurm_version))


def render(rc: ResolvedCluster) -> RenderResult:
    """Render every file of a resolved cluster. Refusing a spec with errors is the caller's
    (``ResolvedCluster.require_valid``)."""
    m = build_model(rc)
    env = _env()
    c = rc.spec
    ver = m.version_str
    all_groups = tuple(g.name for g in c.node_groups)
    ctl_groups = tuple(g.name for g in c.groups_with_role("controller"))
    files: list[RenderedFile] = []

    def add(name: str, template: str, node_path: str, node_groups: tuple[str, ...], daemons: tuple[str, ...] = (),
            mode: str = "0644", secret_refs: tuple[str, ...] = (), owner: str = "root", **ctx: Any) -> None:
        text = env.get_template(template).render(cluster=c.name, version=ver, **ctx)
        files.append(RenderedFile(name, text, node_path, node_groups, daemons, mode, secret_refs, owner,
                                  _daemon_hosts(node_groups, daemons)))

    def add_yaml(name: str, text: str, node_path: str, node_groups: tuple[str, ...], daemons: tuple[str, ...]) -> None:
        # YAML is dumped from data (render/yamlfile.py), not printed by a template
        files.append(RenderedFile(name, text, node_path, node_groups, daemons, "0644", (), "root",
                                  _daemon_hosts(node_groups, daemons)))

    def add_text(name: str, text: str, node_path: str, node_groups: tuple[str, ...]) -> None:
        # data files (JSON from render/agents.py) read by clusterforge's own agents, no Slurm daemon
        files.append(RenderedFile(name, text, node_path, node_groups, (), "0644", (), "root", ()))

    ctl_hosts = hostlist.compress([h for g in rc.with_role("controller") for h in g.hosts])
    slurmd_hosts: dict[tuple[str, ...], str] = {}  # node groups -> hostlist: compressed once, not per file

    def _daemon_hosts(groups: tuple[str, ...], daemons: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        """Which hosts run each daemon that reads a file: slurmctld and slurmdbd on the controller,
        slurmd on the file's compute groups."""
        if "slurmd" in daemons and groups not in slurmd_hosts:
            members = [n for n in m.compute if n.group in groups and n.count]
            slurmd_hosts[groups] = _union_hostlist(members) if members else ""
        out = {"slurmctld": ctl_hosts, "slurmdbd": ctl_hosts, "slurmd": slurmd_hosts.get(groups, "")}
        return tuple((d, out[d]) for d in ("slurmctld", "slurmdbd", "slurmd") if d in daemons and out[d])

    nodes = [line for n in m.compute for line in node_fields(n)]
    sections = slurm_sections(m)
    partitions = partition_fields(m)
    gres = gres_groups(m) if m.has_gpus else []
    dbd = slurmdbd_settings(m) if c.accounting.enabled else None
    layout = _layout(sections, dbd, mariadb_datadir(c))
    add(
        "slurm/slurm.conf", "slurm.conf.j2", f"{SLURM_CONF}/slurm.conf", all_groups, ("slurmctld", "slurmd"),
        sections=sections, nodes=nodes, node_count=sum(n.count for n in m.compute),
        partitions=partitions,
    )
    if m.has_gpus:
        add("slurm/gres.conf", "gres.conf.j2", f"{SLURM_CONF}/gres.conf", all_groups, ("slurmctld", "slurmd"),
            groups=gres)
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
    if agents.wanted(c):
        topo_files = [f for f in files if f.name in ("slurm/topology.conf", "slurm/topology.yaml")]
        topo_path = topo_files[0].node_path if topo_files else None
        agent_cfg = agents.agent_config(c, ver, t, topo_path)
        if topo_files and t.plugin == "topology/tree" and t.basis is not None:
            # the controller's cloud agent rewrites the tree from EC2: Ansible installs the render's
            # copy there once (the per-group fallback) and never puts it back over the agent's
            files[files.index(topo_files[0])] = topo_files[0]._replace(kept_on=ctl_groups)
        add_text("cloud/agent.json", agent_cfg, agents.AGENT_CONFIG_PATH, ctl_groups)
        cloud_compute = tuple(g.name for g in c.node_groups if g.is_cloud and g.role == "compute")
        add_text("cloud/node-agent.json", agents.node_agent_config(c), agents.NODE_AGENT_CONFIG_PATH, cloud_compute)
    if dbd is not None:
        # read by slurmdbd only, which runs as SlurmUser: 0600 keeps the storage password from other users
        add("slurm/slurmdbd.conf", "slurmdbd.conf.j2", f"{SLURM_CONF}/slurmdbd.conf", ctl_groups, ("slurmdbd",),
            mode="0600", secret_refs=(c.accounting.password_secret,), owner=layout.user, settings=dbd)
    gs = c.gpu_stack
    hc = c.health_checks
    for n in m.compute:
        if n.gpus is not None:
            plan = nccl_plan(c, n)
            ofi = gs.aws_ofi_nccl if n.fabric == "efa" else None
            add(f"nccl/{n.group}.conf", "nccl.conf.j2", "/etc/nccl.conf", (n.group,), group=n.group,
                fabric=n.fabric, nccl=gs.nccl, ofi=ofi, variables=plan.conf, not_set=plan.not_set)
            add(f"env/{n.group}.sh", "job-env.sh.j2", "/etc/profile.d/clusterforge-nccl.sh", (n.group,),
                group=n.group, fabric=n.fabric, variables=plan.env)
        if hc.enabled:
            add(f"health/{n.group}.sh", "healthcheck.sh.j2", hc.program, (n.group,), mode="0755",
                p=health_plan(c, n, layout.slurmd_spool_dir), interval=hc.interval_s,
                failures=hc.consecutive_failures, prefix=REASON_PREFIX, state_dir=HEALTH_STATE_DIR,
                retry_pause=RETRY_PAUSE_S, efa_bin=EFA_BIN)
    compute = tuple(n.group for n in m.compute)  # every node runs the folders slurm.conf names
    for phase in phase_scripts_wanted(c):
        name, below = PHASE_SCRIPTS[phase]
        add(name, "healthcheck-phase.sh.j2", f"{SLURM_CONF}/{below}", compute, mode="0755", phase=phase,
            program=hc.program)
    job_env = job_settings(c)
    if job_env:
        # every host a user's job or shell runs on: compute (the batch script) and login (sbatch)
        job_groups = tuple(g.name for g in c.node_groups if g.role in ("compute", "login"))
        add("jobs/env.sh", "jobs-env.sh.j2", JOBS_ENV_PATH, job_groups, variables=job_env)
    rule_groups = alert_groups(m)
    if rule_groups:
        add_yaml("prometheus/alerts.yml", alerts_yaml(m, rule_groups), RULES_PATH, ctl_groups, ("prometheus",))
        if c.monitoring.alertmanager.enabled:
            add_yaml("alertmanager/alertmanager.yml", alertmanager_yaml(c.name, c.monitoring.alertmanager),
                     ALERTMANAGER_PATH, ctl_groups, ("alertmanager",))
    for d in dashboards(m):
        # read by Grafana's file provider, which rescans its folder: no restart (render/restart.py)
        files.append(RenderedFile(f"grafana/{d.slug}.json", d.text(), d.node_path, ctl_groups, ("grafana",),
                                  "0644", (), "root", ()))
    nvidia = tuple(n.group for n in m.compute if n.gpus is not None and n.gpus.vendor == "nvidia")
    if nvidia and c.monitoring.dcgm_exporter:
        # read by dcgm-exporter (-f); the dcgm role installs it and restarts the exporter
        files.append(RenderedFile("dcgm/counters.csv", counters_csv(c.name), COUNTERS_PATH, nvidia, ("dcgm-exporter",),
                                  "0644", (), "root", ()))
    if job_mapping_wanted(m):
        for phase in ("prolog", "epilog"):
            add(f"slurm/{phase}.d/dcgm-job-map.sh", "dcgm-job-map.sh.j2",
                f"{SLURM_CONF}/{phase}.d/50-clusterforge-dcgm-job-map", compute, mode="0755", phase=phase,
                mapping_dir=JOB_MAPPING_DIR, nvidia_proc="/proc/driver/nvidia")
    notes = tuple(
        f"{n.group}: {n.profile.name} socket layout unknown, slurm.conf has CPUs={n.cpus}"
        + (f" ThreadsPerCore={n.threads_per_core}" if n.threads_per_core else "")
        + " only"
        for n in m.nodesets
        if n.sockets is None
    )
    return RenderResult(
        cluster=c.name,
        slurm_version=ver,
        files={f.name: f for f in files},
        slurm=layout,
        config=_records(m, sections, nodes, partitions, gres),
        expect=_expect(m),
        notes=notes,
    )
