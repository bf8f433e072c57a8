"""What a role installs on a host: the rendered files and folders it lacks or has otherwise.

``render_sha256``, ``files_to_copy``, ``dirs_to_make`` and ``manifest_files``
(``clusterforge.render.node_files``, where they are documented and tested). The nccl, dcgm,
monitoring and cloud_agents roles' ``filter_plugins/clusterforge_files.py`` are links to this file,
so each role runs alone too, from one file. Filter plugins run on the Ansible control host: clusterforge must be importable
by the Python that runs ``ansible-playbook`` (``clusterforge configure`` runs it from its own
environment), as for the slurm role's restart policy.
"""

from __future__ import annotations

from typing import Any

from clusterforge.render.node_files import dirs_to_make, files_to_copy, manifest_files, render_sha256


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"render_sha256": render_sha256, "files_to_copy": files_to_copy, "dirs_to_make": dirs_to_make,
                "manifest_files": manifest_files}
