"""Run the tasks that never touch a host in Ansible's own process, not in a worker per host.

``assert``, ``debug``, ``fail``, ``set_fact`` and ``validate_argument_spec`` compute their result
from the host's variables alone: their action plugins declare ``_requires_connection = False`` and
run no module. Ansible's linear strategy still forks a worker for each host of each such task, and
the site playbook has many of them: every role's argument-spec check on every host, the preflight
assertions, the restart policy's ``set_fact``. In the six-node local cluster's idempotent re-run
they are 104 of the 293 host results that ran (``benchmarks/configure_profile.py``), each a fork of
the whole controller, its copy-on-write faults and a round trip through the results queue.

:func:`run_here` does for such a task in the controller what ``WorkerProcess`` does in the fork:
the start callback, ``TaskExecutor(...).run()`` inside the task's ``TaskContext``, and the result
through the same results queue, with the same task fields. What the fork gave for free, it does
by copying: the executor gets its own copy of the task (:func:`own_copy`) and of the variables'
mapping (the executor adds top-level keys such as ``ansible_search_path`` and the loop variable to
it), so nothing it changes reaches the next host or the strategy's own copy.

Left to a worker, as before: any other action (including a local override of these names, which
resolves to ``ansible.legacy``), handlers, ``delegate_to`` (the worker swaps in the delegated
host's variables), ``with_*`` lookups, ``run_once``, ``async`` and a task ``timeout`` (the worker
arms ``SIGALRM``, which the controller must not). ``tests/test_controller_skip.py`` runs one
playbook with and without this and compares every event, under both strategies.

Like ``controller_skip``, it mirrors ansible-core internals (``WorkerProcess._run``), so it is
active only on the checked ansible-core minor release, and not with
``CLUSTERFORGE_CONTROLLER_RUN=0``.
"""

from __future__ import annotations

import os
from typing import Any

ENV_SWITCH = "CLUSTERFORGE_CONTROLLER_RUN"

#: the builtin actions that only compute from variables (``_requires_connection = False``, no module)
LOCAL_ACTIONS = frozenset(
    {
        "ansible.builtin.assert",
        "ansible.builtin.debug",
        "ansible.builtin.fail",
        "ansible.builtin.set_fact",
        "ansible.builtin.validate_argument_spec",
    }
)


def active() -> bool:
    """Whether such tasks run in the controller in this process."""
    from clusterforge.configure.controller_skip import checked_release

    return os.environ.get(ENV_SWITCH, "1") != "0" and checked_release()


def runs_here(task: Any) -> bool:
    """Whether ``task`` is one that :func:`run_here` runs (the same answer for every host)."""
    if task.resolved_action not in LOCAL_ACTIONS:
        return False
    from ansible.playbook.handler import Handler

    return not (
        isinstance(task, Handler)
        or task.delegate_to
        or task.loop_with
        or task.run_once
        or task.async_val
        or task.timeout
    )


def own_copy(task: Any) -> Any:
    """A copy of ``task`` and of the blocks it sits in, for one host's executor.

    The blocks are copied, not shared: ``Task.post_validate`` templates the attributes of every
    block above the task with this host's variables and sets them there. Their other tasks are
    not (``exclude_tasks``, as Ansible's strategy copies a block it resumes): a plain ``copy()``
    duplicates every task of every enclosing block, and of their blocks, so each host's copy of
    one task cost as much as the role around it (``benchmarks/skip_cost.py``, the ``ran`` case:
    local tasks in one block). Nothing the executor runs here reads a block's task list.
    """
    return task.copy(exclude_tasks=True)


def run_here(strategy: Any, host: Any, task: Any, task_vars: dict[str, Any], play_context: Any) -> None:
    """``WorkerProcess._run`` for ``task`` on ``host``, in this process; the result is queued."""
    from ansible import plugins
    from ansible._internal import _task
    from ansible.executor.task_executor import TaskExecutor

    from clusterforge.configure.controller_skip import send_result, started_here

    started_here(strategy, host, task, task_vars, play_context)
    own = own_copy(task)
    with _task.TaskContext(own):
        result = TaskExecutor(
            host,
            own,
            task_vars.copy(),
            play_context,
            strategy._loader,
            plugins.loader.get_plugin_loader_namespace(),
            strategy._final_q,
            strategy._variable_manager,
        ).run()
    # the worker's result: its task's attributes as the executor left them (post-validated)
    send_result(strategy, host, own, result)
