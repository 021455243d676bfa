"""YAML loading that remembers where every value came from, so that an error in
an inventory or playbook names the file, the line and the field, and says what
would be valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import yaml
from pydantic import BaseModel, ValidationError

from dbmigrate.exceptions import ConfigError

Locator = Callable[[Sequence[Any]], int]


def _check_duplicates(node: yaml.Node, path: Path) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key, value in node.value:
            k = key.value if isinstance(key, yaml.ScalarNode) else None
            if k in seen:
                raise ConfigError(f"{path}:{key.start_mark.line + 1}: duplicate key '{k}' "
                                  f"(first defined on line {seen[k]})", hint="keep only one of them")
            seen[k] = key.start_mark.line + 1
            _check_duplicates(value, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicates(item, path)


def load_yaml_with_lines(path: str | Path, text: str | None = None) -> tuple[Any, Locator]:
    path = Path(path)
    if text is None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ConfigError(f"{path}: file not found") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: YAML syntax error: {getattr(e, 'problem', e)}",
                          hint="fix the indentation or quoting on that line") from None
    if root is None:
        raise ConfigError(f"{path}: file is empty")
    _check_duplicates(root, path)
    data = yaml.SafeLoader(text).get_single_data()

    def locate(loc: Sequence[Any]) -> int:
        node, line = root, root.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if k.value == str(part) or k.value == part:
                        node, line = v, k.start_mark.line + 1
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line

    return data, locate


def _field_name(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _valid_keys(model: type[BaseModel], loc: Sequence[Any]) -> list[str] | None:
    """The keys allowed at the mapping that holds loc[-1], walking the model types."""
    import typing

    current: Any = model
    for part in loc[:-1]:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        else:
            origin = typing.get_origin(current)
            args = typing.get_args(current)
            if origin in (dict,) and args:
                current = args[-1]
            elif origin in (list, tuple) and args:
                current = args[0]
            else:
                return None
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return None


def _unwrap(tp: Any) -> Any:
    import typing
    origin = typing.get_origin(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    return tp


def format_validation_error(path: str | Path, exc: ValidationError, locate: Locator,
                            model: type[BaseModel] | None = None) -> ConfigError:
    """Turn pydantic's error list into one actionable ConfigError (first error, plus a count)."""
    errors = exc.errors(include_url=False)
    lines = []
    for err in errors:
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "tagged-union")))]
        line = locate(loc)
        field = _field_name(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            valid = _valid_keys(model, loc) if model else None
            msg = f"unknown key '{loc[-1]}'" + (f"; valid keys: {', '.join(valid)}" if valid else "")
        elif kind == "missing":
            msg = "is required but missing"
        elif kind in ("literal_error", "enum"):
            expected = err.get("ctx", {}).get("expected", "")
            msg = f"{err.get('input')!r} is not valid; expected {expected}"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], (dict, list)) and kind != "value_error":
                msg += f" (got {err['input']!r})"
        lines.append(f"{path}:{line}: {field}: {msg}")
    more = f" (and {len(lines) - 1} more: " + "; ".join(lines[1:4]) + ")" if len(lines) > 1 else ""
    return ConfigError(lines[0] + more, hint="fix the field named above; `--help` of the command shows the expected file format")
