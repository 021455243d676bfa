"""Planning from a file of measured sizes (`consolidate plan --sizes FILE`), YAML or CSV.

One row per shard: the old server, the shard (schema), its size, its working set and
its query rate. Sizes take bytes or a unit (`120G`, `2.2T`, `512MiB`); a missing
working set is the planning fraction of the size. Every row is validated: the first
bad one is reported as FILE:LINE with the shard, the field and what would be valid.

CSV (a header row names the columns, any order):

    server,shard,bytes,working_set,qps
    db-01,shard_001,107374182400,21474836480,350

YAML (a list, or a mapping with `shards:`):

    shards:
      - {server: db-01, shard: shard_001, bytes: 100G, working_set: 20G, qps: 350}
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Annotated, Any, Mapping, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from dbmigrate.exceptions import ConfigError
from dbmigrate.procedures.consolidate.demand import ShardDemand
from dbmigrate.yamlload import load_yaml_with_lines

UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4, "p": 1024 ** 5}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_NAME = r"^[A-Za-z0-9_$][A-Za-z0-9_$-]{0,63}$"
ALIASES = {"size": "bytes", "size_bytes": "bytes", "working_set_bytes": "working_set", "ws": "working_set",
           "queries_per_second": "qps", "schema": "shard", "source": "server"}


def parse_size(value: Any) -> Any:
    """Bytes from 123, "123", "1.5G", "2.2TiB", "512 MB" (binary units); anything else is left to fail."""
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            return int(float(m.group(1)) * UNITS[m.group(2).lower()])
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Size = Annotated[int, BeforeValidator(parse_size), Field(ge=0)]


class SizeRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = Field(min_length=1, max_length=255)
    shard: str = Field(pattern=_NAME)
    bytes: Size
    working_set: Optional[Size] = None
    qps: float = Field(ge=0)  # required: a plan for 0 qps sizes no CPU at all


def _rows_from_yaml(path: Path, text: str) -> list[tuple[int | None, dict[str, Any]]]:
    data, locate = load_yaml_with_lines(path, text)
    rows = data.get("shards") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise ConfigError(f"{path}:1: a sizes file is a list of rows, or a mapping with `shards:` holding one",
                          hint="each row: {server: ..., shard: ..., bytes: ..., working_set: ..., qps: ...}")
    prefix = ("shards",) if isinstance(data, dict) else ()
    return [(locate((*prefix, i)), row) for i, row in enumerate(rows)]


def _rows_from_csv(path: Path, text: str) -> list[tuple[int | None, dict[str, Any]]]:
    reader = csv.reader(io.StringIO(text))
    lines = [(n, row) for n, row in enumerate(reader, 1) if any(c.strip() for c in row) and not row[0].startswith("#")]
    if not lines:
        raise ConfigError(f"{path}: no rows", hint="first line: server,shard,bytes,working_set,qps")
    header_line, header = lines[0]
    columns = [ALIASES.get(c.strip().lower(), c.strip().lower()) for c in header]
    missing = [c for c in ("server", "shard", "bytes", "qps") if c not in columns]
    if missing:
        # Without qps the planner would size CPU for 0 queries per second: no silent default.
        raise ConfigError(f"{path}:{header_line}: the header names no column {', '.join(missing)}",
                          hint="first line: server,shard,bytes,working_set,qps (qps: the shard's measured queries "
                               "per second, 0 for an idle one)")
    out: list[tuple[int | None, dict[str, Any]]] = []
    for n, row in lines[1:]:
        if len(row) != len(columns):
            raise ConfigError(f"{path}:{n}: {len(row)} values for {len(columns)} columns ({', '.join(columns)})")
        out.append((n, {c: v.strip() for c, v in zip(columns, row) if v.strip() != ""}))
    return out


def _describe(row: Any) -> str:
    if isinstance(row, dict) and row.get("shard"):
        return f"shard {row['shard']}" + (f" on {row['server']}" if row.get("server") else "") + ": "
    return ""


def load_sizes(path: str | Path, working_set_fraction: float = 0.25) -> list[ShardDemand]:
    """Shard demands from a sizes file; raises ConfigError (exit 2) naming file, line and field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file", hint="give a YAML or CSV file of measured shard sizes") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    rows = _rows_from_csv(path, text) if path.suffix.lower() == ".csv" else _rows_from_yaml(path, text)
    if not rows:
        raise ConfigError(f"{path}: no shards listed")
    out: list[ShardDemand] = []
    seen: dict[str, tuple[str, int | None]] = {}
    for line, raw in rows:
        where = f"{path}:{line}" if line else str(path)
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: a row is a mapping of server, shard, bytes, working_set, qps")
        raw = {ALIASES.get(str(k).lower(), str(k).lower()): v for k, v in raw.items()}
        try:
            row = SizeRow.model_validate(raw)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "row"
            given = f" (got {err['input']!r})" if field in raw else ""
            raise ConfigError(f"{where}: {_describe(raw)}{field}: {_explain(field, err)}{given}",
                              hint=f"valid fields: {', '.join(SizeRow.model_fields)}; sizes in bytes or "
                                   "with a unit like 120G") from None
        if row.shard in seen:
            other_server, other_line = seen[row.shard]
            raise ConfigError(f"{where}: shard {row.shard} is listed twice (also on {other_server}"
                              f"{f', line {other_line}' if other_line else ''}); shard names are unique")
        seen[row.shard] = (row.server, line)
        ws = row.working_set if row.working_set is not None else int(row.bytes * working_set_fraction)
        est = {"size": f"from {path.name}",
               "working_set": f"from {path.name}" if row.working_set is not None
               else f"{working_set_fraction:g} of size (not in {path.name})",
               "qps": f"from {path.name}"}
        out.append(ShardDemand(row.shard, row.server, row.bytes, ws, row.qps, est))
    return out


def _explain(field: str, err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "missing" + (" (the shard's measured queries per second; 0 for an idle one)" if field == "qps" else "")
    if kind == "extra_forbidden":
        return "unknown field"
    if field in ("bytes", "working_set") and kind in ("int_parsing", "int_type", "int_from_float"):
        return "not a size"
    if field == "shard" and kind == "string_pattern_mismatch":
        return "not a schema name (letters, digits, _, $ and -, at most 64)"
    return str(err.get("msg", "invalid"))
