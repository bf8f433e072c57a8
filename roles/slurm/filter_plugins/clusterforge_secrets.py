"""``fill_secrets``: put secret values into a rendered file's ``{{ SECRET:<name> }}`` placeholders.

The renderer never sees a secret: it writes a placeholder and lists the name in the manifest
entry's ``secret_refs``. This filter substitutes the values (from Ansible Vault) on the way to the
node, inside a ``no_log`` task. Errors name the secret and the file, never a value.
"""

from __future__ import annotations

import re
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # imported by the unit tests without Ansible on the path
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]

PLACEHOLDER = re.compile(r"\{\{ SECRET:([A-Za-z0-9_.-]+) \}\}")


def fill_secrets(text: str, secrets: Any, refs: list[str], filename: str = "file") -> str:
    secrets = secrets or {}
    found = set(PLACEHOLDER.findall(text))
    unlisted = sorted(found - set(refs))
    if unlisted:
        raise AnsibleFilterError(
            f"{filename}: placeholders {unlisted} are not in the manifest's secret_refs; re-render it"
        )
    missing = sorted(r for r in refs if not secrets.get(r))
    if missing:
        raise AnsibleFilterError(
            f"{filename} needs secret(s) {missing}: set clusterforge_secrets.<name> in an Ansible Vault "
            "file (ansible-vault create inventories/<cluster>/group_vars/all/vault.yml)"
        )

    def _sub(m: re.Match[str]) -> str:
        return str(secrets[m.group(1)])

    return PLACEHOLDER.sub(_sub, text)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"fill_secrets": fill_secrets}
