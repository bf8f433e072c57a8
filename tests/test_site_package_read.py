"""site.yml's Facts play reads dpkg's database and systemd's units, and the roles skip what it says
is done.

The play's own tasks (taken from site.yml, not copied) run under the real ``ansible-playbook`` on
this host, with dpkg pointed at a status file written here (``DPKG_ADMINDIR``, which dpkg-query
honours): packages installed, removed with their configuration kept, half-installed, held, and a
versioned one. The lists the roles read must hold exactly what dpkg says is installed and held.
Then the roles' tasks are read: every apt install names the list in its ``when``, every hold loops
over what is not held yet, and the systemd starts of the roles that never stop their daemons leave
out the units that were active and enabled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

# one stanza per package, in dpkg's status format (dpkg(1), deb-control(5))
STATUS = {
    "python3-apt": ("install ok installed", "2.6.0"),
    "munge": ("install ok installed", "0.5.15-2"),
    "slurmd": ("hold ok installed", "24.11.5-1"),
    "libnccl2": ("hold ok installed", "2.21.5-1+cuda12.4"),
    "old-tool": ("deinstall ok config-files", "1.0-1"),
    "broken-lib": ("install reinstreq half-installed", "3.1-2"),
    "held-gone": ("hold ok not-installed", ""),
}


def _status_text() -> str:
    stanzas = []
    for name, (status, version) in STATUS.items():
        lines = [f"Package: {name}", f"Status: {status}", "Architecture: amd64"]
        if version:
            lines.append(f"Version: {version}")
        stanzas.append("\n".join(lines) + "\n")
    return "\n".join(stanzas)


def _facts_play() -> dict[str, Any]:
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    play: dict[str, Any] = next(p for p in site if p.get("name") == "Facts")
    return play


# the one inventory of most tests here: this host, as h1, through the local connection
_LOCAL_VARS = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
_H1 = {"all": {"hosts": {"h1": {}}, "vars": _LOCAL_VARS}}


_READ_TASK = "Read the installed and held packages, the running daemons and the host name"
_KEEP_TASK = "Keep what the host has"


def _facts_tasks(play: dict[str, Any], *names: str) -> list[dict[str, Any]]:
    """The Facts play's tasks of these names, in this order (the host's read, without the rest)."""
    by_name = {t.get("name"): t for t in play["tasks"]}
    return [by_name[n] for n in names]


def _run_play(tmp_path: Path, play: list[dict[str, Any]], hosts: dict[str, Any],
              extra: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real ansible-playbook, with the project's ansible.cfg, on this play and inventory."""
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    run_env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", **(env or {})}
    cmd = ["ansible-playbook", "-i", "hosts.yml", "play.yml"] + (["-e", json.dumps(extra)] if extra else [])
    return subprocess.run(cmd, cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.skipif(shutil.which("ansible-playbook") is None or shutil.which("dpkg-query") is None,
                    reason="needs ansible-core and dpkg")
def test_the_facts_play_reads_what_dpkg_says_is_installed_and_held(tmp_path: Path) -> None:
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "status").write_text(_status_text())
    (admin / "available").write_text("")
    out = tmp_path / "read.json"
    play = _facts_play()
    play["hosts"] = "h1"
    play["tasks"] = [*play["tasks"], {
        "name": "Write what the roles will read",
        "ansible.builtin.copy": {"dest": str(out), "mode": "0600", "content": (
            "{{ {'installed': clusterforge_installed_packages, 'held': clusterforge_held_packages,"
            " 'age': clusterforge_apt_index_age_s, 'units': clusterforge_active_units,"
            " 'static': clusterforge_static_hostname,"
            " 'python_apt': __site_python_apt is skipped} | to_json }}")},
    }]
    p = _run_play(tmp_path, [play], _H1, env={"DPKG_ADMINDIR": str(admin)})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    read = json.loads(out.read_text())
    # installed: each by name and by name=version, as keys (a membership test is one lookup), each
    # valued with its version (the slurm role reads slurmdbd's so); not the removed,
    # half-installed or absent ones
    assert read["installed"] == {
        "python3-apt": "2.6.0", "python3-apt=2.6.0": "2.6.0", "munge": "0.5.15-2",
        "munge=0.5.15-2": "0.5.15-2", "slurmd": "24.11.5-1", "slurmd=24.11.5-1": "24.11.5-1",
        "libnccl2": "2.21.5-1+cuda12.4", "libnccl2=2.21.5-1+cuda12.4": "2.21.5-1+cuda12.4"}
    # held: dpkg's selection of what it lists (dpkg-query leaves purged packages out, so a hold
    # there is set again by the role, which changes nothing)
    assert sorted(read["held"]) == ["libnccl2", "slurmd"]
    # python3-apt is there: nothing installed
    assert read["python_apt"] is True
    # this host's apt index age, by the apt module's rule: a whole number of seconds
    assert isinstance(read["age"], int) and read["age"] >= 0
    # systemd's active and enabled units: a list of names (empty on a host without systemd as PID
    # 1, like this one; tests/test_local_cluster.py repairs what an operator stopped on real nodes)
    assert isinstance(read["units"], list) and all(isinstance(u, str) for u in read["units"])
    # the static host name as hostnamed reads /etc/hostname: the first line that is not a comment
    etc = Path("/etc/hostname")
    lines = [ln.strip() for ln in etc.read_text().splitlines()] if etc.exists() else []
    first = next((ln for ln in lines if ln and not ln.startswith("#")), "")
    assert read["static"] == (first if re.fullmatch(r"[A-Za-z0-9.-]+", first) else "")


def _tasks(path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for t in yaml.safe_load(path.read_text()) or []:
        found.append(t)
        for key in ("block", "rescue", "always"):
            found.extend(t.get(key, []))
    return found


def _when(task: dict[str, Any]) -> str:
    w = task.get("when", "")
    return " ".join(w) if isinstance(w, list) else str(w)


def test_every_role_install_skips_what_dpkg_has_and_every_hold_what_is_held() -> None:
    installs, holds = 0, 0
    for f in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        for t in _tasks(f):
            apt = t.get("ansible.builtin.apt")
            if isinstance(apt, dict) and "name" in apt:
                installs += 1
                assert "clusterforge_installed_packages" in _when(t), f"{f}: {t['name']}"
            if "ansible.builtin.dpkg_selections" in t:
                holds += 1
                assert "reject('in', clusterforge_held_packages" in str(t.get("loop")), f"{f}: {t['name']}"
    # the walk saw the installs and holds it must (a renamed module key would make this vacuous)
    assert installs >= 20 and holds == 3, (installs, holds)


# the roles whose systemd starts skip what was running: none of them stops or disables its daemons
# (slurm does: a layout change stops slurmd, so its starts skip on a read that knows of that stop,
# __slurm_service_running, checked by the last two tests of this file)
_STARTS = {"monitoring": "daemons.yml", "nvidia_driver": "daemons.yml", "dcgm": "main.yml", "munge": "main.yml"}
# and a daemon of a role that stops another: the slurm role's MariaDB (it stops only slurmd)
_STARTS_OF = {("slurm", "mariadb.yml"): "mariadb"}


def test_starts_leave_out_units_that_were_running_only_in_roles_that_never_stop_them() -> None:
    starts_of = set()
    for f in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        role = f.parts[-3]
        for t in _tasks(f):
            svc = t.get("ansible.builtin.systemd_service")
            if not isinstance(svc, dict):
                continue
            reads = "clusterforge_active_units" in str(t.get("loop", "")) + _when(t)
            if svc.get("state") in ("stopped",) or svc.get("enabled") is False:
                assert role not in _STARTS, f"{f}: {t['name']} stops or disables a daemon"
                assert svc.get("name") not in _STARTS_OF.values(), f"{f}: {t['name']} stops or disables it"
            if role in _STARTS and f.name == _STARTS[role] and svc.get("state") == "started":
                assert reads, f"{f}: {t['name']}"
            elif (role, f.name) in _STARTS_OF and svc.get("name") == _STARTS_OF[role, f.name]:
                assert svc.get("state") == "started" and reads, f"{f}: {t['name']}"
                starts_of.add((role, f.name))
            elif role not in _STARTS:
                assert not reads, f"{f}: {t['name']} skips on a read from before the run"
    assert starts_of == set(_STARTS_OF)
    # nothing else stops MariaDB either: no handler, no command
    for f in sorted((ROOT / "roles").glob("*/*/*.yml")):
        assert not re.search(r"(stop|disable)\S* +mariadb|mariadb.*state: stopped", f.read_text()), f


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")
def test_the_facts_play_reads_the_files_the_roles_write(tmp_path: Path) -> None:
    """The Facts play's read of the files the roles write (``__site_read_files``), given paths
    here: type, owner, group, mode and SHA-256 of each, "absent" for a missing one; the SHA-256 of
    the base64 for the munge key's kind; for a block, the bytes from the last begin marker to the
    last end marker (what ansible.builtin.blockinfile replaces), and none when the end comes first
    or a marker is missing. The expected hashes are taken here, from the bytes written."""
    import base64
    import grp
    import hashlib
    import pwd

    files = tmp_path / "files"
    files.mkdir()
    plain = files / "plain.conf"
    plain.write_bytes(b"a = 1\nb = 2\n")
    plain.chmod(0o640)
    key = files / "munge.key"
    key.write_bytes(bytes(range(256)) * 4)
    key.chmod(0o400)
    begin, end = "# BEGIN clusterforge c1", "# END clusterforge c1"
    hosts = files / "hosts"
    hosts.write_bytes(f"127.0.0.1 localhost\n{begin}\n10.0.0.1 old\n{end}\n# between\n"
                      f"{begin}\n10.0.0.2 n1\n10.0.0.3 n2\n{end}\n::1 localhost\n".encode())
    hosts.chmod(0o644)
    backwards = files / "backwards"
    backwards.write_bytes(f"{end}\n10.0.0.2 n1\n{begin}\n".encode())
    unmarked = files / "unmarked"
    unmarked.write_bytes(b"127.0.0.1 localhost\n")
    wanted = [{"path": str(plain)}, {"path": str(key), "base64": True},
              {"path": str(hosts), "block": [begin, end]}, {"path": str(backwards), "block": [begin, end]},
              {"path": str(unmarked), "block": [begin, end]}, {"path": str(files / "missing")},
              {"path": str(files)}]
    out = tmp_path / "read.json"
    play = _facts_play()
    play["hosts"] = "h1"
    play["tasks"] = [*_facts_tasks(play, _READ_TASK, _KEEP_TASK), {
        "name": "Write what the roles will read",
        "ansible.builtin.copy": {"dest": str(out), "mode": "0600", "content": "{{ clusterforge_file_states | to_json }}"},
    }]
    p = _run_play(tmp_path, [play], _H1, {"__site_read_files": wanted, "__site_python_apt": {"skipped": True}})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    read = json.loads(out.read_text())

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    me, my_group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    assert read[str(plain)] == {"type": "file", "owner": me, "group": my_group, "mode": "0640",
                                "sha256": sha(b"a = 1\nb = 2\n")}
    assert read[str(key)]["mode"] == "0400"
    assert read[str(key)]["base64_sha256"] == sha(base64.b64encode(bytes(range(256)) * 4))
    # the last block: the module replaces from the last begin marker to the last end marker
    assert read[str(hosts)]["block_sha256"] == sha(f"{begin}\n10.0.0.2 n1\n10.0.0.3 n2\n{end}\n".encode())
    assert "block_sha256" not in read[str(backwards)] and "block_sha256" not in read[str(unmarked)]
    assert read[str(files / "missing")] == {"type": "absent"}
    assert read[str(files)]["type"] == "directory" and "sha256" not in read[str(files)]


# each file site.yml reads and the task that writes it: the role's own path must be the one read
# (else the task silently runs on every re-run), and the task must be skipped on the read's answer
_WRITES = {
    "common": ("kernel.yml", ["Set resource limits for RDMA and MPI jobs", "Write kernel settings"]),
    "munge": ("key.yml", ["Install the cluster key"]),
    "slurm": ("packages.yml", ["Pin the Slurm packages to release {{ __slurm_family }}"]),
    "slurm_mariadb": ("mariadb.yml", ["Configure MariaDB for slurmdbd"]),
    "nvidia_driver": ("repo.yml", ["Create the apt keyring folder", "Add NVIDIA's CUDA repository",
                                   "Pin the driver branch"]),
    "cuda": ("main.yml", ["Put the toolkit on PATH"]),
    "dcgm": ("main.yml", ["Make the job mapping folder", "Make the dcgm-exporter drop-in folder (systemd)",
                          "Pass the counters file to dcgm-exporter (systemd)"]),
}


def test_the_files_site_reads_are_the_ones_the_roles_write_and_skip_on() -> None:
    play = _facts_play()
    read = [f["path"] for f in play["vars"]["__site_read_files"]]
    common = yaml.safe_load((ROOT / "roles" / "common" / "vars" / "main.yml").read_text())
    munge = yaml.safe_load((ROOT / "roles" / "munge" / "vars" / "main.yml").read_text())
    slurm = yaml.safe_load((ROOT / "roles" / "slurm" / "defaults" / "main.yml").read_text())
    pin_default = re.search(r"default\('([^']+)'\)", next(p for p in read if "slurm_apt_preferences_file" in p))
    assert pin_default and pin_default.group(1) == slurm["slurm_apt_preferences_file"]
    slurm_vars = yaml.safe_load((ROOT / "roles" / "slurm" / "vars" / "main.yml").read_text())
    for path in (common["__common_limits_file"], common["__common_sysctl_file"], "/etc/hosts",
                 munge["__munge_key_path"], slurm_vars["__slurm_mariadb_cnf_file"]):
        assert path in read, path
    hosts_entry = next(f for f in play["vars"]["__site_read_files"] if f["path"] == "/etc/hosts")
    assert [m.replace("| default('') ", "") for m in hosts_entry["block"]] == common["__common_hosts_markers"]
    for role, (name, tasks) in {**_WRITES, "common_hosts": ("hosts.yml", ["Write the cluster hosts into /etc/hosts"])}.items():
        folder = {"common_hosts": "common", "slurm_mariadb": "slurm"}.get(role, role)
        by_name = {t.get("name"): t for t in _tasks(ROOT / "roles" / folder / "tasks" / name)}
        for task in tasks:
            assert re.search(r"not __\w+_as_wanted", _when(by_name[task])), f"{folder}/{name}: {task}"


def _vars(role: str, kind: str = "vars") -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "roles" / role / kind / "main.yml").read_text())
    return data


def test_the_gpu_roles_skip_on_the_paths_site_reads() -> None:
    """The GPU roles' files and folders that site.yml's Facts play reads: each path read is the
    role's own (its vars, or its defaults where an inventory may move it), each write is skipped on
    the read's answer, the repository checks (a stat) only when the read did not find the file, and
    the copies of rendered files loop over ``files_to_copy`` of the read."""
    play = _facts_play()
    read = [f["path"] for f in play["vars"]["__site_read_files"]]
    nvidia, cuda, dcgm, nccl = _vars("nvidia_driver"), _vars("cuda"), _vars("dcgm"), _vars("nccl")
    dcgm_defaults = _vars("dcgm", "defaults")
    for path in (nvidia["__nvidia_driver_repo_list"], nvidia["__nvidia_driver_pin_file"], "/etc/apt/keyrings",
                 cuda["__cuda_profile_file"], cuda["__cuda_repo_list"], dcgm["__dcgm_repo_list"],
                 "/etc/apt/sources.list.d/clusterforge-rocm.list"):
        assert path in read, path
    assert "/etc/apt/keyrings" in str(_tasks(ROOT / "roles" / "nvidia_driver" / "tasks" / "repo.yml")[0])
    assert "/etc/apt/sources.list.d/clusterforge-rocm.list" in nccl["__nccl_repo_list"]
    # the dcgm paths an inventory can move: the play reads the inventory's value, else the role's default
    defaults = {m.group(1): m.group(2) for p in read for m in [re.search(r"\{\{ (\w+) \| default\('([^']+)'\) \}\}", p)] if m}
    assert defaults["dcgm_exporter_job_mapping_dir"] == dcgm_defaults["dcgm_exporter_job_mapping_dir"]
    assert defaults["dcgm_exporter_unit"] == dcgm_defaults["dcgm_exporter_unit"]
    unit = "{{ dcgm_exporter_unit | default('nvidia-dcgm-exporter') }}"
    assert dcgm["__dcgm_dropin_dir"] == "/etc/systemd/system/{{ dcgm_exporter_unit }}.service.d"
    assert f"/etc/systemd/system/{unit}.service.d" in read
    assert f"/etc/systemd/system/{unit}.service.d/clusterforge.conf" in read
    assert dcgm["__dcgm_dropin_file"] == "{{ __dcgm_dropin_dir }}/clusterforge.conf"
    # the rendered files the nccl and dcgm roles copy are among the manifest names the play reads
    pattern = re.search(r"'name', 'match', '([^']+)'", play["vars"]["__site_read_files_all"])
    assert pattern, play["vars"]["__site_read_files_all"]
    for name in ("nccl/gpu.conf", "env/gpu.sh", "dcgm/counters.csv"):
        assert re.match(pattern.group(1), name), name
    assert re.search(_vars("nccl", "defaults")["nccl_manifest_pattern"], "nccl/gpu.conf")
    for role, task_file in (("cuda", "main.yml"), ("dcgm", "main.yml"), ("nccl", "main.yml")):
        tasks = _tasks(ROOT / "roles" / role / "tasks" / task_file)
        stat = next(t for t in tasks if "ansible.builtin.stat" in t)
        assert re.fullmatch(r"not __\w+_repo_read_there", _when(stat)), f"{role}: {_when(stat)}"
        # a skipped stat has no "stat": nothing reads the registered result but the role's _there
        text = (ROOT / "roles" / role / "tasks" / task_file).read_text()
        assert ".stat.exists" not in text, role
        copies = [t for t in tasks if "ansible.builtin.copy" in t and "src" in t["ansible.builtin.copy"]]
        for t in copies:
            assert "files_to_copy(clusterforge_file_states" in str(t["loop"]), f"{role}: {t['name']}"
        assert len(copies) == (1 if role in ("dcgm", "nccl") else 0), role


def test_the_roles_that_copy_rendered_files_carry_the_slurm_roles_file_filters() -> None:
    """Each role runs alone too, so each has the filter file: the others link to slurm's."""
    roles = ("slurm", "nccl", "dcgm", "monitoring", "cloud_agents")
    files = [ROOT / "roles" / r / "filter_plugins" / "clusterforge_files.py" for r in roles]
    assert len({f.read_bytes() for f in files}) == 1
    for role in roles:  # every role that names the filter carries it
        uses = "manifest_files(" in (ROOT / "roles" / role / "vars" / "main.yml").read_text()
        assert uses, role


def test_the_slurm_role_stops_only_slurmd_and_only_before_a_layout_change() -> None:
    """The slurm role's starts skip a daemon that was active and enabled when the run began
    (``__slurm_service_running``), which is sound only while its one stop is slurmd's in
    tasks/stop_first.yml: a new stop anywhere else must say how the starts learn of it."""
    stops = []
    for f in [*sorted((ROOT / "roles" / "slurm").glob("tasks/*.yml")), ROOT / "roles" / "slurm" / "handlers" / "main.yml"]:
        for t in _tasks(f):
            svc = t.get("ansible.builtin.systemd_service")
            if isinstance(svc, dict) and (svc.get("state") == "stopped" or svc.get("enabled") is False):
                stops.append((f.name, svc.get("name")))
            if re.search(r"clusterforge-svc\b.*\bstop\b|__slurm_svc_bin \}\} stop", str(t.get("ansible.builtin.command", ""))):
                stops.append((f.name, "svc"))
    assert stops == [("stop_first.yml", "slurmd"), ("stop_first.yml", "svc")], stops
    start = _tasks(ROOT / "roles" / "slurm" / "tasks" / "service.yml")[0]
    assert start["ansible.builtin.systemd_service"]["state"] == "started"
    assert "not __slurm_service_running" in _when(start)


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")
def test_a_slurm_daemon_counts_as_running_unless_the_rollout_stopped_it(tmp_path: Path) -> None:
    """``__slurm_service_running`` from the role's own vars file, evaluated by the real
    ansible-playbook: active and enabled at the start and not stopped by this run's rollout."""
    cases = [
        # (daemon, active units at the start, the prepare play's rollout or None, running?)
        ("slurmd", ["munge", "slurmd"], {"stop_first": False, "drain": ""}, True),
        ("slurmd", ["munge", "slurmd"], {"stop_first": True, "drain": "gres"}, False),
        ("slurmd", ["munge"], {"stop_first": False, "drain": ""}, False),
        ("slurmd", ["slurmd"], None, True),
        ("slurmctld", ["slurmctld"], None, True),
        ("slurmctld", ["slurmd"], None, False),
        ("slurmdbd", ["slurmdbd"], {"stop_first": True, "drain": "gres"}, True),
    ]
    tasks: list[dict[str, Any]] = [{"name": "Role vars", "ansible.builtin.include_vars": {
        "file": str(ROOT / "roles" / "slurm" / "vars" / "main.yml")}}]
    for i, (daemon, units, rollout, _) in enumerate(cases):
        case_vars: dict[str, Any] = {"__slurm_service": daemon, "clusterforge_active_units": units}
        if rollout is not None:
            case_vars["__slurm_rollout"] = rollout
        tasks.append({"name": f"case {i}", "ansible.builtin.set_fact": {f"case_{i}": "{{ __slurm_service_running | bool }}"},
                      "vars": case_vars})
    tasks.append({"name": "Write", "ansible.builtin.copy": {
        "dest": str(tmp_path / "out.json"), "mode": "0600",
        "content": "{{ [" + ", ".join(f"case_{i}" for i in range(len(cases))) + "] | to_json }}"}})
    p = _run_play(tmp_path, [{"hosts": "h1", "gather_facts": False, "tasks": tasks}], _H1)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert json.loads((tmp_path / "out.json").read_text()) == [c[3] for c in cases]


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")
def test_the_facts_play_reads_the_slurm_daemons_releases(tmp_path: Path) -> None:
    """The Facts play's ``-V`` of each Slurm daemon of ``__site_read_daemons`` (given stand-in
    executables here): what one that answers prints, as the command module registers it, even text
    that JSON must escape; nothing for one that fails, one that is not there or one that is not
    executable, so the slurm role asks those again."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    scripts = {
        "slurmd": "#!/bin/sh\nprintf 'slurm 24.11.5 \"x\" \\\\ y\\n'\necho warn >&2\n",
        "slurmctld": "#!/bin/sh\necho 'error: no' >&2\nexit 1\n",
        "slurmdbd": "#!/bin/sh\necho 'slurm 24.11.5'\n",
    }
    for name, text in scripts.items():
        (sbin / name).write_text(text)
        (sbin / name).chmod(0o755 if name != "slurmdbd" else 0o644)
    out = tmp_path / "read.json"
    play = _facts_play()
    play["hosts"] = "h1"
    play["tasks"] = [*_facts_tasks(play, _READ_TASK, _KEEP_TASK), {
        "name": "Write what the roles will read",
        "ansible.builtin.copy": {"dest": str(out), "mode": "0600",
                                 "content": "{{ {'releases': clusterforge_daemon_releases,"
                                            " 'files': clusterforge_file_states} | to_json }}"},
    }]
    p = _run_play(tmp_path, [play], _H1,
        {"__site_read_files": [{"path": str(sbin / "slurmd")}], "__site_python_apt": {"skipped": True},
         "__site_read_daemons": [str(sbin / n) for n in ("slurmd", "slurmctld", "slurmdbd", "missing")]})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    read = json.loads(out.read_text())
    assert read["releases"] == {"slurmd": {"item": "slurmd", "rc": 0, "stdout": 'slurm 24.11.5 "x" \\ y',
                                           "stderr": "warn"}}
    # the files read still arrives beside it
    assert read["files"][str(sbin / "slurmd")]["mode"] == "0755"


def test_the_site_read_names_the_daemons_the_slurm_role_asks() -> None:
    """The Facts play reads `-V` of the daemons the role would run it on: /usr/sbin/<name>."""
    read = _facts_play()["vars"]["__site_read_daemons"]
    task = next(t for t in _tasks(ROOT / "roles" / "slurm" / "tasks" / "packages.yml")
                if t.get("name") == "Read the release of the installed daemons")
    assert "['/usr/sbin/' ~ item, '-V'] if item != 'slurmdbd'" in task["ansible.builtin.command"]["argv"]
    assert read == ["/usr/sbin/slurmctld", "/usr/sbin/slurmd"]
    assert "__slurm_releases_known" in task["loop"]


def _installed(*packages: str) -> dict[str, str]:
    """The Facts play's ``installed`` for these ``name=version`` packages: both forms as keys,
    each valued with the version (the shape the read test above checks)."""
    out: dict[str, str] = {}
    for p in packages:
        name, version = p.split("=", 1)
        out |= {name: version, p: version}
    return out


def _slurm_release_host(daemons: list[str], **host_vars: Any) -> dict[str, Any]:
    groups = {"slurmctld": "slurm_controller", "slurmd": "slurm_compute", "slurmdbd": "slurm_dbd"}
    return {"groups": [groups[d] for d in daemons], "vars": {
        "clusterforge_slurm_version": "24.11", "clusterforge_accounting": {"enabled": True}, **host_vars}}


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")
def test_the_slurm_role_asks_only_the_daemons_the_facts_play_did_not_read(tmp_path: Path) -> None:
    """``__slurm_releases_known`` from the role's own vars file, evaluated by the real
    ansible-playbook: which daemons the read task still asks, and the releases the check reads
    without asking."""
    ctld = {"item": "slurmctld", "rc": 0, "stdout": "slurm 24.11.5", "stderr": ""}
    cases: dict[str, tuple[dict[str, Any], list[str], dict[str, str]]] = {
        # the re-run: the install skipped, slurmctld read by the Facts play, slurmdbd from dpkg
        "rerun": (_slurm_release_host(
            ["slurmctld", "slurmdbd"], __slurm_pkg_result={"skipped": True},
            clusterforge_daemon_releases={"slurmctld": ctld},
            clusterforge_installed_packages=_installed("slurmdbd=24.11.5-4+deb13u1", "slurmdbd-x=1")),
            [], {"slurmctld": "slurm 24.11.5", "slurmdbd": "24.11.5-4+deb13u1"}),
        # this run installed: everything is asked again
        "installed": (_slurm_release_host(
            ["slurmctld", "slurmdbd"], __slurm_pkg_result={"changed": True},
            clusterforge_daemon_releases={"slurmctld": ctld},
            clusterforge_installed_packages=_installed("slurmdbd=24.11.5-4+deb13u1")), ["slurmctld", "slurmdbd"], {}),
        # check mode's install that could not find a new source's packages
        "failed": (_slurm_release_host(
            ["slurmd"], __slurm_pkg_result={"failed": True},
            clusterforge_daemon_releases={"slurmd": {**ctld, "item": "slurmd"}}), ["slurmd"], {}),
        # the role run without site.yml: no read
        "alone": (_slurm_release_host(["slurmctld", "slurmd"], __slurm_pkg_result={"skipped": True}),
                  ["slurmctld", "slurmd"], {}),
        # SchedMD's packaging names slurmdbd's package slurm-smd-slurmdbd; Debian's name is not it;
        # a release read of a daemon this host does not run is not checked
        "schedmd": (_slurm_release_host(
            ["slurmdbd"], __slurm_pkg_result={"skipped": True},
            clusterforge_slurm_package_repo={"packaging": "schedmd"},
            clusterforge_daemon_releases={"slurmctld": ctld},
            clusterforge_installed_packages=_installed("slurmdbd=22.05.8-4", "slurm-smd-slurmdbd=24.11.5-1")),
            [], {"slurmdbd": "24.11.5-1"}),
        # slurmd failed in the Facts play's read (not in it): asked again
        "unread": (_slurm_release_host(["slurmd"], __slurm_pkg_result={"skipped": True},
                                       clusterforge_daemon_releases={}), ["slurmd"], {}),
    }
    tasks = [
        {"name": "Role vars", "ansible.builtin.include_vars": {"file": str(ROOT / "roles" / "slurm" / "vars" / "main.yml")}},
        {"name": "Write", "ansible.builtin.copy": {
            "dest": str(tmp_path / "{{ inventory_hostname }}.json"), "mode": "0600",
            "content": "{{ {'ask': __slurm_daemon_names | reject('in', __slurm_releases_known) | list,"
                       " 'known': __slurm_releases_known | dict2items | selectattr('key', 'in', __slurm_daemon_names)"
                       " | items2dict | dict2items | map(attribute='value') | list} | to_json }}"}},
    ]
    hosts: dict[str, Any] = {"all": {"vars": _LOCAL_VARS, "children": {}}}
    for name, (host, _, _) in cases.items():
        for group in host["groups"]:
            hosts["all"]["children"].setdefault(group, {"hosts": {}})["hosts"][name] = host["vars"]
    p = _run_play(tmp_path, [{"hosts": "all", "gather_facts": False, "tasks": tasks}], hosts)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    for name, (_, ask, known) in cases.items():
        got = json.loads((tmp_path / f"{name}.json").read_text())
        assert sorted(got["ask"]) == ask, name
        assert {k["item"]: k["stdout"] for k in got["known"]} == known, name
        assert all(k["rc"] == 0 and k["stderr"] == "" for k in got["known"]), name


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")
def test_the_release_check_fails_on_a_release_the_facts_play_read(tmp_path: Path) -> None:
    """The role's own read and check tasks (tasks/packages.yml) under ansible-playbook, on a re-run
    whose Facts play read each daemon: nothing is asked again, the right family passes and another
    family fails with the check's message."""
    tasks = [t for t in _tasks(ROOT / "roles" / "slurm" / "tasks" / "packages.yml")
             if t["name"] in ("Read the release of the installed daemons", "Check that the daemons are Slurm {{ __slurm_family }}")]
    assert len(tasks) == 2
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Role vars", "ansible.builtin.include_vars": {"file": str(ROOT / "roles" / "slurm" / "vars" / "main.yml")}},
        *tasks]}]

    def host(release: str) -> dict[str, Any]:
        return {"clusterforge_slurm_version": "24.11", "clusterforge_accounting": {"enabled": False},
                "__slurm_pkg_result": {"skipped": True}, "clusterforge_daemon_releases": {
                    "slurmd": {"item": "slurmd", "rc": 0, "stdout": release, "stderr": ""}}}

    hosts = {"all": {"vars": _LOCAL_VARS,
                     "children": {"slurm_compute": {"hosts": {"good": host("slurm 24.11.5"), "old": host("slurm 22.05.8")}}}}}
    p = _run_play(tmp_path, play, hosts)
    assert p.returncode != 0
    # host: (ok, failed, skipped); the one skip is the read, whose loop is empty: no command ran
    recap = {m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4))) for m in
             re.finditer(r"^(\w+)\s*: ok=(\d+) .*? failed=(\d+)\s+skipped=(\d+)", p.stdout, re.M)}
    assert recap == {"good": (2, 0, 1), "old": (1, 1, 1)}, p.stdout[-3000:]
    assert "slurmd on old reports slurm 22.05.8, but the spec targets Slurm 24.11" in p.stdout


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")
def test_the_munge_key_install_is_skipped_for_the_key_read_however_the_vault_wraps_it(tmp_path: Path) -> None:
    """``__munge_key_as_wanted`` from the munge role's vars, under the real ansible-playbook: the
    Facts play read this host's key (the SHA-256 of its base64, as ``__site_read_files_py`` gives
    it). The vault's key matches whether it is one line or wrapped as ``base64`` prints it (76
    columns, what ``base64 -d`` in the install reads alike); another key does not."""
    import base64
    import hashlib
    key = bytes(range(256)) * 4  # munge's 1024-byte key
    b64 = base64.b64encode(key).decode()
    wrapped = "\n".join(b64[i:i + 76] for i in range(0, len(b64), 76)) + "\n"
    other = base64.b64encode(key[::-1]).decode()
    read = {"/etc/munge/munge.key": {"type": "file", "owner": "munge", "group": "munge", "mode": "0400",
                                     "base64_sha256": hashlib.sha256(b64.encode()).hexdigest()}}
    cases = {"one_line": b64, "wrapped": wrapped, "other": other}
    hosts = {"all": {"vars": {**_LOCAL_VARS, "clusterforge_file_states": read},
                     "hosts": {name: {"munge_key_b64": k} for name, k in cases.items()}}}
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Role vars", "ansible.builtin.include_vars": {"file": str(ROOT / "roles" / "munge" / "vars" / "main.yml")}},
        {"name": "Write", "ansible.builtin.copy": {"dest": str(tmp_path / "{{ inventory_hostname }}.json"), "mode": "0600",
                                                   "content": "{{ __munge_key_as_wanted | bool | to_json }}"}}]}]
    p = _run_play(tmp_path, play, hosts)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    got = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in cases}
    assert got == {"one_line": True, "wrapped": True, "other": False}


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")
def test_the_slurm_config_reads_the_node_again_only_when_the_prepare_read_is_stale(tmp_path: Path) -> None:
    """``__slurm_prep_read_current`` and ``__slurm_node_paths`` from the role's vars file, under the
    real ansible-playbook: a compute host's config tasks take the prepare play's read of its paths
    while this run's install changed nothing, and read again after an install, a failed one, with
    no prepare read (a controller, the role alone) or a skipped one."""
    prep = {"changed": False, "rc": 0, "stdout": json.dumps({"/etc/slurm": {"type": "directory"}})}
    own = {"changed": False, "rc": 0, "stdout": json.dumps({"/etc/slurm": {"type": "file"}})}
    cases: dict[str, tuple[dict[str, Any], bool]] = {
        "rerun": ({"__slurm_prep_read": prep, "__slurm_pkg_result": {"skipped": True}}, True),
        "install_ok": ({"__slurm_prep_read": prep, "__slurm_pkg_result": {"changed": False}}, True),
        "tags": ({"__slurm_prep_read": prep}, True),  # --tags slurm-config: no install task ran
        "installed": ({"__slurm_prep_read": prep, "__slurm_pkg_result": {"changed": True}}, False),
        "failed": ({"__slurm_prep_read": prep, "__slurm_pkg_result": {"failed": True}}, False),
        "no_prepare": ({"__slurm_pkg_result": {"skipped": True}}, False),
        "prepare_skipped": ({"__slurm_prep_read": {"skipped": True}, "__slurm_pkg_result": {"skipped": True}}, False),
    }
    tasks = [
        {"name": "Role vars", "ansible.builtin.include_vars": {"file": str(ROOT / "roles" / "slurm" / "vars" / "main.yml")}},
        {"name": "The config read, where the role would run it", "ansible.builtin.set_fact": {"__slurm_paths_read": own},
         "when": "not __slurm_prep_read_current | bool"},
        {"name": "The config read, skipped", "ansible.builtin.set_fact": {"__slurm_paths_read": {"skipped": True}},
         "when": "__slurm_prep_read_current | bool"},
        {"name": "Write", "ansible.builtin.copy": {
            "dest": str(tmp_path / "{{ inventory_hostname }}.json"), "mode": "0600",
            "content": "{{ {'current': __slurm_prep_read_current | bool,"
                       " 'type': __slurm_node_paths['/etc/slurm'].type} | to_json }}"}},
    ]
    hosts = {"all": {"vars": _LOCAL_VARS, "children": {"slurm_compute": {"hosts": {
        name: {"clusterforge_slurm_version": "24.11", **host} for name, (host, _) in cases.items()}}}}}
    p = _run_play(tmp_path, [{"hosts": "all", "gather_facts": False, "tasks": tasks}], hosts)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    for name, (_, current) in cases.items():
        got = json.loads((tmp_path / f"{name}.json").read_text())
        assert got == {"current": current, "type": "directory" if current else "file"}, name


def test_the_prepare_play_and_the_config_tasks_read_the_same_paths() -> None:
    """Both reads are the one command from the role's vars, and the config read is skipped on the
    prepare read's currency only: the tasks between them (the install) are what could change a
    path, and they are the ones the rule names."""
    prep = next(t for t in _tasks(ROOT / "roles" / "slurm" / "tasks" / "prepare.yml") if "ansible.builtin.command" in t)
    conf = next(t for t in _tasks(ROOT / "roles" / "slurm" / "tasks" / "config.yml")
                if t["name"] == "Read the Slurm folders and files this host has")
    argv = "{{ __slurm_read_paths_cmd + __slurm_read_paths_args }}"
    assert prep["ansible.builtin.command"]["argv"] == conf["ansible.builtin.command"]["argv"] == argv
    assert prep["register"] == "__slurm_prep_read" and conf["register"] == "__slurm_paths_read"
    assert _when(conf) == "not __slurm_prep_read_current | bool"
    assert "__slurm_pkg_result" in _vars("slurm")["__slurm_prep_read_current"]
    # the role's only package install registers what the rule reads
    installs = [t for t in _tasks(ROOT / "roles" / "slurm" / "tasks" / "packages.yml") if "ansible.builtin.apt" in t]
    assert [t.get("register") for t in installs if t["name"].startswith("Install the Slurm packages")] == ["__slurm_pkg_result"]


def _read_then_judge(state_py: list[str], dest: Path, content: str, label: str) -> list[dict[str, Any]]:
    """Two tasks: the Facts play's read of the files (``state_py``), then ``content`` (a template of
    the roles' comparisons) written to ``dest`` with that read as ``clusterforge_file_states``."""
    return [
        {"name": f"Read ({label})", "ansible.builtin.command": {"argv": state_py}, "register": "__read",
         "changed_when": False},
        {"name": f"Judge ({label})", "ansible.builtin.copy": {"dest": str(dest), "mode": "0600", "content": content},
         "vars": {"clusterforge_file_states": "{{ (__read.stdout | from_json).files }}"}},
    ]


@pytest.mark.skipif(shutil.which("ansible-playbook") is None or os.geteuid() != 0,
                    reason="needs ansible-core and root (the file is root's, as on the controller)")
def test_the_mariadb_settings_write_is_skipped_for_the_bytes_the_copy_wrote(tmp_path: Path) -> None:
    """``__slurm_mariadb_cnf_as_wanted`` from the slurm role's vars, under the real
    ansible-playbook: the role's own copy task writes the settings file (loopback-only, and over
    TCP with a datadir on the state volume), the Facts play's read of the files reads it, and the
    write is then found done. A line added by hand, another mode or another bind address is not."""
    read_py = _facts_play()["vars"]["__site_read_files_py"]
    copy = next(t for t in _tasks(ROOT / "roles" / "slurm" / "tasks" / "mariadb.yml")
                if t["name"] == "Configure MariaDB for slurmdbd")
    cnf = str(tmp_path / "{{ inventory_hostname }}.cnf")
    state_py = [sys.executable, "-c", read_py, json.dumps([cnf]), "[]"]

    def read_then_judge(label: str) -> list[dict[str, Any]]:
        return _read_then_judge(state_py, tmp_path / f"{{{{ inventory_hostname }}}}-{label}.json",
                                "{{ __slurm_mariadb_cnf_as_wanted | bool | to_json }}", label)

    tasks = [
        {"name": "Role defaults", "ansible.builtin.include_vars": {"file": str(ROOT / "roles" / "slurm" / "defaults" / "main.yml")}},
        {"name": "Role vars", "ansible.builtin.include_vars": {"file": str(ROOT / "roles" / "slurm" / "vars" / "main.yml")}},
        # what the manifest's layout gives (a set_fact outranks include_vars), and a file of the test's
        {"name": "This host's layout", "ansible.builtin.set_fact": {
            "__slurm_mariadb_cnf_file": cnf, "__slurm_mariadb_datadir": "{{ datadir }}",
            "__slurm_dbd_storage_host": "{{ storage_host }}"}},
        {"name": "The role's write", "ansible.builtin.copy": copy["ansible.builtin.copy"]},
        *read_then_judge("written"),
        {"name": "By hand: a line", "ansible.builtin.shell": f"echo '# by hand' >> {cnf}", "when": "inventory_hostname == 'local'"},
        {"name": "By hand: a mode", "ansible.builtin.file": {"path": cnf, "mode": "0600"}, "when": "inventory_hostname == 'tcp'"},
        *read_then_judge("edited"),
    ]
    hosts = {"all": {"vars": _LOCAL_VARS, "hosts": {
        "local": {"datadir": "", "storage_host": "localhost"},
        "tcp": {"datadir": "/var/lib/clusterforge/state/mysql", "storage_host": "ctl", "ansible_host": "10.0.0.10"},
    }}}
    p = _run_play(tmp_path, [{"hosts": "all", "gather_facts": False, "tasks": tasks}], hosts)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    got = {(h, label): json.loads((tmp_path / f"{h}-{label}.json").read_text())
           for h in ("local", "tcp") for label in ("written", "edited")}
    assert got == {("local", "written"): True, ("tcp", "written"): True,
                   ("local", "edited"): False, ("tcp", "edited"): False}
    # what was written is the settings file the role means, for each host
    local, tcp = (tmp_path / "local.cnf").read_text(), (tmp_path / "tcp.cnf").read_text()
    assert "[mysqld]\n" in local and "bind-address = 127.0.0.1\n" in local and "datadir" not in local
    assert "bind-address = 10.0.0.10\n" in tcp and "datadir = /var/lib/clusterforge/state/mysql\n" in tcp


# what the template module wrote before these files' texts became role variables (a host's files as
# configured then, with the roles' defaults and Slurm 24.11): the copies must keep them byte for byte
_LIMITS_BEFORE = """#
# Ansible managed
#
# RDMA pins (registers) memory: memlock must be unlimited for EFA/InfiniBand/NCCL jobs.
* - memlock unlimited
* - nofile 1048576
* - stack unlimited
"""
_SYSCTL_BEFORE = """#
# Ansible managed
#
kernel.numa_balancing = 0
net.core.rmem_max = 67108864
net.core.somaxconn = 4096
net.core.wmem_max = 67108864
net.ipv4.neigh.default.gc_thresh1 = 8192
net.ipv4.neigh.default.gc_thresh2 = 32768
net.ipv4.neigh.default.gc_thresh3 = 65536
net.ipv4.tcp_max_syn_backlog = 8192
vm.max_map_count = 1048576
"""
_PIN_BEFORE = """#
# Ansible managed
#
# Slurm 24.11 only (slurm.version of the spec): the first record gives every version of
# the family priority 1001 (installed even when that is a downgrade), the second makes every other
# version uninstallable (-1), so neither an upgrade nor a fresh install brings another family.
# apt_preferences(5): the first specific-form record that matches a package version decides.
Package: src:slurm-wlm src:slurm-smd slurmd slurm-client
Pin: version 24.11.*
Pin-Priority: 1001

Package: src:slurm-wlm src:slurm-smd slurmd slurm-client
Pin: version *
Pin-Priority: -1
"""


@pytest.mark.skipif(shutil.which("ansible-playbook") is None or os.geteuid() != 0,
                    reason="needs ansible-core and root (the files are root's, as on the nodes)")
def test_the_limits_sysctl_and_pin_writes_keep_their_bytes_and_skip_on_the_read(tmp_path: Path) -> None:
    """The common role's limits and kernel settings and the slurm role's apt pin, under the real
    ansible-playbook: each role's own copy task writes its text (a role variable, no template file),
    which is what the template module wrote before, byte for byte. The Facts play's read of the
    files then finds each write done (``__*_as_wanted``); a line added by hand or another mode is
    not."""
    read_py = _facts_play()["vars"]["__site_read_files_py"]
    kernel = {t["name"]: t for t in _tasks(ROOT / "roles" / "common" / "tasks" / "kernel.yml")}
    pin = next(t for t in _tasks(ROOT / "roles" / "slurm" / "tasks" / "packages.yml")
               if t["name"].startswith("Pin the Slurm packages"))
    writes = {  # file: (the role's copy task, the variable that judges it, the path variable it writes)
        "limits": (kernel["Set resource limits for RDMA and MPI jobs"], "__common_limits_as_wanted", "__common_limits_file"),
        "sysctl": (kernel["Write kernel settings"], "__common_sysctl_as_wanted", "__common_sysctl_file"),
        "pin": (pin, "__slurm_pin_as_wanted", "slurm_apt_preferences_file"),
    }
    paths = {name: str(tmp_path / f"{name}.conf") for name in writes}
    state_py = [sys.executable, "-c", read_py, json.dumps(list(paths.values())), "[]"]

    judged = "{{ {" + ", ".join(f"'{n}': {v} | bool" for n, (_, v, _p) in writes.items()) + "} | to_json }}"

    def read_then_judge(label: str) -> list[dict[str, Any]]:
        return _read_then_judge(state_py, tmp_path / f"{label}.json", judged, label)

    role_files = [ROOT / "roles" / r / k / "main.yml" for r in ("common", "slurm") for k in ("defaults", "vars")]
    tasks = [
        *({"name": f"Role {f.parent.parent.name} {f.parent.name}", "ansible.builtin.include_vars": {"file": str(f)}}
          for f in role_files),
        # the test's paths (a set_fact outranks include_vars)
        {"name": "The test's paths", "ansible.builtin.set_fact": {var: paths[n] for n, (_, _v, var) in writes.items()}},
        *({"name": f"The role's write ({n})", "ansible.builtin.copy": task["ansible.builtin.copy"]}
          for n, (task, _v, _p) in writes.items()),
        *read_then_judge("written"),
        {"name": "By hand: a line", "ansible.builtin.shell": f"echo '# by hand' >> {paths['sysctl']}"},
        {"name": "By hand: a mode", "ansible.builtin.file": {"path": paths["pin"], "mode": "0600"}},
        *read_then_judge("edited"),
    ]
    hosts = {"all": {"vars": {**_LOCAL_VARS, "clusterforge_slurm_version": "24.11"},
                     "children": {"slurm_compute": {"hosts": {"h1": {}}}}}}
    p = _run_play(tmp_path, [{"hosts": "all", "gather_facts": False, "tasks": tasks}], hosts)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert json.loads((tmp_path / "written.json").read_text()) == {"limits": True, "sysctl": True, "pin": True}
    assert json.loads((tmp_path / "edited.json").read_text()) == {"limits": True, "sysctl": False, "pin": False}
    assert Path(paths["limits"]).read_text() == _LIMITS_BEFORE
    assert Path(paths["sysctl"]).read_text() == _SYSCTL_BEFORE + "# by hand\n"
    assert Path(paths["pin"]).read_text() == _PIN_BEFORE
