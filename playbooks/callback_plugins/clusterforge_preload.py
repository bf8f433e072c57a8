"""Import the Slurm role's restart policy (and the roles' file filters) once, in the process that forks
Ansible's workers.

Ansible forks a worker process per host and task, and a worker's imports die with it. The Slurm
role's two restart-policy tasks call filters (``roles/slurm/filter_plugins/clusterforge_restart.py``)
that import ``clusterforge.render.restart`` and the manifest's pydantic models on first use: about
180 ms (``benchmarks/filter_import.py``) in every host's worker, twice per host and run. Imported
here, in ``ansible-playbook``'s own process before the first play, every forked worker inherits the
modules instead (``benchmarks/configure_profile.py``, README "The configure curve").

A callback plugin because it is the one kind of plugin Ansible loads in that process at start for
every play of this folder, with or without ``clusterforge configure``. It prints nothing and
handles no event. When clusterforge is not importable it does nothing: the filter itself then
fails with the error that says how to install it.
"""

from __future__ import annotations

import contextlib

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: clusterforge_preload
type: aggregate
short_description: import clusterforge's restart policy before Ansible forks its workers
description:
  - Imports clusterforge.render.restart, clusterforge.render.manifest and
    clusterforge.render.node_files in the controller process, so the workers Ansible forks per host
    and task inherit them.
  - Handles no event and prints nothing.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "clusterforge_preload"
    # loaded for every run of a playbook in this folder, like the roles' filters it serves
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        with contextlib.suppress(ImportError):
            from clusterforge.render import manifest, node_files, restart  # noqa: F401
