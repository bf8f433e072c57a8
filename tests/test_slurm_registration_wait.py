"""The slurm role waits for a batch's compute nodes with one ``scontrol show node`` per try, not one
per node, and still judges, reports and returns each node on its own.

``roles/slurm/tasks/start_compute.yml`` runs through ``include_role`` under the real
``ansible-playbook`` on this host (local connection, one inventory name per node). ``scontrol`` is a
stand-in on ``PATH`` that answers ``show node NAMES --oneliner`` with lines a real Slurm 24.11.5
printed (``tests/fixtures/scontrol/show-node-oneliner-24.11.txt``), a round per call, and says
"Node NAME not found" (exit 1) for a name it has no line for, as the real one does. It logs every
call, so the tests count them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_site_package_read import _LOCAL_VARS, _run_play

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "scontrol" / "show-node-oneliner-24.11.txt"

STANDIN = r'''#!/usr/bin/env python3
import json, os, sys
log, fixture = os.environ["STANDIN_LOG"], os.environ["STANDIN_FIXTURE"]
with open(log, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1:3] != ["show", "node"]:
    sys.exit(0)
calls = sum(1 for line in open(log) if line.startswith('["show", "node"'))
rounds, lines = 0, {}
for line in open(fixture):
    if line.startswith("# round "):
        rounds += 1
    elif line.startswith("NodeName=") and rounds <= calls:
        lines[line.split(" ", 1)[0][len("NodeName="):]] = line
rc = 0
for name in sys.argv[3].split(","):
    if name in lines:
        sys.stdout.write(lines[name])
    else:
        sys.stderr.write(f"Node {name} not found\n")
        rc = 1
sys.exit(rc)
'''

def _run(tmp_path: Path, compute: list[str], timeout_s: int) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(STANDIN)
    (bin_dir / "scontrol").chmod(0o755)
    log = tmp_path / "scontrol.log"
    play = [{"hosts": "slurm_login:slurm_compute", "gather_facts": False, "tasks": [
        {"name": "The role's compute start", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "start_compute"},
         "when": "'slurm_compute' in group_names"}]}]
    # a login node shares the compute play (site.yml), here first in it: it starts no slurmd, is
    # not waited for, and is not the host that asks
    hosts = {"all": {"vars": _LOCAL_VARS, "children": {
        "slurm_compute": {"hosts": {h: {} for h in compute}}, "slurm_login": {"hosts": {"login": {}}}}}}
    extra = {
        "slurm_wait_timeout_s": timeout_s,
        # what the rest of the role would have set: slurmd already runs under systemd (no start), and
        # the log path the report names (from the render's manifest otherwise)
        "clusterforge_service_manager": "systemd", "__slurm_service_running": True,
        "__slurm_slurmd_log": "/var/log/slurm/slurmd.log",
    }
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "STANDIN_LOG": str(log), "STANDIN_FIXTURE": str(FIXTURE)}
    p = _run_play(tmp_path, play, hosts, extra=extra, env=env)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return p, calls


def _recap(stdout: str) -> dict[str, tuple[int, int]]:
    """host: (changed, failed) from the play recap"""
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in
            re.finditer(r"^([\w-]+)\s*: ok=\d+\s+changed=(\d+) .*? failed=(\d+)", stdout, re.M)}


needs_ansible = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-core")


@needs_ansible
def test_one_query_per_try_waits_for_the_batch_and_resumes_only_this_runs_drain(tmp_path: Path) -> None:
    """cpu-002 is DOWN at the first try and IDLE at the second: two queries in all, each naming the
    three compute nodes and not the login node. Only cpu-001, drained with this run's reason, is
    returned to service."""
    p, calls = _run(tmp_path, ["gpu-001", "cpu-001", "cpu-002"], timeout_s=20)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    shows = [c for c in calls if c[:2] == ["show", "node"]]
    assert len(shows) == 2, calls
    assert all(sorted(c[2].split(",")) == ["cpu-001", "cpu-002", "gpu-001"] and c[3:] == ["--oneliner"] for c in shows), shows
    assert [c for c in calls if c[0] == "update"] == [["update", "NodeName=cpu-001", "State=RESUME"]]
    assert _recap(p.stdout) == {"gpu-001": (0, 0), "cpu-001": (1, 0), "cpu-002": (0, 0), "login": (0, 0)}, p.stdout[-3000:]


@needs_ansible
def test_each_node_that_did_not_register_is_reported_with_its_state(tmp_path: Path) -> None:
    """With one try (a timeout of 1 s leaves no retry), cpu-002 is DOWN and gpu-009 is unknown to
    the controller: each of them fails with its own state or scontrol's words, the other nodes
    pass, and the batch was asked once."""
    p, calls = _run(tmp_path, ["gpu-001", "cpu-002", "gpu-009"], timeout_s=1)
    assert p.returncode != 0
    assert len([c for c in calls if c[:2] == ["show", "node"]]) == 1, calls
    assert _recap(p.stdout) == {"gpu-001": (0, 0), "cpu-002": (0, 1), "gpu-009": (0, 1), "login": (0, 0)}, p.stdout[-3000:]
    out = " ".join(p.stdout.split())
    assert ("cpu-002 did not register with the controller within 1 s (State=DOWN Reason=slurmd-stopped );"
            " see /var/log/slurm/slurmd.log on the node") in out, out[-3000:]
    assert "gpu-009 did not register with the controller within 1 s ( Node gpu-009 not found);" in out, out[-3000:]
    assert [c for c in calls if c[0] == "update"] == []
