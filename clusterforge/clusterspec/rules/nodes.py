"""Rules on node groups: profiles, controllers, host names, EFA, fabrics, GPU vendors, CPU layouts."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from clusterforge import hostlist
from clusterforge.catalog import profile_names
from clusterforge.clusterspec.models import Cluster, NodeGroup
from clusterforge.clusterspec.rules.base import Finding, Level, RuleContext, _gi, rule


@rule
def profiles_exist(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        name = g.profile_name
        field = "cloud.instance_type" if g.is_cloud else "onprem.profile"
        p = ctx.profile(g)
        if p is None:
            known = ", ".join(profile_names("aws" if g.is_cloud else None))
            yield Finding(
                Level.ERROR, "unknown-profile", f"{_gi(c, g)}.{field}", name,
                "is not in the hardware catalog, so its sockets, memory and GPUs are unknown.",
                f"use one of: {known}; or add a profile to clusterforge/catalog/profiles.yaml with sources.",
            )


@rule
def one_controller(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    ctl = c.groups_with_role("controller")
    hosts = sum(g.node_count for g in ctl)
    if len(ctl) != 1 or hosts not in (1, 2):
        yield Finding(
            Level.ERROR, "controller-count", "node_groups[*].role", f"{len(ctl)} group(s), {hosts} host(s)",
            "Slurm needs exactly one controller group with one host (or two for a backup controller).",
            "mark exactly one node group 'role: controller' with count 1 (or 2).",
        )
    # two controllers and their shared state: rules/state.py
    if not c.groups_with_role("compute"):
        yield Finding(
            Level.ERROR, "no-compute", "node_groups", len(c.node_groups),
            "a cluster without compute nodes runs no jobs.", "add a node group with role: compute.",
        )


@rule
def unique_hosts(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    # The findings of a pass over every name of every group, in its order: each group's names in
    # turn, each against the first group that had it. A cloud group's names are "<group>-" and
    # zero-padded numbers (NodeGroup.name_numbers) and group names are unique, so no two cloud
    # groups share a name; only an on-prem host can be a cloud group's. So a cloud group is matched
    # by its count against the on-prem hosts of its prefix, and 65,536 cloud nodes are never listed.
    owner: dict[str, str] = {}  # an on-prem group's host -> the first group that had it
    by_prefix: dict[str, list[str]] = {}  # a cloud group's prefix -> owner's hosts that start with it
    clouds: dict[str, tuple[int, int, str]] = {}  # a cloud group's prefix -> its count, width, name

    def duplicate(g: NodeGroup, h: str, first: str) -> Finding:
        return Finding(
            Level.ERROR, "duplicate-host", f"{_gi(c, g)}", h,
            f"host name is also in node group {first!r}; Slurm node names must be unique.",
            "rename the hosts of one group or remove the overlap.",
        )

    cloud_prefixes = {g.name_numbers[0] for g in c.node_groups if g.name_numbers is not None}
    # on-prem groups whose ranges cannot meet need no pass over their names either
    for g in () if _apart_by_stem(c, cloud_prefixes) else c.node_groups:
        if g.name_numbers is not None:
            prefix, count, width = g.name_numbers
            # its names among them, in the order its names run: one prefix and one width, so the
            # text's order is the numbers'
            for h in sorted(h for h in by_prefix.get(prefix, ()) if _numbered(h[len(prefix):], count, width)):
                yield duplicate(g, h, owner[h])
            clouds[prefix] = (count, width, g.name)
            continue
        for h in g.hostnames:
            first = owner.get(h)
            if first is None:
                head, dash, digits = h.rpartition("-") if cloud_prefixes else ("", "", "")
                if dash and head + dash in cloud_prefixes:  # a cloud group's prefix: it may be its name
                    cloud = clouds.get(head + dash)
                    if cloud is not None and _numbered(digits, cloud[0], cloud[1]):
                        first = cloud[2]
                    by_prefix.setdefault(head + dash, []).append(h)
                owner[h] = first or g.name
            if first is not None and first != g.name:
                yield duplicate(g, h, first)
    addr_owner: dict[str, str] = {}
    # groups whose addresses' stems (10.0.5.) are their own, each stem's ranges apart, share none
    for g in () if _addresses_apart(c) else c.node_groups:
        if g.onprem and g.onprem.addresses:
            for a in hostlist.expand(g.onprem.addresses):
                if a in addr_owner:
                    yield Finding(
                        Level.ERROR, "duplicate-address", f"{_gi(c, g)}.onprem.addresses", a,
                        f"address is also used by group {addr_owner[a]!r}.", "give every host its own address.",
                    )
                addr_owner.setdefault(a, g.name)


def _apart_by_stem(c: Cluster, cloud_prefixes: set[str]) -> bool:
    """Whether no two groups can share a host, seen from the on-prem groups' expressions alone. A
    name's stem is its text before its trailing ASCII digits; equal names have equal stems. An
    on-prem group's stems come from its items (``hostlist.name_stems``), a cloud group's is its
    ``<group>-``. So groups whose stems are each their own share no name. Duplicates inside one
    group are not findings (a name's first group is its own). So 65,536 on-prem hosts in groups of
    their own are never listed."""
    owner: dict[str, str] = {}  # an on-prem stem -> its group
    for g in c.node_groups:
        if g.onprem is None:
            continue
        stems = hostlist.name_stems(g.onprem.hosts)
        if stems is None:
            return False
        for stem in stems:
            if stem in cloud_prefixes or owner.setdefault(stem, g.name) != g.name:
                return False
    return True


def _addresses_apart(c: Cluster) -> bool:
    """Whether no address is listed twice, seen from the address expressions' ranges alone: each
    stem (``10.0.5.``) in one group, and its ranges there apart (``hostlist.stem_ranges``). Equal
    addresses have one stem and one number. Unlike host names, an address twice in one group is
    a finding, hence the ranges' check."""
    owner: dict[str, str] = {}  # a stem -> its group
    for g in c.node_groups:
        if g.onprem is None or not g.onprem.addresses:
            continue
        stems = hostlist.stem_ranges(g.onprem.addresses)
        if stems is None:
            return False
        for stem, ranges in stems.items():
            ordered = sorted(ranges)
            if owner.setdefault(stem, g.name) != g.name or any(b[0] <= a[1] for a, b in pairwise(ordered)):
                return False
    return True


def _numbered(digits: str, count: int, width: int) -> bool:
    """Whether ``digits`` is one of 1 … ``count`` zero-padded to ``width`` (a cloud group's names)."""
    return len(digits) == width and digits.isascii() and digits.isdigit() and 1 <= int(digits) <= count


@rule
def cloud_needs_aws(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        if g.cloud is None:
            continue
        if c.aws is None:
            yield Finding(
                Level.ERROR, "cloud-without-aws", f"{_gi(c, g)}.cloud", g.cloud.instance_type,
                "a cloud node group needs the 'aws' section (region, VPC, subnets).",
                "add 'aws:' with region, vpc_cidr and subnets, or make the group on-prem.",
            )
            continue
        names = [s.name for s in c.aws.subnets]
        if g.cloud.subnet is not None and g.cloud.subnet not in names:
            yield Finding(
                Level.ERROR, "unknown-subnet", f"{_gi(c, g)}.cloud.subnet", g.cloud.subnet,
                "names no subnet in aws.subnets.", f"use one of: {', '.join(names)}.",
            )


@rule
def efa_rules(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    # Imported here: clusterforge.render imports the resolver, which imports these rules.
    from clusterforge.render.nccl_versions import first as nccl_first
    from clusterforge.render.nccl_versions import has as nccl_gate

    for g in c.node_groups:
        cl = g.cloud
        if cl is None or not cl.efa:
            continue
        path = f"{_gi(c, g)}.cloud"
        p = ctx.profile(g)
        if p is not None and not p.efa_capable:
            yield Finding(
                Level.ERROR, "efa-unsupported", f"{path}.instance_type", cl.instance_type,
                "this instance type has no EFA interfaces (maximumEfaInterfaces = 0).",
                "use an EFA-capable type (p5.48xlarge, p4d.24xlarge, hpc7a.96xlarge, ...) or set efa: false.",
            )
        if c.aws is not None and cl.subnet is None:
            azs = {s.availability_zone for s in c.aws.subnets if not s.public}
            if len(azs) != 1:
                yield Finding(
                    Level.ERROR, "efa-multi-az", f"{path}.subnet", None,
                    f"EFA traffic does not cross availability zones, and the private subnets span {sorted(azs)}.",
                    "name one subnet for the group (cloud.subnet) so all its nodes land in one AZ.",
                )
        cb = cl.capacity.type == "capacity_block"
        if cb and cl.placement_group:
            yield Finding(
                Level.WARNING, "placement-with-capacity-block", f"{path}.placement_group", True,
                "a capacity block is already placed by AWS; an extra placement group can cause "
                "insufficient-capacity errors outside the reservation.",
                "set placement_group: false for capacity-block groups.",
            )
        elif not cb and not cl.placement_group:
            yield Finding(
                Level.ERROR, "efa-needs-placement", f"{path}.placement_group", False,
                "EFA nodes outside a cluster placement group may land on distant racks: higher "
                "latency and lower all-reduce bandwidth.",
                "set placement_group: true (or use a capacity block).",
            )
        if cl.capacity.type == "spot":
            yield Finding(
                Level.WARNING, "efa-on-spot", f"{path}.capacity.type", "spot",
                "a reclaimed spot node kills every synchronous multi-node job on the group.",
                "use on_demand, a reservation or a capacity block for training groups.",
            )
        gs = c.gpu_stack
        if p is not None and p.gpu is not None and gs.vendor == "nvidia":
            if gs.aws_ofi_nccl is None:
                yield Finding(
                    Level.ERROR, "efa-without-ofi", "gpu_stack.aws_ofi_nccl", None,
                    "NCCL cannot use EFA without the aws-ofi-nccl plugin; it would fall back to TCP sockets.",
                    "set gpu_stack.aws_ofi_nccl (e.g. '1.14.0').",
                )
            elif p.gpu.generation == "hopper" and not nccl_gate(gs.aws_ofi_nccl, "ofi_p5_minimum"):
                yield Finding(
                    Level.ERROR, "ofi-too-old", "gpu_stack.aws_ofi_nccl", gs.aws_ofi_nccl,
                    f"p5-class instances need aws-ofi-nccl >= {nccl_first('ofi_p5_minimum')} (EFA cheatsheet).",
                    "upgrade to 1.7.3 or newer.",
                )
            if p.gpu.generation == "hopper" and not nccl_gate(gs.nccl, "nccl_nvls"):
                yield Finding(
                    Level.WARNING, "nccl-too-old", "gpu_stack.nccl", gs.nccl,
                    f"on p5-class instances NCCL < {nccl_first('nccl_nvls')} runs without NVLS (plugin disables it).",
                    "use NCCL 2.18.5 or newer.",
                )


@rule
def fabric_matches_location(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        f = g.fabric
        if f is None:
            continue
        path = f"{_gi(c, g)}.fabric.type"
        if g.is_cloud and f.type in ("infiniband", "roce"):
            yield Finding(
                Level.ERROR, "fabric-not-in-cloud", path, f.type,
                "EC2 offers no InfiniBand or RoCE; its RDMA fabric is EFA.",
                "use fabric type efa (with cloud.efa: true) or ethernet.",
            )
        if f.type == "efa" and not (g.cloud and g.cloud.efa):
            yield Finding(
                Level.ERROR, "efa-fabric-without-efa", path, f.type,
                "fabric efa needs EFA interfaces on the instances.",
                "set cloud.efa: true on this group, or use fabric ethernet/infiniband.",
            )
        if f.type in ("infiniband", "roce") and not f.hcas:
            yield Finding(
                Level.WARNING, "no-hcas", f"{_gi(c, g)}.fabric.hcas", [],
                "without NCCL_IB_HCA NCCL may use storage or management ports for collectives.",
                "list the compute HCAs (ibstat shows them; playbooks/discover.yml collects them).",
            )
        if f.type == "roce" and f.gid_index is None:
            yield Finding(
                Level.INFO, "roce-gid-auto", f"{_gi(c, g)}.fabric.gid_index", None,
                "NCCL will auto-select the GID (NCCL >= 2.21 follows NCCL_SOCKET_FAMILY).",
                "set gid_index (usually 3 for RoCEv2/IPv4) to pin it.",
            )


@rule
def gpu_vendor_matches(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    for g in c.node_groups:
        p = ctx.profile(g)
        if p is not None and p.gpu is not None and p.gpu.vendor != c.gpu_stack.vendor:
            yield Finding(
                Level.ERROR, "gpu-vendor-mismatch", "gpu_stack.vendor", c.gpu_stack.vendor,
                f"node group {g.name!r} ({g.profile_name}) has {p.gpu.vendor} GPUs.",
                f"set gpu_stack.vendor: {p.gpu.vendor}, or split the clusters.",
            )


@rule
def unknown_cpu_layout(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    # the resolved profile: discovered facts (--facts DIR or facts_dir) already applied
    for g in c.node_groups:
        p = ctx.profile(g)
        if p is not None and not p.cpu_layout_known:
            yield Finding(
                Level.INFO if p.cpus else Level.ERROR, "cpu-layout-unknown", f"{_gi(c, g)}", g.profile_name,
                "neither the catalog nor discovered facts give this profile's sockets/cores/threads"
                + (
                    (" (slurm.conf gets CPUs and ThreadsPerCore only)." if p.threads_per_core else
                     " (slurm.conf gets CPUs only).")
                    if p.cpus
                    else " nor its CPU count."
                ),
                "run playbooks/discover.yml and render with --facts DIR (or set facts_dir).",
            )




@rule
def cloud_nodes_return_to_service(c: Cluster, ctx: RuleContext) -> Iterator[Finding]:
    # A replaced instance registers under the old node name after the departure tooling set the
    # node DOWN; with ReturnToService=2 slurmctld logs "node ... returned to service" on that
    # registration (seen with slurmctld 22.05, tests/test_slurm_cloud_nodes.py). With 0 or 1 the
    # DOWN node (reason set by scontrol) stays DOWN until an admin resumes it (slurm.conf(5)).
    cloud = [g.name for g in c.groups_with_role("compute") if g.is_cloud]
    if cloud and c.slurm.return_to_service != 2:
        yield Finding(
            Level.ERROR, "cloud-return-to-service", "slurm.return_to_service", c.slurm.return_to_service,
            f"cloud compute groups ({', '.join(cloud)}) replace instances under the same node name; "
            "a replacement only rejoins by itself with ReturnToService=2.",
            "set slurm.return_to_service: 2 (the default).",
        )
