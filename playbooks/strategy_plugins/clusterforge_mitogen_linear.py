"""Mitogen for Ansible's ``mitogen_linear``, with the skips it can decide decided in its own process.

``clusterforge configure --strategy mitogen`` selects it. See
``clusterforge/configure/controller_skip.py`` for what is decided in the controller and why it is
the worker's own decision.
"""

from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

DOCUMENTATION = """
name: clusterforge_mitogen_linear
short_description: mitogen_linear, with a host's skip decided in the controller instead of a forked worker
description:
  - Mitogen for Ansible's linear strategy (one Python per host for the whole run). A task whose
    when is false on a host, or whose loop is empty, gets the worker's skipped result from the
    controller process without forking a worker.
  - Each Jinja template string is compiled once per run in the controller process
    (clusterforge/configure/template_cache.py), and the workers it forks inherit it.
"""

try:
    from clusterforge.configure import template_cache
    from clusterforge.configure.controller_skip import ControllerSkipMixin

    # each template string compiled once in this process, which forks the workers (they inherit it)
    template_cache.install()
except ImportError:  # clusterforge not installed beside Ansible: mitogen_linear as is
    ControllerSkipMixin = object  # type: ignore[assignment,misc]

# the same composition as Mitogen's own plugins/strategy/mitogen_linear.py
_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ControllerSkipMixin, ansible_mitogen.strategy.StrategyMixin, _Linear):  # type: ignore[misc,valid-type]
    pass
