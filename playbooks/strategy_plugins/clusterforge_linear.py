"""Ansible's linear strategy, with the skips it can decide decided in its own process.

See ``clusterforge/configure/controller_skip.py`` for what is decided there and why it is the
worker's own decision. Without clusterforge importable this is Ansible's linear strategy as is.
"""

from __future__ import annotations

from ansible.plugins.strategy.linear import StrategyModule as LinearStrategy

DOCUMENTATION = """
name: clusterforge_linear
short_description: linear, with a host's skip decided in the controller instead of a forked worker
description:
  - Ansible's linear strategy. A task whose when is false on a host, or whose loop is empty, gets
    the worker's skipped result from the controller process without forking a worker.
  - Each Jinja template string is compiled once per run in the controller process
    (clusterforge/configure/template_cache.py), and the workers it forks inherit it.
  - Everything else runs as under linear.
"""

try:
    from clusterforge.configure import template_cache
    from clusterforge.configure.controller_skip import ControllerSkipMixin

    # each template string compiled once in this process, which forks the workers (they inherit it)
    template_cache.install()
except ImportError:  # clusterforge not installed beside Ansible: linear as is
    ControllerSkipMixin = object  # type: ignore[assignment,misc]


class StrategyModule(ControllerSkipMixin, LinearStrategy):  # type: ignore[misc,valid-type]
    pass
