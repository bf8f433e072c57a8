"""Security groups and rules, read from what the program registers under mocks."""

from __future__ import annotations

import pulumi

from clusterforge.plan.mocks import RecordedResource, Recording
from tests.pulumi_helpers import (
    EGRESS,
    INGRESS,
    INSTANCE,
    LT,
    SG,
    expect,
    mocks_runtime,
    of_type,
    one,
    run_example,
    run_variant,
)


def rules_of(rec: Recording, type_: str, sg_id: str) -> list[RecordedResource]:
    return [r for r in of_type(rec, type_) if r.inputs.get("securityGroupId") == sg_id]


def sg_id(cluster: str, suffix: str) -> str:
    return f"{cluster}-{suffix}-id"  # the mocks' fake id for resource "<cluster>-<suffix>"


def test_efa_group_allows_all_traffic_to_and_from_itself() -> None:
    for example in ("p5-training", "hybrid"):
        rec = run_example(example)
        efa = sg_id(example, "efa")
        one(rec, SG, f"{example}-efa")
        for kind in (INGRESS, EGRESS):
            rules = rules_of(rec, kind, efa)
            assert len(rules) == 1, f"{example}: EFA group needs exactly one {kind}, got {[r.urn for r in rules]}"
            rule = rules[0]
            expect(rule, rule.inputs.get("ipProtocol") == "-1", "EFA rule must cover all protocols (-1)")
            expect(
                rule,
                rule.inputs.get("referencedSecurityGroupId") == efa,
                "EFA rule must reference its own group",
            )
            expect(rule, "fromPort" not in rule.inputs and "toPort" not in rule.inputs, "all traffic: no ports")
            expect(rule, "cidrIpv4" not in rule.inputs, "EFA rule must not be CIDR-based")


def test_login_ssh_only_from_allowed_cidrs() -> None:
    rec = run_example("p5-training")
    cidr_rules = [r for r in of_type(rec, INGRESS) if "cidrIpv4" in r.inputs or "cidrIpv6" in r.inputs]
    assert cidr_rules, "expected the SSH rule for 203.0.113.0/24"
    for rule in cidr_rules:
        expect(
            rule,
            rule.inputs["securityGroupId"] == sg_id("p5-training", "login"),
            "CIDR ingress only on login",
        )
        expect(rule, rule.inputs.get("cidrIpv4") == "203.0.113.0/24", "only the spec's allowed CIDRs")
        expect(
            rule,
            (rule.inputs["ipProtocol"], rule.inputs["fromPort"], rule.inputs["toPort"]) == ("tcp", 22, 22),
            "only SSH",
        )


def test_no_ssh_group_and_no_public_ip_without_allowed_cidrs() -> None:
    rec = run_variant("p5-two-az-no-ssh")  # login_allowed_cidrs: []
    assert [r.name for r in of_type(rec, SG)] and not [r for r in of_type(rec, SG) if r.name.endswith("-login")]
    assert not [r for r in of_type(rec, INGRESS) if "cidrIpv4" in r.inputs], "no CIDR ingress at all (use SSM)"
    login = one(rec, INSTANCE, "p5-training-login-login-001")
    expect(login, login.inputs["associatePublicIpAddress"] is False, "unreachable login node needs no public IP")
    expect(
        login,
        login.inputs["vpcSecurityGroupIds"] == [sg_id("p5-training", "cluster"), sg_id("p5-training", "nodes")],
        "cluster and node groups only",
    )


def test_cluster_group_is_identity_and_egress_nodes_take_all_cluster_traffic() -> None:
    rec = run_example("p5-training")
    cluster, nodes = sg_id("p5-training", "cluster"), sg_id("p5-training", "nodes")
    assert rules_of(rec, INGRESS, cluster) == [], "members reach each other through nodes/controller"
    egress = rules_of(rec, EGRESS, cluster)
    assert [(r.inputs["ipProtocol"], r.inputs.get("cidrIpv4")) for r in egress] == [("-1", "0.0.0.0/0")]
    ingress = rules_of(rec, INGRESS, nodes)
    assert [(r.inputs["ipProtocol"], r.inputs.get("referencedSecurityGroupId")) for r in ingress] == [("-1", cluster)]


#: slurmdbd and MariaDB: reachable from the controller itself only (its own traffic never crosses
#: a security group), so no rule anywhere may cover them.
CONTROLLER_ONLY = (6819, 3306)


def _covers(rule: RecordedResource, port: int) -> bool:
    proto = rule.inputs["ipProtocol"]
    if proto == "-1":
        return True
    return proto == "tcp" and rule.inputs["fromPort"] <= port <= rule.inputs["toPort"]


def test_slurmdbd_and_mariadb_open_to_no_one_but_the_controller() -> None:
    rec = run_example("p5-training")
    controller = sg_id("p5-training", "controller")
    head = one(rec, INSTANCE, "p5-training-head-head-001")
    expect(head, head.inputs["vpcSecurityGroupIds"] == [sg_id("p5-training", "cluster"), controller], "groups")
    controller_rules = rules_of(rec, INGRESS, controller)
    # 0-3305, 3307-6818, 6820-65535 + UDP + ICMP, from cluster members
    assert sorted((r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"]) for r in controller_rules) == [
        ("icmp", -1, -1),
        ("tcp", 0, 3305),
        ("tcp", 3307, 6818),
        ("tcp", 6820, 65535),
        ("udp", 0, 65535),
    ]
    for r in controller_rules:
        expect(r, r.inputs.get("referencedSecurityGroupId") == sg_id("p5-training", "cluster"), "from members")
    for port in (6817, 22, 9090):  # slurmctld, SSH, Prometheus stay reachable
        assert any(_covers(r, port) for r in controller_rules), port
    # what the controller instance accepts: the rules of every group it carries
    carried = set(head.inputs["vpcSecurityGroupIds"])
    for r in of_type(rec, INGRESS):
        if r.inputs["securityGroupId"] in carried:
            for port in CONTROLLER_ONLY:
                expect(r, not _covers(r, port), f"port {port} open on a group the controller carries")


def test_controller_group_also_closes_the_db_ports_to_on_prem_nodes() -> None:
    """A cloud controller with on-prem members: their CIDRs get the controller's ranges, not all traffic."""
    from infra.security import Security, SecurityArgs, open_tcp_ranges

    assert open_tcp_ranges({3306, 6819}) == [(0, 3305), (3307, 6818), (6820, 65535)]
    assert open_tcp_ranges({0, 65535}) == [(1, 65534)]
    with mocks_runtime() as monitor:

        @pulumi.runtime.test
        def build() -> None:
            args = SecurityArgs(
                cluster="t", login_allowed_cidrs=(), onprem_cidrs=("10.40.0.10/32",), login=False,
                controller=True, efa=False, fsx=False, efs=False,
            )
            Security("t", args, vpc_id="vpc-1")

        build()
    rules = [r for r in monitor.recorded if r.type == INGRESS and r.inputs.get("cidrIpv4") == "10.40.0.10/32"]
    on_controller = [r for r in rules if r.name.startswith("t-controller-in-onprem-0")]
    assert len(on_controller) == 5 and len(rules) == 6  # 5 on the controller group + all traffic to nodes
    for r in on_controller:
        for port in CONTROLLER_ONLY:
            expect(r, not _covers(r, port), f"port {port} open to the on-prem CIDR")


def _ports(rules: list[RecordedResource]) -> set[tuple[str, int, int]]:
    return {(r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"]) for r in rules}


def test_fsx_group_opens_only_lustre_ports() -> None:
    rec = run_example("p5-training")
    fsx, cluster = sg_id("p5-training", "fsx"), sg_id("p5-training", "cluster")
    for kind in (INGRESS, EGRESS):
        rules = rules_of(rec, kind, fsx)
        assert _ports(rules) == {("tcp", 988, 988), ("tcp", 1018, 1023)}, [r.urn for r in rules]
        for r in rules:
            expect(
                r,
                r.inputs.get("referencedSecurityGroupId") in (fsx, cluster),
                "only the file servers and nodes",
            )
        assert {r.inputs["referencedSecurityGroupId"] for r in rules} == {fsx, cluster}


def test_efs_group_opens_only_nfs_from_cluster_nodes() -> None:
    rec = run_example("p5-training")
    efs, cluster = sg_id("p5-training", "efs"), sg_id("p5-training", "cluster")
    rules = rules_of(rec, INGRESS, efs)
    assert _ports(rules) == {("tcp", 2049, 2049)}
    for r in rules:
        expect(r, r.inputs["referencedSecurityGroupId"] == cluster, "NFS only from cluster nodes")
    assert rules_of(rec, EGRESS, efs) == []


def test_groups_attached_to_each_kind_of_node() -> None:
    rec = run_example("p5-training")
    cluster, nodes, controller, efa, login = (
        sg_id("p5-training", s) for s in ("cluster", "nodes", "controller", "efa", "login")
    )
    gpu = one(rec, LT, "p5-training-gpu-lt")
    for ni in gpu.inputs["networkInterfaces"]:
        expect(gpu, ni["securityGroups"] == [cluster, nodes, efa], f"EFA interface {ni} needs the EFA group")
    cpu = one(rec, LT, "p5-training-cpu-lt")
    expect(
        cpu, [ni["securityGroups"] for ni in cpu.inputs["networkInterfaces"]] == [[cluster, nodes]], "no EFA group"
    )
    head = one(rec, INSTANCE, "p5-training-head-head-001")
    expect(head, head.inputs["vpcSecurityGroupIds"] == [cluster, controller], "controller: its own ingress group")
    login_node = one(rec, INSTANCE, "p5-training-login-login-001")
    expect(login_node, login_node.inputs["vpcSecurityGroupIds"] == [cluster, nodes, login], "login: + SSH group")


def test_security_component_alone_exposes_its_groups() -> None:
    """The component built directly in its own mock runtime, checked through its Outputs."""
    with mocks_runtime() as monitor:
        from infra.security import Security, SecurityArgs

        @pulumi.runtime.test
        def build() -> pulumi.Output[None]:
            sec = Security(
                "t",
                SecurityArgs(
                    cluster="t",
                    login_allowed_cidrs=(),
                    onprem_cidrs=(),
                    login=False,
                    controller=False,
                    efa=True,
                    fsx=False,
                    efs=True,
                ),
                vpc_id="vpc-123",
            )
            assert sec.login is None and sec.fsx is None and sec.efa is not None and sec.efs is not None

            def check(ids: list[str]) -> None:
                assert ids == ["t-cluster-id", "t-nodes-id", "t-efa-id", "t-efs-id"], ids

            return pulumi.Output.all(sec.cluster.id, sec.nodes.id, sec.efa.id, sec.efs.id).apply(check)

        build()
    groups = [r for r in monitor.recorded if r.type == SG]
    assert sorted(r.name for r in groups) == ["t-cluster", "t-efa", "t-efs", "t-nodes"]
    for g in groups:
        expect(g, g.inputs["vpcId"] == "vpc-123", "group in the cluster VPC")
        expect(g, g.inputs["tags"]["clusterforge:cluster"] == "t", "cluster tag")
