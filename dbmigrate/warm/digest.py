"""Read queries worth replaying, from pt-query-digest's JSON output.

pt-query-digest runs on a slow log file (no server connection, so no credentials
involved). Its JSON has top-level `classes[]`, each with `fingerprint`,
`query_count`, `example.query`, `tables[]` (as SHOW statements) and
`metrics.{Query_time,db,...}` whose values are all strings.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbmigrate.exceptions import UsageError
from dbmigrate.warm.readonly import refusal

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})

_SHOW_CREATE = re.compile(r"SHOW CREATE TABLE `((?:[^`]|``)+)`\.`((?:[^`]|``)+)`")


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
        return float(v)
    except (TypeError, ValueError):
        return default


def parse_classes(data: Any, origin: str) -> list[DigestClass]:
    if not isinstance(data, dict) or not isinstance(data.get("classes"), list):
        raise UsageError(f"{origin} is not pt-query-digest JSON (no top-level 'classes' list)",
                         hint="produce it with: pt-query-digest --output json --limit 100%:1000 SLOW_LOG")
    out = []
    for c in data["classes"]:
        example = (c.get("example") or {}).get("query") or ""
        metrics = c.get("metrics") or {}
        db = (metrics.get("db") or {}).get("value")
        tables = []
        for t in c.get("tables") or []:
            m = _SHOW_CREATE.search(str(t.get("create", "")))
            if m:
                tables.append(f"{m.group(1).replace('``', '`')}.{m.group(2).replace('``', '`')}")
        out.append(DigestClass(
            fingerprint=str(c.get("fingerprint") or ""), example=example, db=db or None,
            query_count=int(_num(c.get("query_count"))),
            total_time=_num((metrics.get("Query_time") or {}).get("sum")), tables=tuple(dict.fromkeys(tables))))
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
                              "few minutes), or use --method scan --tables schema.table,...")
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
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}: not valid JSON ({e})")
        return parse_classes(data, str(path))
    return parse_classes(run_pt_query_digest(path), str(path))
