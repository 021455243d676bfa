"""Reads against the target: scan and replay tasks, a bounded pool of reader
threads (each with its own read-only session) and the sampled probe that
measures the hit ratio. The statements and sessions are `dbmigrate.db.warmup`'s;
a replay task carries a digest's captured query text as it is.
"""

from __future__ import annotations

import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from dbmigrate.db.connection import QueryError, Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.db.warmup import ReadSession, clustered_scan_sql, index_scan_sql, key_lookup_sql
from dbmigrate.clock import Clock
from dbmigrate.exceptions import UsageError
from dbmigrate.warm.measure import HitRatio, hit_ratio_between, snapshot

_LEADING_COMMENT = re.compile(r"^\s*/\*(?!\+).*?\*/\s*", re.S)
_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})


def split_table(table: str) -> tuple[str, str]:
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise UsageError(f"'{table}' is not schema.table", hint="name tables as schema.table, e.g. app.orders")
    return schema, name


@dataclass(frozen=True)
class ReadTask:
    sql: str
    label: str
    db: str | None = None


def strip_leading_comments(sql: str) -> str:
    prev = None
    while prev != sql:
        prev, sql = sql, _LEADING_COMMENT.sub("", sql, count=1)
    return sql.strip().rstrip(";")


def scan_tasks(table: str, indexes: list[dict[str, Any]]) -> list[ReadTask]:
    """One full read per B-tree: the clustered index, then each secondary index.

    COUNT(*) needs no column, so with FORCE INDEX every leaf page of that index is
    read and nothing else (off-page BLOB pages are not)."""
    btrees = [ix for ix in indexes if ix.get("type", "BTREE") == "BTREE"]
    names = [ix["name"] for ix in btrees]
    tasks = []
    if "PRIMARY" in names:
        tasks.append(ReadTask(index_scan_sql(table, "PRIMARY"), f"scan {table} PRIMARY"))
    else:
        tasks.append(ReadTask(clustered_scan_sql(table, names), f"scan {table} clustered"))
    for n in names:
        if n != "PRIMARY":
            tasks.append(ReadTask(index_scan_sql(table, n), f"scan {table} {n}"))
    return tasks


@dataclass
class ReadStats:
    done: int = 0
    rows: int = 0
    skipped: int = 0       # not started: time limit reached
    timed_out: int = 0     # stopped by the statement time limit
    errors: list[tuple[str, str]] = field(default_factory=list)

    def add(self, other: "ReadStats") -> None:
        self.done += other.done
        self.rows += other.rows
        self.skipped += other.skipped
        self.timed_out += other.timed_out
        self.errors.extend(other.errors)

    def to_dict(self) -> dict[str, Any]:
        return {"done": self.done, "rows": self.rows, "skipped": self.skipped, "timed_out": self.timed_out,
                "errors": [{"task": t, "error": e} for t, e in self.errors[:20]], "error_count": len(self.errors)}


class ReadWorkers:
    """Up to `threads` concurrent reads, each thread on its own read-only session."""

    def __init__(self, server: Server, threads: int = 2, clock: Clock | None = None):
        if threads < 1:
            raise UsageError("--threads must be at least 1")
        self.server = server
        self.threads = threads
        self.clock = clock or Clock()
        self._local = threading.local()
        self._sessions: list[ReadSession] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="warm-read")

    def _session(self) -> ReadSession:
        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = ReadSession(self.server)
            with self._lock:
                self._sessions.append(s)
        return s

    def _one(self, task: ReadTask, deadline: float | None, stats: ReadStats, on_done: Callable[[ReadTask], None] | None) -> None:
        remaining = None if deadline is None else deadline - self.clock.monotonic()
        if remaining is not None and remaining <= 0:
            with self._lock:
                stats.skipped += 1
            return
        s = self._session()
        try:
            if task.db:
                s.use(task.db)
            rows = s.read(task.sql, time_limit_s=remaining)
            with self._lock:
                stats.done += 1
                stats.rows += rows
        except QueryError as e:
            with self._lock:
                if s.timed_out(e):
                    stats.timed_out += 1
                else:
                    stats.errors.append((task.label, e.message))
        if on_done:
            on_done(task)

    def run(self, tasks: list[ReadTask], deadline: float | None = None,
            on_done: Callable[[ReadTask], None] | None = None) -> ReadStats:
        stats = ReadStats()
        futures = [self._pool.submit(self._one, t, deadline, stats, on_done) for t in tasks]
        for f in futures:
            f.result()
        return stats

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for s in self._sessions:
            s.close()

    def __enter__(self) -> "ReadWorkers":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the probe -------------------------------------------------------------------
@dataclass(frozen=True)
class KeyRange:
    table: str
    column: str
    lo: int
    hi: int


@dataclass
class SampledReads:
    """A representative read mix: random primary-key lookups over whole tables.

    Replaying one example query a thousand times only re-reads the same pages, so
    it says nothing about the pool; random keys do."""

    ranges: list[KeyRange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def tables(self) -> list[str]:
        return [r.table for r in self.ranges]


def sampled_reads(inspector: Inspector, tables: list[str]) -> SampledReads:
    out = SampledReads()
    for table in tables:
        schema, name = split_table(table)
        idx = {ix["name"]: ix for ix in inspector.table_indexes(schema, name)}
        pk = idx.get("PRIMARY")
        if not pk or len(pk["columns"]) != 1 or pk["columns"][0][1] not in _INTEGER_TYPES:
            out.notes.append(f"{table}: no single-column integer primary key, not sampled by the probe")
            continue
        col = pk["columns"][0][0]
        lo, hi = inspector.key_range(schema, name, col)
        if lo is None:
            out.notes.append(f"{table}: empty, not sampled by the probe")
            continue
        out.ranges.append(KeyRange(table, col, int(lo), int(hi)))
    return out


def run_probe(server: Server, reads: SampledReads, queries: int | None = None, seconds: float | None = None,
              rng: random.Random | None = None, clock: Clock | None = None) -> HitRatio:
    """Hit ratio over a window of random primary-key lookups (a count or a duration)."""
    if not reads.ranges:
        raise UsageError("nothing to probe: none of the tables has a single-column integer primary key with rows",
                         hint="name tables with an integer primary key (--tables schema.table)")
    if queries is None and seconds is None:
        queries = 500
    rng = rng or random.Random()
    clock = clock or Clock()
    probe = ReadSession(server)
    insp = Inspector(probe.server)
    lookups = [key_lookup_sql(r.table, r.column) for r in reads.ranges]
    try:
        before = snapshot(insp)
        end = None if seconds is None else clock.monotonic() + seconds
        n = 0
        while (queries is None or n < queries) and (end is None or clock.monotonic() < end):
            i = n % len(reads.ranges)
            r = reads.ranges[i]
            probe.read(lookups[i], (rng.randint(r.lo, r.hi),))
            n += 1
        after = snapshot(insp)
    finally:
        probe.close()
    return hit_ratio_between(before, after, queries=n)
