"""roles/common's metadata firewall, applied for real inside a private network namespace.

The namespace (``cfsec-<pid>``) carries a dummy interface (a veth pair where the kernel has no
dummy module) with 169.254.169.254 and a tiny HTTP
server on it, standing in for the instance metadata service. The role's task file runs through
the real ``ansible-playbook -c local`` under ``ip netns exec``, so its iptables rule lands in that
namespace only. Then root must get an answer and ``nobody`` must be refused; a second run must
change nothing. The boot unit's command, run in a second, fresh namespace (a reboot), must
recreate exactly the rule Ansible manages (the playbook then reports changed=0 there too).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "common"
IMDS = "169.254.169.254"

_missing = [t for t in ("iptables", "ip", "ansible-playbook", "curl", "setpriv") if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or bool(_missing),
    reason="needs root (network namespaces, iptables) and "
    + (", ".join(_missing) if _missing else "the tools")
    + "; apt-get install -y iptables (scripts/setup-deps.sh)",
)

PLAY = """\
- name: Metadata firewall only
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The role's task file
      ansible.builtin.include_role:
        name: common
        tasks_from: imds_firewall
"""

RENDER = """\
- name: Render the boot unit without installing it
  hosts: localhost
  gather_facts: false
  vars_files: [{vars}]
  tasks:
    - name: The role's unit template
      ansible.builtin.template:
        src: {template}
        dest: {dest}
        mode: "0644"
"""


def _run(cmd: list[str], *, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)


@contextmanager
def namespace(web: Path) -> Iterator[str]:
    """A fresh namespace with the metadata address and an HTTP server on it; deleted on exit."""
    name = f"cfsec-{os.getpid()}"
    web.mkdir(exist_ok=True)
    (web / "index.html").write_text("metadata\n")
    server: subprocess.Popen[bytes] | None = None
    try:
        _run(["ip", "netns", "add", name])
        _run(["ip", "-n", name, "link", "set", "lo", "up"])
        # a dummy interface carries the address; kernels without the dummy module (containers)
        # get a veth pair instead, both ends inside the namespace
        if _run(["ip", "-n", name, "link", "add", "imds0", "type", "dummy"], check=False).returncode != 0:
            _run(["ip", "-n", name, "link", "add", "imds0", "type", "veth", "peer", "name", "imds1"])
            _run(["ip", "-n", name, "link", "set", "imds1", "up"])
        _run(["ip", "-n", name, "addr", "add", f"{IMDS}/32", "dev", "imds0"])
        _run(["ip", "-n", name, "link", "set", "imds0", "up"])
        server = subprocess.Popen(
            ["ip", "netns", "exec", name, "python3", "-m", "http.server", "80", "--bind", IMDS, "-d", str(web)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            if _curl(name, as_nobody=False):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the stand-in metadata server did not come up in the namespace")
        yield name
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
        _run(["ip", "netns", "delete", name], check=False)


def _curl(ns: str, *, as_nobody: bool) -> bool:
    user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if as_nobody else []
    p = _run(["ip", "netns", "exec", ns, *user, "curl", "-sS", "-m", "3", f"http://{IMDS}/"], check=False)
    return p.returncode == 0 and p.stdout == "metadata\n"


def _playbook(ns: str, play: Path) -> str:
    # the repository's ansible.cfg, plus the host_list plugin that `-i localhost,` needs
    env_cfg = ["env", f"ANSIBLE_CONFIG={ROOT / 'ansible.cfg'}", f"ANSIBLE_ROLES_PATH={ROOT / 'roles'}",
               "ANSIBLE_INVENTORY_ENABLED=host_list"]
    p = _run(
        [
            "ip", "netns", "exec", ns, *env_cfg,
            "ansible-playbook", "-c", "local", "-i", "localhost,", str(play),
            # not a cluster host: no boot unit on this machine (its rule is checked below)
            "-e", "clusterforge_service_manager=direct",
            "-e", "ansible_python_interpreter=/usr/bin/python3",
        ],
        check=False,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    return p.stdout


def _changed(recap: str) -> int:
    m = re.search(r"localhost\s*:.*changed=(\d+)", recap)
    assert m, recap[-2000:]
    return int(m.group(1))


def _rules(ns: str) -> list[str]:
    out = _run(["ip", "netns", "exec", ns, "iptables", "-S", "OUTPUT"]).stdout
    return [line for line in out.splitlines() if line.startswith("-A OUTPUT")]


def test_metadata_only_for_root_and_idempotent_and_restored_at_boot(tmp_path: Path) -> None:
    play = tmp_path / "imds.yml"
    play.write_text(PLAY)
    with namespace(tmp_path / "web") as ns:
        assert _curl(ns, as_nobody=False) and _curl(ns, as_nobody=True), "before the rule both users get an answer"
        first = _playbook(ns, play)
        assert _changed(first) >= 1, first[-2000:]
        assert _curl(ns, as_nobody=False), "root must still reach the metadata service"
        assert not _curl(ns, as_nobody=True), "nobody must be refused"
        rules = _rules(ns)
        assert len(rules) == 1 and "! --uid-owner 0" in rules[0] and "-j REJECT" in rules[0], rules
        assert _changed(_playbook(ns, play)) == 0, "a second run must change nothing"

    # the boot unit's command in a fresh namespace (the rule is gone, as after a reboot)
    unit = tmp_path / "clusterforge-imds-firewall.service"
    render = tmp_path / "render.yml"
    render.write_text(
        RENDER.format(
            vars=ROLE / "vars" / "main.yml",
            template=ROLE / "templates" / "clusterforge-imds-firewall.service.j2",
            dest=unit,
        )
    )
    exec_start = ""
    with namespace(tmp_path / "web") as ns:
        assert _rules(ns) == [] and _curl(ns, as_nobody=True), "a fresh namespace has no rule"
        _playbook(ns, render)
        exec_start = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
        for _ in range(2):  # a restarted unit must not add it twice
            _run(["ip", "netns", "exec", ns, *shlex.split(exec_start.removeprefix("ExecStart="))])
        assert _rules(ns) == rules, "the boot unit must recreate exactly Ansible's rule"
        assert _curl(ns, as_nobody=False) and not _curl(ns, as_nobody=True)
        assert _changed(_playbook(ns, play)) == 0, "Ansible must find its rule after the boot unit ran"
