"""The spec's JSON Schema, as checked in at schema/cluster.schema.json (a test keeps it current)."""

from __future__ import annotations

import json

from clusterforge.clusterspec.models import Cluster


def schema_text() -> str:
    schema = Cluster.model_json_schema()
    schema["$id"] = "https://clusterforge.dev/schema/cluster.schema.json"
    schema["title"] = "clusterforge cluster spec"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
