"""Validation rules with levels, on top of the schema.

The schema (``clusterspec/models.py``) guarantees shapes; these rules weigh the spec against the
hardware catalog (the profiles ``clusterforge.resolve`` resolved, discovered facts applied), the
target Slurm version and itself. Every finding names the field path, the value, why it matters and
how to fix it. Each rule is a function registered in ``RULES`` by ``@rule``, in the module of its
section: ``nodes``, ``network``, ``partitions``, ``monitoring``, ``topology``, ``versions``, ``packages``, ``storage``,
``state`` (where the controller's state lives), ``paths`` (no system folder as a target), ``extra_conf``
(no weakening of authentication or isolation) (``base`` holds what they share); a test checks that each one can fire.
"""

from clusterforge.clusterspec.rules import (
    extra_conf,
    monitoring,
    network,
    nodes,
    packages,
    partitions,
    paths,
    state,
    storage,
    topology,
    versions,
)
from clusterforge.clusterspec.rules.base import RULES, Finding, Level, Rule, RuleContext, errors, rule, validate

__all__ = [
    "RULES", "Finding", "Level", "Rule", "RuleContext", "errors", "extra_conf", "monitoring", "network", "nodes",
    "packages",
    "partitions", "paths", "rule", "state", "storage", "topology", "validate", "versions",
]
