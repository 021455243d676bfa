"""The captured query classes replayed at their captured rates through a client that behaves
like an application's pool (Go's database/sql), not like a polite one:

- one pool per account, connections opened lazily (only when none is idle) through the
  router's address (or where a DSN file names the writer, read only when a connection is
  opened), reused most-recently-returned first;
- a connection that returned an SQL error (1290 read-only, 1176 unknown key, 1142 denied)
  goes back into the pool and is used again; only a connection that is gone is thrown away;
- every new connection sets the account's own session variables (captured, or declared in
  sessions.yaml: sql_mode, long_query_time, ...);
- every statement is a server-side prepared statement, its parameters generated to fit the
  columns they meet (shape/replay_plan.py, shape/generate.py).

Each execution is recorded (when, latency, error code), so a rehearsal reports per class and per
phase: count, p50, p99 and errors. It stands in for the application: its statements stay here.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import mysql.connector

from dbmigrate.db.credentials import Credentials
from dbmigrate.digest.model import QueryClass, nearest_rank
from dbmigrate.db.grants import parse as parse_grant
from dbmigrate.shape.files import ShapeFiles
from dbmigrate.shape.generate import ValueSource
from dbmigrate.shape.replay_plan import ReplayStatement, plan
from dbmigrate.rehearsal.shape_load import LoadedShape

GONE = {2006, 2013, 2055, 1927, 4031, 2003, 2002}  # the connection is gone: the pool discards it
MAX_RATE = 200.0  # per class: a rehearsal on a shared 2-core host replays shape, not peak load


@dataclass
class _Conn:
    conn: Any
    prepared: dict[str, Any] = field(default_factory=dict)


class Pool:
    """database/sql-like: lazy opens, idle connections kept after SQL errors."""

    def __init__(self, address: "tuple[str, int] | Callable[[], tuple[str, int]]", creds: Credentials,
                 session: dict[str, str], size: int = 4, database: str = ""):
        self.address, self.creds, self.session, self.size = address, creds, session, size
        self.database = database  # the default database the application's sessions had
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()
        self.opened = 0
        self.session_seen: dict[str, str] = {}  # the settings read back on the first connection
        self.opened_to: dict[str, int] = {}  # address -> connections opened there

    def get(self) -> _Conn:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        # A route (a DSN file) is read only here, when a connection is opened: kept connections
        # stay where they were opened, as a real pool's do.
        host, port = self.address() if callable(self.address) else self.address
        conn = mysql.connector.connect(host=host, port=port, user=self.creds.user,
                                       password=self.creds.password or "", connection_timeout=2, autocommit=True,
                                       use_pure=True, ssl_disabled=True,
                                       **({"database": self.database} if self.database else {}))
        cur = conn.cursor()
        try:
            for name, value in self.session.items():
                literal = value if _numeric(value) else "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
                cur.execute(f"SET SESSION {name} = {literal}")
            if self.session and not self.session_seen:
                cur.execute("SELECT " + ", ".join(f"@@SESSION.{name}" for name in self.session))
                self.session_seen = {n: str(v) for n, v in zip(self.session, cur.fetchone())}
        finally:
            cur.close()
        self.opened += 1
        self.opened_to[f"{host}:{port}"] = self.opened_to.get(f"{host}:{port}", 0) + 1
        return _Conn(conn)

    def put(self, c: _Conn) -> None:
        with self._lock:
            if len(self._idle) < self.size:
                self._idle.append(c)
                return
        _close(c.conn)

    def discard(self, c: _Conn) -> None:
        _close(c.conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            _close(c.conn)


@dataclass
class ReplayClass:
    label: str
    checksum: str
    account: str
    db: str
    rate: float
    statement: ReplayStatement
    tables: tuple[str, ...]
    records: list[tuple[float, float, int | None]] = field(default_factory=list)  # (when, seconds, errno)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        rows = [r for r in list(self.records) if t0 <= r[0] <= t1]
        ok = sorted(r[1] for r in rows if r[2] is None)
        errors: dict[str, int] = {}
        for r in rows:
            if r[2] is not None:
                errors[str(r[2])] = errors.get(str(r[2]), 0) + 1
        p50, p99 = nearest_rank(ok, 0.50), nearest_rank(ok, 0.99)
        return {"count": len(rows), "ok": len(ok), "per_s": round(len(rows) / max(t1 - t0, 1e-9), 1),
                "p50_ms": round(p50 * 1000, 2) if p50 is not None else None,
                "p99_ms": round(p99 * 1000, 2) if p99 is not None else None,
                "errors": sum(errors.values()), "errors_by_code": errors}


def writer_account(shape: ShapeFiles, loaded: LoadedShape) -> str:
    """The account a class with no recorded user runs as: one with schema-level write grants."""
    schemas = list(shape.schemas)
    for account in shape.accounts:
        for line in account.get("grants") or []:
            g = parse_grant(line)
            if g is not None and g.level == "schema" and g.writes and g.schema in schemas \
                    and account["user"] in loaded.accounts:
                return account["user"]
    if not loaded.accounts:
        raise ValueError("the shape has no account to replay its queries as")
    return sorted(loaded.accounts)[0]


class ShapeReplay:
    def __init__(self, address: "tuple[str, int] | Callable[[], tuple[str, int]]", shape: ShapeFiles,
                 loaded: LoadedShape, *,
                 rate_scale: float = 1.0, pool_size: int = 4):
        self.address, self.shape, self.loaded = address, shape, loaded
        default = writer_account(shape, loaded)
        # One pool per account and default database: a class runs where the application ran it
        # (unqualified table names), with the account's session settings.
        self.classes = [ReplayClass(label=qc.label, checksum=qc.checksum,
                                    account=qc.user if qc.user in loaded.accounts else default,
                                    db=qc.db if qc.db in shape.schemas else _only_schema(shape),
                                    rate=min(MAX_RATE, shape.rate(qc) * rate_scale),
                                    statement=plan(qc.example), tables=_tables(qc, shape))
                        for qc in shape.classes]
        self.pools = {(c.account, c.db): Pool(address, loaded.accounts[c.account],
                                              shape.sessions.get(c.account, {}), pool_size, c.db)
                      for c in self.classes}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.started_at: float | None = None

    def start(self) -> "ShapeReplay":
        self.started_at = time.time()
        for i, rc in enumerate(self.classes):
            sources = {}
            for key, src in self.loaded.sources.items():  # each thread its own generator state
                mine = copy.copy(src)
                mine.rng = random.Random(1000 + i)
                mine.continue_after(1_000_000 * (i + 1))
                sources[key] = mine
            t = threading.Thread(target=self._run, args=(rc, sources), daemon=True, name=f"replay-{i}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        for p in self.pools.values():
            p.close()

    def wait_for(self, n: int, timeout_s: float = 30) -> bool:
        """Until every class has at least n successful executions."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(sum(1 for r in list(c.records) if r[2] is None) >= n for c in self.classes):
                return True
            time.sleep(0.1)
        return False

    def pools_report(self) -> dict[str, dict[str, Any]]:
        return {(f"{user}@{db}" if db else user): {"opened": p.opened, "opened_to": p.opened_to,
                                                    "session": p.session_seen, "database": db}
                for (user, db), p in self.pools.items()}

    def report(self, phases: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
        return [{"class": c.label, "checksum": c.checksum, "account": c.account, "db": c.db, "rate": round(c.rate, 1),
                 "statement": c.statement.sql, **{name: c.window(*span) for name, span in phases.items()}}
                for c in self.classes]

    def _run(self, rc: ReplayClass, sources: dict[str, ValueSource]) -> None:
        pool = self.pools[(rc.account, rc.db)]
        interval = 1.0 / rc.rate if rc.rate > 0 else 1.0
        due = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if due > now:
                self._stop.wait(due - now)
                continue
            due = max(due + interval, now - 1.0)  # behind by more than a second: no burst to catch up
            started, got, errno = time.perf_counter(), None, None
            try:
                got = pool.get()
                cur = got.prepared.get(rc.statement.sql)
                if cur is None:
                    cur = got.prepared[rc.statement.sql] = got.conn.cursor(prepared=True)
                cur.execute(rc.statement.sql, self._parameters(rc, sources))
                if cur.with_rows:
                    cur.fetchall()
            except (mysql.connector.Error, OSError) as e:
                errno = getattr(e, "errno", None) or -1
            rc.records.append((time.time(), time.perf_counter() - started, errno))
            if got is not None:
                if errno is None or errno not in GONE and errno >= 1000:
                    pool.put(got)  # an SQL error: the pool keeps the connection, as database/sql does
                else:
                    pool.discard(got)

    def _parameters(self, rc: ReplayClass, sources: dict[str, ValueSource]) -> tuple:
        out = []
        for p in rc.statement.parameters:
            value = None
            names = [p.table] if p.table else list(rc.tables)
            for key in names:
                src = sources.get(key or "")
                if src is None:
                    continue
                column = p.column
                if column is None and p.position is not None and p.position < len(src.columns):
                    column = src.columns[p.position].name
                c = src.column(column) if column else None
                if c is None:
                    continue
                value = (None if c.server_fills else src.value(c)) if p.inserted else src.parameter(column)
                break
            else:
                value = 1 if p.literal_kind == "number" else "x"
            out.append(value)
        return tuple(out)


def _tables(qc: QueryClass, shape: ShapeFiles) -> tuple[str, ...]:
    """The class's tables as schema.table (pt-query-digest names them with backticks, maybe without a schema)."""
    out = []
    for t in qc.tables:
        name = t.replace("`", "")
        if "." not in name and len(shape.schemas) == 1:
            name = f"{next(iter(shape.schemas))}.{name}"
        out.append(name)
    return tuple(out)


def _only_schema(shape: ShapeFiles) -> str:
    """A class without a recorded database: the shape's schema when it has one only."""
    return next(iter(shape.schemas)) if len(shape.schemas) == 1 else ""


def failed_classes(classes: list[dict[str, Any]], captured: dict[str, int] | None = None) -> list[str]:
    """Each replayed class whose executions failed more often than at capture (`captured`: checksum
    -> errors counted in the capture window, none known: 0), named with its errors and counts."""
    out = []
    for c in classes:
        count = sum(int((c.get(p) or {}).get("count") or 0) for p in ("before", "during", "after"))
        codes: dict[str, int] = {}
        for p in ("before", "after"):  # during a cutover, 1290 and lost connections are the cutover's
            for code, n in ((c.get(p) or {}).get("errors_by_code") or {}).items():
                codes[code] = codes.get(code, 0) + int(n)
        errors = sum(codes.values())
        if errors > int((captured or {}).get(str(c.get("checksum")), 0)) and count:
            shown = ", ".join(f"error {code} x {n}" for code, n in sorted(codes.items(), key=lambda kv: -kv[1]))
            out.append(f"{c['class']} ({errors} of {count} executions failed: {shown})")
    return out


def _numeric(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        pass
