"""The roles for real: bare Debian 12 hosts -> a working GPU Slurm cluster, twice.

A controller (slurmctld, slurmdbd, MariaDB), two GPU nodes with 8 fake H100 each (character
devices, major 195) and a CPU node are chroots with sshd in their own namespaces on
10.81.0.0/24 (``scripts/testhosts.sh``). ``playbooks/site.yml`` runs against them in check mode
first (fresh hosts), then for real through ansible-playbook, then again through
``clusterforge.configure`` (ansible-runner), which must change nothing.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ansible import harness

pytestmark = [pytest.mark.hosts]

_skip = harness.missing_prerequisites()
if _skip:
    pytestmark.append(pytest.mark.skip(reason=_skip))


class Results:
    check: harness.Run
    first: harness.Run
    second: dict
    second_raw: str
    artifacts: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[harness.TestCluster, Results]]:
    state = tmp_path_factory.mktemp("cf81")
    res = Results()
    try:
        t0 = time.monotonic()
        tc = harness.up(state)
        print(f"\nhosts up in {time.monotonic() - t0:.1f} s")
        res.check = tc.playbook("site.yml", "--check", "--diff")
        print(f"check-mode run on fresh hosts: rc={res.check.rc} {res.check.seconds:.1f} s")
        res.first = tc.playbook("site.yml")
        print(f"first run: rc={res.first.rc} {res.first.seconds:.1f} s changed={res.first.changed}")
        res.artifacts = state / "artifacts"
        p = tc.ctl(
            "python3", str(harness.HERE / "run_configure.py"), str(harness.SPEC), str(tc.inventory),
            str(tc.test_inventory), str(state / "secrets.yml"), str(res.artifacts), timeout=900,
        )
        res.second_raw = p.stdout + p.stderr
        last = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        res.second = json.loads(last[-1]) if last else {"rc": p.returncode, "changed": -1, "failures": [res.second_raw[-2000:]]}
        print(f"second run (clusterforge.configure / ansible-runner): rc={res.second['rc']} "
              f"{res.second.get('seconds')} s changed={res.second['changed']}")
        yield tc, res
    finally:
        harness.down(state)


def _slurm(tc: harness.TestCluster, cmd: str, timeout: float = 60) -> str:
    p = tc.on("ctl", f"timeout {int(timeout)} {cmd}", timeout=timeout + 10)
    assert p.returncode == 0, f"{cmd}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_check_mode_on_fresh_hosts(cluster: tuple[harness.TestCluster, Results]) -> None:
    _, r = cluster
    assert r.check.rc == 0 and r.check.failed == 0, r.check.output[-6000:]
    assert set(r.check.recap) == set(harness.HOSTS)


def test_first_run_builds_the_cluster(cluster: tuple[harness.TestCluster, Results]) -> None:
    _, r = cluster
    assert r.first.rc == 0 and r.first.failed == 0, r.first.output[-8000:]
    assert set(r.first.recap) == set(harness.HOSTS)


def test_daemons_run_on_their_hosts(cluster: tuple[harness.TestCluster, Results]) -> None:
    tc, _ = cluster
    want = {"ctl": ["munged", "slurmctld", "slurmdbd", "mariadbd"], "gpu-001": ["munged", "slurmd"],
            "gpu-002": ["munged", "slurmd"], "cpu-001": ["munged", "slurmd"]}
    for host, daemons in want.items():
        ps = tc.on(host, "ps -eo comm=").stdout.split()
        for d in daemons:
            assert d in ps, f"{d} is not running on {host}: {sorted(set(ps))}"
        assert tc.on(host, "hostname").stdout.strip() == host
    # one munge key on every host, and it authenticates across hosts
    sums = {h: tc.on(h, "sha256sum /etc/munge/munge.key").stdout.split()[0] for h in want}
    assert len(set(sums.values())) == 1, sums
    cred = tc.on("gpu-001", "munge -n").stdout
    assert "STATUS:           Success" in tc.on("ctl", f"echo '{cred.strip()}' | unmunge").stdout


def test_gpu_nodes_register_with_their_gres(cluster: tuple[harness.TestCluster, Results]) -> None:
    tc, _ = cluster
    nodes = {}
    for line in _slurm(tc, "scontrol show node --oneliner").splitlines():
        name = re.search(r"NodeName=(\S+)", line)
        if name:
            nodes[name.group(1)] = line
    assert set(nodes) == {"gpu-001", "gpu-002", "cpu-001"}
    for n in ("gpu-001", "gpu-002"):
        assert "Gres=gpu:h100:8" in nodes[n], nodes[n]
        assert re.search(r"State=(IDLE|MIXED|ALLOCATED)", nodes[n]), nodes[n]
    assert re.search(r"State=IDLE", nodes["cpu-001"]), nodes["cpu-001"]


def test_jobs_run_across_hosts(cluster: tuple[harness.TestCluster, Results]) -> None:
    tc, _ = cluster
    out = _slurm(tc, "srun -N2 -p gpu hostname", timeout=60)
    assert sorted(out.split()) == ["gpu-001", "gpu-002"]
    # GRES binding: a 2-GPU step sees exactly two devices on each node
    out = _slurm(tc, "srun -N2 -p gpu --gpus-per-node=2 bash -c 'echo $(hostname) $CUDA_VISIBLE_DEVICES'", timeout=60)
    assert sorted(out.splitlines()) == ["gpu-001 0,1", "gpu-002 0,1"]
    out = _slurm(tc, "srun -N1 -p cpu hostname", timeout=60)
    assert out.strip() == "cpu-001"


def test_accounting_records_jobs(cluster: tuple[harness.TestCluster, Results]) -> None:
    tc, _ = cluster
    assert "cftest" in _slurm(tc, "sacctmgr -n -P show cluster format=cluster")
    _slurm(tc, "srun -N1 -p cpu true")
    # slurmctld sends job records to slurmdbd asynchronously: poll, bounded
    for _ in range(30):
        out = tc.on("ctl", "sacct -n -X -a -P --format=JobID,State").stdout
        if "COMPLETED" in out:
            break
        time.sleep(1)
    assert "COMPLETED" in out, out


def test_second_run_changes_nothing(cluster: tuple[harness.TestCluster, Results]) -> None:
    _, r = cluster
    s = r.second
    assert s["rc"] == 0, "\n".join(s.get("failures", [])) + r.second_raw[-4000:]
    assert s["changed"] == 0, "\n".join(ln for ln in s.get("progress", []) if "changed" in ln)
    assert set(s["stats"]) == set(harness.HOSTS)


def test_secret_never_printed_or_left_in_artifacts(cluster: tuple[harness.TestCluster, Results]) -> None:
    tc, r = cluster
    secret = harness.TEST_DB_PASSWORD
    for run in (r.check, r.first):
        assert secret not in run.output
    assert secret not in r.second_raw
    assert r.artifacts.is_dir()
    for f in r.artifacts.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f"secret in {f}"
    assert not any(p.name in ("env", "envvars", "extravars", "passwords") for p in r.artifacts.rglob("*"))
    # but it reached slurmdbd.conf (0600, owned by slurm) on the controller
    st = tc.on("ctl", "stat -c '%a %U' /etc/slurm/slurmdbd.conf; grep -c '^StoragePass=" + secret + "$' /etc/slurm/slurmdbd.conf")
    assert st.stdout.split() == ["600", "slurm", "1"], st.stdout + st.stderr
