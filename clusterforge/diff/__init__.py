"""PR preview diffs: what a change does to cloud resources, rendered configs, cost and a running cluster.

API for the CLI (``clusterforge diff``) and the tests::

    from clusterforge.diff import diff_refs, diff_spec_files, to_json, to_markdown, print_terminal

    report = diff_refs(Path.cwd(), base="origin/main", head=None, specs=None)   # -> DiffReport
    report = diff_spec_files(Path("old.yaml"), Path("new.yaml"))
    report.exit_code          # 0 no change, 1 changes (errors raise DiffError, exit 2 in the CLI)

Modules: ``sides`` (a spec at a git ref, the working tree or a file), ``resources`` (two plans'
resources: added/changed/replaced/removed), ``impact`` (rendered config changes classified for a
running cluster), ``report`` (the model and its JSON, Markdown and terminal forms), ``engine``
(load, validate, render, plan, compare), ``pulumi_preview`` (summary of ``pulumi preview --json``).
"""

from clusterforge.diff.engine import diff_refs, diff_sources, diff_spec_files
from clusterforge.diff.impact import Impact, ImpactClass, classify_file
from clusterforge.diff.report import MARKER, DiffReport, SpecDiff, print_terminal, to_dict, to_json, to_markdown
from clusterforge.diff.resources import ResourceDiff, diff_resources
from clusterforge.diff.sides import DiffError

__all__ = [
    "MARKER",
    "DiffError",
    "DiffReport",
    "Impact",
    "ImpactClass",
    "ResourceDiff",
    "SpecDiff",
    "classify_file",
    "diff_refs",
    "diff_resources",
    "diff_sources",
    "diff_spec_files",
    "print_terminal",
    "to_dict",
    "to_json",
    "to_markdown",
]
