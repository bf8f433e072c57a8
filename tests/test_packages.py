"""Packages that match the target: the OS/Slurm table, the slurm-not-shipped rule, slurm.package_repo,
and the Slurm role's apt pin, which the host's real apt is asked about."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import jinja2
import pytest
import yaml

from clusterforge.catalog.os_slurm import load_table, release_family
from clusterforge.clusterspec import Level, parse_spec, validate
from clusterforge.clusterspec.models import OsName
from clusterforge.errors import SpecError

from .conftest import EXAMPLE_SPECS, EXAMPLES, ROOT

ROLE = ROOT / "roles" / "slurm"
REPO = {"uris": ["https://apt.example.org/slurm"], "suites": ["jammy"], "components": ["main"],
        "signed_by": "https://apt.example.org/slurm/site-slurm.asc"}


def raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return data


def shipped_findings(data: dict[str, Any]) -> list[Any]:
    return [f for f in validate(parse_spec(data), EXAMPLES) if f.code == "slurm-not-shipped"]


# ------------------------------------------------------------------------------------ the table


def test_table_has_a_row_for_every_spec_os() -> None:
    assert set(load_table().distributions) == set(get_args(OsName))


def test_table_says_what_each_release_ships() -> None:
    # packages.debian.org / packages.ubuntu.com (os_slurm.yaml cites each); the two Debian rows and
    # sid are also what the cached root filesystems' dpkg status says here
    t = load_table()
    assert {k: v.slurm for k, v in t.distributions.items()} == {
        "debian-12": "22.05.8", "debian-13": "24.11.5", "ubuntu-22.04": "21.08.5", "ubuntu-24.04": "23.11.4",
    }
    assert {k: (v.codename, v.slurm) for k, v in t.build_sources.items()} == {"debian-sid": ("sid", "26.05.5")}
    assert {k: v.proven for k, v in t.distributions.items()} == {
        "debian-12": "daemons", "debian-13": "daemons", "ubuntu-22.04": "lint", "ubuntu-24.04": "lint",
    }
    assert all(v.source for v in [*t.distributions.values(), *t.build_sources.values()])


def test_release_family() -> None:
    assert [release_family(v) for v in ("24.11.5", "24.11", "22.05.8", "26.05.5")] == [
        "24.11", "24.11", "22.05", "26.05"]
    with pytest.raises(ValueError, match="not a Slurm version"):
        release_family("latest")


# ------------------------------------------------------------------------------------ the rule

# the examples' pairs before this change: each was os ubuntu-22.04 (Slurm 21.08)
OLD_PAIRS = [
    ("onprem-dgx.yaml", "22.05", "set os: debian-12, which ships 22.05 (22.05.8)"),
    ("amd-mi300x.yaml", "22.05", "set os: debian-12, which ships 22.05 (22.05.8)"),
    ("hybrid.yaml", "23.11", "set os: ubuntu-24.04, which ships 23.11 (23.11.4)"),
    ("p5-training.yaml", "24.05", "no OS clusterforge knows ships 24.05"),
]


@pytest.mark.parametrize(("example", "version", "way_os"), OLD_PAIRS, ids=[p[0] for p in OLD_PAIRS])
def test_rule_fires_for_the_old_example_pairs(example: str, version: str, way_os: str) -> None:
    data = raw(example)
    data["os"] = "ubuntu-22.04"
    data["slurm"]["version"] = version
    data["slurm"].pop("package_repo", None)
    hits = shipped_findings(data)
    assert len(hits) == 1
    f = hits[0]
    assert (f.level, f.path, f.value) == (Level.ERROR, "slurm.version", version)
    assert f"os ubuntu-22.04 (jammy) ships Slurm 21.08.5, not {version}" in f.why
    assert f.fix.startswith(way_os)
    assert f.fix.endswith(f"or name your own builds of {version} in slurm.package_repo: see docs/slurm-packages.md.")


def test_fix_names_debian_13_for_2411() -> None:
    data = raw("onprem-dgx.yaml")
    data["os"] = "ubuntu-22.04"
    (f,) = shipped_findings(data)  # onprem-dgx targets 24.11
    assert f.fix.startswith("set os: debian-13, which ships 24.11 (24.11.5); or name your own builds of 24.11")


@pytest.mark.parametrize("example", EXAMPLE_SPECS, ids=lambda p: Path(p).name)
def test_fixed_examples_install_as_is(example: str) -> None:
    assert shipped_findings(raw(Path(example).name)) == []


def test_each_example_pair() -> None:
    """The pairs the README's table states, written here by hand."""
    got = {}
    for name in ("onprem-dgx.yaml", "amd-mi300x.yaml", "hybrid.yaml", "p5-training.yaml", "local.yaml",
                 "local-aws.yaml", "local-roles.yaml"):
        d = raw(name)
        got[name] = (d["os"], d["slurm"]["version"], "package_repo" in d["slurm"])
    assert got == {
        "onprem-dgx.yaml": ("debian-13", "24.11", False),
        "amd-mi300x.yaml": ("ubuntu-24.04", "23.11", False),
        "hybrid.yaml": ("ubuntu-24.04", "23.11", False),
        "p5-training.yaml": ("ubuntu-24.04", "23.11", False),
        "local.yaml": ("debian-13", "24.11", False),
        "local-aws.yaml": ("debian-12", "22.05", False),
        "local-roles.yaml": ("debian-12", "22.05", False),
    }


def test_package_repo_lifts_the_rule() -> None:
    data = raw("onprem-dgx.yaml")
    data["os"] = "ubuntu-22.04"
    data["slurm"]["package_repo"] = REPO
    assert shipped_findings(data) == []


# ----------------------------------------------------------------------------- slurm.package_repo


def _repo_error(**change: Any) -> str:
    data = raw("p5-training.yaml")
    repo = {**REPO, **change}
    data["slurm"]["package_repo"] = {k: v for k, v in repo.items() if v is not None}
    with pytest.raises(SpecError) as exc:
        parse_spec(data, "p5")
    return str(exc.value)


def test_package_repo_defaults() -> None:
    r = parse_spec({**raw("p5-training.yaml"), "slurm": {"version": "24.05", "package_repo": REPO}}).slurm.package_repo
    assert r is not None and (r.components, r.packaging) == (["main"], "debian")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"uris": ["ftp://apt.example.org/slurm"]}, "'ftp://apt.example.org/slurm' is not an http or https URL"),
        ({"uris": ["https://"]}, "is not an http or https URL"),
        ({"uris": []}, "uris"),
        ({"signed_by": "http://apt.example.org/key.asc"}, "neither an https URL nor an absolute path"),
        ({"signed_by": "site-slurm.gpg"}, "neither an https URL nor an absolute path"),
        ({"suites": ["./"]}, "flat repository"),
        ({"components": []}, "need components"),
        ({"packaging": "rpm"}, "packaging"),
        ({"trusted": True}, "trusted"),
    ],
    ids=["ftp", "no-host", "no-uris", "key-over-http", "key-relative", "flat-with-components",
         "suite-without-components", "packaging", "unknown-key"],
)
def test_package_repo_errors_name_the_field(change: dict[str, Any], says: str) -> None:
    msg = _repo_error(**change)
    assert "package_repo" in msg and says in msg, msg


def test_flat_repository_and_key_path_are_accepted() -> None:
    data = raw("p5-training.yaml")
    data["slurm"]["package_repo"] = {"uris": ["http://10.0.0.5/slurm"], "suites": ["./"], "components": [],
                                     "signed_by": "/etc/apt/keyrings/site-slurm.gpg"}
    assert parse_spec(data).slurm.package_repo is not None


def test_inventory_hands_the_repo_to_the_role() -> None:
    from clusterforge.inventory.generate import build_inventory
    from clusterforge.resolve import resolve, resolve_file

    data = raw("onprem-dgx.yaml")
    data["os"] = "ubuntu-22.04"
    data["slurm"]["package_repo"] = {**REPO, "packaging": "schedmd"}
    inv = build_inventory(resolve(parse_spec(data), base_dir=EXAMPLES)).all_vars
    assert inv["clusterforge_slurm_version"] == "24.11"
    assert inv["clusterforge_slurm_package_repo"] == {
        "uris": ["https://apt.example.org/slurm"], "suites": ["jammy"], "components": ["main"],
        "signed_by": "https://apt.example.org/slurm/site-slurm.asc", "packaging": "schedmd",
    }
    assert build_inventory(resolve_file(EXAMPLES / "onprem-dgx.yaml")).all_vars[
        "clusterforge_slurm_package_repo"] is None


# ------------------------------------------------------------------------------ the role's pin


def _pin_text(family: str, packages: list[str]) -> str:
    """The role's pin text (``__slurm_pin_text``), printed by Jinja as Ansible prints a variable."""
    env = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    tpl = env.from_string(yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__slurm_pin_text"])
    return tpl.render(__slurm_family=family, __slurm_pin_packages=packages)


def test_pin_file_text() -> None:
    text = _pin_text("24.11", ["src:slurm-wlm", "src:slurm-smd", "slurmd"])
    records = [r for r in text.split("\n\n")]
    body = ["\n".join(ln for ln in r.splitlines() if not ln.startswith("#")) for r in records]
    assert body == [
        "Package: src:slurm-wlm src:slurm-smd slurmd\nPin: version 24.11.*\nPin-Priority: 1001",
        "Package: src:slurm-wlm src:slurm-smd slurmd\nPin: version *\nPin-Priority: -1",
    ]
    assert text.endswith("Pin-Priority: -1\n")


def _apt_policy(tmp_path: Path, family: str) -> dict[str, tuple[str, str]]:
    parts = tmp_path / family
    parts.mkdir()
    (parts / "clusterforge-slurm.pref").write_text(
        _pin_text(family, ["src:slurm-wlm", "src:slurm-smd", "slurmctld", "slurmd", "slurm-client"]))
    p = subprocess.run(
        ["apt-cache", "policy", "-o", "Dir::Etc::Preferences=/dev/null", "-o", f"Dir::Etc::PreferencesParts={parts}",
         "slurmd", "libslurm38"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    out: dict[str, tuple[str, str]] = {}
    pkg = ""
    for line in p.stdout.splitlines():
        if not line.startswith(" "):
            pkg = line.rstrip(":")
        elif line.strip().startswith("Candidate:"):
            out[pkg] = (line.split(":", 1)[1].strip(), "")
        elif line.strip().startswith(("***", "2")) and pkg in out and not out[pkg][1]:
            out[pkg] = (out[pkg][0], line.split()[-1])  # the first version's priority
    return out


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="no apt on this host")
def test_real_apt_installs_only_the_pinned_family(tmp_path: Path) -> None:
    """The host's own apt (Debian 12: slurmd 22.05.8-4+deb12u3 in its archive) reads the rendered
    pin file: with 22.05 the candidate is bookworm's 22.05.8 at priority 1001; with 24.11 apt has
    no candidate at all, the installed 22.05.8 at -1 (neither kept for an upgrade nor installable)."""
    probe = subprocess.run(["apt-cache", "show", "slurmd"], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        pytest.skip("this host's apt knows no slurmd")
    ok = _apt_policy(tmp_path, "22.05")
    assert ok["slurmd"][0].startswith("22.05.8-") and ok["slurmd"][1] == "1001", ok
    assert ok["libslurm38"][0].startswith("22.05.8-"), ok  # a binary of src:slurm-wlm the role never names
    blocked = _apt_policy(tmp_path, "24.11")
    assert blocked["slurmd"][0] == "(none)" and blocked["slurmd"][1] == "-1", blocked
    assert blocked["libslurm38"][0] == "(none)", blocked


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
def test_role_names_the_packages_of_the_repos_packaging(tmp_path: Path) -> None:
    """The role's own vars (roles/slurm/vars/main.yml) and pin task, run by ansible-playbook for a
    controller+compute host without a repository and one with a SchedMD-packaged repository."""
    pin_task = next(t for t in yaml.safe_load((ROLE / "tasks" / "packages.yml").read_text())
                    if t["name"].startswith("Pin the Slurm packages"))
    assert pin_task["ansible.builtin.copy"]["dest"] == "{{ slurm_apt_preferences_file }}"
    pins = {h: tmp_path / f"{h}.pref" for h in ("debian", "schedmd")}
    system_pin = Path(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["slurm_apt_preferences_file"])
    existed = system_pin.exists()
    inventory = {"all": {
        # the role's defaults as inventory vars (include_vars would outrank the hosts' pin paths
        # and write the host's real /etc/apt/preferences.d)
        "vars": {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
                 "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "clusterforge_accounting": {"enabled": True}, "clusterforge_slurm_version": "25.05"},
        "hosts": {
            "debian": {"slurm_apt_preferences_file": str(pins["debian"])},
            "schedmd": {"slurm_apt_preferences_file": str(pins["schedmd"]),
                        "clusterforge_slurm_package_repo": {**REPO, "packaging": "schedmd"}},
        },
        "children": {"slurm_controller": {"hosts": {"debian": {}, "schedmd": {}}},
                     "slurm_dbd": {"hosts": {"debian": {}, "schedmd": {}}}},
    }}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "Pin", "hosts": "all", "gather_facts": False,
        "tasks": [
            {"name": "Role vars", "ansible.builtin.include_vars": str(ROLE / "vars" / "main.yml")},
            {"name": "Pin file", "ansible.builtin.copy": {**pin_task["ansible.builtin.copy"], "owner": None, "group": None}},
            {"name": "Names", "ansible.builtin.debug": {"msg": "{{ {'install': __slurm_pkgs, 'hold': __slurm_hold_pkgs} | to_json }}"}},
        ],
    }], sort_keys=False))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "json"}
    p = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
    assert system_pin.exists() == existed, "the test wrote the host's own apt preferences"
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    tasks = json.loads(p.stdout)["plays"][0]["tasks"]
    names = {h: json.loads(r["msg"]) for h, r in tasks[-1]["hosts"].items()}
    assert names == {
        "debian": {"install": ["slurmctld", "slurm-client", "slurmdbd"], "hold": ["slurmctld", "slurmdbd"]},
        "schedmd": {"install": ["slurm-smd-slurmctld", "slurm-smd-client", "slurm-smd-slurmdbd"],
                    "hold": ["slurm-smd-slurmctld", "slurm-smd-slurmdbd"]},
    }
    assert "Package: src:slurm-wlm src:slurm-smd slurm-smd-slurmctld slurm-smd-client slurm-smd-slurmdbd\n" \
           "Pin: version 25.05.*\nPin-Priority: 1001\n" in pins["schedmd"].read_text()
    assert "Pin: version 25.05.*" in pins["debian"].read_text()


def test_package_tasks_keep_check_mode_and_hold() -> None:
    """What makes check mode and a second run work, read from the task file (the e2e run proves the
    rest): reads never change, the check skips daemons check mode would only install, the hold stays."""
    tasks = {t["name"]: t for f in ("packages.yml", "repo.yml") for t in yaml.safe_load((ROLE / "tasks" / f).read_text())}
    read = tasks["Read the release of the installed daemons"]
    assert (read["changed_when"], read["check_mode"]) == (False, False)
    assert "ansible_check_mode" in tasks["Check that the daemons are Slurm {{ __slurm_family }}"]["when"]
    assert tasks["Hold the Slurm packages at the installed version"]["ansible.builtin.dpkg_selections"] == {
        "name": "{{ item }}", "selection": "hold"}
    assert tasks["Refresh the apt cache for the new source"]["when"].startswith("__slurm_repo_result is changed")
    # the site's repository's tasks run only where the spec names one (included), after the pin
    assert tasks["The site's Slurm repository"]["when"] == "__slurm_repo is not none"
    assert tasks["The site's Slurm repository"]["ansible.builtin.include_tasks"]["file"] == "repo.yml"
    deb822 = tasks["Add the site's Slurm repository (slurm.package_repo)"]["ansible.builtin.deb822_repository"]
    assert set(deb822) == {"name", "types", "uris", "suites", "components", "signed_by", "state"}



def test_fix_names_sid_as_a_build_source_for_2605() -> None:
    # slurm.version 26.05 arrives with the version-gate work; the fix text's part for it is here
    from clusterforge.clusterspec.rules.packages import _build_source

    assert _build_source("26.05") == " (Debian sid's slurm-wlm 26.05.5 is one to build them from)"
    assert _build_source("24.05") == ""


def test_ami_names_its_os() -> None:
    """The OS an AMI parameter names, for the ami-os-mismatch rule (paths as AWS, Canonical and Debian publish them)."""
    from clusterforge.clusterspec.rules.packages import ami_os

    dlami = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    assert ami_os(dlami) == "ubuntu-22.04"
    assert ami_os("resolve:ssm:/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id") \
        == "ubuntu-24.04"
    assert ami_os("resolve:ssm:/aws/service/canonical/ubuntu/server/noble/stable/current/amd64/hvm/ebs-gp3/ami-id") \
        == "ubuntu-24.04"
    assert ami_os("resolve:ssm:/aws/service/canonical/ubuntu/server/focal/stable/current/amd64/hvm/ebs-gp2/ami-id") \
        == "ubuntu (focal)"
    assert ami_os("resolve:ssm:/aws/service/debian/release/bookworm/latest/amd64") == "debian-12"
    assert ami_os("resolve:ssm:/aws/service/debian/release/13/latest/amd64") == "debian-13"
    assert ami_os("ami-0123456789abcdef0") is None and ami_os("resolve:ssm:/site/golden-ami") is None


def test_ami_of_another_os_is_an_error_with_both_ways_out() -> None:
    data = raw("p5-training.yaml")
    data["os"] = "ubuntu-22.04"
    data["slurm"]["package_repo"] = {"uris": ["https://apt.example.org/slurm"], "suites": ["jammy"],
                                     "components": ["main"], "packaging": "schedmd",
                                     "signed_by": "https://apt.example.org/slurm/site-slurm.asc"}
    (f,) = [f for f in validate(parse_spec(data), EXAMPLES) if f.code == "ami-os-mismatch"]
    assert f.path == "aws.ami" and f.level is Level.ERROR
    assert "the AMI is ubuntu-24.04 but os is ubuntu-22.04 (jammy)" in f.why
    assert f.fix.startswith("set os: ubuntu-24.04") and "base-oss-nvidia-driver-gpu-ubuntu-22.04" in f.fix
