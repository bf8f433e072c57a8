"""Decide a task's skip in Ansible's own process when the answer is already known there.

Ansible's linear strategy forks a worker process for every host of every task, and the worker
evaluates the task's ``when`` (and its ``loop``) before anything touches the host. A task that a
host skips therefore still costs a fork, a pass of the host's variables through the worker and a
result sent back: 13.1 ms of CPU per host and task on this 2-core machine, against 1.1 ms when
the controller decides it (``benchmarks/skip_cost.py``: 100 ``when: false`` tasks on six local
hosts). The site playbook has many such tasks by design: the service-manager alternatives,
features a cluster does not use, and the steps that only run when something changed.

:class:`ControllerSkipMixin` goes in front of a strategy's ``_queue_task``. For a task whose
outcome on a host is a skip, it does in the controller exactly what the worker would have done
first, with the same inputs, and sends the same result through the same results queue:

* no ``loop``: the worker's ``TaskExecutor._execute_internal`` prefix. The variables it gets,
  plus ``ansible_search_path``; the play context's magic variables (``update_vars``); then
  ``Task._resolve_conditional`` over ``when``. False gives ``{changed: False, skipped: True,
  skip_reason: 'Conditional result was False', false_condition: ...}`` plus ``_ansible_no_log``;
* a ``loop`` that templates to an empty list: ``TaskExecutor.run``'s ``No items in the list``
  result (the worker evaluates no ``when`` then).

Everything else goes to a worker as before: a ``when`` that holds, a loop with items, any error
or warning while deciding (the worker then reports it as it always did), ``delegate_to`` (the
worker swaps in the delegated host's variables first), ``with_*`` lookups, ``run_once`` and
handlers. The callbacks see ``v2_runner_on_start`` and then the result, as from a worker, so the
events ansible-runner keeps are the same. ``tests/test_controller_skip.py`` runs one playbook of
these cases with and without the mixin and compares every event.

It reads ansible-core internals (``TaskContext``, ``DeferredWarningContext``, ``_RawTaskResult``),
so it is active only on the ansible-core minor release it was checked against
(:data:`CHECKED_ANSIBLE`); on any other, and with ``CLUSTERFORGE_CONTROLLER_SKIP=0``, every task
goes to a worker, which is Ansible's own behaviour.
"""

from __future__ import annotations

import os
from typing import Any

from clusterforge.configure import controller_run

CHECKED_ANSIBLE = "2.19"
"""The ansible-core minor release whose ``TaskExecutor`` this module mirrors."""

ENV_SWITCH = "CLUSTERFORGE_CONTROLLER_SKIP"


def checked_release() -> bool:
    """Whether the ansible-core in this process is the minor release these internals were read from."""
    try:
        from ansible.release import __version__
    except ImportError:
        return False
    return ".".join(__version__.split(".")[:2]) == CHECKED_ANSIBLE


def active() -> bool:
    """Whether skips are decided in the controller in this process."""
    return os.environ.get(ENV_SWITCH, "1") != "0" and checked_release()


def skip_result(
    loader: Any, host: Any, task: Any, task_vars: dict[str, Any], play_context: Any
) -> dict[str, Any] | None:
    """The result a worker would return for ``task`` on ``host`` when that result is a skip.

    ``None`` when the task runs, or whenever this cannot be decided exactly as the worker decides
    it; the caller then queues the task to a worker."""
    if not task.when and task.loop is None:
        return None  # nothing to decide: it runs
    from ansible._internal import _display_utils, _task
    from ansible._internal._templating._engine import TemplateEngine
    from ansible.playbook.handler import Handler

    if isinstance(task, Handler) or task.delegate_to or task.loop_with or task.run_once:
        return None

    # the worker's copy of the variables gains the search path before anything is templated
    # (TaskExecutor._get_loop_items); a copy here, because the strategy keeps task_vars for the
    # result's processing
    job_vars = task_vars.copy()
    search_path = task.get_search_path()
    if loader.get_basedir() not in search_path:
        search_path.append(loader.get_basedir())
    job_vars["ansible_search_path"] = search_path
    templar = TemplateEngine(loader=loader, variables=job_vars)

    with _task.TaskContext(task), _display_utils.DeferredWarningContext(variables=job_vars) as warnings:
        try:
            result = _decide(host, task, job_vars, templar, play_context)
        except Exception:  # the worker raises it again, and reports it as it always has
            return None
    if warnings.get_warnings() or warnings.get_deprecation_warnings():
        return None  # the worker attaches them to its result
    return result


def _decide(host: Any, task: Any, job_vars: dict[str, Any], templar: Any, play_context: Any) -> dict[str, Any] | None:
    if task.loop is not None:
        items = templar.template(task.loop)
        if isinstance(items, list) and not items:
            return dict(changed=False, skipped=True, skipped_reason="No items in the list", results=[])
        return None  # items to run (or an error to report): the worker evaluates each item's when

    # TaskExecutor._execute_internal, up to its conditional; with no delegate_to,
    # _calculate_delegate_to adds nothing
    tempvars = job_vars.copy()
    context = play_context.set_task_and_variable_override(task=task, variables=job_vars, templar=templar)
    context.post_validate(templar=templar)
    if not context.remote_addr:
        context.remote_addr = host.address
    context.update_vars(tempvars)
    false_condition: dict[str, Any] = {}
    if task._resolve_conditional(task.when, tempvars, result_context=false_condition):
        return None
    result = dict(changed=False, skipped=True, skip_reason="Conditional result was False") | false_condition
    task.update_result_no_log(templar, result)  # TaskExecutor._execute does this to every result
    return result


class ControllerSkipMixin:
    """Put in front of a strategy class: ``_queue_task`` sends a skip's result itself, and runs a
    task that never touches the host in this process (``controller_run``)."""

    _controller_skip = active()
    _controller_run = controller_run.active()

    def _queue_task(self, host: Any, task: Any, task_vars: dict[str, Any], play_context: Any) -> None:
        result = skip_result(self._loader, host, task, task_vars, play_context) if self._controller_skip else None  # type: ignore[attr-defined]
        if result is None:
            if self._controller_run and controller_run.runs_here(task):
                controller_run.run_here(self, host, task, task_vars, play_context)
            else:
                super()._queue_task(host, task, task_vars, play_context)  # type: ignore[misc]
            return
        # what StrategyBase._queue_task and WorkerProcess._run do around TaskExecutor.run
        started_here(self, host, task, task_vars, play_context)
        send_result(self, host, task, result)


def started_here(strategy: Any, host: Any, task: Any, task_vars: dict[str, Any], play_context: Any) -> None:
    """``StrategyBase._queue_task``'s part for a result this process sends: the cache entry first
    (the results thread looks the task up in it), then the start callback."""
    strategy._queued_task_cache[(host.name, task._uuid)] = {
        "host": host,
        "task": task,
        "task_vars": task_vars,
        "play_context": play_context,
    }
    strategy._tqm.send_callback("v2_runner_on_start", host, task)


def send_result(strategy: Any, host: Any, task: Any, result: dict[str, Any]) -> None:
    """``WorkerProcess._run``'s part: the result through the results queue, with the task's fields
    (its squashed attributes, which ``dump_attrs`` resolves as in the worker)."""
    from ansible.executor.task_result import _RawTaskResult

    strategy._final_q.send_task_result(
        _RawTaskResult(host=host, task=task, return_data=result, task_fields=task.dump_attrs())
    )
    strategy._pending_results += 1
