"""`shape capture`: what a rehearsal needs to look like production, without the data.

Written to DIR:
  shape.json   per schema: tables (CREATE statement, rows, bytes, partitioned, sampled column
               statistics: null share, distinct share, numeric range, string lengths; never a
               value of a string or blob), views, routines, triggers, events; the accounts and
               their grants (secrets redacted); the session settings the applications' open
               sessions use, where performance_schema shows them
  schema.sql   the CREATE statements in an order a server can load
  digest.json  with --seconds: a query window digested into classes (rates, samples), the
               samples' literals redacted unless asked
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

from dbmigrate.db.connection import Server
from dbmigrate.db.shape_reader import Measured, ShapeReader, load_script
from dbmigrate.shape.pacing import Pacer

FORMAT = "dbmigrate.shape/1"
SAMPLE_ROWS = 1000
_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"")
_HEX = re.compile(r"(?<![\w.`])(?:0x[0-9a-f]+|x'[0-9a-f]*')(?![\w.`])", re.IGNORECASE)  # blobs in a log
_NUMBER = re.compile(r"(?<![\w.`])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.`])", re.IGNORECASE)


def redact_literals(statement: str) -> str:
    """Strings and numbers of a sample statement replaced by placeholders (identifiers kept)."""
    return _NUMBER.sub("0", _STRING.sub("'?'", _HEX.sub("'?'", statement)))


def column_stats(columns: list[str], rows: list[tuple[Any, ...]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    n = len(rows)
    for i, col in enumerate(columns):
        values = [r[i] for r in rows]
        present = [v for v in values if v is not None]
        st: dict[str, Any] = {"sampled": n, "null_share": round(1 - len(present) / n, 4) if n else None}
        if present and all(isinstance(v, Measured) for v in present):
            # a long value sampled as its length and CRC32 (its bytes never left the server)
            lengths = [v.length for v in present]
            st.update(distinct_share=round(len({v for v in present}) / len(present), 4),
                      avg_len=round(statistics.fmean(lengths), 1), max_len=max(lengths))
        elif present:
            try:
                st["distinct_share"] = round(len(set(present)) / len(present), 4)
            except TypeError:
                pass
            if all(isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in present):
                st.update(min=min(present), max=max(present))
            elif all(isinstance(v, (datetime.date, datetime.timedelta)) for v in present):
                # the range keeps generated rows inside range partitions; a date says nothing private
                st.update(min=str(min(present)), max=str(max(present)))
            elif all(isinstance(v, (str, bytes, bytearray)) for v in present):
                lengths = [len(v) for v in present]
                st.update(avg_len=round(statistics.fmean(lengths), 1), max_len=max(lengths))
        out[col] = st
    return out


@dataclass
class Shape:
    captured_from: str
    schemas: dict[str, Any] = field(default_factory=dict)
    accounts: list[dict[str, Any]] = field(default_factory=list)
    roles: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[str, Any] = field(default_factory=dict)
    digest: str | None = None
    digest_source: str | None = None  # which query window: wire, performance_schema or the slow log
    digest_classes: int | None = None  # how many query classes the window captured
    took_s: float = 0.0
    paced: dict[str, Any] = field(default_factory=dict)  # reads, time reading, time paused

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "captured_from": self.captured_from, "took_s": round(self.took_s, 2),
                "paced": self.paced,
                "schemas": self.schemas, "accounts": self.accounts, "roles": self.roles, "sessions": self.sessions,
                "digest": self.digest, "digest_source": self.digest_source,
                "digest_classes": self.digest_classes}

    def schema_sql(self) -> str:
        return load_script(self.schemas)


def capture_shape(server: Server, schemas: list[str] | None = None, *, sample_rows: int = SAMPLE_ROWS,
                  pacer: Pacer | None = None, progress: Callable[[str], None] | None = None) -> Shape:
    """Every read is a catalog read or a bounded sample, one at a time, each followed by a pause
    (`pacer`) so that the capture takes a bounded share of the server's time, never a burst."""
    reader = ShapeReader(server)
    pace = pacer or Pacer()
    say = progress or (lambda message: None)
    t0 = time.monotonic()
    shape = Shape(captured_from=server.name)
    persistent = reader.stats_on_metadata()
    if persistent:
        say(f"{server.name} has innodb_stats_on_metadata=ON: each table's size is read from the persistent "
            "statistics (mysql.innodb_table_stats), not information_schema.TABLES, which would recompute them")
    with pace:
        names = schemas or reader.user_schemas()
    for schema in names:
        with pace:
            listed = reader.tables_from_persistent_stats(schema) if persistent else reader.tables(schema)
        tables = []
        for t in listed:
            with pace:
                t["create"] = reader.create_statement(schema, t["name"], t["type"])
            if persistent and t["type"] == "table":
                t.update(reader.table_options(t["create"]))
            if t["type"] == "table":
                cols: list[str] = []
                rows: list[tuple[Any, ...]] = []
                for cols, batch in pace.each(reader.sample(schema, t["name"], sample_rows)):
                    rows += batch
                t["columns"] = column_stats(cols, rows)
                t["has_primary_key"] = "PRIMARY KEY" in t["create"].upper()
                t["foreign_keys"] = t["create"].upper().count("FOREIGN KEY")
            tables.append(t)
        with pace:
            routines, triggers, events = reader.routines(schema), reader.triggers(schema), reader.events(schema)
        objects: dict[str, list[dict[str, str]]] = {"routines": [], "triggers": [], "events": []}
        for key, kinds in (("routines", routines), ("triggers", [("trigger", n) for n in triggers]),
                           ("events", [("event", n) for n in events])):
            for kind, n in kinds:
                with pace:
                    create = reader.create_statement(schema, n, kind)
                objects[key].append({"type": kind, "name": n, "create": create} if key == "routines"
                                    else {"name": n, "create": create})
        shape.schemas[schema] = {"tables": tables, **objects}
        say(f"{schema}: {len(tables)} table(s) and view(s)")
    # Roles and PROXY grants: which roles exist with their privileges, who holds each (an
    # account, or another role), which an account's sessions start with, and who may act as whom.
    with pace:
        held, defaults, proxies = reader.role_grants(), reader.default_roles(), reader.proxies()

    def roles_of(user: str, host: str, rows: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{"name": r["role"], "host": r["role_host"]} for r in rows if (r["user"], r["host"]) == (user, host)]

    with pace:
        roles = reader.roles()
    for name, host in roles:
        with pace:
            shape.roles.append({"name": name, "host": host, "grants": reader.role_privileges(name, host),
                                "roles": roles_of(name, host, held)})
    with pace:
        accounts = reader.accounts()
    for user, host in accounts:
        with pace:
            shape.accounts.append({"user": user, "host": host, "grants": reader.grants(user, host),
                                   "roles": roles_of(user, host, held),
                                   "default_roles": roles_of(user, host, defaults),
                                   "proxies": [{"user": p["proxied_user"], "host": p["proxied_host"],
                                                "with_grant": p["with_grant"]}
                                               for p in proxies if (p["user"], p["host"]) == (user, host)]})
    with pace:
        shape.sessions = reader.session_overrides()
    shape.took_s = time.monotonic() - t0
    shape.paced = pace.summary()
    return shape


def write_shape(shape: Shape, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "shape.json", out / "schema.sql"]
    written[0].write_text(json.dumps(shape.to_dict(), indent=2, default=str) + "\n")
    written[1].write_text(shape.schema_sql())
    return written
