"""The cluster spec: model, loader and validation rules."""

from clusterforge.clusterspec.loader import load_spec, parse_spec
from clusterforge.clusterspec.models import Cluster, NodeGroup, Partition
from clusterforge.clusterspec.rules import Finding, Level, validate

__all__ = ["Cluster", "Finding", "Level", "NodeGroup", "Partition", "load_spec", "parse_spec", "validate"]
