"""An in-memory cluster behind the switchover's inspector and applier interfaces.

Each fake server holds what the switchover reads (read_only, its binlog as a
list of MariaDB GTIDs, its replication source and threads, sessions) and
changes only through the statements a FakeApplier sends, with the server's
semantics: a running replica applies everything its source has (at once, or
once a lag ends), CHANGE MASTER and RESET SLAVE ALL refuse a running replica,
an unreachable server raises ConnectionFailed for every read and write.
Statements are rendered by the real Applier, so dry-run plans are the real
ones, and every statement sent lands in `FakeTopology.sent` in order.

Time is a FakeClock that can also run scheduled events: a wait that cannot
succeed moves it by its whole bound, a lag that ends within the bound moves it
to the end of the lag.
Turning read_only off while another server is writable fails the test at
once (two writable primaries must never happen, not even briefly).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Iterator

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import InDoubtUnsettled, QueryError, Unresponsive
from dbmigrate.db.in_doubt import InDoubt
from dbmigrate.db.ledger import SafetyLedger
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.flavor import Flavor, MariaDB, ReplicaStatus
from dbmigrate.db.gtid import MariaGtid
from dbmigrate.db.binlog import BinlogReadError, BinlogTransaction
from dbmigrate.db.inspector import HeavyWork, Session
from dbmigrate.clock import FakeClock
from dbmigrate.exceptions import ConnectionFailed
from dbmigrate.procedures.kit.switchover import SwitchoverServers
from dbmigrate.routing.base import RouteIntent, RouterError, RouterGone, RouterNoAnswer, RouteState

DOMAIN = 0
TOOL_USER = "dbmigrate"


class ScheduledClock(FakeClock):
    """A FakeClock that also does what was scheduled for a moment once time reaches it
    (an operator opening a server by hand in the middle of a wait, a server going down)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[float, Callable[[], object]]] = []

    def at(self, delay: float, action: Callable[[], object]) -> None:
        self.events.append((self.monotonic() + delay, action))

    def advance(self, seconds: float) -> None:
        super().advance(seconds)
        due = [e for e in self.events if e[0] <= self.monotonic()]
        self.events = [e for e in self.events if e not in due]
        for _, action in due:
            action()


@dataclass
class FakeServer:
    name: str
    port: int
    server_id: int
    host: str = "127.0.0.1"
    flavor: Flavor = field(default_factory=MariaDB)
    gtid_mode: str = "ON"  # read on a MySQL flavor only, as by the real inspector
    binlog_format: str = "ROW"
    read_only: bool = False
    log: list[MariaGtid] = field(default_factory=list)  # binlog: written or applied, in order
    source: str | None = None  # name of the server CHANGE MASTER points at
    io_running: bool = False
    sql_running: bool = False
    lag_until: float = 0.0  # the SQL thread applies nothing before this clock time (inf: stuck)
    # Its I/O thread looks connected but receives nothing until it reconnects (a partition healed
    # while the source's kernel backs off its retransmissions).
    io_stalled: bool = False
    row_lock_waits_until: float = 0.0  # a transaction waits for a row lock before this clock time
    last_sql_error: str = ""
    sql_delay_s: int = 0  # a configured MASTER_DELAY (reported only)
    fails_with: str = ""  # an error the SQL thread stops on each time it starts (a conflicting row)
    up: bool = True
    frozen: bool = False  # SIGSTOPped: accepts connections, answers nothing
    sessions: list[Session] = field(default_factory=list)
    open_trx: set[int] = field(default_factory=set)  # session ids inside a transaction
    bypass_users: set[str] = field(default_factory=set)  # accounts that bypass read_only
    # Accounts: their SHOW GRANTS lines, and the levels at which each can write the application's schemas.
    grants: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    writers: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    event_scheduler: bool = True
    # Partitioned: connections hang like a frozen server's, and a change sent meanwhile is in
    # doubt: it lands when the network heals (its packets were only delayed) unless its session
    # was ended first. `doubts` holds those changes (statement, effect).
    partitioned: bool = False
    doubts: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    settle_cost_s: float = 0.0  # ending a session in doubt here takes this long (a new connection after a partition)
    expiry_at: float | None = None  # clock time when a scheduled fence expiry fires (None: none)
    # Its fencing generation (db/generation.py): a change, or an expiry, that carries an older one
    # does nothing when it lands. `lost` holds changes of a process killed with them in flight
    # whose intent nobody journaled: only the generation stands between them and the server.
    generation: int = 0
    lost: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    disk_full: bool = False  # a write waits for disk space (until the bound, or the read timeout)
    # Work too big for a fenced window, each until a clock time: a DDL or large transaction in
    # flight here (as a primary), a DDL its SQL thread applies, binlog bytes it has still to apply.
    heavy: list[tuple[float, HeavyWork]] = field(default_factory=list)
    applying: list[tuple[float, HeavyWork]] = field(default_factory=list)
    backlog: list[tuple[float, int]] = field(default_factory=list)
    # What its binlog says of a transaction (GTID -> its tables, rows, statement); others read as bare GTIDs.
    binlog_says: dict[str, BinlogTransaction] = field(default_factory=dict)
    binlog_error: str = ""  # reading its binlog fails with this (privileges, purged)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def position(self) -> str:
        """gtid_binlog_pos / gtid_current_pos: the last GTID per domain."""
        last: dict[int, MariaGtid] = {}
        for g in self.log:
            last[g.domain] = g
        return ",".join(str(last[d]) for d in sorted(last))


@dataclass
class FakeTopology(SwitchoverServers):
    clock: ScheduledClock = field(default_factory=ScheduledClock)
    sent: list[tuple[str, str]] = field(default_factory=list)  # (server or "router", statement)
    deadlines: dict[str, float] = field(default_factory=dict)  # bounds in force, in clock time
    read_timeout_s: float = 60.0  # what a statement to a frozen server costs without a bound
    # Fencing generations, as a run's process holds them once it has the cluster lock: off by
    # default (the decisions tested elsewhere); `new_decision()` turns them on, or starts a later
    # decision (another process: every server is bumped again on its first statement).
    generations: bool = False
    held: dict[str, int] = field(default_factory=dict)  # server -> the generation this decision bumped it to
    # The ledger the real Applier reads (never armed: the fake keeps generations and doubts itself).
    ledger: SafetyLedger = field(default_factory=SafetyLedger)

    def new_decision(self) -> None:
        self.generations = True
        self.held.clear()

    def die(self) -> None:
        """The tool's process is killed: what it had in flight stays on the wire, unknown to the next
        process (no intent journaled), and that next process decides anew."""
        for s in self.servers.values():
            s.lost += s.doubts
            s.doubts = []
        self.new_decision()

    def carried(self, name: str) -> int | None:
        """The generation a change sent to `name` now carries (None: generations off)."""
        return self.held.get(name) if self.generations else None

    def guarded(self, name: str, what: str, gen: int | None, effect: Callable[[], None]) -> Callable[[], None]:
        """`effect` as the server runs a change that carries `gen`: a no-op under a later one."""
        def run() -> None:
            s = self.servers[name]
            if gen is not None and s.generation != gen:
                self.sent.append((name, f"{what} <generation {gen}, server holds {s.generation}: no-op>"))
                return
            effect()
        return run

    @contextmanager
    def bounded(self, seconds: float, *names: str) -> Iterator[None]:
        outer = {n: self.deadlines.get(n) for n in names}
        for n in names:
            mine = self.clock.monotonic() + seconds
            self.deadlines[n] = mine if outer[n] is None else min(outer[n], mine)  # type: ignore[type-var]
        try:
            yield
        finally:
            for n, d in outer.items():
                if d is None:
                    self.deadlines.pop(n, None)
                else:
                    self.deadlines[n] = d

    def side_session(self, name: str, timeout_s: float) -> None:
        return None  # no watchdog: a fake fence never blocks

    def binlog(self, name: str, timeout_s: float) -> "FakeBinlog":
        return FakeBinlog(self, name)

    # -- the SwitchoverServers seam --------------------------------------------------
    def inspector(self, name: str) -> "FakeInspector":
        return FakeInspector(self, name)

    def applier(self, name: str, *, dry_run: bool = False, on_planned=None) -> "FakeApplier":
        return FakeApplier(self, name, dry_run=dry_run, on_planned=on_planned)

    def address(self, name: str) -> tuple[str, int]:
        s = self.servers[name]
        return s.host, s.port

    # -- the model ----------------------------------------------------------
    def reach(self, name: str) -> FakeServer:
        s = self.servers[name]
        if s.doubts:
            self._settle(s)
            deadline = self.deadlines.get(name)
            if deadline is not None and self.clock.monotonic() >= deadline:  # as the real handle's _check_time_left
                raise Unresponsive(f"{name} ({s.host}:{s.port}): the bound of the wait in progress ran out", errno=3024)
        if s.up and (s.frozen or s.partitioned):
            # The statement waits for an answer that never comes: until the bound, or the read timeout.
            deadline = self.deadlines.get(name, self.clock.monotonic() + self.read_timeout_s)
            self.clock.advance(max(0.0, deadline - self.clock.monotonic()))
            raise Unresponsive(f"{name} ({s.host}:{s.port}) did not answer", errno=3024)
        if not s.up:
            raise ConnectionFailed(f"cannot reach {name} ({s.host}:{s.port}): Connection refused",
                                   hint="is the server running and listening on that address?")
        if self.generations and name not in self.held:
            s.generation += 1  # the decision's first statement there: before anything is read
            self.held[name] = s.generation
            self.sent.append((name, f"bump generation to {s.generation}"))
        return s

    # -- statements in doubt (the real handle's rule, db/in_doubt.py) ---------------
    def _settle(self, s: FakeServer) -> None:
        """Before any statement to a server with a change in doubt: end that change's session
        (it then never lands), or fail as the real handle does when it cannot."""
        if s.up and not s.frozen and not s.partitioned:
            self.clock.advance(s.settle_cost_s)
            self.sent.append((s.name, "KILL CONNECTION <in doubt: " + "; ".join(sql for sql, _ in s.doubts) + ">"))
            s.doubts.clear()
            return
        statement = s.doubts[0][0]
        doubt = InDoubt(s.name, s.address, 7, TOOL_USER, statement, 0.0)
        raise InDoubtUnsettled(f"{doubt.said()} was given up on and may still be executed; it stays in doubt until "
                               f"that session is ended, and it cannot be ended now", doubt)

    def own_sessions(self, name: str) -> set[int]:
        return {1}  # FakeInspector.connection_id(): the tool's one session on each server

    def settle(self, name: str) -> None:
        s = self.servers[name]
        if s.doubts:
            self._settle(s)

    def in_doubt(self, name: str, sql: str, effect: Callable[[], None]) -> None:
        """A change sent to a partitioned server: costs the bound, then is given up on, in doubt."""
        s = self.servers[name]
        s.doubts.append((sql, self.guarded(name, sql, self.carried(name), effect)))
        self.sent.append((name, sql + " <no answer>"))
        deadline = self.deadlines.get(name, self.clock.monotonic() + self.read_timeout_s)
        self.clock.advance(max(0.0, deadline - self.clock.monotonic()))
        err = Unresponsive(f"{name} ({s.address}) did not answer in: {sql}", errno=3024)
        err.in_doubt = InDoubt(name, s.address, 7, TOOL_USER, sql, 0.0)
        raise err

    def heal(self, name: str, lands_after_s: float) -> None:
        """The partition ends; changes still in doubt land `lands_after_s` later (retransmits)."""
        s = self.servers[name]
        s.partitioned = False

        def land() -> None:
            pending, s.doubts, s.lost = s.doubts + s.lost, [], []
            for sql, effect in pending:
                self.sent.append((name, sql + " <landed late>"))
                effect()

        self.clock.at(lands_after_s, land)

    def send(self, name: str, sql: str) -> int:
        self.reach(name)
        self.sent.append((name, sql))
        return 0

    def statements(self, name: str) -> list[str]:
        return [sql for who, sql in self.sent if who == name]

    def name_at(self, host: str, port: int) -> str:
        for name in self.servers:
            if (host, port) in (self.address(name), self.repl_addresses.get(name)):
                return name
        raise AssertionError(f"no fake server at {host}:{port}")

    def io_connected(self, s: FakeServer) -> bool:
        return s.io_running and s.source is not None and self.servers[s.source].up

    def replicate(self) -> None:
        """Every running replica applies what its source has (chains included)."""
        changed = True
        while changed:
            changed = False
            for s in self.servers.values():
                if not (s.up and s.sql_running and self.io_connected(s) and not s.io_stalled
                        and self.clock.monotonic() >= s.lag_until):
                    continue
                have = set(s.log)
                new = [g for g in self.servers[s.source].log if g not in have]
                s.log.extend(new)
                changed = changed or bool(new)

    def write(self, name: str, n: int = 1) -> str:
        """The application commits n transactions on `name`; returns its position after them."""
        s = self.reach(name)
        if s.read_only:
            raise QueryError(f"{name}: The MariaDB server is running with the --read-only option", errno=1290)
        for _ in range(n):
            seq = max((g.seq for g in s.log if g.domain == DOMAIN), default=0) + 1
            s.log.append(MariaGtid(DOMAIN, s.server_id, seq))
        self.replicate()
        return s.position()

    def link(self, replica: str, source: str | None) -> None:
        """Set up (not through statements) `replica` replicating from `source`, threads running."""
        s = self.servers[replica]
        s.source = source
        s.io_running = s.sql_running = source is not None
        s.read_only = s.read_only or source is not None  # replicas run read-only
        self.replicate()

    def missing_on(self, name: str) -> list[str]:
        """Transactions written anywhere that `name` does not have (lost if it is the primary)."""
        self.replicate()
        have = set(self.servers[name].log)
        return sorted({str(g) for s in self.servers.values() for g in s.log if g not in have})

    def writable(self) -> list[str]:
        return [n for n, s in self.servers.items() if s.up and not s.read_only]


class FakeInspector:
    """The reads the switchover makes, with Inspector's semantics."""

    login_user = TOOL_USER

    def __init__(self, topo: FakeTopology, name: str):
        self.topo, self.name = topo, name
        self.flavor = topo.servers[name].flavor

    def _server(self) -> FakeServer:
        self.topo.replicate()
        return self.topo.reach(self.name)

    def variable(self, name: str):
        return {"binlog_format": self._server().binlog_format}[name]

    def reachable(self) -> bool:
        return self.topo.servers[self.name].up

    def connection_id(self) -> int:
        self._server()
        return 1

    def read_only(self) -> bool:
        return self._server().read_only

    def event_scheduler_on(self) -> bool:
        return self._server().event_scheduler

    def gtid_mode_problem(self) -> str | None:
        s = self._server()
        return None if s.flavor.name != "mysql" or s.gtid_mode == "ON" else f"gtid_mode={s.gtid_mode}"

    def gtid_binlog_pos(self) -> str:
        return self._server().position()

    gtid_executed = gtid_binlog_pos  # a server with log_slave_updates logs what it applies

    def gtid_state(self) -> str:
        """gtid_binlog_state: the last GTID per domain and server_id."""
        last: dict[tuple[int, int], MariaGtid] = {}
        for g in self._server().log:
            last[(g.domain, g.server_id)] = g
        return ",".join(str(last[k]) for k in sorted(last))

    def read_only_sessions_count_and_binlog_pos(self, users) -> tuple[bool, int, str]:
        s = self._server()
        return s.read_only, sum(x.user in users for x in s.sessions), s.position()

    def read_only_and_binlog_pos(self) -> tuple[bool, str]:
        s = self._server()
        return s.read_only, s.position()

    def has_applied(self, position: str) -> bool:
        return self.flavor.includes(self.gtid_executed(), position)

    def missing_from(self, position: str) -> str:
        return self.flavor.behind(position, self.gtid_executed())

    def open_sessions(self, wait_timeout_s: float) -> None:
        self._server()

    def trx_behind(self, position: str) -> dict[str, int]:
        return self.flavor.behind(position, self.gtid_executed())

    def row_lock_waits(self) -> int:
        return int(self.topo.clock.monotonic() < self._server().row_lock_waits_until)

    def wait_for_gtid(self, position: str, timeout_s: float) -> bool:
        """MASTER_GTID_WAIT: True once applied, False after timeout_s of (fake) time."""
        clock = self.topo.clock
        bound = self.topo.deadlines.get(self.name)
        if bound is not None:
            timeout_s = max(0.0, min(timeout_s, bound - clock.monotonic() - 0.25))
        deadline = clock.monotonic() + timeout_s
        if self._server().lag_until < deadline:  # the lag ends within the bound
            clock.advance(self._server().lag_until - clock.monotonic())
        if self.has_applied(position):
            return True
        clock.advance(deadline - clock.monotonic())
        return False

    def replica_status(self) -> ReplicaStatus | None:
        s = self._server()
        if s.source is None:
            return None
        host, port = self.topo.repl_addresses.get(s.source) or self.topo.address(s.source)
        connected = self.topo.io_connected(s)
        io = "Yes" if connected else "Connecting" if s.io_running else "No"
        io_error = "" if connected or not s.io_running else \
            f"error reconnecting to master '{self.topo.repl.user}@{host}:{port}' - retry-time: 1"
        # What the I/O thread received: all its source has, unless it is cut off or stalled.
        received = self.topo.servers[s.source].position() if connected and not s.io_stalled else s.position()
        return ReplicaStatus(source_host=host, source_port=port, io_running=io,
                             sql_running="Yes" if s.sql_running else "No", seconds_behind=0 if connected else None,
                             last_io_error=io_error, last_sql_error=s.last_sql_error, using_gtid="Slave_Pos",
                             sql_delay_s=s.sql_delay_s, retrieved_gtid=received, executed_gtid=s.position())

    def sessions(self, exclude_system: bool = True) -> list[Session]:
        system = ("system user", "event_scheduler")
        return [x for x in self._server().sessions
                if not exclude_system or (x.user not in system and not x.command.startswith("Binlog Dump"))]

    def read_only_bypass_users(self) -> set[str]:
        return set(self._server().bypass_users)

    def schemas(self) -> list[str]:
        return ["app"]

    def schema_writers(self, schemas: list[str]) -> dict[tuple[str, str], set[str]]:
        return {a: set(levels) for a, levels in self._server().writers.items()}

    def user_hosts(self, user: str) -> list[str]:
        return sorted(h for u, h in self._server().grants if u == user)

    def grants(self, user: str, host: str = "%") -> list[str]:
        return list(self._server().grants[(user, host)])

    def open_transactions(self) -> list[tuple[int, str]]:
        s = self._server()
        return [(x.id, x.user) for x in s.sessions if x.id in s.open_trx]

    def _until(self, items: list) -> list:
        now = self.topo.clock.monotonic()
        return [what for until, what in items if now < until]

    def heavy_work_in_flight(self, min_rows: int) -> list[HeavyWork]:
        return [w for w in self._until(self._server().heavy) if w.kind == "DDL" or w.rows >= min_rows]

    def applying_heavy(self) -> list[HeavyWork]:
        return self._until(self._server().applying)

    def binlog_coordinates(self) -> tuple[str, int]:
        s = self._server()
        return "mysql-bin.000001", 1000 + 100 * len(s.log)

    def apply_backlog_bytes(self, source_file: str, source_pos: int, transactions_behind: int) -> int:
        return sum(self._until(self._server().backlog))

    def disk_full_waits(self) -> list[Session]:
        s = self._server()
        return [Session(99, "app", "127.0.0.1", "app", "Query", 12, "Waiting for someone to free space",
                        "INSERT INTO app.t ...")] if s.disk_full else []


class FakeBinlog:
    """A server's binlog as BinlogReader reads it: its GTIDs in order, each described by
    `binlog_says` where the test said what it changed."""

    def __init__(self, topo: FakeTopology, name: str):
        self.topo, self.name = topo, name

    def _read(self) -> list[BinlogTransaction]:
        s = self.topo.reach(self.name)
        if s.binlog_error:
            raise BinlogReadError(f"cannot read {self.name}'s binlog: {s.binlog_error}")
        return [s.binlog_says.get(str(g)) or BinlogTransaction(str(g)) for g in s.log]

    def after(self, position: str, includes) -> list[BinlogTransaction]:
        return [t for t in self._read() if not includes(position, t.gtid)]

    def transactions(self, gtids, start: str = "") -> list[BinlogTransaction]:
        wanted = set(gtids)
        return [t for t in self._read() if t.gtid in wanted]


class FakeApplier:
    """The writes the switchover makes, rendered and (in dry-run) recorded by the real Applier."""

    def __init__(self, topo: FakeTopology, name: str, *, dry_run: bool = False, on_planned=None):
        self.topo, self.name, self.dry_run = topo, name, dry_run
        s = topo.servers[name]
        wire = SimpleNamespace(name=name, flavor=s.flavor, ledger=topo.ledger,
                               execute=lambda sql, params=None: topo.send(name, sql))
        self.real = Applier(wire, dry_run=dry_run, on_planned=on_planned)  # type: ignore[arg-type]

    @property
    def planned(self) -> list[str]:
        return self.real.planned

    def _live(self) -> FakeServer | None:
        """The server to change, or None in dry-run (nothing is sent, nothing changes)."""
        return None if self.dry_run else self.topo.reach(self.name)

    def _refuse_if_running(self, s: FakeServer | None) -> None:
        if s is not None and (s.io_running or s.sql_running):
            raise QueryError(f"{self.name}: This operation cannot be performed as you have a running slave ''; "
                             "run STOP SLAVE '' first", errno=1198)

    def _partitioned(self) -> FakeServer | None:
        s = self.topo.servers[self.name]
        if self.dry_run or not s.partitioned:
            return None
        if s.doubts:
            self.topo.reach(self.name)  # raises: an earlier change there is still in doubt
        return s

    def _set(self, s: FakeServer, on: bool) -> None:
        others = [n for n in self.topo.writable() if n != self.name]
        assert on or not others, f"{self.name} made writable while {others} is writable: two primaries"
        s.read_only = on

    def set_read_only(self, on: bool, lock_wait_timeout: float | None = None) -> None:
        cut_off = self._partitioned()
        if cut_off is not None:
            self.topo.in_doubt(self.name, f"SET GLOBAL read_only={'ON' if on else 'OFF'}",
                               lambda: self._set(cut_off, on))
        s = self._live()
        others = [n for n in self.topo.writable() if n != self.name]
        assert s is None or on or not others, f"{self.name} made writable while {others} is writable: two primaries"
        self.real.set_read_only(on, lock_wait_timeout)
        if s is not None:
            s.read_only = on

    def fence_and_read_binlog_pos(self, lock_wait_timeout: float, expiry_s: float | None = None) -> str | None:
        """The real applier sends all in one request; here the expiry, the fence, then the position read."""
        cut_off = self._partitioned()
        if cut_off is not None:
            carried = self.topo.carried(self.name)

            def fence_lands() -> None:
                if expiry_s:
                    self._schedule_expiry(cut_off, expiry_s, carried)
                self._set(cut_off, True)

            self.topo.in_doubt(self.name, "fence" + (f" with expiry in {expiry_s:g}s" if expiry_s else ""),
                               fence_lands)
        s = self._live()
        if expiry_s:
            self.topo.sent.append((self.name, f"fence expiry in {expiry_s:g}s"))
            if s is not None:
                self._schedule_expiry(s, expiry_s)
        self.set_read_only(True, lock_wait_timeout)
        return None if s is None else s.position()

    def _schedule_expiry(self, s: FakeServer, expiry_s: float, gen: "int | None | object" = ...) -> None:
        at = s.expiry_at = self.topo.clock.monotonic() + expiry_s
        gen = self.topo.carried(self.name) if gen is ... else gen  # the generation its fence carried

        def fire() -> None:
            if s.expiry_at != at or not s.up:
                return  # cancelled or replaced since
            if gen is not None and (s.generation != gen or s.io_running or s.sql_running):
                # The event's body checks the generation it was set under, and that the server
                # does not replicate, before it unfences (db/flavor.py fence_expiry_sql).
                self.topo.sent.append((self.name, f"fence expiry <generation {gen}, server holds {s.generation}, "
                                                  f"replicating {s.io_running or s.sql_running}: no-op>"))
                return
            if s.expiry_at == at and s.up:  # not cancelled nor replaced since
                s.expiry_at = None
                others = [n for n in self.topo.writable() if n != self.name]
                assert not others, f"{self.name}'s fence expired while {others} is writable: two primaries"
                s.read_only = False
                self.topo.sent.append((self.name, "fence expired: read_only=OFF"))

        self.topo.clock.at(expiry_s, fire)

    def cancel_fence_expiry(self) -> None:
        s = self._live()
        self.topo.sent.append((self.name, "cancel fence expiry"))
        if s is not None:
            s.expiry_at = None

    def stop_replica(self) -> None:
        s = self._live()
        self.real.stop_replica()
        if s is not None:
            s.io_running = s.sql_running = False

    def start_replica(self) -> None:
        s = self._live()
        if s is not None and s.source is None:
            raise QueryError(f"{self.name}: Misconfigured slave: MASTER_HOST was not set", errno=1200)
        self.real.start_replica()
        if s is not None:
            s.io_running, s.sql_running, s.last_sql_error = True, not s.fails_with, s.fails_with
            self.topo.replicate()

    def restart_replica_io(self) -> None:
        s = self._live()
        self.real.restart_replica_io()
        if s is not None:
            s.io_stalled = False
            self.topo.replicate()

    def reset_replica_all(self) -> None:
        s = self._live()
        self._refuse_if_running(s)
        self.real.reset_replica_all()
        if s is not None:
            s.source, s.last_sql_error = None, ""

    def change_source(self, host: str, port: int, repl: Credentials, *, ssl: bool = False) -> None:
        s = self._live()
        self._refuse_if_running(s)
        self.real.change_source(host, port, repl, ssl=ssl)
        if s is not None:
            s.source = self.topo.name_at(host, port)

    def prepare_as_replica(self) -> None:
        self._live()
        self.real.prepare_as_replica()

    def kill_connection(self, connection_id: int) -> None:
        s = self._live()
        self.real.kill_connection(connection_id)
        if s is not None:
            if all(x.id != connection_id for x in s.sessions):
                raise QueryError(f"{self.name}: Unknown thread id: {connection_id}", errno=1094)
            s.sessions = [x for x in s.sessions if x.id != connection_id]
            s.open_trx.discard(connection_id)

    def write_switchover_probe(self, run_id: str, primary: str) -> None:
        s = self._live()
        if s is not None and s.disk_full:
            # The write waits for space that never comes: until the bound, or the read timeout.
            deadline = self.topo.deadlines.get(self.name, self.topo.clock.monotonic() + self.topo.read_timeout_s)
            self.topo.clock.advance(max(0.0, deadline - self.topo.clock.monotonic()))
            raise Unresponsive(f"{self.name} did not answer", errno=3024)
        self.real.write_switchover_probe(run_id, primary)
        if s is not None:
            self.topo.write(self.name)

    def sql(self, statement: str, params: tuple | None = None) -> int:
        self._live()
        return self.real.sql(statement, params)


class FakeRouter:
    """A router holding one writer address; like the real ones, it refuses to switch
    from an `old` writer it does not currently have. `freeze()` makes it a frozen HAProxy:
    a change sent is kept in its buffer unanswered (RouterNoAnswer) and runs at `thaw()`;
    reads do not answer meanwhile. `marker` is the number of the last change that ran."""

    def __init__(self, topo: FakeTopology, writer: str | None):
        self.topo = topo
        self.writer = None if writer is None else "%s:%d" % topo.address(writer)
        self.switches: list[tuple[str, str | None]] = []
        self.frozen = False
        self.dead = False  # killed: nothing listens, what was in its buffer is gone
        self.buffered: list[tuple[object, object, int | None]] = []
        self.marker = 0

    def describe(self) -> str:
        return "fake router"

    def freeze(self) -> None:
        self.frozen = True

    def thaw(self) -> None:
        """Wakes and runs what was left in its buffer, in the order it was sent."""
        self.frozen = False
        for new, old, seq in self.buffered:
            self._switch(new, None, seq)  # checked when planned, not when it runs (as HAProxy's commands)
        self.buffered = []

    def kill(self) -> None:
        self.dead, self.frozen, self.buffered = True, False, []

    def current(self) -> RouteState:
        if self.dead:
            raise RouterGone("the fake router's socket refused the connection")
        if self.frozen:
            raise RouterError("the fake router did not answer within 3s")
        return RouteState(writer=self.writer, writers=[self.writer] if self.writer else [])

    def settled(self, seq: int) -> bool:
        self.current()
        return self.marker >= seq

    def prepare_switch(self, new, old=None) -> None:
        self.current()

    def switch_writer(self, new, old=None, *, persist=True, log=None, seq=None) -> RouteState:
        if self.frozen:
            intent = RouteIntent(seq or 0, f"writer={new.name}", f"writer={old.name}" if old else "", "send {request}")
            if log is not None:
                log.sent(intent)
            self.buffered.append((new, old, seq))
            raise RouterNoAnswer(f"the fake router did not answer 'writer={new.name}' within 3s")
        if self.writer == new.address:
            return self.current()
        intent = RouteIntent(seq or 0, f"writer={new.name}", f"writer={old.name}" if old else "", "send {request}")
        if log is not None:
            log.sent(intent)
        self._switch(new, old, seq)
        if log is not None:
            log.answered(intent)
        return self.current()

    def _switch(self, new, old, seq) -> None:
        if old is not None and self.writer not in (old.address, new.address):
            raise RouterError(f"the router's writer is {self.writer}, not {old.address}")
        self.writer = new.address
        self.switches.append((new.name, old.name if old is not None else None))
        self.topo.sent.append(("router", f"writer={new.name}"))
        if seq is not None:
            self.marker = max(self.marker, seq)

    def describe_switch(self, new, old=None) -> list[str]:
        return [f"send writes to {new.name} ({new.address}) instead of {old.name if old is not None else 'nobody'}"]


def cluster(names: tuple[str, ...] = ("db1", "db2", "db3"), writes: int = 10) -> FakeTopology:
    """names[0] the writable primary with `writes` transactions, the others caught-up
    read-only replicas of it; the replicas to repoint are those after names[1]."""
    servers = {n: FakeServer(n, port=3300 + i, server_id=i) for i, n in enumerate(names, start=1)}
    topo = FakeTopology(servers=servers, repl=Credentials("repl", "secret"), replicas=list(names[2:]))
    topo.write(names[0], writes)
    for n in names[1:]:
        topo.link(n, names[0])
    return topo
