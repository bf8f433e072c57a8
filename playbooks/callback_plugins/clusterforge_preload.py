"""Import the Slurm role's restart policy (and the roles' file filters) once, in the process that forks
Ansible's workers, and keep the cyclic garbage collector off what that process holds for the run.

Ansible forks a worker process per host and task, and a worker's imports die with it. The Slurm
role's two restart-policy tasks call filters (``roles/slurm/filter_plugins/clusterforge_restart.py``)
that import ``clusterforge.render.restart`` and the manifest's pydantic models on first use: about
180 ms (``benchmarks/filter_import.py``) in every host's worker, twice per host and run. Imported
here, in ``ansible-playbook``'s own process before the first play, every forked worker inherits the
modules instead (``benchmarks/configure_profile.py``, docs/performance.md "The configure curve").

The collector: ``ansible-playbook``'s one thread queues every host's tasks, and at CPython's default
threshold its collector walked everything the process holds (the inventory, every host's
variables, the plays, the plugins) again and again while freeing next to nothing: 0.21 to 0.34 s of
that thread's CPU in a six-node re-run and 0.70 to 0.94 s at 24 nodes, most of it in full
collections (``benchmarks/controller_per_host.py``). From the plugin's load, before the playbook is
parsed, young objects are collected every 50,000 allocations instead of every 700, as clusterforge's
own commands do (``clusterforge/cli.py``, ``GC_YOUNG``); at each play's start what is alive is frozen
(``gc.freeze``: later collections skip it, and a forked worker's collections do not write to those
objects' pages). Cycles made later are still collected; what was frozen stays for the run, which
ends with the process (docs/performance.md "The configure curve").

A callback plugin because it is the one kind of plugin Ansible loads in that process at start for
every play of this folder, with or without ``clusterforge configure``. It prints nothing. When
clusterforge is not importable it imports nothing: the filter itself then fails with the error that
says how to install it.
"""

from __future__ import annotations

import contextlib
import gc

from ansible.plugins.callback import CallbackBase

#: young allocations between collections (CPython's default is 700), as clusterforge.cli's GC_YOUNG
GC_YOUNG = 50_000

DOCUMENTATION = """
name: clusterforge_preload
type: aggregate
short_description: import clusterforge's restart policy and tune the collector before Ansible forks its workers
description:
  - Imports clusterforge.render.restart, clusterforge.render.manifest and
    clusterforge.render.node_files in the controller process, so the workers Ansible forks per host
    and task inherit them.
  - Raises the collector's young threshold to 50,000 allocations when loaded, and at each play's
    start freezes the objects alive in that process (gc.freeze).
  - Prints nothing.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "clusterforge_preload"
    # loaded for every run of a playbook in this folder, like the roles' filters it serves
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        # loaded before the playbook is: its parse already collects young objects less often
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
        with contextlib.suppress(ImportError):
            from clusterforge.render import manifest, node_files, restart  # noqa: F401

    def v2_playbook_on_play_start(self, play: object) -> None:
        # what the controller holds now lives until the run ends: out of the collector's walks
        gc.freeze()
