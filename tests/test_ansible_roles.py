"""Static checks of roles/ and playbooks/ (no hosts): argument specs, defaults, syntax, filters."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
EXPECTED_ROLES = {
    "cloud_agents",
    "common", "nvidia_driver", "cuda", "rocm", "efa", "infiniband", "nccl", "munge", "slurm", "dcgm",
    "monitoring", "storage",
}


def _yaml(p: Path) -> object:
    return yaml.safe_load(p.read_text())


def test_every_role_of_the_issue_exists() -> None:
    assert {r.name for r in ROLES} >= EXPECTED_ROLES


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_defaults_match_argument_specs(role: Path) -> None:
    """Every default is declared with the same value; every optional option has a default."""
    spec = _yaml(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    options = spec["options"]
    defaults_file = role / "defaults" / "main.yml"
    defaults = (_yaml(defaults_file) or {}) if defaults_file.exists() else {}
    undeclared = sorted(set(defaults) - set(options))
    assert not undeclared, f"{role.name}: defaults not in meta/argument_specs.yml: {undeclared}"
    # clusterforge_* come from the generated inventory, never from role defaults
    optional = {k for k, v in options.items() if not v.get("required") and not k.startswith("clusterforge_")}
    no_default = sorted(optional - set(defaults))
    assert not no_default, f"{role.name}: optional options without a default in defaults/main.yml: {no_default}"
    for key, value in defaults.items():
        declared = options[key].get("default")
        if isinstance(value, str):
            value = " ".join(value.split())  # folded scalars
            declared = " ".join(str(declared).split())
        assert declared == value, f"{role.name}.{key}: argument_specs default {declared!r} != defaults {value!r}"
    for key, opt in options.items():
        assert opt.get("description"), f"{role.name}.{key} has no description"
        if not key.startswith("clusterforge_"):
            assert key.startswith(role.name.split("_")[0]) or key.startswith("amdgpu_"), (
                f"{role.name}.{key}: role variables start with the role name"
            )


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_defaults_are_commented(role: Path) -> None:
    """Every top-level default sits in a block (lines up to the previous blank line) that a
    comment opens: one comment may explain a group of related settings, none goes unexplained."""
    f = role / "defaults" / "main.yml"
    if not f.exists():
        return
    lines = f.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line or line.startswith((" ", "#", "-")) or ":" not in line:
            continue
        j = i - 1
        while j >= 0 and lines[j].strip() and not lines[j].startswith("#"):
            j -= 1
        assert j >= 0 and lines[j].startswith("#"), f"{role.name}: default {line.split(':')[0]!r} has no comment above it"


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_role_layout(role: Path) -> None:
    assert (role / "tasks" / "main.yml").is_file()
    meta = _yaml(role / "meta" / "main.yml")
    assert meta["galaxy_info"]["role_name"] == role.name
    platforms = {p["name"] for p in meta["galaxy_info"]["platforms"]}
    assert platforms == {"Debian", "Ubuntu"}
    for tpl in (role / "templates").glob("*.j2") if (role / "templates").is_dir() else []:
        assert tpl.read_text().startswith("{{ ansible_managed | comment }}"), tpl


def test_site_runs_every_role_and_validates_first() -> None:
    plays = _yaml(ROOT / "playbooks" / "site.yml")
    assert plays[0]["ansible.builtin.import_playbook"] == "validate.yml"
    used = {r["role"] for p in plays[1:] for r in p.get("roles", [])}
    assert used == EXPECTED_ROLES
    names = [p["name"] for p in plays]
    assert names.index("Slurm controller") < names.index("Slurm compute and login nodes")
    assert names.index("Munge") < names.index("Slurm controller")


def _fill_secrets():
    spec = importlib.util.spec_from_file_location(
        "cf_secrets", ROOT / "roles" / "slurm" / "filter_plugins" / "clusterforge_secrets.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.fill_secrets


def test_fill_secrets_substitutes_listed_placeholders() -> None:
    fill = _fill_secrets()
    text = "StorageUser=slurm\nStoragePass={{ SECRET:slurmdbd_storage_pass }}\n"
    assert fill(text, {"slurmdbd_storage_pass": "p@ss{{x}}"}, ["slurmdbd_storage_pass"]) == (
        "StorageUser=slurm\nStoragePass=p@ss{{x}}\n"
    )


def test_fill_secrets_errors_name_the_secret_not_the_value() -> None:
    fill = _fill_secrets()
    with pytest.raises(Exception, match="slurmdbd_storage_pass") as exc:
        fill("StoragePass={{ SECRET:slurmdbd_storage_pass }}\n", {}, ["slurmdbd_storage_pass"], "slurmdbd.conf")
    assert "Vault" in str(exc.value)
    with pytest.raises(Exception, match="not in the manifest's secret_refs"):
        fill("X={{ SECRET:other }}\n", {"other": "v"}, [], "f")


def _files_filters():
    """The filters as the slurm role's plugin file gives them to Ansible."""
    spec = importlib.util.spec_from_file_location(
        "cf_files", ROOT / "roles" / "slurm" / "filter_plugins" / "clusterforge_files.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    filters = mod.FilterModule().filters()
    return types.SimpleNamespace(**filters)


def test_render_sha256_hashes_bytes_and_names_a_missing_file(tmp_path: Path) -> None:
    """The slurm role copies a rendered file only when the node's SHA-256 differs from this one's."""
    mod = _files_filters()
    (tmp_path / "slurm").mkdir()
    data = b"NodeName=gpu-001 CPUs=2\r\n\xff"  # bytes as they are: no decoding, no newline changes
    (tmp_path / "slurm" / "slurm.conf").write_bytes(data)
    got = mod.render_sha256(str(tmp_path), ["slurm/slurm.conf", "slurm/gone.conf"])
    assert got == {"slurm/slurm.conf": hashlib.sha256(data).hexdigest(), "slurm/gone.conf": None}




def test_files_to_copy_names_the_files_a_node_lacks_or_has_otherwise(tmp_path: Path) -> None:
    """The slurm role's copy loops over these only: a file the node lacks, or has with other bytes,
    owner, group or mode; a file the host's group keeps (kept_on) only when it lacks it."""
    mod = _files_filters()
    (tmp_path / "slurm").mkdir()
    for name in ("a.conf", "b.conf", "c.conf", "d.conf", "kept.conf"):
        (tmp_path / "slurm" / name).write_bytes(name.encode())
    sha = {n: hashlib.sha256(n.encode()).hexdigest() for n in ("a.conf", "b.conf", "c.conf", "d.conf")}

    def entry(name: str, **kw: Any) -> dict[str, Any]:
        return {"name": f"slurm/{name}", "node_path": f"/etc/slurm/{name}", "owner": "root", "group": "root",
                "mode": "0644", **kw}

    def node(name: str, **kw: Any) -> dict[str, Any]:
        return {"type": "file", "owner": "root", "group": "root", "mode": "0644", "sha256": sha.get(name), **kw}

    entries = [entry("a.conf"), entry("b.conf"), entry("c.conf", mode=0o600), entry("d.conf"),
               entry("kept.conf", kept_on=["cpu"]), entry("new.conf")]
    have = {
        "/etc/slurm/a.conf": node("a.conf", text="a.conf"),         # as rendered (read with its text: "+PATH")
        "/etc/slurm/b.conf": node("b.conf", sha256="0" * 64),       # other bytes
        "/etc/slurm/c.conf": node("c.conf", mode="0600"),           # as rendered, mode given as a number
        "/etc/slurm/d.conf": node("d.conf", owner="slurm"),         # other owner
        "/etc/slurm/kept.conf": node("kept.conf", sha256="1" * 64),  # the host's program changed it
    }
    got = mod.files_to_copy(entries, have, str(tmp_path), "cpu")
    assert [e["name"] for e in got] == ["slurm/b.conf", "slurm/d.conf", "slurm/new.conf"]
    # the same kept file on a host whose group does not keep it is put back
    assert [e["name"] for e in mod.files_to_copy(entries, have, str(tmp_path), "gpu")] == [
        "slurm/b.conf", "slurm/d.conf", "slurm/kept.conf", "slurm/new.conf"]
    assert mod.files_to_copy([], have, str(tmp_path), "cpu") == []


def test_dirs_to_make_names_the_folders_a_node_lacks_or_has_otherwise() -> None:
    mod = _files_filters()

    def folder(owner: str, mode: str = "0755") -> dict[str, str]:
        return {"type": "directory", "owner": owner, "group": owner, "mode": mode}

    dirs = [{"path": "/etc/slurm", "owner": "root"}, {"path": "/var/spool/slurmctld", "owner": "slurm"},
            {"path": "/var/log/slurm", "owner": "slurm"}, "/etc/slurm/prolog.d", "/etc/slurm/epilog.d"]
    have = {"/etc/slurm": folder("root"), "/var/spool/slurmctld": folder("root"),
            "/var/log/slurm": folder("slurm", "0700"), "/etc/slurm/prolog.d": folder("root")}
    assert mod.dirs_to_make(dirs, have) == [{"path": "/var/spool/slurmctld", "owner": "slurm"},
                                            {"path": "/var/log/slurm", "owner": "slurm"}, "/etc/slurm/epilog.d"]


def test_manifest_files_lists_a_groups_entries_whose_name_the_pattern_matches_from_its_start() -> None:
    mod = _files_filters()
    files = [
        {"name": "slurm/slurm.conf", "node_groups": ["cpu", "gpu"]},
        {"name": "nccl/nccl.conf", "node_groups": ["gpu"]},
        {"name": "slurm/gres.conf", "node_groups": ["gpu"]},
        {"name": "x/slurm/y.conf", "node_groups": ["gpu"]},  # the pattern matches from the name's start only
    ]
    assert [e["name"] for e in mod.manifest_files(files, "gpu", "slurm/")] == ["slurm/slurm.conf", "slurm/gres.conf"]
    assert [e["name"] for e in mod.manifest_files(files, "cpu", "^(slurm|nccl)/")] == ["slurm/slurm.conf"]
    assert mod.manifest_files(files, "login", ".*") == []
    assert mod.manifest_files(None, "gpu", ".*") == []
    # the manifest's JSON text, as the roles pass it: the same entries, parsed once per text
    text = json.dumps({"cluster": "c", "files": files})
    got = mod.manifest_files(text, "gpu", "slurm/")
    assert got == [files[0], files[2]]
    got[0]["name"] = "changed by a caller"  # a copy: the next host's list is not changed
    again = mod.manifest_files(str(text), "gpu", "slurm/")
    assert [e["name"] for e in again] == ["slurm/slurm.conf", "slurm/gres.conf"]


MANIFEST_PATTERNS = {  # each role's file list, as its vars file filters the manifest
    "slurm": "slurm_manifest_pattern", "nccl": "nccl_manifest_pattern",
    "monitoring": "monitoring_rules_manifest_pattern", "alertmanager": "monitoring_alertmanager_manifest_pattern",
    "grafana": "monitoring_dashboards_manifest_pattern", "cloud_agents": "'^cloud/'",
}


@pytest.mark.parametrize("example", ["p5-training", "onprem-dgx", "hybrid", "amd-mi300x", "local"])
def test_the_roles_file_lists_are_the_selectattr_chains_they_replaced(example: str) -> None:
    """``__slurm_files`` and the other roles' lists were Jinja's two ``selectattr`` tests per entry;
    they are ``manifest_files`` now. Through ansible-core's own Templar, for every node group of an
    example's render and every role's pattern (their defaults), both give the same entries in the
    same order; dcgm's counters file was an ``equalto`` test."""
    pytest.importorskip("ansible")
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import filter_loader, init_plugin_loader
    from ansible.template import Templar, trust_as_template

    init_plugin_loader([])
    filter_loader.add_directory(str(ROOT / "roles" / "slurm" / "filter_plugins"))
    manifest = json.loads((ROOT / "tests" / "golden" / example / "manifest.json").read_text())
    defaults: dict[str, Any] = {}
    for role in ("slurm", "nccl", "monitoring"):
        defaults |= yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    groups = sorted({g for f in manifest["files"] for g in f["node_groups"]})
    assert len(groups) >= 2
    listed = 0
    for group in groups:
        text = (ROOT / "tests" / "golden" / example / "manifest.json").read_text()
        templar = Templar(loader=DataLoader(), variables={**defaults, "m": manifest, "text": text, "g": group})
        for pattern in MANIFEST_PATTERNS.values():
            before = templar.template(trust_as_template(
                f"{{{{ m.files | selectattr('node_groups', 'contains', g) | selectattr('name', 'match', {pattern}) | list }}}}"))
            now = templar.template(trust_as_template(f"{{{{ m.files | manifest_files(g, {pattern}) }}}}"))
            assert now == before, (group, pattern)
            as_text = templar.template(trust_as_template(f"{{{{ text | manifest_files(g, {pattern}) }}}}"))
            assert as_text == before, (group, pattern)
            listed += len(now)
        before = templar.template(trust_as_template(
            "{{ m.files | selectattr('node_groups', 'contains', g) | selectattr('name', 'equalto', 'dcgm/counters.csv') | list }}"))
        assert templar.template(trust_as_template("{{ text | manifest_files(g, '^dcgm/counters[.]csv$') }}")) == before
    assert listed > 0


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
def test_playbooks_syntax(tmp_path: Path) -> None:
    from clusterforge.inventory import generate_inventory
    from clusterforge.resolve import resolve_file

    inv = generate_inventory(resolve_file(ROOT / "examples" / "onprem-dgx.yaml"), out_dir=tmp_path / "inv").out_dir
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    p = subprocess.run(
        ["ansible-playbook", "-i", str(inv), "--syntax-check",
         *(str(ROOT / "playbooks" / n) for n in ("site.yml", "validate.yml", "discover.yml"))],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=env, check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
def test_validate_names_the_generator_on_a_broken_inventory(tmp_path: Path) -> None:
    """validate.yml fails naming the host, the missing variable and the generator when a contract
    variable is missing."""
    from clusterforge.inventory import generate_inventory
    from clusterforge.resolve import resolve_file

    # the 5-host local example keeps the two playbook runs quick
    inv = generate_inventory(resolve_file(ROOT / "examples" / "local.yaml"), out_dir=tmp_path / "inv").out_dir
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    secrets = tmp_path / "vault.yml"
    secrets.write_text("clusterforge_secrets: {slurmdbd_storage_pass: x}\n")
    cmd = ["ansible-playbook", "-i", str(inv), "-e", f"@{secrets}", str(ROOT / "playbooks" / "validate.yml")]
    # (that the intact inventory passes is test_ansible_configure's run; one playbook run here)
    gv = inv / "group_vars" / "local_cpu.yml"
    gv.write_text(gv.read_text().replace("clusterforge_node_group: cpu\n", ""))
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env, check=False)
    assert bad.returncode != 0
    assert "host cpu-001 lacks clusterforge_node_group" in bad.stdout, bad.stdout[-3000:]
    assert "clusterforge inventory" in bad.stdout


def test_ansible_lint_production_profile_passes(tmp_path: Path) -> None:
    """ansible-lint at the `production` profile (.ansible-lint, offline) on every playbook and the
    roles they use, in one run (ansible-lint takes minutes to start on a small machine).

    The run is on a copy of roles/ and playbooks/ plus one seeded playbook with a nameless task:
    the only findings allowed are the seeded file's, and `name[missing]` must be among them, which
    proves the linter ran with the production rules. The collections come from
    scripts/fetch-collections.sh (make setup).
    """
    if shutil.which("ansible-lint") is None:
        pytest.fail("ansible-lint is not installed: make setup (requirements-ci.txt pins it)")
    for name in ("roles", "playbooks"):
        shutil.copytree(ROOT / name, tmp_path / name)
    for name in (".ansible-lint", "ansible.cfg"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "playbooks" / "zz-seeded.yml").write_text(
        "---\n- name: Seeded violation\n  hosts: all\n  tasks:\n    - ansible.builtin.command: echo hi\n"
    )
    env = {**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"), "NO_COLOR": "1"}
    p = subprocess.run(
        ["ansible-lint", "--nocolor", "-f", "codeclimate", "playbooks"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1500, env=env, check=False,
    )
    import json

    try:
        findings = json.loads(p.stdout or "[]")
    except json.JSONDecodeError:
        pytest.fail(f"ansible-lint did not report JSON (rc={p.returncode}):\n{(p.stdout + p.stderr)[-4000:]}")
    real = [f for f in findings if not f["location"]["path"].endswith("zz-seeded.yml")]
    assert not real, "\n".join(
        f"{f['location']['path']}:{f['location'].get('lines', {}).get('begin')}: {f['check_name']}: {f['description']}"
        for f in real
    )
    seeded = {f["check_name"] for f in findings}
    assert any(c.startswith("name[missing]") for c in seeded), (seeded, p.stderr[-2000:])
    assert p.returncode != 0
