"""Read queries worth replaying, from pt-query-digest's JSON output.

pt-query-digest runs on a slow log file (no server connection, so no credentials
involved). Its JSON has top-level `classes[]`, each with `fingerprint`,
`query_count`, `example.query`, `tables[]` (as SHOW statements) and
`metrics.{Query_time,db,...}` whose values are all strings.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbmigrate.exceptions import UsageError
from dbmigrate.warm.readonly import refusal

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})

_SHOW_CREATE = re.compile(r"SHOW CREATE TABLE `((?:[^`]|``)+)`\.`((?:[^`]|``)+)`")
_QUOTED_TABLE = re.compile(r"`((?:[^`]|``)+)`\.`((?:[^`]|``)+)`")
DBMIGRATE_DIGEST = "dbmigrate.digest/1"  # the file `dbmigrate digest capture` writes
MAX_JSON_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class DigestClass:
    fingerprint: str
    example: str
    db: str | None
    query_count: int
    total_time: float
    tables: tuple[str, ...] = ()  # 'schema.table'

    @property
    def user_tables(self) -> tuple[str, ...]:
        return tuple(t for t in self.tables if t.split(".", 1)[0].lower() not in SYSTEM_SCHEMAS)


@dataclass
class ReplayPlan:
    """The SELECT classes to replay (heaviest first) and what was left out, with why."""

    classes: list[DigestClass]
    refused: list[tuple[str, str]] = field(default_factory=list)  # (fingerprint, reason)
    origin: str = ""

    def hot_tables(self) -> list[str]:
        """Tables the replayed classes read, heaviest total query time first."""
        weight: dict[str, float] = {}
        for c in self.classes:
            for t in c.user_tables:
                weight[t] = weight.get(t, 0.0) + c.total_time
        return sorted(weight, key=lambda t: (-weight[t], t))


def _num(v: Any, default: float = 0.0) -> float:
    try:
        number = float(v)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) and number >= 0 else default


def _table(m: re.Match[str]) -> str:
    return f"{m.group(1).replace('``', '`')}.{m.group(2).replace('``', '`')}"


def parse_classes(data: Any, origin: str) -> list[DigestClass]:
    """Classes from pt-query-digest JSON or from a dbmigrate digest file."""
    if not isinstance(data, dict) or not isinstance(data.get("classes"), list):
        raise UsageError(f"{origin} is not pt-query-digest JSON (no top-level 'classes' list)",
                         hint="produce it with: pt-query-digest --output json --limit 100%:1000 SLOW_LOG")
    ours = data.get("format") == DBMIGRATE_DIGEST
    out = []
    for i, c in enumerate(data["classes"]):
        if not isinstance(c, dict):
            raise UsageError(f"{origin}: classes[{i}] is not an object")
        if ours:  # example is the query text, tables are `schema`.`table`, count and total_time are numbers
            example, db = str(c.get("example") or ""), None
            tables = [_table(m) for t in c.get("tables") or [] for m in [_QUOTED_TABLE.search(str(t))] if m]
            count, total = c.get("count"), c.get("total_time")
        else:
            ex = c.get("example")
            example = str((ex.get("query") if isinstance(ex, dict) else None) or "")
            raw_metrics = c.get("metrics")
            metrics = raw_metrics if isinstance(raw_metrics, dict) else {}
            dbm = metrics.get("db")
            db = dbm.get("value") if isinstance(dbm, dict) else None
            tables = [_table(m) for t in c.get("tables") or [] if isinstance(t, dict)
                      for m in [_SHOW_CREATE.search(str(t.get("create", "")))] if m]
            qt = metrics.get("Query_time")
            count, total = c.get("query_count"), qt.get("sum") if isinstance(qt, dict) else None
        out.append(DigestClass(
            fingerprint=str(c.get("fingerprint") or ""), example=example, db=str(db) if db else None,
            query_count=int(_num(count)), total_time=_num(total), tables=tuple(dict.fromkeys(tables))))
    return out


def plan_replay(classes: list[DigestClass], origin: str, limit: int = 1000) -> ReplayPlan:
    """Keep the SELECT classes that read user tables; refuse the rest, saying why."""
    kept: list[DigestClass] = []
    refused: list[tuple[str, str]] = []
    for c in sorted(classes, key=lambda c: -c.total_time):
        reason = refusal(c.example) if c.example else "no example query"
        if reason is None and not c.user_tables:
            reason = "reads no user table"
        if reason:
            refused.append((c.fingerprint or c.example[:60], reason))
        else:
            kept.append(c)
    if not kept:
        seen = ", ".join(sorted({r for _, r in refused})) or "no classes at all"
        raise UsageError(f"{origin}: none of its {len(classes)} query classes is a replayable SELECT on a user table "
                         f"({seen})",
                         hint="digest a slow log taken while the server served reads (long_query_time=0 for a "
                              "few minutes; sessions that set their own long_query_time, as some pools do, are "
                              "logged only after they reconnect), or use --method scan --tables schema.table,...")
    return ReplayPlan(kept[:limit], refused, origin)


def run_pt_query_digest(slow_log: Path, timeout: float = 600) -> dict[str, Any]:
    """pt-query-digest --output json on a local slow log file."""
    from dbmigrate.tools import percona

    if not slow_log.is_file():
        raise UsageError(f"slow log {slow_log} does not exist")
    if slow_log.stat().st_size == 0:
        raise UsageError(f"slow log {slow_log} is empty",
                         hint="enable it with slow_query_log=ON and long_query_time=0 while the server serves reads")
    # Our own tagged statements stay in: they are refused below unless they read user tables.
    report = percona.run_query_digest(slow_log, timeout_s=timeout, exclude_own=False).report
    return report if report.get("classes") is not None else {"classes": []}


def load_digest(path: Path) -> list[DigestClass]:
    """Classes from a slow log (digested here) or from a saved pt-query-digest JSON file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path} does not exist", hint="give a slow log or a pt-query-digest JSON file")
    with path.open("rb") as f:
        head = f.read(64).lstrip()
    if head.startswith(b"{"):
        if path.stat().st_size > MAX_JSON_BYTES:
            raise UsageError(f"{path} is larger than {MAX_JSON_BYTES // (1024 * 1024)} MB: not a digest")
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise UsageError(f"{path}: not valid JSON ({' '.join(str(e).split())[:120]})") from None
        return parse_classes(data, str(path))
    return parse_classes(run_pt_query_digest(path), str(path))
