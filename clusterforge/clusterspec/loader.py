"""Read a spec file into a ``Cluster``, turning every failure into one clear ``SpecError``.

Each message names the field path, the value, why it is wrong and how to fix it, because the
person reading it is looking at a YAML file, not at our models.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from clusterforge.clusterspec.models import Cluster
from clusterforge.errors import SpecError


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(top level)"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the field at ``loc`` (to list allowed keys)."""
    model: Any = Cluster
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            # discriminated-union tags (e.g. 'fsx_lustre') appear in loc; step over them
            continue
        ann = fields[part].annotation
        model = _first_model(ann)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _first_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: the spec does not fit the schema ({exc.error_count()} problem(s)):"]
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        kind = err["type"]
        msg = err["msg"].removeprefix("Value error, ")
        if kind == "extra_forbidden":
            key = str(loc[-1])
            owner = _model_at(loc[:-1])
            allowed = sorted(owner.model_fields) if owner else []
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            lines.append(
                f"  - {_path(loc)}: unknown key {key!r}. {hint}Allowed keys here: {', '.join(allowed)}."
            )
        elif kind == "missing":
            lines.append(f"  - {_path(loc)}: required field is missing; add it.")
        else:
            value = err.get("input")
            lines.append(f"  - {_path(loc)} = {_short(value)}: {msg}.")
    lines.append("Fix the fields above; `clusterforge schema` prints the full JSON Schema.")
    return "\n".join(lines)


def parse_spec(data: Any, source: str = "spec") -> Cluster:
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the spec must be a YAML mapping (name:, node_groups:, ...), "
            f"not {type(data).__name__}"
        )
    try:
        return Cluster.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, source)) from None


def load_spec(path: str | Path) -> Cluster:
    p = Path(path)
    if not p.exists():
        raise SpecError(
            f"spec file {str(p)!r} does not exist; pass the path of a cluster YAML such as examples/local.yaml"
        )
    if p.is_dir():
        raise SpecError(f"{str(p)!r} is a folder; pass the path of a cluster YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read spec file {str(p)!r}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{p}: not valid YAML{where}: {problem}. Check indentation and quoting there.") from None
    return parse_spec(data, str(p))
