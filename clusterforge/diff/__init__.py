"""PR preview diffs: what a change does to cloud resources, rendered configs, cost and a running cluster.

API for the CLI (``clusterforge diff``) and the tests::

    from clusterforge.diff import diff_refs, diff_spec_files, to_json, to_markdown, print_terminal

    report = diff_refs(Path.cwd(), base="origin/main", head=None, specs=None)   # -> DiffReport
    report = diff_spec_files(Path("old.yaml"), Path("new.yaml"))
    report.exit_code          # 0 no change, 1 changes, 2 a head spec that does not load, validate or
                              # render (other errors raise DiffError, exit 2 in the CLI)

Modules: ``sides`` (a spec at a git ref, the working tree or a file), ``resources`` (two plans'
resources: added/changed/replaced/removed), ``hosts`` (the two sides' inventory variables compared
and classified by :mod:`clusterforge.inventory.settings_impact`), ``report`` (the model, its JSON
and Markdown forms), ``terminal`` (its rich form), ``engine`` (resolve, render, plan, compare),
``pulumi_preview`` (summary of ``pulumi preview --json``). What a rendered file's change does to a
running cluster is :mod:`clusterforge.render.restart`, the one restart policy (``Impact`` and
``ImpactClass`` are re-exported here).
"""

from clusterforge.diff.engine import diff_refs, diff_sources, diff_spec_files
from clusterforge.diff.hosts import HostSetting
from clusterforge.diff.report import MARKER, DiffReport, SpecDiff, to_dict, to_json, to_markdown
from clusterforge.diff.resources import ResourceDiff, diff_resources
from clusterforge.diff.sides import DiffError
from clusterforge.diff.terminal import print_terminal
from clusterforge.render.restart import Impact, ImpactClass

__all__ = [
    "MARKER",
    "DiffError",
    "DiffReport",
    "HostSetting",
    "Impact",
    "ImpactClass",
    "ResourceDiff",
    "SpecDiff",
    "diff_refs",
    "diff_resources",
    "diff_sources",
    "diff_spec_files",
    "print_terminal",
    "to_dict",
    "to_json",
    "to_markdown",
]
