"""Bring up local test hosts and run the playbooks against them (used by tests/test_ansible_hosts.py).

The hosts are chroots of a cached Debian 12 minbase rootfs, each with sshd in its own network,
PID, mount and UTS namespaces on a bridge in 10.81.0.0/24 (``scripts/testhosts.sh``); their apt
mirror is a local repository on the bridge (``scripts/testhost-repo.sh``) that also serves the
vendor stand-in repositories (``tests/ansible/standin/build.sh``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SCRIPTS = ROOT / "scripts"
SPEC = HERE / "cluster.yaml"
#: test hosts: name -> (address, fake GPUs)
HOSTS = {"ctl": ("10.81.0.10", 0), "gpu-001": ("10.81.0.21", 8), "gpu-002": ("10.81.0.22", 8), "cpu-001": ("10.81.0.31", 0)}
#: a throw-away value: the tests check it never shows up in output or ansible-runner artifacts
TEST_DB_PASSWORD = "cf-test-Secret-7c1d9e"
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)",
    re.M,
)


def missing_prerequisites() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, chroot)"
    for tool in ("debootstrap", "dpkg-scanpackages", "ansible-playbook", "ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@dataclass
class Run:
    rc: int
    seconds: float
    output: str
    recap: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(h["changed"] for h in self.recap.values())

    @property
    def failed(self) -> int:
        return sum(h["failed"] + h["unreachable"] for h in self.recap.values())


@dataclass
class TestCluster:
    state: Path
    repo: Path
    inventory: Path
    test_inventory: Path
    log: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ commands on the hosts
    def ctl(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a command on the bridge side (where Ansible runs)."""
        return subprocess.run(
            [str(SCRIPTS / "testhosts.sh"), "ctl", str(self.state), *cmd],
            capture_output=True, text=True, timeout=timeout, check=False,
        )

    def on(self, host: str, script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a shell script inside a test host (its namespaces and root)."""
        return subprocess.run(
            [str(SCRIPTS / "testhosts.sh"), "exec", str(self.state), host, "/bin/bash", "-c", script],
            capture_output=True, text=True, timeout=timeout, check=False,
        )

    # ------------------------------------------------------------------------- playbooks
    def playbook(self, name: str, *args: str, timeout: float = 900) -> Run:
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.profile_tasks",
            "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "15",
        }
        cmd = [
            "ansible-playbook", "-i", str(self.inventory), "-i", str(self.test_inventory),
            "-e", f"@{self.state / 'secrets.yml'}", str(ROOT / "playbooks" / name), *args,
        ]
        t0 = time.monotonic()
        p = subprocess.run(
            [str(SCRIPTS / "testhosts.sh"), "ctl", str(self.state), *cmd],
            capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, check=False,
        )
        dt = time.monotonic() - t0
        out = p.stdout + p.stderr
        recap = {
            m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")} for m in RECAP.finditer(out)
        }
        (self.state / f"run-{len(self.log)}-{name}.log").write_text(out)
        self.log.append(f"{name} {' '.join(args)}: rc={p.returncode} {dt:.1f}s changed={sum(h['changed'] for h in recap.values())}")
        return Run(p.returncode, dt, out, recap)


def build_repo() -> Path:
    """The local apt repository (Debian closure + vendor stand-ins), cached."""
    repo = subprocess.run(
        [str(SCRIPTS / "testhost-repo.sh"), str(HERE / "repo-packages.txt")],
        capture_output=True, text=True, timeout=900, check=False,
    )
    if repo.returncode != 0:
        raise RuntimeError(f"building the local apt repository failed:\n{repo.stderr[-3000:]}")
    path = Path(repo.stdout.strip().splitlines()[-1])
    standin = HERE / "standin" / "build.sh"
    if standin.exists():
        s = subprocess.run([str(standin), str(path)], capture_output=True, text=True, timeout=600, check=False)
        if s.returncode != 0:
            raise RuntimeError(f"building the vendor stand-in repositories failed:\n{s.stderr[-3000:]}")
    return path


def up(state: Path) -> TestCluster:
    """Render the test spec, write its inventory, start the hosts. Call ``down`` in any case."""
    from clusterforge.inventory import generate_inventory

    state.mkdir(parents=True, exist_ok=True)
    repo = build_repo()
    res = generate_inventory(SPEC, out_dir=state / "inventory" / "cftest")
    # test-only layer: how Ansible reaches the hosts, no systemd, the stand-in vendor repositories
    tinv = state / "inventory-test"
    (tinv / "group_vars").mkdir(parents=True, exist_ok=True)
    # an (empty) hosts file makes the folder an inventory source whose group_vars apply
    (tinv / "hosts.yml").write_text("---\nall: {}\n")
    test_vars = yaml.safe_load((HERE / "test-vars.yml").read_text())
    test_vars["ansible_ssh_private_key_file"] = str(state / "id_ed25519")
    (tinv / "group_vars" / "all.yml").write_text(yaml.safe_dump(test_vars, sort_keys=False))
    # what an Ansible Vault file holds in production; 0600, inside the test's own folder
    secrets = state / "secrets.yml"
    secrets.write_text(yaml.safe_dump({"clusterforge_secrets": {"slurmdbd_storage_pass": TEST_DB_PASSWORD}}))
    secrets.chmod(0o600)
    hosts = [f"{n}={a}" + (f":gpu{g}" if g else "") for n, (a, g) in HOSTS.items()]
    p = subprocess.run(
        [str(SCRIPTS / "testhosts.sh"), "up", str(state), str(repo), *hosts],
        capture_output=True, text=True, timeout=600, check=False,
    )
    if p.returncode != 0:
        raise RuntimeError(f"test hosts did not come up:\n{p.stderr[-3000:]}")
    return TestCluster(state=state, repo=repo, inventory=res.out_dir, test_inventory=tinv)


def down(state: Path) -> None:
    subprocess.run([str(SCRIPTS / "testhosts.sh"), "down", str(state)], capture_output=True, timeout=120, check=False)
