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

#: A cluster spec nests about six levels (node_groups[0].onprem.placement[0]...); the YAML
#: composer recurses once per level, so a file nesting a thousand lists would end in Python's
#: RecursionError. Anything deeper than this is refused with its line instead.
MAX_DEPTH = 64

#: Values a spec may stand for once YAML aliases are expanded: a few thousand at most in practice.
#: Aliases of aliases (``b: [*a, *a, ...]``) grow exponentially and would stall validation.
MAX_VALUES = 100_000


class _LimitError(Exception):
    """A file the YAML parser would accept but that no spec can be: where, why and the fix."""

    def __init__(self, path: str, mark: yaml.Mark, why: str, fix: str) -> None:
        super().__init__(why)
        self.path, self.line, self.why, self.fix = path, mark.line + 1, why, fix


class _Limits:
    """What both spec loaders add to PyYAML: limits, so that hostile or broken files end in a message."""

    _where: list[int | str]  # the field path of the node being composed

    def compose_node(self, parent: Any, index: Any) -> Any:
        if parent is not None:
            self._where.append(index if isinstance(index, int) else str(getattr(index, "value", "?"))[:40])
        try:
            if len(self._where) > MAX_DEPTH:
                raise _LimitError(
                    _path(tuple(self._where[:8])) + "...",
                    self.peek_event().start_mark,  # type: ignore[attr-defined]
                    f"the values nest deeper than {MAX_DEPTH} levels (a cluster spec nests fewer than 10)",
                    "remove the extra brackets or indentation; `clusterforge schema` shows the structure",
                )
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            if parent is not None:
                self._where.pop()



def _construct_int(loader: Any, node: Any) -> int:
    try:
        return int(yaml.constructor.SafeConstructor.construct_yaml_int(loader, node))
    except ValueError:  # Python refuses int() of more than 4300 digits
        raise _LimitError(
            "(a number)", node.start_mark, f"the number {node.value[:20]}... has {len(node.value)} digits",
            "write a number of realistic size (counts and sizes here have fewer than 20 digits)",
        ) from None


class _SpecLoader(_Limits, yaml.SafeLoader):
    """``yaml.SafeLoader`` with the limits: the reference, and the loader of every error message."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._where = []


_SpecLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)

_CParser: Any
try:  # libyaml's scanner and parser, when PyYAML was built with it
    from yaml.cyaml import CParser as _CParser  # type: ignore[attr-defined]  # the stubs do not re-export it
except ImportError:
    _CParser = None
if _CParser is not None:

    class _CSpecLoader(_Limits, yaml.composer.Composer, _CParser,  # type: ignore[misc]  # _CParser: Any
                       yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """libyaml scans and parses (the pure-Python scanner is most of a spec's load time); the
        nodes are still composed here, one event at a time, so the depth limit and the field path
        hold as in ``_SpecLoader`` (libyaml's own composer would recurse in C without a limit)."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            yaml.composer.Composer.__init__(self)
            self._where = []

    _CSpecLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _expanded_size(node: yaml.Node) -> int:
    """How many values ``node`` stands for with aliases expanded (a shared node counts each time)."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def size(n: yaml.Node) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in busy:  # an alias inside its own anchor: a value that contains itself
            raise SpecError(f"line {n.start_mark.line + 1}: a YAML alias refers to a value that contains it")
        busy.add(id(n))
        total = 1
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(c) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in n.value)
        busy.discard(id(n))
        sizes[id(n)] = min(total, MAX_VALUES + 1)
        return sizes[id(n)]

    return size(node)


def _load_with(loader: Any, where: Path) -> Any:
    try:
        node = loader.get_single_node()
        if node is not None and _expanded_size(node) > MAX_VALUES:
            raise SpecError(
                f"{where}: the spec stands for more than {MAX_VALUES} values once its YAML aliases (*name) are "
                "expanded; write the values out, or use fewer nested aliases"
            )
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _load_yaml(text: str, where: Path) -> Any:
    """The spec's data: through libyaml when PyYAML has it, else (and for every error) pure Python.

    A file libyaml refuses is read again by ``_SpecLoader``, so the message is PyYAML's own, as it
    always was. So is one with a character PyYAML's reader refuses, or a tab: there the two
    disagree (libyaml reads ``n<TAB>ame: x`` as a key, PyYAML refuses it). libyaml also reads a
    few other broken texts PyYAML refuses (``{v? endor: amd}``); their odd keys then fail the
    schema with its message (tests/test_spec.py compares the two loaders)."""
    if _CParser is None or "\t" in text or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return _load_with(_SpecLoader(text), where)
    try:
        return _load_with(_CSpecLoader(text), where)
    except yaml.YAMLError:
        return _load_with(_SpecLoader(text), where)


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
            f"not {'an empty file' if data is None else type(data).__name__}; write one such as examples/local.yaml"
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
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise SpecError(
            f"spec file {str(p)!r}, line {line}: byte {exc.object[exc.start]:#04x} is not UTF-8 ({exc.reason}); "
            "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or remove that byte"
        ) from None
    except OSError as exc:
        raise SpecError(
            f"cannot read spec file {str(p)!r}: {exc.strerror or exc}; pass the path of a readable cluster YAML file"
        ) from None
    try:
        data = _load_yaml(text, p)
    except _LimitError as exc:
        raise SpecError(f"{p}: {exc.path} (line {exc.line}): {exc.why}. Fix: {exc.fix}.") from None
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{p}: not valid YAML{where}: {problem}. Check indentation and quoting there.") from None
    return parse_spec(data, str(p))
