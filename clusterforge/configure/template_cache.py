"""Compile each Jinja template string once per ``ansible-playbook`` run, not once per host and task.

ansible-core 2.19 keeps no compiled templates: every ``when``, ``loop``, module argument and
variable it templates is lexed, parsed, turned into Python source and ``compile()``-d again, for
every host of every task, in the controller (the strategy's decisions, ``controller_skip``) and
again in each forked worker. A sampling profile of the six-node local cluster's idempotent re-run
(py-spy over ``ansible-playbook`` and its workers) showed Jinja's compile as a large part of both;
``benchmarks/controller_cost.py`` measures what the cache saves.

:func:`install` puts a cache in front of ``TemplateEngine._compile_template`` and
``TemplateEngine._compile_expression`` in the process that forks the workers, so a string
compiled once is reused for every other host and task, and every worker forked later inherits
what the controller compiled (the ``when`` it decided, the ``loop`` it templated).

Why a compiled template can be shared, from the 2.19 source (``_internal/_templating``):

* What a compile depends on is the key: the template text, the ``TemplateOptions`` (the
  ``#jinja2:`` overrides and ``escape_backslashes``, the only compile-time settings) and the
  engine's base folder, which is the only argument an ``AnsibleEnvironment`` is built with (its
  ``FileSystemLoader`` for ``include``/``import``). Every other setting of the environment is the
  same for every instance: the filters and tests resolve through the process-wide plugin loaders
  (``JinjaPluginIntercept``, with no collection context), the globals are the same functions.
* The compiled code holds no origin or trust: constants are written as ``repr()`` and an embedded
  template constant is tagged at render time from the ``TemplateContext`` of that render
  (``AnsibleEnvironment._access_const``); variables are passed at every render.
* A compile error is not cached: ``_compile_*`` returns a deferred error bound to that call's
  template, so each use reports its own, as before.

It reads ansible-core internals, so it is active only where ``controller_skip`` is (the checked
ansible-core minor release) and not with ``CLUSTERFORGE_TEMPLATE_CACHE=0``.
``tests/test_template_cache.py`` compares every event of a playbook run with and without it.
"""

from __future__ import annotations

import os
from typing import Any

from clusterforge.configure.controller_skip import checked_release

ENV_SWITCH = "CLUSTERFORGE_TEMPLATE_CACHE"

#: compiled templates kept at most (least recently used dropped): a run's distinct strings are a
#: few thousand at most (the site playbook's tasks, defaults and argument specs)
CAPACITY = 8192

_installed = False
#: compiles that went to Jinja, and compiles answered from the cache (for the tests and benchmark)
stats = {"compiled": 0, "reused": 0}


def active() -> bool:
    """Whether the cache may be installed in this process."""
    return os.environ.get(ENV_SWITCH, "1") != "0" and checked_release()


def install() -> bool:
    """Put the cache in front of ansible-core's compiles (once per process); whether it is on."""
    global _installed
    if _installed:
        return True
    if not active():
        return False
    from ansible._internal._templating._engine import TemplateEngine
    from ansible._internal._templating._jinja_bits import AnsibleTemplate, AnsibleTemplateExpression
    from jinja2.utils import LRUCache

    cache = LRUCache(CAPACITY)
    compile_template = TemplateEngine._compile_template
    compile_expression = TemplateEngine._compile_expression

    def cached(kind: str, compile_: Any, good: type, engine: Any, source: str, options: Any) -> Any:
        try:
            # str(): the plain text of a tagged string (tags are Ansible's origin and trust
            # markers, which the compiled code does not hold)
            key = (kind, str(source), options, engine.basedir)
            hit = cache.get(key)
        except TypeError:  # an unhashable option (a value_for_omit object): compile as before
            return compile_(engine, source, options)
        if hit is not None:
            stats["reused"] += 1
            return hit
        result = compile_(engine, source, options)
        stats["compiled"] += 1
        if isinstance(result, good):  # not a deferred compile error (LRUCache locks its writes)
            cache[key] = result
        return result

    def _compile_template(self: Any, template: str, options: Any) -> Any:
        return cached("template", compile_template, AnsibleTemplate, self, template, options)

    def _compile_expression(self: Any, expression: str, options: Any) -> Any:
        return cached("expression", compile_expression, AnsibleTemplateExpression, self, expression, options)

    TemplateEngine._compile_template = _compile_template
    TemplateEngine._compile_expression = _compile_expression
    _installed = True
    return True
