"""ansible.cfg holds only settings the installed ansible-core reads.

Ansible ignores a key it does not know without a word: ``gather_subset = min`` stayed in
ansible.cfg after ansible-core stopped reading it there, and every configure gathered every host's
hardware, network and virtualisation facts. The list of what it reads comes from ansible-core
itself (``ansible-config list -t all``: its own settings and every plugin's).
"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ini_entries(setting: object) -> list[tuple[str, str]]:
    if not isinstance(setting, dict):
        return []
    return [(e["section"], e["key"]) for e in setting.get("ini") or [] if isinstance(e, dict)]


@pytest.mark.skipif(shutil.which("ansible-config") is None, reason="ansible-core is not installed")
def test_every_ansible_cfg_key_is_one_ansible_reads() -> None:
    p = subprocess.run(["ansible-config", "list", "-t", "all", "--format", "json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, check=True,
                       env={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "/usr/bin:/bin:" +
                            str(Path(shutil.which("ansible-config") or "").parent)})
    listing = json.loads(p.stdout)
    known: set[tuple[str, str]] = set()
    for name, setting in listing.items():
        if name != "PLUGINS":
            known.update(_ini_entries(setting))
    for plugins in listing.get("PLUGINS", {}).values():
        for options in plugins.values():
            for option in options.values():
                known.update(_ini_entries(option))
    assert ("defaults", "forks") in known and ("ssh_connection", "pipelining") in known

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    ours = {(section, key) for section in cfg.sections() for key in cfg[section]}
    assert ours, "ansible.cfg has settings"
    unknown = sorted(ours - known)
    assert not unknown, f"ansible.cfg keys this ansible-core does not read (silently ignored): {unknown}"
