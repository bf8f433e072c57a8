"""``pulumi_aws`` for the program, one resource module at a time: ``from infra import lazy_aws as aws``.

``aws.ec2.Vpc`` is ``pulumi_aws.ec2.Vpc``, the same class object, but getting it imports
``pulumi_aws.ec2.vpc`` (and what that module imports: the service's ``_inputs``, ``outputs`` and
``_enums``), not the whole ``pulumi_aws.ec2`` package, whose ``__init__`` imports all 184 of its
modules. ``pulumi_aws`` already defers each *service* (its ``__init__`` binds ``ec2`` to
``pulumi._utils.lazy_import('pulumi_aws.ec2')``), but the first attribute read on a deferred
service runs that service's whole ``__init__``, and the program reads ten services. Measured
(``python -X importtime``, cProfile) on ``clusterforge plan examples/p5-training.yaml``: imports
were about 70 % of the plan's time, ``pulumi_aws`` the largest part; getting the program's 57
names took 1.1 s CPU and 366 service modules whole, and takes 0.67 s and 39 modules this way.
What is left is mostly ``ec2/_inputs.py`` and ``ec2/outputs.py`` (2.6 MB of generated input and
output types, whose class bodies and decorators run at import), which ``LaunchTemplate`` and
``Instance`` need.

Why this is sound, under ``clusterforge plan``'s mocks and under a real ``pulumi up`` alike:

* ``import pulumi_aws`` below runs ``pulumi_aws/__init__`` in full, as before: it calls
  ``_utilities.register``, which registers every resource module and the ``aws`` provider package
  with ``pulumi.runtime`` (what the engine uses to rebuild resource references it deserialises).
  Importing any ``pulumi_aws.<service>.<module>`` runs it anyway (Python imports parents first).
* Every name resolves to the very object ``pulumi_aws.<service>.<Name>`` is: it is read from the
  module that defines it, which the service's ``__init__`` re-exports with ``from .vpc import *``.
  Type tokens (``aws:ec2/vpc:Vpc``), input and output types are therefore those of pulumi_aws.
* The service package stays pulumi's lazy module: anything else that reads an attribute of
  ``pulumi_aws.ec2`` (a registered resource module rebuilding a reference, user code) runs its
  ``__init__`` in full then, which finds the modules imported here in ``sys.modules`` and binds
  them, so ``pulumi_aws.ec2`` ends up exactly as an eager import leaves it.
* To import one module under a deferred package without running the package's ``__init__``,
  the package must not load itself when the import machinery looks it over (``from . import
  outputs`` asks ``hasattr(pulumi_aws.ec2, 'outputs')``, and any attribute read loads a lazy
  module): for the duration of that one import, under a lock, the package is a plain module, then
  its lazy class is put back. Only CamelCase names (resource classes, ``*Args`` input types) are
  resolved this way; any other name, a name not found where the convention says, or a package in a
  state this does not recognise falls back to the ordinary attribute of ``pulumi_aws.<service>``,
  which is always right, only slower.
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
import types
from typing import Any

import pulumi_aws

_LOCK = threading.RLock()
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def module_of(name: str) -> str | None:
    """The submodule of a service that pulumi's code generator puts ``name`` in, by its naming
    convention: ``SecurityGroupIngressRule`` -> ``security_group_ingress_rule``, ``*Args`` and
    ``*ArgsDict`` -> ``_inputs``; ``None`` for a name the convention does not cover."""
    if not name[:1].isupper() or not name.isidentifier():
        return None
    if name.endswith(("Args", "ArgsDict")):
        return "_inputs"
    return _WORD.sub("_", name).lower()


def _deferred(package: types.ModuleType) -> bool:
    """True while ``package`` is pulumi's (or importlib's) lazy module whose ``__init__`` has not run:
    both switch the instance's class back to ``types.ModuleType`` when they load it."""
    return type(package) is not types.ModuleType and isinstance(package, types.ModuleType)


def _import_under(package: types.ModuleType, fullname: str) -> types.ModuleType:
    """Import ``fullname`` (a module of ``package``) without running ``package``'s ``__init__``."""
    lazy_class = type(package)
    package.__class__ = types.ModuleType  # the import machinery's reads must not load the package
    try:
        return importlib.import_module(fullname)
    finally:
        package.__class__ = lazy_class


class Service:
    """One ``pulumi_aws`` service (``aws.ec2``): its names, each imported on first use."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._fullname = f"pulumi_aws.{service}"

    def __repr__(self) -> str:
        return f"<lazy {self._fullname}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = self._resolve(name)
        setattr(self, name, value)  # the next read is a plain attribute
        return value

    def _resolve(self, name: str) -> Any:
        with _LOCK:
            package = sys.modules.get(self._fullname)
            sub = module_of(name)
            if package is not None and sub is not None and _deferred(package):
                try:
                    module = _import_under(package, f"{self._fullname}.{sub}")
                except ImportError:
                    module = None  # no such module: the name lives elsewhere
                if module is not None and name in vars(module):
                    return vars(module)[name]
            return getattr(importlib.import_module(self._fullname), name)


_services: dict[str, Service] = {}


def __getattr__(name: str) -> Any:
    """``aws.<service>`` -> a :class:`Service`; any other ``pulumi_aws`` name as it is."""
    value = getattr(pulumi_aws, name)  # a deferred service is returned as is, not loaded
    if isinstance(value, types.ModuleType) and value.__name__ == f"pulumi_aws.{name}":
        return _services.setdefault(name, Service(name))
    return value
