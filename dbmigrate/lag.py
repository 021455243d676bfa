"""Replication lag in milliseconds: a heartbeat, GTID distance, and samples per replica.

The heartbeat is one row per primary (`dbmigrate.heartbeat`: server_id, ts
DATETIME(6)), written on the primary with UTC_TIMESTAMP(6). A replica's copy of
that row says up to when it has applied the primary's writes. Lag is the
primary's *current* heartbeat minus the replica's applied one: both
timestamps come from the primary's clock, so clock skew between hosts does
not enter the figure.

A heartbeat row is only evidence while someone keeps writing it. When no
writer runs, the row's age is not lag: the sample says "stale" (or "absent")
and the decision falls back to GTID distance (transactions behind, per
domain). A sample can write one heartbeat itself (`write=True`) and wait a
bounded time for each replica to apply it; a replica that does not apply it
within that time is lagging by at least that long, whatever its row says.

Seconds_Behind_Master is reported next to these figures, never trusted alone:
it is 0 while the SQL thread is stopped with an empty relay log, and NULL
while the IO thread reconnects.

The writer refuses to write where read_only is ON (one statement checks and
writes), because the tool's own account bypasses read_only: a heartbeat must
never become a write on a fenced primary or an errant transaction on a replica.

The statements are `dbmigrate.db.heartbeat`'s; this module decides what they mean.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Iterable

from dbmigrate.db.connection import QueryError, Server
from dbmigrate.db.heartbeat import HeartbeatSQL, valid_table
from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock, wait_until
from dbmigrate.exceptions import DbmigrateError, SafetyError, UsageError, WaitTimeout

log = logging.getLogger("dbmigrate.lag")

DEFAULT_TABLE = "dbmigrate.heartbeat"
PT_HEARTBEAT_TABLE = "percona.heartbeat"
NO_TABLE_ERRNOS = (1146, 1049)  # table / database does not exist (yet) on that server


@dataclass(frozen=True)
class HeartbeatTable:
    """Where heartbeats live: our own table, or pt-heartbeat's (ts is an ISO string there)."""

    table: str = DEFAULT_TABLE
    kind: str = "dbmigrate"  # "dbmigrate" (we write it) or "pt-heartbeat" (read only)

    def __post_init__(self) -> None:
        if not valid_table(self.table):
            raise UsageError(f"heartbeat table '{self.table}' is not db.table", hint="e.g. percona.heartbeat")

    def on(self, server: Server) -> HeartbeatSQL:
        """This table's statements on `server`."""
        return HeartbeatSQL(server, self.table)

    @classmethod
    def pt_heartbeat(cls, table: str = PT_HEARTBEAT_TABLE) -> "HeartbeatTable":
        return cls(table, "pt-heartbeat")


def _ts(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).strip().replace(" ", "T"))


def _clock_ts(value: Any, server: Server) -> datetime:
    """A time the server read from its own clock (never NULL, unless the server is broken)."""
    ts = _ts(value)
    if ts is None:
        raise DbmigrateError(f"{server.name} ({server.address}) returned no time from its clock")
    return ts


def _ms(a: datetime, b: datetime) -> float:
    return (a - b).total_seconds() * 1000.0


# ---- writing -----------------------------------------------------------------

def ensure_heartbeat_table(server: Server, hb: HeartbeatTable = HeartbeatTable()) -> None:
    if hb.kind != "dbmigrate":
        raise UsageError(f"{hb.table} is pt-heartbeat's table; dbmigrate only reads it",
                         hint="run pt-heartbeat --update on the primary, or use the built-in heartbeat")
    if Inspector(server).read_only():
        raise SafetyError(f"{server.name} ({server.address}) is read_only: not creating {hb.table} there",
                          hint="the heartbeat is written on the writable primary only")
    table = hb.on(server)
    table.create_database()
    table.create_table()


def write_heartbeat(server: Server, hb: HeartbeatTable = HeartbeatTable()) -> datetime | None:
    """One heartbeat on the primary. Returns its ts, or None when the server is read_only (nothing written)."""
    table = hb.on(server)
    try:
        written = table.beat_unless_read_only()
    except QueryError as e:
        if e.errno not in NO_TABLE_ERRNOS:
            raise
        ensure_heartbeat_table(server, hb)
        written = table.beat_unless_read_only()
    if not written:
        return None
    return _ts(table.own_ts())


class HeartbeatWriter:
    """Writes the heartbeat every `interval_s` on its own connection, in a background thread.

    Write errors do not stop it (a primary restarting, a brief network cut):
    they are counted and the last one kept; it retries at the next tick.
    """

    def __init__(self, primary: Server, interval_s: float = 0.1, hb: HeartbeatTable = HeartbeatTable(),
                 clock: Clock | None = None):
        if interval_s <= 0:
            raise UsageError("heartbeat interval must be > 0")
        self.clock = clock or Clock()
        self.server = primary.dedicated()
        self.interval_s = interval_s
        self.hb = hb
        self.writes = 0
        self.paused = 0  # ticks skipped because the server was read_only
        self.errors = 0
        self.last_error: str | None = None
        self.last_ts: datetime | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "HeartbeatWriter":
        if self.running:
            return self
        st = Inspector(self.server).replica_status()
        if st is not None and st.source_host:
            raise SafetyError(f"{self.server.name} ({self.server.address}) replicates from "
                              f"{st.source_host}:{st.source_port}: not writing heartbeats on a replica",
                              hint="start the heartbeat writer on the primary")
        ensure_heartbeat_table(self.server, self.hb)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{self.server.name}", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = self.clock.monotonic()
            try:
                ts = write_heartbeat(self.server, self.hb)
                if ts is None:
                    self.paused += 1
                else:
                    self.writes += 1
                    self.last_ts = ts
            except DbmigrateError as e:
                self.errors += 1
                self.last_error = e.message
                log.warning("heartbeat write on %s failed: %s", self.server.name, e.message)
                self.server.close()
            # An event, not the clock's sleep: stop() must cut the pause short.
            self._stop.wait(max(0.0, self.interval_s - (self.clock.monotonic() - started)))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.server.close()

    def __enter__(self) -> "HeartbeatWriter":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- reading -----------------------------------------------------------------

def read_heartbeat(server: Server, origin_server_id: int, hb: HeartbeatTable = HeartbeatTable()) -> datetime | None:
    """The origin's heartbeat as applied on `server` (None when absent there)."""
    table = hb.on(server)
    try:
        ts = table.ts_of(origin_server_id)
        if ts is None and hb.kind == "pt-heartbeat":
            # pt-heartbeat --master-server-id may differ from ours; take its newest row.
            ts = table.newest_ts()
    except QueryError as e:
        if e.errno in NO_TABLE_ERRNOS:
            return None
        raise
    return _ts(ts)


def heartbeat_age_ms(primary: Server, ts: datetime, hb: HeartbeatTable = HeartbeatTable()) -> float:
    """How old the primary's own heartbeat is, by the primary's clock."""
    utc_now, local_now = Inspector(primary).server_clock()
    if hb.kind == "pt-heartbeat":
        # pt-heartbeat writes local time unless --utc: accept whichever reading is closer.
        return min(abs(_ms(_clock_ts(utc_now, primary), ts)), abs(_ms(_clock_ts(local_now, primary), ts)))
    return _ms(_clock_ts(utc_now, primary), ts)


# ---- samples -------------------------------------------------------------------

@dataclass
class LagSample:
    name: str
    address: str
    lag_ms: float | None  # heartbeat-based; None when stale/absent (then GTID distance decides)
    behind: dict[str, int] = field(default_factory=dict)  # transactions behind the primary, per domain
    seconds_behind_master: int | None = None
    io_running: str | None = None
    sql_running: str | None = None
    heartbeat: str = "absent"  # fresh / stale / absent
    limit_ms: float | None = None
    ok: bool = False
    reason: str = ""
    error: str | None = None

    @property
    def behind_total(self) -> int:
        return sum(self.behind.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["lag_ms"] is not None:
            d["lag_ms"] = round(d["lag_ms"], 1)
        return d


def judge(sample: LagSample, limit_ms: float) -> LagSample:
    """Decide ok/reason for one sample (pure)."""
    sample.limit_ms = limit_ms
    if sample.error:
        sample.ok, sample.reason = False, f"cannot read: {sample.error}"
        return sample
    stopped = [t for t, v in (("io", sample.io_running), ("sql", sample.sql_running)) if v != "Yes"]
    behind = f"{sample.behind_total} trx behind" if sample.behind else "GTID distance unknown"
    if stopped:
        sample.ok = False
        sample.reason = f"replication {'/'.join(stopped)} thread not running"
    elif sample.lag_ms is not None:
        sample.ok = sample.lag_ms <= limit_ms
        sample.reason = f"lag {sample.lag_ms:.0f} ms {'<=' if sample.ok else '>'} {limit_ms:g} ms ({behind})"
        return sample
    else:
        sample.ok = sample.behind_total == 0 and bool(sample.behind)
        sample.reason = f"heartbeat {sample.heartbeat}: {behind} (GTID distance decides)"
        return sample
    if sample.lag_ms is not None:
        sample.reason += f"; lag {sample.lag_ms:.0f} ms"
    sample.reason += f"; {behind}"
    return sample


def sample_lag(primary: Server, replicas: Iterable[Server], *, limit_ms: float = 1000.0, write: bool = True,
               settle_ms: float | None = None, fresh_ms: float = 2000.0, hb: HeartbeatTable = HeartbeatTable(),
               poll_s: float = 0.005, clock: Clock | None = None) -> list[LagSample]:
    """One lag sample per replica.

    With `write` (built-in heartbeat only), one heartbeat is written on the
    primary first and each replica gets up to `settle_ms` (default limit + 500)
    to apply it: an idle healthy replica then reads ~0 ms instead of the age of
    an old row, and one that cannot apply it is at least `settle_ms` behind.
    Without `write`, a primary heartbeat older than `fresh_ms` is "stale".
    """
    replicas = list(replicas)
    clock = clock or Clock()
    insp = Inspector(primary)
    origin = insp.server_id()
    wrote_at: float | None = None
    primary_ts: datetime | None = None
    if write and hb.kind == "dbmigrate":
        primary_ts = write_heartbeat(primary, hb)
        wrote_at = clock.monotonic() if primary_ts is not None else None
    if primary_ts is None:
        primary_ts = read_heartbeat(primary, origin, hb)
    fresh = primary_ts is not None and (wrote_at is not None or heartbeat_age_ms(primary, primary_ts, hb) <= fresh_ms)
    target = insp.gtid_binlog_pos()

    applied: dict[int, float] = {}  # replica index -> ms after the write when it showed up
    latest: dict[int, datetime | None] = {}
    errors: dict[int, str] = {}
    settle = (limit_ms + 500.0) if settle_ms is None else settle_ms

    def since_write_ms() -> float:
        return (clock.monotonic() - wrote_at) * 1000.0 if wrote_at is not None else 0.0

    def all_seen() -> bool:
        for i, r in enumerate(replicas):
            if i in applied or i in errors:
                continue
            try:
                seen = latest[i] = read_heartbeat(r, origin, hb)
            except DbmigrateError as e:
                errors[i] = e.message
                continue
            if fresh and seen is not None and primary_ts is not None and seen >= primary_ts:
                applied[i] = since_write_ms()
        return wrote_at is None or len(applied) + len(errors) >= len(replicas)

    try:
        wait_until(all_seen, timeout=max(0.0, settle - since_write_ms()) / 1000.0, interval=poll_s, clock=clock,
                   what="the replicas to apply the probe heartbeat")
    except WaitTimeout:
        pass  # not an error: a replica that has not applied it is lagging by at least the wait
    waited_ms = since_write_ms()

    out = []
    for i, r in enumerate(replicas):
        s = LagSample(r.name, r.address, None)
        if i in errors:
            s.error = errors[i]
            out.append(judge(s, limit_ms))
            continue
        try:
            st = Inspector(r).replica_status()
            if st is not None:
                s.io_running, s.sql_running, s.seconds_behind_master = st.io_running, st.sql_running, st.seconds_behind
            s.behind = r.flavor.behind(target, Inspector(r).gtid_executed()) if target else {}
        except DbmigrateError as e:
            s.error = e.message
            out.append(judge(s, limit_ms))
            continue
        row = latest.get(i)
        s.heartbeat = "absent" if row is None else ("fresh" if fresh else "stale")
        if i in applied:
            s.lag_ms = applied[i]
        elif fresh and row is not None and primary_ts is not None:
            s.lag_ms = max(0.0, _ms(primary_ts, row), waited_ms)
        elif wrote_at is not None:
            # Our probe write did not arrive within the wait: that is a measurement, not a row's age.
            s.lag_ms = waited_ms
        out.append(judge(s, limit_ms))
    return out
