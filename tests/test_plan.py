"""The offline plan: the program under the engine's mock mode, files, cost, stable JSON."""

from __future__ import annotations

import json
from functools import cache

import pytest

from clusterforge.aws import outputs as out
from clusterforge.catalog import profile_names
from clusterforge.catalog.prices import load_prices
from clusterforge.clusterspec import load_spec
from clusterforge.clusterspec.models import Cluster
from clusterforge.plan import UNKNOWN, Plan, PlanError, build_plan, format_text, to_json
from clusterforge.plan.build import plan_from_recording
from clusterforge.render import render_cluster
from clusterforge.resolve import resolve, resolve_file
from tests.pulumi_helpers import EXAMPLES, example_data, run_example, spec
from tests.test_infra_program import EXPECTED_COUNTS


@cache
def plan_of(name: str) -> Plan:
    """The example's plan, assembled from the preview-mode run the policy tests share
    (``build_plan`` itself is exercised by the stability test below)."""
    rc = resolve_file(EXAMPLES / f"{name}.yaml")
    recording = run_example(name, preview=True)
    return plan_from_recording(rc, recording, spec_path=f"examples/{name}.yaml", stack=name)


@pytest.mark.parametrize("example", ["p5-training", "hybrid"])
def test_plan_runs_the_same_program(example: str) -> None:
    assert plan_of(example).counts == EXPECTED_COUNTS[example]


def test_unknowns_are_not_invented() -> None:
    plan = plan_of("p5-training")
    text = to_json(plan)
    invented = [r.name for r in plan.resources if f'"{r.name}-id"' in text]  # the test mocks' fake ids
    assert invented == [] and "10.0.0.10" not in text, "no fake ids or addresses in a plan"
    assert plan.outputs[out.CONTROLLER_ADDRESS] == UNKNOWN
    assert plan.outputs[out.VPC_ID] == UNKNOWN
    assert plan.outputs[out.STORAGE]["fsx"]["dns_name"] == UNKNOWN
    rule = plan.resource("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule::p5-training-efa-in-self")
    assert rule.properties["referencedSecurityGroupId"] == UNKNOWN
    param = plan.resource("aws:ssm/parameter:Parameter::p5-training-slurmdbd_storage_pass")
    assert param.properties["value"] == "(secret)"
    # what is known is shown: the tag filters the inventory will use
    assert plan.outputs[out.NODE_GROUPS]["gpu"]["tag_filters"] == out.group_tag_filters("p5-training", "gpu")


def test_tree_parents_and_properties() -> None:
    plan = plan_of("p5-training")
    lt = plan.resource("aws:ec2/launchTemplate:LaunchTemplate::p5-training-gpu-lt")
    assert lt.parent == "clusterforge:aws:NodeGroup::p5-training-gpu"
    assert lt.kind == "resource" and len(lt.properties["networkInterfaces"]) == 33
    assert lt.properties["userData"].startswith("sha256:")
    assert (
        plan.resource("clusterforge:aws:NodeGroup::p5-training-gpu").parent == "clusterforge:aws:Cluster::p5-training"
    )
    assert plan.resource("pulumi:providers:aws::p5-training-aws").kind == "provider"


def test_rendered_files_with_hashes() -> None:
    cluster = load_spec(EXAMPLES / "p5-training.yaml")
    rendered = render_cluster(cluster, base_dir=EXAMPLES)
    files = {f.name: f.sha256 for f in plan_of("p5-training").files}
    assert files == {name: f.sha256 for name, f in rendered.files.items()}
    assert "slurm/slurm.conf" in files


def test_json_is_stable_sorted_and_repeatable_in_one_process() -> None:
    first = to_json(plan_of("p5-training"))  # after other runs of the program in this process
    again = to_json(build_plan(resolve_file(EXAMPLES / "p5-training.yaml"), spec_path="examples/p5-training.yaml"))
    assert again == first, "a second run in the same process must give the same plan"
    data = json.loads(first)
    assert json.dumps(data, indent=2, sort_keys=True) + "\n" == first
    assert list(data["resources"]) == sorted(data["resources"])
    assert data["format"] == 1 and data["cluster"] == "p5-training"


def test_cost_estimate() -> None:
    prices = load_prices()
    p5 = prices.instance("p5.48xlarge")
    c7i = prices.instance("c7i.48xlarge")
    assert p5 is not None and c7i is not None
    cost = plan_of("p5-training").cost
    lines = {line.item: line for line in cost.lines}
    gpu = lines["gpu: 16 x p5.48xlarge"]
    assert gpu.hourly == pytest.approx(16 * p5.on_demand)
    assert "capacity block" in gpu.basis and "on-demand rate" in gpu.basis
    assert lines["cpu: 4 x c7i.48xlarge"].hourly == pytest.approx(4 * c7i.on_demand)
    fsx = next(line for item, line in lines.items() if item.startswith("FSx for Lustre fsx"))
    assert fsx.hourly == pytest.approx(24000 * prices.fsx_lustre_persistent_2_gib_month[250] / 730)
    assert lines["EFS home"].hourly == 0 and "size unknown" in lines["EFS home"].basis
    assert cost.total_hourly == pytest.approx(sum(line.hourly for line in cost.lines))


def test_spot_groups_are_priced_at_spot() -> None:
    data = example_data("hybrid")
    next(g for g in data["node_groups"] if g["name"] == "burst")["cloud"]["capacity"] = {"type": "spot"}
    from clusterforge.plan.cost import estimate_cost

    line = estimate_cost(resolve(spec(data), base_dir=EXAMPLES)).lines[0]
    p5 = load_prices().instance("p5.48xlarge")
    assert p5 is not None and p5.spot is not None
    assert line.basis.startswith("spot") and line.hourly == pytest.approx(4 * p5.spot)


def test_every_aws_catalog_type_has_a_price() -> None:
    assert sorted(load_prices().instances) == profile_names("aws")


def test_text_format() -> None:
    text = format_text(plan_of("p5-training"))
    assert "Plan for cluster p5-training" in text
    assert "aws:ec2:LaunchTemplate p5-training-gpu-lt  p5.48xlarge, 33 NICs (32 efa-only + 1 interface)" in text
    assert "market=capacity-block, reservation=cr-0a1b2c3d4e5f67890" in text
    assert "slurm/slurm.conf -> /etc/slurm/slurm.conf" in text
    assert 'controller_address = "(known after apply)"' in text
    assert "/h  total" in text
    assert ("p5-training-gpu-asg  size 0/0/16 (min/desired/max), capacity block 2027-01-04T11:30:00Z.."
            "2027-01-18T11:30:00Z scale-to-0 2027-01-18T10:55:00Z drain 2027-01-18T10:30:00Z") in text
    assert "p5-training-gpu-block-start  at 2027-01-04T11:30:00Z: min/desired 16/16" in text
    assert "p5-training-gpu-scale-to-0  at 2027-01-18T10:55:00Z: min/desired 0/0" in text


def test_on_prem_only_spec_has_nothing_to_plan() -> None:
    onprem = Cluster.model_validate(
        {
            "name": "rack",
            "node_groups": [{"name": "dgx", "onprem": {"hosts": "dgx-[01-02]", "profile": "dgx-h100"}}],
        }
    )
    with pytest.raises(PlanError, match="nothing for Pulumi to create"):
        build_plan(resolve(onprem, base_dir=EXAMPLES), spec_path="rack.yaml", render=False)
