"""The one renderer: a resolved cluster -> every config file of the cluster, plus the typed manifest.

``render(rc)`` is used by ``clusterforge render``, ``plan``, ``inventory``, ``diff`` and ``local``;
the check and the Ansible roles read what it wrote through ``manifest.Manifest``. Nothing else
formats (or parses) a Slurm or NCCL line. The package holds: ``model`` (the config model),
``slurm``/``topology``/``nccl``/``jobs``/``alerts``/``alertmanager``/``dcgm_exporter``/``dashboards``
(one builder per file kind), ``versions`` and ``nccl_versions`` (the cited version gates),
``manifest`` (the contract), ``restart`` (the one restart policy), ``result``/``writer``/``yamlfile``
(files, atomic writes, YAML from data).

The names below load on first use (PEP 562), from ``build``: importing one submodule, such as
``manifest`` and ``restart`` for the slurm role's filter plugins (which Ansible imports again in
the worker of each host and task), loads no templates, builders or spec models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusterforge.render.build import HEALTHCHECK_PATH as HEALTHCHECK_PATH
    from clusterforge.render.build import TEMPLATES as TEMPLATES
    from clusterforge.render.build import _env as _env
    from clusterforge.render.build import build_model, render, render_cluster
    from clusterforge.render.result import RenderedFile, RenderResult

__all__ = ["RenderResult", "RenderedFile", "build_model", "render", "render_cluster"]

_MODULE = {
    "render": "build", "build_model": "build", "render_cluster": "build", "TEMPLATES": "build", "_env": "build",
    "HEALTHCHECK_PATH": "build", "RenderResult": "result", "RenderedFile": "result",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE[name]}"), name)
