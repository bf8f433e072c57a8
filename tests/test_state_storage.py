"""Where the controller's state lives (issue 15, item 6): the spec's choices, the render, the user
data that mounts the retained volume, and the stack that creates and attaches it (under mocks).

The rules' firing cases are in tests/test_spec.py (CASES); here: what is accepted, and what each
layer makes of it. The real daemons' failover and replacement: tests/test_slurm_failover.py.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from pydantic import ValidationError

from clusterforge.aws.userdata import group_user_data
from clusterforge.clusterspec import validate
from clusterforge.clusterspec.models import Cluster
from clusterforge.plan import format_text, to_json
from clusterforge.render import render_cluster
from clusterforge.render.writer import render_tree
from tests.pulumi_helpers import EXAMPLES, INSTANCE, example_data, expect, one, run_example, run_spec, spec
from tests.test_plan import plan_of

VOLUME = "aws:ebs/volume:Volume"
VOLUME_ATTACHMENT = "aws:ec2/volumeAttachment:VolumeAttachment"
STATE = "/srv/clusterforge-state"


def _codes(data: dict[str, Any]) -> set[str]:
    return {f.code for f in validate(spec(data), EXAMPLES)}


def _two_controllers_on_fsx() -> dict[str, Any]:
    d = example_data("p5-training")
    d["node_groups"][0]["cloud"]["count"] = 2
    d["slurm"].update(state_storage={"type": "shared", "mount": "/fsx"}, state_save_location="/fsx/slurm/state")
    return d


# ------------------------------------------------------------------------------------ spec


def test_two_controllers_with_shared_state_are_accepted() -> None:
    codes = _codes(_two_controllers_on_fsx())
    assert not codes & {"ha-state-not-shared", "state-outside-storage", "state-storage-unknown-mount",
                        "state-on-root-volume"}


def test_ebs_state_on_one_cloud_controller_is_accepted_and_silences_the_warning() -> None:
    codes = _codes(example_data("p5-training"))  # the example keeps its state on ebs
    assert "state-on-root-volume" not in codes and "state-outside-storage" not in codes


def test_shared_state_with_a_database_host_of_its_own_is_not_warned() -> None:
    # the job history on a server that is no controller outlives a replaced controller; on the
    # controllers (localhost or ctl's name) it does not, and InnoDB is never moved onto /fsx
    d = _two_controllers_on_fsx()
    assert "accounting-db-not-retained" in _codes(d)
    d["accounting"]["storage_host"] = "db-01.example.org"
    assert "accounting-db-not-retained" not in _codes(d)


@pytest.mark.parametrize("bad", [4, 3601])
def test_slurmctld_timeout_is_bounded(bad: int) -> None:
    d = example_data("p5-training")
    d["slurm"]["slurmctld_timeout_s"] = bad
    with pytest.raises(ValidationError, match="slurmctld_timeout_s"):
        Cluster.model_validate(d)


def test_state_storage_type_is_one_of_two() -> None:
    d = example_data("p5-training")
    d["slurm"]["state_storage"] = {"type": "instance_store"}
    with pytest.raises(ValidationError, match=r"'ebs', 'shared'"):
        Cluster.model_validate(d)


# ---------------------------------------------------------------------------------- render


def _conf(c: Cluster) -> list[str]:
    return render_tree(render_cluster(c, base_dir=EXAMPLES))["slurm/slurm.conf"].decode().splitlines()


def test_two_controllers_render_both_hosts_the_shared_state_and_the_timeout() -> None:
    d = _two_controllers_on_fsx()
    d["slurm"]["slurmctld_timeout_s"] = 45
    lines = _conf(spec(d))
    assert [ln for ln in lines if ln.startswith("SlurmctldHost=")] == ["SlurmctldHost=head-001", "SlurmctldHost=head-002"]
    assert "StateSaveLocation=/fsx/slurm/state" in lines
    assert "SlurmctldTimeout=45" in lines


def test_default_timeout_is_slurms() -> None:
    d = example_data("hybrid")
    assert "SlurmctldTimeout=120" in _conf(spec(d))


def test_mariadb_datadir_follows_the_state_volume() -> None:
    r = render_cluster(spec(example_data("p5-training")), base_dir=EXAMPLES)
    assert r.slurm.mariadb_datadir == f"{STATE}/mysql"
    assert r.slurm.state_save_location == f"{STATE}/slurmctld"
    # shared state leaves MariaDB where the package puts it (a database on NFS/Lustre is not the
    # state volume's business)
    assert render_cluster(spec(_two_controllers_on_fsx()), base_dir=EXAMPLES).slurm.mariadb_datadir is None


# ------------------------------------------------------------------------------- user data


def _user_data(d: dict[str, Any], group: str = "head") -> str:
    c = spec(d)
    g = c.group(group)
    return group_user_data(c, g, hostname=g.hostnames[0])


def test_only_the_ebs_controller_mounts_the_state_volume() -> None:
    ud = _user_data(example_data("p5-training"))
    assert f"mount {STATE}" in ud and "mkfs.ext4" in ud
    # formatting is guarded: only when blkid finds nothing and the first MiB reads as zeros
    guard = next(ln for ln in ud.splitlines() if "cmp -s -n 1048576" in ln)
    assert 'blkid -p' in ud and '"$probe" -eq 2' in guard
    assert ud.index("cmp -s -n 1048576") < ud.index("mkfs.ext4")
    assert "mkfs" not in _user_data(example_data("p5-training"), "login")
    assert "mkfs" not in _user_data(_two_controllers_on_fsx())


def _state_block(ud: str) -> str:
    lines = ud.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# the controller's state volume"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(f"mountpoint -q {STATE}"))
    return "\n".join(lines[start : end + 1])


def test_the_state_volume_script_is_valid_shell() -> None:
    block = _state_block(_user_data(example_data("p5-training")))
    r = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr


# ----------------------------------------------------------------------- stack (under mocks)


def test_state_volume_is_encrypted_protected_and_in_the_controllers_az() -> None:
    rec = run_example("p5-training")
    vol = one(rec, VOLUME)
    expect(vol, vol.inputs.get("encrypted") is True, "the state volume must be encrypted")
    expect(vol, vol.protect, "the state volume must be protect-ed (pulumi destroy stops at it)")
    expect(vol, vol.inputs.get("availabilityZone") == "us-east-1a", "the volume must be in the controller's AZ")
    expect(vol, vol.inputs.get("size") == 64 and vol.inputs.get("type") == "gp3", "size and type from the spec")
    expect(vol, vol.inputs.get("tags", {}).get("clusterforge:cluster") == "p5-training", "tagged with the cluster")


def test_state_volume_is_attached_to_the_controller_instance() -> None:
    rec = run_example("p5-training")
    att = one(rec, VOLUME_ATTACHMENT)
    head = one(rec, INSTANCE, "p5-training-head-head-001")
    vol = one(rec, VOLUME)
    deps = att.property_dependencies
    expect(att, head.urn in deps.get("instanceId", []), "the attachment must follow the controller instance")
    expect(att, vol.urn in deps.get("volumeId", []), "the attachment must attach the state volume")
    expect(att, att.inputs.get("stopInstanceBeforeDetaching") is True, "stop the old controller before detaching")
    expect(att, not att.protect, "the attachment is replaced with the instance; the volume is what is kept")
    # no volume_tags with an attached, separately tagged volume (pulumi-aws: resource cycling)
    expect(head, "volumeTags" not in head.inputs, "the controller must tag its root volume, not volume_tags")
    expect(head, head.inputs["rootBlockDevice"].get("tags", {}).get("clusterforge:cluster") == "p5-training",
           "the root volume keeps its tags")
    login = one(rec, INSTANCE, "p5-training-login-login-001")
    expect(login, "volumeTags" in login.inputs, "other instances keep volume_tags")


def test_no_state_volume_without_ebs_state() -> None:
    rec = run_spec(_two_controllers_on_fsx())
    assert [r for r in rec.resources if r.type in (VOLUME, VOLUME_ATTACHMENT)] == []


def test_plan_shows_the_protected_volume_and_its_attachment() -> None:
    plan = plan_of("p5-training")
    vol = plan.resource(f"{VOLUME}::p5-training-state")
    assert vol.protected and vol.properties["encrypted"] is True
    att = plan.resource(f"{VOLUME_ATTACHMENT}::p5-training-head-head-001-state")
    assert att.parent == "clusterforge:aws:HeadNodes::p5-training-head" and not att.protected
    text = format_text(plan)
    line = next(ln for ln in text.splitlines() if "p5-training-state " in ln or ln.rstrip().endswith("p5-training-state"))
    assert "[protected]" in line and "64 GiB" in line and "encrypted=True" in line
    assert '"protected": true' in to_json(plan)
