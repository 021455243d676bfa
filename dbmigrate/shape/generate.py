"""Generated rows shaped like a captured table: as many as its row count times a scale, each
column's values drawn from its type and its captured statistics (null share, distinct share,
numeric and date range, string and blob lengths). Nothing here was ever a production value.

- An AUTO_INCREMENT or generated column is left to the server, so the ids are 1..n.
- A foreign key column takes ids of its parent table (1..the parent's generated rows).
- A primary or unique key column gets distinct values; a column whose sample had few distinct
  values (a status) draws from as few.
- Dates stay inside the captured range, so rows fall in the captured range partitions.

Pure: the columns come in as dicts read from the server's catalog (db/shape_reader.py).
"""

from __future__ import annotations

import datetime
import math
import random
import re
import string
from dataclasses import dataclass, field
from typing import Any

from dbmigrate.exceptions import UsageError

_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_TEXT = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
_BINARY = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
_ALPHABET = string.ascii_letters + string.digits  # fits ascii, latin1 and utf8 columns alike
_FK = re.compile(r"FOREIGN KEY \(([^)]*)\) REFERENCES (?:`[^`]+`\.)?`([^`]+)` \(([^)]*)\)", re.IGNORECASE)
# Generated strings and blobs are capped: a scale rehearsal needs the shape, not 4 GB longblobs.
MAX_GENERATED_BYTES = 256 * 1024


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str
    column_type: str
    nullable: bool
    max_len: int | None = None
    scale: int | None = None
    extra: str = ""
    key: str = ""

    @classmethod
    def from_catalog(cls, row: dict[str, Any]) -> "Column":
        return cls(name=str(row["name"]), data_type=str(row["data_type"]).lower(),
                   column_type=str(row["column_type"]).lower(), nullable=str(row["nullable"]).upper() == "YES",
                   max_len=int(row["max_len"]) if row.get("max_len") is not None else None,
                   scale=int(row["scale"]) if row.get("scale") is not None else None,
                   extra=str(row.get("extra") or "").lower(), key=str(row.get("key") or "").upper())

    @property
    def server_fills(self) -> bool:
        return "auto_increment" in self.extra or "generated" in self.extra

    @property
    def unique(self) -> bool:
        return self.key in ("PRI", "UNI")


def scaled_rows(captured_rows: int, scale: float) -> int:
    """ceil(rows x scale): a table that had rows keeps at least one."""
    return math.ceil(max(captured_rows, 0) * scale)


def foreign_keys(create: str) -> dict[str, str]:
    """Child column -> parent table, for single-column foreign keys of a CREATE TABLE."""
    out = {}
    for cols, parent, _ in _FK.findall(create):
        names = [c.strip().strip("`") for c in cols.split(",")]
        if len(names) == 1:
            out[names[0]] = parent
    return out


def enum_values(column_type: str) -> list[str]:
    inner = column_type[column_type.index("(") + 1:column_type.rindex(")")]
    return [v.replace("''", "'") for v in re.findall(r"'((?:[^']|'')*)'", inner)]


@dataclass
class ValueSource:
    """Values for one table's columns: rows to load, and values for a replayed statement's
    parameters (lookups by id land on generated rows)."""

    table: str
    columns: list[Column]
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: int = 0
    parents: dict[str, int] = field(default_factory=dict)  # column -> parent table's generated rows
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    _pools: dict[str, list[Any]] = field(default_factory=dict)
    _serial: int = 0

    def __post_init__(self) -> None:
        for c in self.columns:
            if c.data_type not in _INT_BITS and c.data_type not in _TEXT + _BINARY + (
                    "decimal", "numeric", "float", "double", "real", "date", "datetime", "timestamp", "time",
                    "year", "enum", "set", "bit", "json") and not c.nullable:
                raise UsageError(f"the shape's table {self.table} has a NOT NULL column {c.name} of type "
                                 f"{c.column_type}, which the data generator does not make",
                                 hint="make the column nullable in the shape's schema.sql, or rehearse "
                                      "without that table")

    @property
    def loaded_columns(self) -> list[Column]:
        return [c for c in self.columns if not c.server_fills]

    def continue_after(self, offset: int) -> None:
        """Unique values from here on start past the loaded rows' (and past other replayers')."""
        self._serial = self.rows + offset

    def row(self) -> tuple[Any, ...]:
        return tuple(self.value(c) for c in self.loaded_columns)

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name.lower() == name.lower()), None)

    def parameter(self, name: str) -> Any:
        """A value for `column = ?` in a replayed statement: an existing id for a key that the
        server fills, else a value shaped like the column's."""
        c = self.column(name)
        if c is None:
            return None
        if "auto_increment" in c.extra:
            return self.rng.randint(1, max(1, self.rows))
        return self.value(c, for_lookup=True)

    def value(self, c: Column, for_lookup: bool = False) -> Any:
        st = self.stats.get(c.name) or {}
        if c.nullable and not for_lookup and self.rng.random() < float(st.get("null_share") or 0):
            return None
        if c.name in self.parents:
            return self.rng.randint(1, max(1, self.parents[c.name]))
        distinct = float(st.get("distinct_share") or 1.0)
        if not c.unique and distinct < 0.5 and c.data_type not in ("enum", "set"):
            pool = self._pools.setdefault(c.name, [])
            size = max(1, round(distinct * max(self.rows, 1)))
            if len(pool) < size:
                pool.append(self._fresh(c, st))
            return self.rng.choice(pool)
        return self._fresh(c, st)

    def _fresh(self, c: Column, st: dict[str, Any]) -> Any:
        t, rng = c.data_type, self.rng
        if c.unique:
            self._serial += 1
        if t in _INT_BITS:
            unsigned = "unsigned" in c.column_type
            bits = _INT_BITS[t]
            lo_t, hi_t = (0, 2 ** bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            if c.unique:
                return min(hi_t, _num(st.get("min"), 1) + self._serial * 7 + rng.randint(0, 6))
            lo, hi = _num(st.get("min"), 1), _num(st.get("max"), 1000)
            return max(lo_t, min(hi_t, rng.randint(int(min(lo, hi)), int(max(lo, hi)))))
        if t in ("decimal", "numeric", "float", "double", "real"):
            lo, hi = _num(st.get("min"), 0), _num(st.get("max"), 1000)
            return round(rng.uniform(min(lo, hi), max(lo, hi)), c.scale if c.scale is not None else 4)
        if t in ("date", "datetime", "timestamp"):
            first = _when(st.get("min"), datetime.datetime(2024, 1, 1))
            last = _when(st.get("max"), datetime.datetime(2025, 12, 31))
            at = first + (last - first) * rng.random()
            return at.date() if t == "date" else at.replace(microsecond=0 if "(" not in c.column_type else
                                                              at.microsecond)
        if t == "time":
            return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        if t == "year":
            return rng.randint(int(_num(st.get("min"), 2000)), int(_num(st.get("max"), 2030)))
        if t == "enum":
            return rng.choice(enum_values(c.column_type) or [""])
        if t == "set":
            values = enum_values(c.column_type)
            return ",".join(v for v in values if rng.random() < 0.5)
        if t == "bit":
            return rng.randint(0, 1)
        if t == "json":
            return "{}"
        if t in _TEXT or t in _BINARY:
            cap = min(c.max_len or MAX_GENERATED_BYTES, MAX_GENERATED_BYTES)
            avg = _num(st.get("avg_len"), min(cap, 16))
            n = max(0, min(cap, int(rng.gauss(avg, max(1.0, avg / 10)))))
            if c.unique:
                n = max(n, 8)
                text = f"{self._serial:x}-" + "".join(rng.choices(_ALPHABET, k=max(0, n - 10)))
                text = text[:cap] if cap >= 8 else text[-cap:]
                return text.encode() if t in _BINARY else text
            if t in _BINARY:
                return rng.randbytes(n)
            return "".join(rng.choices(_ALPHABET, k=n))
        return None  # nullable column of a type not generated (checked in __post_init__)


def _num(value: Any, default: float) -> float:
    try:
        return float(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _when(value: Any, default: datetime.datetime) -> datetime.datetime:
    if value is None:
        return default
    text = str(value)
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.datetime.strptime(text, fmt)
        except ValueError:
            continue
    return default
