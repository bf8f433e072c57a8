"""The cluster spec: model, loader and validation rules.

The names below load on first use (PEP 562), so that importing one submodule, such as
``clusterforge.clusterspec.types`` for the CLI's option help, builds no models and imports no rules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusterforge.clusterspec.loader import load_spec, parse_spec
    from clusterforge.clusterspec.models import Cluster, NodeGroup, Partition
    from clusterforge.clusterspec.rules import Finding, Level, validate

__all__ = ["Cluster", "Finding", "Level", "NodeGroup", "Partition", "load_spec", "parse_spec", "validate"]

_MODULE = {
    "load_spec": "loader", "parse_spec": "loader",
    "Cluster": "models", "NodeGroup": "models", "Partition": "models",
    "Finding": "rules", "Level": "rules", "validate": "rules",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE[name]}"), name)
