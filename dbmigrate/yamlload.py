"""Load YAML remembering where every key came from, and explain errors by file:line.

    data, locate = load_yaml_with_lines("playbooks/x.yaml")
    try:
        Model.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error("playbooks/x.yaml", exc, locate, model=Model)

gives messages like
    playbooks/x.yaml:7: gates[1].kind: 'maybe' is not valid; expected one of manual, auto
Used for playbooks and inventories alike; knows nothing about either.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

import yaml
from pydantic import BaseModel, ValidationError

from dbmigrate.exceptions import ConfigError

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

Loc = tuple[Union[str, int], ...]

# Bounds on what a configuration file may be. Inventories and playbooks are a few
# kilobytes; these only stop hostile or broken input (a device, a YAML alias bomb
# whose expansion would be billions of nodes, nesting deep enough to exhaust the
# stack) with one clear line instead of a hang or a traceback.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_NODES = 100_000  # after alias expansion
MAX_DEPTH = 64


class Locator:
    """Maps a data path like ("gates", 1, "kind") to the 1-based line it was written on."""

    def __init__(self, lines: dict[Loc, int]) -> None:
        self.lines = lines

    def __call__(self, loc: Iterable[str | int]) -> int | None:
        loc = tuple(loc)
        # A missing key has no line of its own: point at the closest enclosing one.
        while loc not in self.lines and loc:
            loc = loc[:-1]
        return self.lines.get(loc)


# What finds the line a data path was written on: a Locator, or a function over one.
LineOf = Callable[[Iterable[str | int]], "int | None"]


def format_loc(loc: Iterable[str | int]) -> str:
    """("gates", 1, "kind") -> "gates[1].kind"."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def error_at(path: str | Path, locate: LineOf, loc: Loc, message: str, hint: str | None = None) -> ConfigError:
    """A ConfigError for one field, formatted like every other config message."""
    line = locate(loc)
    where = f"{path}:{line}" if line else f"{path}"
    field = format_loc(loc)
    return ConfigError(f"{where}: {field}: {message}" if field else f"{where}: {message}", hint=hint)


# --------------------------------------------------------------------------- loading


class _Loader(yaml.SafeLoader):
    """Safe loader; duplicate keys are caught while walking the node tree below."""


def read_config_text(path: str | Path, what: str = "file") -> str:
    """A configuration file's text: UTF-8, a regular file, at most MAX_FILE_BYTES.
    Every way it can be unreadable is one ConfigError naming the file."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory, not a {what}", hint="name the YAML file itself")
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file", hint="check the path (relative paths are from the current directory)")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}")
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MB; not a {what}",
                          hint="name the YAML file itself")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        column = exc.start - raw.rfind(b"\n", 0, exc.start)
        raise ConfigError(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {column})",
                          hint="save the file as UTF-8 (a Latin-1 accent in a comment is enough)") from None


def load_yaml_with_lines(path: str | Path, text: str | None = None) -> tuple[Any, Locator]:
    """Load YAML from `path` (or from `text`, named `path` in messages) with a line index."""
    path = Path(path)
    if text is None:
        text = read_config_text(path)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Locator({(): 1})
        _check_size(path, node)
        lines: dict[Loc, int] = {(): node.start_mark.line + 1}
        _index_lines(path, node, (), lines)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        column = f" (column {mark.column + 1})" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{path}{line}: YAML syntax error: {problem}{column}",
                          hint="check indentation and quoting around that line") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML syntax error: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep",
                          hint="inventories and playbooks are a few levels deep; check the file") from None
    finally:
        loader.dispose()
    return data, Locator(lines)


def _check_size(path: Path, root: yaml.Node) -> None:
    """Refuse an alias that contains itself, nesting past MAX_DEPTH, or an expansion
    past MAX_NODES. Sizes are memoized per node, so a bomb costs one pass over the
    nodes as written, not over their expansion."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int, open_nodes: set[int]) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigError(f"{path}:{node.start_mark.line + 1}: an alias refers to a node that contains it",
                              hint="YAML anchors (&x) and aliases (*x) may not be recursive here")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{path}:{node.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep",
                              hint="inventories and playbooks are a few levels deep; check the file")
        total = 1
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            open_nodes.add(key)
            children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
            for child in children:
                total += size(child, depth + 1, open_nodes)
                if total > MAX_NODES:
                    raise ConfigError(f"{path}:{node.start_mark.line + 1}: expands to more than {MAX_NODES:,} values "
                                      "(YAML aliases)", hint="an alias bomb? write the values out, or fewer aliases")
            open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root, 0, set())


def _index_lines(path: Path, node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":
                where = format_loc(loc + (key,))
                raise ConfigError(f"{path}:{line}: {where}: duplicate key '{key}' (first defined on line {seen[key]})",
                                  hint="a key may appear once per mapping; remove one of them")
            seen[key] = line
            lines[loc + (key,)] = line
            _index_lines(path, value_node, loc + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[loc + (i,)] = item.start_mark.line + 1
            _index_lines(path, item, loc + (i,), lines)


# --------------------------------------------------------------------------- validation errors


def _data_path(data: Any, loc: Loc) -> Loc:
    """Drop pydantic's union tags (e.g. 'list[str]') that are not keys of the data."""
    out: list[str | int] = []
    current = data
    for i, part in enumerate(loc):
        if isinstance(current, dict) and part in current:
            current = current[part]
            out.append(part)
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
            out.append(part)
        elif i == len(loc) - 1 and isinstance(part, str) and isinstance(current, dict):
            out.append(part)  # a missing key: keep it, it is what the message is about
    return tuple(out)


def _unwrap(tp: Any) -> list[Any]:
    """Candidate types behind Optional/Union/Annotated."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [t for arg in typing.get_args(tp) for t in _unwrap(arg) if t is not type(None)]
    return [tp]


def _model_at(model: type[BaseModel] | None, loc: Loc) -> type[BaseModel] | None:
    """Follow field annotations along loc to the model that owns the last key."""
    candidates: list[Any] = [model] if model is not None else []
    for part in loc:
        following: list[Any] = []
        for tp in (t for c in candidates for t in _unwrap(c)):
            if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str):
                field = tp.model_fields.get(part) or next(
                    (f for f in tp.model_fields.values() if f.alias == part), None)
                if field is not None:
                    following.append(field.annotation)
            elif typing.get_origin(tp) in (list, tuple, set, typing.Sequence) and isinstance(part, int):
                following.append(typing.get_args(tp)[0] if typing.get_args(tp) else Any)
            elif typing.get_origin(tp) is dict and isinstance(part, str):
                following.append(typing.get_args(tp)[1] if typing.get_args(tp) else Any)
        candidates = following
    for tp in (t for c in candidates for t in _unwrap(c)):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return tp
    return None


def _shown(value: Any, limit: int = 80) -> str:
    """repr of a value, cut in the middle when long: an error stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-limit // 4:]}"


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (empty value)"
    return f"{type(value).__name__} {_shown(value)}"


def _explain(error: ErrorDetails, model_here: type[BaseModel] | None) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    key = error["loc"][-1] if error["loc"] else ""
    if kind == "extra_forbidden":
        valid = ", ".join(f.alias or name for name, f in model_here.model_fields.items()) if model_here else ""
        return f"unknown key '{key}'" + (f"; valid keys: {valid}" if valid else "")
    if kind == "missing":
        return f"required key '{key}' is missing"
    if kind in ("literal_error", "enum"):
        choices = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        return f"{_shown(value)} is not valid; expected one of {choices}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping (key: value), got {_kind(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list, got {_kind(value)}"
    if kind == "string_type":
        return f"expected a string, got {_kind(value)}"
    message = str(error["msg"])
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    message = message[:1].lower() + message[1:]
    if isinstance(value, (dict, list)) or value is None:
        return message
    return f"{_shown(value)} is not valid: {message}"


_TYPE_EXPECTED = {
    "string_type": "a string", "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
    "int_type": "an integer", "int_parsing": "an integer", "float_type": "a number", "float_parsing": "a number",
    "bool_type": "a boolean", "bool_parsing": "a boolean",
}


def _explain_union(errors: list[ErrorDetails]) -> str:
    """Several union arms failed on one field: the arm that got the right type says the most."""
    constraint = [e for e in errors if e["type"] not in _TYPE_EXPECTED]
    if constraint:
        return _explain(constraint[0], None)
    expected = " or ".join(dict.fromkeys(_TYPE_EXPECTED[e["type"]] for e in errors))
    return f"expected {expected}, got {_kind(errors[0].get('input'))}"


def format_validation_error(
    path: str | Path,
    exc: ValidationError,
    locate: LineOf,
    *,
    data: Any = None,
    model: type[BaseModel] | None = None,
    prefix: Loc = (),
) -> ConfigError:
    """One line per problem, ordered by line: `file:line: field: what is wrong; what is valid`.

    `data` (the loaded YAML) lets union tags be dropped from field names;
    `model` lets unknown-key errors list the valid keys; `prefix` places a
    nested validation (e.g. a procedure's params) inside the file.
    """
    grouped: dict[Loc, list[ErrorDetails]] = {}
    for error in exc.errors(include_url=False):
        loc = prefix + tuple(error["loc"])
        if data is not None:
            loc = _data_path(data, loc)
        grouped.setdefault(loc, []).append(error)
    entries: list[tuple[int, str]] = []
    for loc, errors in grouped.items():
        line = locate(loc) or 0
        where = f"{path}:{line}" if line else str(path)
        field = format_loc(loc)
        explained = _explain_union(errors) if len(errors) > 1 else _explain(
            errors[0], _model_at(model, loc[len(prefix):-1]) if errors[0]["type"] == "extra_forbidden" else None)
        entries.append((line, f"{where}: {field}: {explained}" if field else f"{where}: {explained}"))
    entries.sort(key=lambda e: e[0])
    return ConfigError("\n".join(text for _, text in entries), hint=f"fix {path} and try again")
