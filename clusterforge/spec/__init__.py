"""The cluster spec: model, loader and validation rules."""

from clusterforge.spec.loader import load_spec, parse_spec
from clusterforge.spec.models import Cluster, NodeGroup, Partition
from clusterforge.spec.rules import Finding, Level, validate

__all__ = ["Cluster", "Finding", "Level", "NodeGroup", "Partition", "load_spec", "parse_spec", "validate"]
