"""Issue 15, "Refuse what destroys": specs the roles would turn into damage, and outputs that
cannot be written, end in one clear message (exit 1 or 2), never a traceback or a broken host.

The rule cases (system-path, path-not-normal, extra-conf-weakens) are in tests/test_spec.py's
CASES table; this file holds the schema-level refusals (paths, bucket names, control characters,
sizes), what must stay accepted, and the CLI's output folders.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterforge.clusterspec import Level, parse_spec, validate
from clusterforge.errors import SpecError

from .conftest import EXAMPLES
from .test_spec import raw, run_cli


def _refused(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as exc:
        parse_spec(data, "spec.yaml")
    return str(exc.value)


def _codes(data: dict[str, Any]) -> set[str]:
    return {f.code for f in validate(parse_spec(data), EXAMPLES) if f.level is Level.ERROR}


def _gpu(d: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in d["node_groups"] if g["name"] == "gpu")  # type: ignore[no-any-return]


# ------------------------------------------------------------------- paths: absolute, normalised


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/srv/../etc", ["'..'", "it is '/etc'"]),
        ("/var/spool/./slurmctld", ["'.'"]),
        ("//etc/slurm", ["'//'"]),
        ("/var//spool/slurmctld", ["'//'"]),
        ("/var/spool/slurmctld/", ["trailing '/'"]),
    ],
)
def test_paths_must_be_normalised(path: str, words: list[str]) -> None:
    d = raw("p5-training.yaml")
    d["slurm"]["state_save_location"] = path
    msg = _refused(d)
    assert f"slurm.state_save_location = {path!r}" in msg
    assert "not an absolute, normalised path" in msg
    for w in words:
        assert w in msg, msg


def test_mount_path_normalised_too() -> None:
    d = raw("onprem-dgx.yaml")
    d["storage"][1]["mount"] = "/lustre/"
    assert "storage[1].lustre.mount = '/lustre/'" in _refused(d)


@pytest.mark.parametrize(
    ("example", "mutate"),
    [
        # the defaults and the legitimate neighbours of refused folders (without the example's ebs
        # state_storage, whose mount the state must lie below: tests/test_spec.py)
        ("p5-training.yaml", lambda d: (d["slurm"].pop("state_storage"), d["slurm"].update(state_save_location="/var/spool/slurmctld"))),
        ("p5-training.yaml", lambda d: (d["slurm"].pop("state_storage"), d["slurm"].update(state_save_location="/home/slurm/state"))),
        ("p5-training.yaml", lambda d: (d["slurm"].pop("state_storage"), d["slurm"].update(state_save_location="/fsx/slurm/state"))),
        ("p5-training.yaml", lambda d: _gpu(d)["cloud"].update(local_nvme_raid0="/scratch/nvme")),
        ("p5-training.yaml", lambda d: _gpu(d)["cloud"].update(local_nvme_raid0="/var/lib/scratch")),
        ("onprem-dgx.yaml", lambda d: d.setdefault("health_checks", {}).update(program="/opt/site/bin/check")),
        ("onprem-dgx.yaml", lambda d: d.setdefault("health_checks", {}).update(program="/usr/local/sbin/hc")),
        ("onprem-dgx.yaml", lambda d: d["slurm"].setdefault("extra_conf", {}).update(
            SlurmdSpoolDir="/var/spool/slurmd/%n", SlurmdLogFile="/var/log/slurm/slurmd-%n.log")),
        # extra_conf values that keep authentication and isolation
        ("onprem-dgx.yaml", lambda d: d["slurm"].setdefault("extra_conf", {}).update(
            AuthType="auth/munge", CredType="cred/munge", AuthAltTypes="auth/jwt", SlurmdUser="root",
            SlurmUser="slurm", ProctrackType="proctrack/cgroup", TaskPlugin="cgroup,affinity",
            AccountingStorageEnforce="limits,qos")),
    ],
)
def test_legitimate_specs_stay_valid(example: str, mutate: Any) -> None:
    d = raw(example)
    mutate(d)
    assert _codes(d) == set()


def test_home_mount_is_legitimate_only_for_home() -> None:
    d = raw("onprem-dgx.yaml")
    assert d["storage"][0]["mount"] == "/home" and d["storage"][0]["purpose"] == ["home"]
    assert "system-path" not in _codes(copy.deepcopy(d))
    d["storage"][0]["purpose"] = ["datasets"]
    assert "system-path" in _codes(d)


# ------------------------------------------------------------------------------- S3 bucket names


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("*", "wildcard"),
        ("arn:aws:s3:::data", "only lowercase letters"),
        ("data/*", "only lowercase letters"),
        ("My-Datasets", "only lowercase letters"),
        ("ab", "it has 2 characters"),
        ("a" * 64, "it has 64 characters"),
        ("-datasets", "begins and ends with a letter or digit"),
        ("datasets.", "begins and ends with a letter or digit"),
        ("my..datasets", "no two adjacent periods"),
        ("192.168.5.4", "IP address"),
        ("xn--datasets", "'xn--' is reserved"),
        ("sthree-data", "'sthree-' is reserved"),
        ("amzn-s3-demo-data", "'amzn-s3-demo-' is reserved"),
        ("data-s3alias", "'-s3alias' is reserved"),
        ("data--ol-s3", "'--ol-s3' is reserved"),
        ("data.mrap", "'.mrap' is reserved"),
        ("data--x-s3", "'--x-s3' is reserved"),
        ("data--table-s3", "'--table-s3' is reserved"),
    ],
)
def test_s3_bucket_refused(name: str, why: str) -> None:
    d = raw("p5-training.yaml")
    d["aws"]["s3_bucket"] = name
    msg = _refused(d)
    assert f"aws.s3_bucket = {name!r}" in msg and "is not an S3 bucket name" in msg
    assert why in msg, msg


@pytest.mark.parametrize("name", ["abc", "my-datasets", "datasets.example.com", "1datasets", "a" * 63])
def test_s3_bucket_accepted(name: str) -> None:
    d = raw("p5-training.yaml")
    d["aws"]["s3_bucket"] = name
    assert parse_spec(d).aws is not None and parse_spec(d).aws.s3_bucket == name  # type: ignore[union-attr]


# ----------------------------------------------------------------------- newlines, control characters


@pytest.mark.parametrize(
    ("example", "path", "mutate", "value"),
    [
        ("p5-training.yaml", "slurm.extra_conf", lambda d, v: d["slurm"].update(extra_conf={"MailProg": v}),
         "/bin/true\nAuthType=auth/none"),
        ("p5-training.yaml", "slurm.extra_conf", lambda d, v: d["slurm"].update(extra_conf={"MailProg": v}),
         "/bin/true\rAuthType=auth/none"),
        ("onprem-dgx.yaml", "accounting.storage_host", lambda d, v: d["accounting"].update(storage_host=v),
         "head-01\nStoragePass=x"),
        ("onprem-dgx.yaml", "accounting.database", lambda d, v: d["accounting"].update(database=v), "db\x00"),
        ("onprem-dgx.yaml", "node_groups[2].fabric.socket_ifname",
         lambda d, v: d["node_groups"][2]["fabric"].update(socket_ifname=v), "=ib0\nNCCL_NET=Socket"),
        ("onprem-dgx.yaml", "storage[0].nfs.options", lambda d, v: d["storage"][0].update(options=v),
         "vers=4.1\tnoexec"),
        ("onprem-dgx.yaml", "storage[1].lustre.mgs_nid", lambda d, v: d["storage"][1].update(mgs_nid=v),
         "10.10.0.5@o2ib\u2028x"),
        ("p5-training.yaml", "aws.key_name", lambda d, v: d["aws"].update(key_name=v), "key\x1b[31m"),
        ("p5-training.yaml", "topology.ec2_instance_topology",
         lambda d, v: d.setdefault("topology", {}).update(ec2_instance_topology=v), "t.json\n"),
    ],
)
def test_control_characters_refused(example: str, path: str, mutate: Any, value: str) -> None:
    d = raw(example)
    mutate(d, value)
    msg = _refused(d)
    assert path in msg, msg
    assert repr(value) in msg and "control character" in msg and "config injection" in msg, msg


# ---------------------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("count", [10**30, 2**63, 65537])
def test_huge_count_is_refused_at_once(count: int) -> None:
    d = raw("p5-training.yaml")
    _gpu(d)["cloud"]["count"] = count
    msg = _refused(d)  # without the bound, 10**30 built host names until memory ran out
    assert f"node_groups[2].cloud.count = {count}" in msg
    assert "over 65536" in msg and "split the group" in msg


def test_count_at_the_bound_is_accepted() -> None:
    d = raw("p5-training.yaml")
    d["node_groups"] = [g for g in d["node_groups"] if g["name"] != "cpu"]  # the one other compute group
    d.pop("partitions")
    _gpu(d)["cloud"]["count"] = 65536
    assert parse_spec(d).node_groups[2].cloud.count == 65536  # type: ignore[union-attr]


def test_cluster_total_is_bounded() -> None:
    d = raw("p5-training.yaml")
    _gpu(d)["cloud"]["count"] = 40000
    next(g for g in d["node_groups"] if g["name"] == "cpu")["cloud"]["count"] = 40000
    msg = _refused(d)
    assert "node_groups = " in msg and "compute node groups hold 80000 hosts" in msg and "65536 hosts in one" in msg


def test_count_bound_in_schema() -> None:
    from clusterforge.clusterspec.schema import schema_text

    assert '"maximum": 65536' in schema_text()


# -------------------------------------------------------------------- the CLI: refused specs, outputs


def _spec(tmp_path: Path, example: str, mutate: Any) -> Path:
    d = raw(example)
    mutate(d)
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d))
    return f


@pytest.mark.parametrize("verb", ["validate", "render", "inventory"])
def test_destructive_spec_is_refused_by_every_verb(tmp_path: Path, verb: str) -> None:
    f = _spec(tmp_path, "p5-training.yaml", lambda d: d["slurm"].update(state_save_location="/etc/slurm"))
    args = [verb, str(f)] + ([] if verb == "validate" else ["--out", str(tmp_path / "out")])
    code, text = run_cli(*args)
    assert code == 1 and "system-path" in text and "Traceback" not in text, text
    assert not (tmp_path / "out").exists()


def test_render_to_unwritable_folder(tmp_path: Path) -> None:
    # /sys refuses new entries even to root (a chmod'ed folder would not stop the root test runner)
    code, text = run_cli("render", str(EXAMPLES / "local.yaml"), "--out", "/sys/clusterforge-test-out")
    assert code == 2 and "Traceback" not in text, text
    assert "--out '/sys/clusterforge-test-out': cannot write the render there" in text
    assert "choose a writable folder" in text


def test_render_below_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    code, text = run_cli("render", str(EXAMPLES / "local.yaml"), "--out", str(tmp_path / "f" / "out"))
    assert code == 2 and "Traceback" not in text and "cannot write the render there" in text, text


def test_inventory_out_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    code, text = run_cli("inventory", str(EXAMPLES / "local.yaml"), "--out", str(tmp_path / "f"))
    assert code == 2 and "Traceback" not in text, text
    assert f"--out {str(tmp_path / 'f')!r} is a file; give a folder" in text
    assert (tmp_path / "f").read_text() == "x"


def test_inventory_file_where_a_folder_is_needed(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "group_vars").write_text("x")  # write_inventory needs group_vars/ to be a folder
    code, text = run_cli("inventory", str(EXAMPLES / "local.yaml"), "--out", str(inv))
    assert code == 2 and "Traceback" not in text, text
    assert "cannot write the inventory there" in text


def test_facts_folder_with_an_empty_host_folder(tmp_path: Path) -> None:
    (tmp_path / "facts" / "mi-01").mkdir(parents=True)
    for verb in (["validate"], ["render", "--out", str(tmp_path / "o")]):
        code, text = run_cli(verb[0], str(EXAMPLES / "amd-mi300x.yaml"), *verb[1:], "--facts", str(tmp_path / "facts"))
        assert code == 2 and "Traceback" not in text, text
        assert "mi-01: none of slurmd-C.txt" in text
