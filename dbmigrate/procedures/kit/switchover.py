"""The mechanics of a planned switchover, one method per step, each idempotent.

`Switchover(old, new)` moves the writer from `old` to `new`. The promote
and schema swap procedures wrap these methods as engine steps; rollback is the same mechanics
pointed the other way (`switch_back`), so going back is a switchover, not a
restore.

Order matters for the write gap (measured on loopback, see the README):
read_only on the old primary, wait for the candidate to apply the old
primary's final GTID position, flip the router (the candidate is still
read-only: the application reconnects while it opens), read_only=OFF on the
candidate, and only then the slow parts (STOP SLAVE, RESET SLAVE ALL purges
relay logs: ~180 ms) and the repointing of the other replicas.

Safety rules enforced here, not left to callers:
- the candidate is opened only after the old primary is fenced and the
  candidate has applied everything the old primary wrote;
- the old primary is unfenced only when the candidate is known read-only
  (never two writable primaries);
- every wait is bounded; a failed catch-up leads to unfencing (never left read-only).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from dbmigrate.db.applier import Applier
from dbmigrate.db.binlog import BinlogReader
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.db.in_doubt import SETTLE_GONE_S
from dbmigrate.db.inspector import Inspector, Session
from dbmigrate.engine.wait import Clock
from dbmigrate.db.connection import ROUND_TRIP_MARGIN_S, QueryError
from dbmigrate.procedures.kit.drain import UNKNOWN_THREAD, drain, protected_users
from dbmigrate.procedures.kit.fence import CalmWait, Fence, FencedServer, FenceParams
from dbmigrate.exceptions import DbmigrateError, RefusedWait, SafetyError, WaitTimeout
from dbmigrate.routing.base import RouterError

# The convergence loop polls slowly while the candidate is more than this many times the limit behind.
FAR_TIMES = 4

# The catch-up's first, short wait; only past it is the candidate's replication status read.
FIRST_CATCHUP_WAIT_S = 0.05

# A catch-up whose candidate receives nothing this long while behind renews its replication connection.
IO_STALL_S = 1.0

# A SQL thread seen stopped with an error this long is taken as stopped: it does not restart by
# itself (transient errors are retried by the server before the thread stops).
SQL_STOPPED_CONFIRM_S = 0.3

# How often the convergence looks again at work that is too big for the window: INNODB_TRX is
# a cache refreshed only when nobody read it for 0.1 s.
SIZE_LOOK_POLL_S = 0.11

@dataclass
class _SizeSeen:
    """What the convergence saw of work too big for the window, across its looks."""

    running: str = ""  # heavy work seen running on the old primary at the last look
    drained: str = ""  # the same, once it ended
    drain_to: str | None = None  # the old primary's position once it ended: the candidate must apply it


class WriterRouter(Protocol):
    """What a switchover needs of a router (see dbmigrate.routing.base.Router)."""

    def current(self) -> Any: ...  # RouteState with .writer "host:port"
    def switch_writer(self, new: Server, old: Server | None = None, *, persist: bool = True) -> Any: ...
    def describe_switch(self, new: Server, old: Server | None = None) -> list[str]: ...


class SwitchoverSettings(FenceParams):
    """The switchover's bounds: the fence's (FenceParams, declared once in the kit) and its own."""

    catchup_timeout_s: float = 5.0
    # The fence waits until the candidate is this close to the primary, so that the
    # catch-up inside the fenced window (where writes are refused) stays short.
    converge_timeout_s: float = 10.0
    converge_max_trx: int = 10  # transactions behind, per domain
    converge_poll_s: float = 0.001
    # While the candidate is far behind (more than FAR_TIMES x converge_max_trx) the loop polls
    # this slowly: a 1 ms loop is two reads per ms and most of a core, taken from a primary
    # and a machine that may be saturated already, for nothing until the candidate comes close.
    converge_far_poll_s: float = 0.01
    # Size, not only count: once converged, the fence also waits (within converge_timeout_s,
    # else refuses with the reason) while the old primary runs a DDL or a transaction that has
    # modified at least this many rows, or the candidate applies a DDL or has more than
    # converge_max_backlog_bytes of the old primary's binlog still to apply. Each of those is a
    # multi-second apply that would otherwise fall inside the fenced window.
    converge_max_trx_rows: int = 10_000
    converge_max_backlog_bytes: int = 1 << 20
    # How long an undo waits for one server to answer before taking it as down (frozen, dead).
    probe_timeout_s: float = 2.0
    drain_timeout_s: float = 2.0  # wait for in-flight app transactions after read_only
    kill_app_sessions: bool = True  # end remaining app sessions on the fenced server
    replica_timeout_s: float = 30.0  # bound for repointing each other replica
    admin_users: tuple[str, ...] = ()  # sessions never killed (the tool's own, replication)

    def expiry_s(self) -> float:
        """Seconds after which the old primary's fence expires by itself (0: never scheduled)."""
        return self.expiry_after(self.catchup_timeout_s)


@dataclass
class Topology:
    """The servers involved, by name, with what the steps need."""

    servers: dict[str, Server]
    repl: Credentials
    replicas: list[str] = field(default_factory=list)  # other replicas to repoint (not old/new)
    # How servers reach each other for replication, when it differs from how this
    # tool reaches them (containers, NAT): name -> (host, port).
    repl_addresses: dict[str, tuple[str, int]] = field(default_factory=dict)

    # The switchover reads and writes servers only through these two, so that its
    # decisions can be tested on a fake topology (tests/unit/fake_topology.py).
    def inspector(self, name: str) -> Inspector:
        return Inspector(self.servers[name])

    def applier(self, name: str, *, dry_run: bool = False, on_planned: "Record | None" = None) -> Applier:
        return Applier(self.servers[name], dry_run=dry_run, on_planned=on_planned)

    def address(self, name: str) -> tuple[str, int]:
        """How this tool reaches `name` (the router names servers the same way)."""
        s = self.servers[name]
        return s.host, s.port

    @contextmanager
    def bounded(self, seconds: float, *names: str) -> Iterator[None]:
        """Every statement to these servers inside the block answers within `seconds` from now
        (a frozen server costs the bound, not the read timeout)."""
        with ExitStack() as stack:
            for name in names:
                stack.enter_context(self.servers[name].bounded(seconds))
            yield

    def settle(self, name: str) -> None:
        """End the sessions of `name`'s statements in doubt (db/in_doubt.py); raises when it cannot."""
        self.servers[name].settle_doubts()

    def binlog(self, name: str, timeout_s: float) -> BinlogReader:
        """Transactions from `name`'s binlog (each read bounded by `timeout_s`)."""
        return BinlogReader(self.servers[name], timeout_s)

    def side_session(self, name: str, timeout_s: float) -> tuple[Inspector, Applier] | None:
        """Reads and writes on a session of its own to `name` (its watch session, opened before
        the fence), for a watchdog that acts while the main session is blocked."""
        watcher = self.servers[name].watcher(int(timeout_s) + 5)
        return Inspector(watcher), Applier(watcher)


Notify = Callable[..., None]  # (message, level="info")
Record = Callable[[str, str], None]  # (server, statement) planned in dry-run


class Switchover:
    def __init__(self, topo: Topology, old: str, new: str, settings: SwitchoverSettings,
                 router: WriterRouter | None = None, *, dry_run: bool = False,
                 log: Notify | None = None, record: Record | None = None, clock: Clock | None = None):
        self.topo = topo
        self.old, self.new = old, new
        self.s = settings
        self.router = router
        self.dry_run = dry_run
        self.log = log or (lambda message, level="info": None)
        self.record = record
        self.clock = clock or Clock()
        self._window_ready = False  # prepare_window ran: the checks before the fence are done
        # The final position the candidate was seen to apply within the fenced catch-up budget:
        # the catch-up step need not ask again inside the window.
        self.applied_at_fence: str | None = None
        # The kit's fence of the old primary (its expiry, watchdog, attempts and budget).
        self.old_fence: Fence[str] = Fence(
            old, FencedServer(inspector=lambda: self.insp(self.old), applier=lambda: self.apply(self.old),
                              bounded=lambda seconds: self.topo.bounded(seconds, self.old),
                              side_session=lambda timeout_s: self.topo.side_session(self.old, timeout_s)),
            settings, final_position=lambda insp, read: read if read is not None else insp.gtid_binlog_pos(),
            catchup_timeout_s=settings.catchup_timeout_s, targets=new, log=self.log, clock=self.clock,
            dry_run=dry_run)
        # Sessions of accounts that bypass read_only that seal_old ended: who may have written after the fence.
        self.sealed_sessions: list[Session] = []

    @property
    def fence_expires_at(self) -> float | None:
        """Wall clock by which the last fence this instance set expires on the server (None: no expiry)."""
        return self.old_fence.expires_at

    # -- helpers -------------------------------------------------------------
    def server(self, name: str) -> Server:
        return self.topo.servers[name]

    def insp(self, name: str) -> Inspector:
        return self.topo.inspector(name)

    def apply(self, name: str) -> Applier:
        return self.topo.applier(name, dry_run=self.dry_run, on_planned=self.record)

    def _repl_addr(self, name: str) -> tuple[str, int]:
        return self.topo.repl_addresses.get(name) or self._addr(name)

    def _addr(self, name: str) -> tuple[str, int]:
        return self.topo.address(name)

    def replicates_from(self, name: str, source: str) -> bool:
        st = self.insp(name).replica_status()
        host, port = self._repl_addr(source)
        return st is not None and st.source_port == port and st.source_host in (host, "localhost" if host == "127.0.0.1" else host)

    def replicating_from(self, name: str, source: str) -> bool:
        """Pointed at `source` AND both threads running: the effect a repoint must leave.
        A repoint killed between STOP SLAVE and START SLAVE leaves the right source configured
        but nothing applied, so the configuration alone proves nothing."""
        st = self.insp(name).replica_status()
        return st is not None and st.running and self.replicates_from(name, source)

    def writable(self, name: str) -> bool:
        return not self.insp(name).read_only()

    def writable_or_none(self, name: str) -> bool | None:
        """Is `name` writable? None when it does not answer within probe_timeout_s (frozen, dead).
        A statement in doubt there is ended first, within a bound of its own: after a partition
        heals, ending it takes a new connection, and the read must not find its bound spent."""
        try:
            with self.topo.bounded(self.s.probe_timeout_s + SETTLE_GONE_S, name):
                self.topo.settle(name)
            with self.topo.bounded(self.s.probe_timeout_s, name):
                return self.writable(name)
        except DbmigrateError:
            return None

    # -- 0. converge (before the fence) ---------------------------------------
    def converge(self) -> tuple[str, int]:
        """Wait (bounded) until the candidate is within `converge_max_trx` of the old primary.

        Returns (sentence, transactions behind when it converged). Nothing is changed on
        any server: on timeout it raises with the lag it saw, and the caller does not fence.
        The loop polls on the inspectors' open connections: each round is two short reads.
        Once within the limit it also waits, up to fence_calm_wait_s, for a moment when no
        transaction on the old primary waits for a row lock (a third read, then only).
        """
        limit = self.s.converge_max_trx
        if self.dry_run:
            return (f"would wait up to {self.s.converge_timeout_s:g}s for {self.new} to be within "
                    f"{limit} transaction(s) of {self.old}"), 0
        # The loop ends itself at converge_timeout_s; a server that stops answering ends it one probe later.
        bound = self.s.converge_timeout_s + self.s.probe_timeout_s
        try:
            with self.topo.bounded(bound, self.old, self.new):
                return self._converge()
        except QueryError as e:
            raise RefusedWait(f"{e.message}: no answer within the convergence bound of {bound:g}s; not fenced, "
                              f"nothing changed",
                              hint="check both servers (dbmigrate topology show), then run again") from None

    def _converge(self) -> tuple[str, int]:
        limit = self.s.converge_max_trx
        old, new = self.insp(self.old), self.insp(self.new)
        delay = self._require_applying(new).sql_delay_s
        if delay:
            # Delayed by configuration, it cannot converge while writes flow: the bounded
            # catch-up after the fence (and the unfence when it times out) decides.
            behind = max(new.trx_behind(old.gtid_binlog_pos()).values(), default=0)
            self.log(f"{self.new} replicates with a configured delay of {delay}s: the fenced window will last "
                     f"about that long", "warning")
            return (f"{self.new} was {behind} transaction(s) behind {self.old} and replicates with a configured "
                    f"delay of {delay}s: not waiting for it to converge"), behind
        t0 = self.clock.monotonic()
        deadline = t0 + self.s.converge_timeout_s
        worst = 0
        calm = CalmWait(self.s.fence_calm_wait_s)
        too_big, size_waited_from, seen = "", None, _SizeSeen()
        while True:
            behind = max(new.trx_behind(old.gtid_binlog_pos()).values(), default=0)
            worst = max(worst, behind)
            if behind <= limit:
                if calm.now(old.row_lock_waits() if calm.looks else 0, self.clock.monotonic(), deadline):
                    # Read once converged, not every poll: a few reads more, then only while it waits.
                    too_big = self._too_big_for_window(old, new, behind, seen)
                    now = self.clock.monotonic()
                    if not too_big:
                        waited_ms = (now - t0) * 1000
                        size_said = (f"; waited {(now - size_waited_from) * 1000:.0f} ms for work too big for the "
                                     f"fenced window" if size_waited_from is not None else "")
                        calm_said = f"; {calm.said(self.old)}" if calm.said(self.old) else ""
                        return (f"{self.new} was {behind} transaction(s) behind {self.old} (limit {limit}; "
                                f"at most {worst} while waiting {waited_ms:.1f} ms){calm_said}{size_said}"), \
                            behind
                    if size_waited_from is None:
                        size_waited_from = now
                        self.log(f"not fencing yet: {too_big}", "info")
                    if now >= deadline:
                        raise RefusedWait(f"{too_big}: it would be applied inside the fenced window, so the fence "
                                          f"waited up to {self.s.converge_timeout_s:g}s for it; not fenced, nothing "
                                          f"changed",
                                          hint="run the switchover once it is done (a DDL belongs in a schema swap or "
                                               "an online schema change; a large transaction can be split), or raise "
                                               "converge_timeout_s / converge_max_trx_rows / converge_max_backlog_bytes")
                    self.clock.sleep(SIZE_LOOK_POLL_S)
                    continue
            elif self.clock.monotonic() >= deadline:
                earlier = f"; earlier {too_big}" if too_big else ""  # what held it back first (a DDL it applies)
                raise RefusedWait(f"{self.new} did not apply {self.old}'s writes to within {limit} transaction(s) in "
                                  f"{self.s.converge_timeout_s:g}s (last {behind} behind, at most {worst}{earlier}): "
                                  f"not fenced, nothing changed",
                                  hint="retry when the load is lighter or the candidate applies faster "
                                       "(dbmigrate lag watch), or raise converge_max_trx / converge_timeout_s")
            far = behind > FAR_TIMES * max(limit, 1)
            self.clock.sleep(max(self.s.converge_far_poll_s, self.s.converge_poll_s) if far else self.s.converge_poll_s)

    def _too_big_for_window(self, old: Inspector, new: Inspector, behind: int, seen: "_SizeSeen") -> str:
        """Why the candidate, close by count, would still take long to catch up inside the
        window ('' when nothing is seen): a DDL or a large uncommitted transaction on the old
        primary, a DDL being applied on the candidate, or a binlog backlog beyond the limit."""
        if self.s.converge_max_trx_rows <= 0 and self.s.converge_max_backlog_bytes <= 0:
            return ""
        rows = self.s.converge_max_trx_rows if self.s.converge_max_trx_rows > 0 else 1 << 62
        running = old.heavy_work_in_flight(rows)
        if running:
            seen.running = f"{self.old} ran " + "; ".join(w.describe() for w in running)
            return f"{self.old} runs " + "; ".join(w.describe() for w in running)
        if seen.running:
            # It ended (committed, or rolled back): the candidate must apply everything up to now,
            # that work included, before the fence. Its SQL thread may not have begun it yet, so
            # no later look could see it there: the position decides.
            seen.drain_to, seen.drained, seen.running = old.gtid_binlog_pos(), seen.running, ""
        if seen.drain_to is not None:
            if not new.has_applied(seen.drain_to):
                return f"{self.new} has not applied what {seen.drained.removeprefix(self.old + ' ran ')} wrote yet"
            seen.drain_to = None
        applying = new.applying_heavy()
        if applying:
            return f"{self.new} applies " + "; ".join(w.describe() for w in applying)
        if self.s.converge_max_backlog_bytes > 0:
            source_file, source_pos = old.binlog_coordinates()
            backlog = new.apply_backlog_bytes(source_file, source_pos, behind)
            if backlog > self.s.converge_max_backlog_bytes:
                return (f"{self.new} has {backlog / 1048576:.1f} MiB of {self.old}'s binlog still to apply "
                        f"(limit {self.s.converge_max_backlog_bytes / 1048576:g} MiB: a large transaction)")
        return ""

    def prepare_window(self) -> set[str]:
        """Before the fence: every session the fenced window uses is open and answers
        (the catch-up wait's too), and the router's request is built. Returns the accounts
        that bypass read_only on the old primary, for `seal_old` inside the window."""
        if self.dry_run:
            return set()
        self.insp(self.old).open_sessions(self.s.fence_timeout_s)
        self.insp(self.new).open_sessions(self.s.catchup_timeout_s)
        self._require_gtid_mode()
        self.old_fence.expiry_s()  # read now: not inside the window
        self._window_ready = True
        # Grants (and roles' grants) are read now: inside the window only the sessions are.
        bypass = self.bypass_users()
        prepare = getattr(self.router, "prepare_switch", None)
        if prepare is not None:
            prepare(self.server(self.new), self.server(self.old))
        return bypass

    def _require_applying(self, insp: Inspector) -> ReplicaStatus:
        st = insp.replica_status()
        if st is None or st.sql_running != "Yes":
            raise DbmigrateError(f"{self.new} is not applying replication (SQL thread {st.sql_running if st else 'absent'}"
                                 f"{': ' + st.last_error if st and st.last_error else ''})",
                                 hint="fix replication on the candidate and run again")
        return st

    # -- 1. fence ------------------------------------------------------------
    def is_fenced(self) -> bool:
        return self.insp(self.old).read_only()

    def fence(self, before_retry: Callable[[], object] | None = None) -> tuple[str, str]:
        """read_only on the old primary through the kit's fence (kit/fence.py): tried up to
        fence_attempts times when one attempt gives up blocked, or its candidate did not apply the
        final position within fenced_catchup_budget_s (writes flow for fence_retry_pause_s in
        between); returns (sentence, final position). `before_retry` runs before each new
        attempt: the candidate may have fallen behind while writes flowed, and the caller
        converges again (its calm wait too) so that the catch-up stays outside the window."""
        if not self.dry_run and not self._window_ready:
            self._require_gtid_mode()
        fenced = self.old_fence.fence(self._applied_within, before_retry, calm=False)
        return fenced.sentence, fenced.position

    def _applied_within(self, position: str, budget_s: float) -> bool:
        """Inside the fenced window: has the candidate applied the final position within the budget?"""
        with self.topo.bounded(budget_s + ROUND_TRIP_MARGIN_S, self.new):
            applied = self.insp(self.new).wait_for_gtid(position, budget_s)
        if applied:
            self.applied_at_fence = position
        return applied

    def _require_gtid_mode(self) -> None:
        problem = self.insp(self.old).gtid_mode_problem()
        if problem:
            # Without GTIDs the final position would be empty and the catch-up wait a no-op.
            raise SafetyError(f"{self.old} runs with {problem}",
                              hint="switchovers need gtid_mode=ON and enforce_gtid_consistency=ON")

    def require_fence_holds(self, expires_at: float | None) -> None:
        """Refuse to open the candidate when the old primary's fence expires (or expired) before
        the open can have landed: the expiry would make the old primary writable beside it."""
        self.old_fence.require_not_expiring(expires_at, self.new)

    def end_sessions(self, name: str | None = None) -> str:
        """Wait (bounded) for open app transactions on a fenced server, then end its app sessions."""
        name = name or self.old
        drained, killed = self._drain(name)
        return f"{name}: {drained} open app transaction(s) at the start, {killed} app session(s) ended"

    def _drain(self, name: str) -> tuple[int, int]:
        """Wait (bounded) for open app transactions to end, then end app sessions."""
        if self.dry_run:
            return 0, 0
        insp = self.insp(name)
        if not insp.reachable():
            return 0, 0  # unreachable: it has no sessions we could end, and takes no writes (fenced)
        protected = protected_users(insp, self.topo.repl.user, self.s.admin_users)
        done = drain(insp, self.apply(name), protected, timeout_s=self.s.drain_timeout_s,
                     until="transactions", end=self.s.kill_app_sessions, clock=self.clock)
        return done.open_at_start, done.ended

    def seal_old(self, bypass: set[str] | None = None) -> tuple[str, str]:
        """Before the candidate opens: the old primary must still be read-only, and every session
        of an account that bypasses read_only is ended, so that nothing can commit there after
        the final position is read. Returns (sentence, final position). Bounded like the fence:
        inside the window a frozen old primary costs the bound, and no ping precedes a statement."""
        bypass = self.bypass_users() if bypass is None else bypass
        with self.topo.bounded(self.s.fence_timeout_s, self.old):
            return self._seal_old(bypass)

    def _seal_old(self, bypass: set[str]) -> tuple[str, str]:
        insp = self.insp(self.old)
        # Before the read that proves the fence holds: once the expiry is dropped, nothing but
        # an operator can unfence the old primary, so "still fenced" stays true through the open.
        self.old_fence.cancel_expiry()
        if not bypass:
            # No account can write past read_only: one round trip, no session list, inside the window.
            fenced, pos = insp.read_only_and_binlog_pos()
            self._require_still_fenced(fenced)
            return "", pos
        # One round trip when none of those accounts has a session, the usual case.
        fenced, count, pos = insp.read_only_sessions_count_and_binlog_pos(bypass)
        self._require_still_fenced(fenced)
        if not count:
            return "", pos
        ended = 0
        for sess in insp.sessions():
            if sess.user in bypass:
                self.sealed_sessions.append(sess)
                try:
                    self.apply(self.old).kill_connection(sess.id)
                    ended += 1
                except QueryError as e:
                    if e.errno != UNKNOWN_THREAD:
                        raise
        # Read after the sessions were ended: a commit of theirs before that is in it.
        pos = insp.gtid_binlog_pos()
        return (f"ended {ended} session(s) of accounts that bypass read_only on {self.old}; " if ended else ""), pos

    def _require_still_fenced(self, fenced: bool) -> None:
        self.old_fence.require_fenced(fenced, self.new)

    def bypass_users(self) -> set[str]:
        insp = self.insp(self.old)
        return insp.read_only_bypass_users() - {insp.login_user, self.topo.repl.user, "system user", "event_scheduler"}

    def unfence_old(self, candidate_known_closed: bool, candidate_writable: "bool | None | object" = ...) -> str:
        """Make the old primary writable again, only if the candidate cannot take writes.
        `candidate_writable` is what a caller already found (None: it did not answer); by
        default the candidate is asked, within probe_timeout_s."""
        if not self.is_fenced():
            return f"{self.old} is already writable"
        cand_writable = self.writable_or_none(self.new) if candidate_writable is ... else candidate_writable
        if cand_writable is None:
            if not candidate_known_closed:
                raise SafetyError(f"cannot unfence {self.old}: {self.new} is unreachable and may be writable (what it "
                                  f"was last sent may still land): {self.old} stays fenced",
                                  hint=f"check {self.new} by hand: set read_only=ON there and bring its writes to "
                                       f"{self.old} (replicate until caught up) before {self.old} takes writes again")
            cand_writable = False
            self.log(f"{self.new} did not answer within {self.s.probe_timeout_s:g}s; it was never opened by this "
                     f"run, so {self.old} is unfenced", "warning")
        if cand_writable:
            raise SafetyError(f"refusing to unfence {self.old}: {self.new} is writable (two primaries)",
                              hint="roll the switchover back instead: dbmigrate rollback RUN")
        self.old_fence.unfence()
        return f"unfenced {self.old} (read_only=OFF): it takes writes again"

    # -- 2. catch up ---------------------------------------------------------
    def caught_up(self, position: str) -> bool:
        return self.insp(self.new).has_applied(position)

    def wait_catchup(self, position: str) -> str:
        """Inside the fenced window: one MASTER_GTID_WAIT on the session opened beforehand."""
        if self.dry_run:
            return (f"would wait up to {self.s.catchup_timeout_s:g}s for {self.new} to apply "
                    f"{position or f'the final position of {self.old}'}")
        bound = self.s.catchup_timeout_s
        t0 = self.clock.monotonic()  # the bound counts from here, time blocked on the candidate included
        try:
            with self.topo.bounded(bound, self.new):
                insp = self.insp(self.new)
                # The fence follows convergence, so the position is usually applied within a few ms:
                # a short first wait spares the replica status read inside the window.
                if insp.wait_for_gtid(position, min(FIRST_CATCHUP_WAIT_S, bound)):
                    return f"{self.new} applied {position} in {(self.clock.monotonic() - t0) * 1000:.1f} ms"
                if self._wait_renewing_stalled_io(insp, self._require_applying(insp), position, t0, bound):
                    return f"{self.new} applied {position} in {(self.clock.monotonic() - t0) * 1000:.1f} ms"
                behind = insp.missing_from(position)
        except QueryError as e:
            waited = self.clock.monotonic() - t0
            raise WaitTimeout(f"{self.new} did not apply {self.old}'s final position {position} within {bound:g}s: "
                              f"it did not answer ({e.message}; waited {waited:.1f}s)",
                              hint="the old primary will be unfenced; check the candidate by hand") from None
        raise WaitTimeout(f"{self.new} did not apply {self.old}'s final position {position} within "
                          f"{bound:g}s (still behind: {behind})",
                          hint="the old primary will be unfenced; retry when lag is low (dbmigrate lag watch)")

    def _wait_renewing_stalled_io(self, insp: Inspector, st: ReplicaStatus, position: str, t0: float,
                                  bound: float) -> bool:
        """The rest of the catch-up's bound. A candidate whose I/O thread lacks the position and
        receives nothing for IO_STALL_S gets a new connection to its source, once: after a
        partition heals, the old connection can stay silent for seconds (the source's kernel
        backs off its retransmissions) while a new one streams at once."""
        seen, renewed = st.retrieved_gtid, False
        for _ in range(int(bound / IO_STALL_S) + 2):
            left = bound - (self.clock.monotonic() - t0)
            if left <= 0:
                return False
            if insp.wait_for_gtid(position, left if renewed else min(left, IO_STALL_S)):
                return True
            if renewed:
                return False
            st = insp.replica_status()
            if st is None:
                return False
            if insp.flavor.received(st, position) or st.retrieved_gtid != seen:
                seen = st.retrieved_gtid  # it receives: the SQL thread is what it waits for
                continue
            self.log(f"{self.new} received nothing from {self.old} for {IO_STALL_S:g}s while behind: "
                     f"its replication connection is renewed", "warning")
            self.apply(self.new).restart_replica_io()
            renewed = True
        return False

    # -- 3. open the candidate ----------------------------------------------
    def is_open(self) -> bool:
        st = self.insp(self.new).replica_status()
        return self.writable(self.new) and (st is None or st.sql_running != "Yes")

    def open_candidate(self, stop_replica: bool = True, sealed: bool = False) -> str:
        """Inside the fenced window, bounded like the catch-up: a candidate that stops answering
        fails the step (and, since it may have taken the statements, the old stays fenced).

        `stop_replica=False` leaves STOP SLAVE (3-5 ms under load) to `reset_new_replication`,
        after the router flip: once the old primary is sealed (read-only, no session that
        bypasses it, its final position applied here) its replication has nothing left to send."""
        t0 = self.clock.monotonic()
        if not sealed and not self.dry_run:
            # The old primary's fence may carry an expiry (a switch back fenced it): dropped, then
            # seen still fenced, before the candidate opens.
            self.old_fence.before_open(self.new)
        a = self.apply(self.new)
        with self.topo.bounded(self.s.catchup_timeout_s, self.new):
            if stop_replica:
                a.stop_replica()
            a.set_read_only(False)
        took = f"in {(self.clock.monotonic() - t0) * 1000:.1f} ms"
        if stop_replica:
            return f"{self.new} stopped replicating and is writable (read_only=OFF) {took}"
        return f"{self.new} is writable (read_only=OFF) {took}; its replication stops after the router flip"

    # -- 4. router -----------------------------------------------------------
    def router_points_to(self, name: str) -> bool:
        if self.router is None:
            return True
        host, port = self._addr(name)
        writer = self.router.current().writer
        return writer is not None and writer.rsplit(":", 1) == [host, str(port)]

    def switch_router(self, persist: bool = True) -> str:
        """`persist=False`: only the flip; the read-back and the router's copy for restarts
        are `confirm_router`'s, after the fenced window."""
        if self.router is None:
            return "no router configured: applications must be repointed (hooks can do it)"
        if self.dry_run:
            for line in self.router.describe_switch(self.server(self.new), self.server(self.old)):
                if self.record:
                    self.record("router", line)
            return f"would switch the writer from {self.old} to {self.new}"
        t0 = self.clock.monotonic()
        self.router.switch_writer(self.server(self.new), self.server(self.old), persist=persist)
        return f"router sends writes to {self.new} (switched in {(self.clock.monotonic() - t0) * 1000:.1f} ms)"

    def confirm_router(self) -> str:
        """After the fenced window: the flip made with persist=False is read back and saved for
        restarts of the router; a router that lost it meanwhile (restarted from its state
        file) is switched again."""
        if self.router is None:
            return "no router configured"
        if self.dry_run:
            return f"would check that the router sends writes to {self.new} only and save that route"
        self.router.switch_writer(self.server(self.new), self.server(self.old))
        return f"router sends writes to {self.new} only (read back, saved for its restarts)"

    # -- 5. forget the old source on the new primary -------------------------
    def has_replication_config(self, name: str) -> bool:
        return self.insp(name).replica_status() is not None

    def reset_new_replication(self) -> str:
        t0 = self.clock.monotonic()
        a = self.apply(self.new)
        a.stop_replica()
        a.reset_replica_all()
        return f"{self.new} forgot its old source (RESET SLAVE ALL, {(self.clock.monotonic() - t0) * 1000:.0f} ms)"

    # -- 6. repoint the other replicas --------------------------------------
    def replicas_repointed(self) -> bool:
        return all(self.replicating_from(r, self.new) for r in self.topo.replicas)

    def repoint_replicas(self, position: str) -> str:
        """Move the other replicas under the new primary. A replica that cannot be moved
        (lagging, broken) stays under the old primary, which replicates from the new one
        next: it still receives every write, and rolling the whole cutover back for a
        read replica would cost a second write outage. It is named, to move later."""
        done, left = [], []
        for r in self.topo.replicas:
            if self.replicating_from(r, self.new):
                continue
            try:
                self._repoint(r, self.new, position)
                done.append(r)
            except DbmigrateError as e:
                left.append(f"{r} ({e.message})")
                self.log(f"left {r} under {self.old}: {e.message}; repoint it later (dbmigrate resume RUN)")
        said = f"repointed {', '.join(done) or 'no replica'} to {self.new}"
        return said + (f"; left under {self.old}: {'; '.join(left)}" if left else "")

    def _repoint(self, replica: str, source: str, position: str) -> None:
        """Let the replica apply `position` from its current source, then move it to `source`;
        the whole of it within replica_timeout_s (a frozen replica included)."""
        with self.topo.bounded(self.s.replica_timeout_s, replica):
            self._repoint_within(replica, source, position)

    def _repoint_within(self, replica: str, source: str, position: str) -> None:
        insp = self.insp(replica)
        if not self.dry_run and position:
            self._restart_if_stopped(replica)
            st = insp.replica_status()
            if st is not None and st.sql_running == "No" and st.last_sql_error:
                # Waiting replica_timeout_s for a position it cannot reach would only report lag.
                raise ReplicationStopped(replica, st)
        if not self.dry_run and position and not insp.wait_for_gtid(position, self.s.replica_timeout_s):
            st = insp.replica_status()
            if st is not None and st.sql_running == "No" and st.last_sql_error:
                raise ReplicationStopped(replica, st)  # stopped while it was waited for: not lag
            raise WaitTimeout(f"replica {replica} did not reach {position} within {self.s.replica_timeout_s:g}s",
                              hint=f"check replication on {replica}; it still points at its old source")
        host, port = self._repl_addr(source)
        a = self.apply(replica)
        a.stop_replica()
        a.change_source(host, port, self.topo.repl)
        a.start_replica()

    def _restart_if_stopped(self, replica: str) -> None:
        """A replica left by a repoint cut short (STOP SLAVE: both threads stopped, no error)
        applies nothing: start it on its current source so that it can reach the position it
        must wait for. A replica stuck otherwise (a thread stopped by hand, an error) is left
        for the operator and named by the repoint."""
        st = self.insp(replica).replica_status()
        if st is not None and st.io_running == "No" and st.sql_running == "No" and not st.last_error:
            self.apply(replica).start_replica()

    # -- 7. reverse replication ---------------------------------------------
    def reverse_running(self) -> bool:
        return self.replicating_from(self.old, self.new)

    def start_reverse(self) -> str:
        self._make_replica(self.old, self.new)
        return f"{self.old} replicates from {self.new} (read-only): rollback loses nothing"

    def _make_replica(self, name: str, source: str) -> None:
        host, port = self._repl_addr(source)
        a = self.apply(name)
        a.set_read_only(True)
        a.stop_replica()
        a.prepare_as_replica()
        a.change_source(host, port, self.topo.repl)
        a.start_replica()

    def wait_replica_running(self, name: str, timeout: float = 10) -> None:
        """Both replication threads of `name` running, within `timeout` (every read included).
        A SQL thread stopped with an error does not heal by waiting: it fails at once, naming
        the error; an IO thread's error (the source not reachable yet) is waited out, then named."""
        if self.dry_run:
            return
        deadline = self.clock.monotonic() + timeout
        stopped_since = None
        try:
            with self.topo.bounded(timeout + self.s.probe_timeout_s, name):
                while True:
                    st = self.insp(name).replica_status()
                    if st and st.running:
                        return
                    if st and st.sql_running == "No" and st.last_sql_error:
                        # Seen stopped twice, SQL_STOPPED_CONFIRM_S apart: not a thread between START and run.
                        now = self.clock.monotonic()
                        stopped_since = now if stopped_since is None else stopped_since
                        if now - stopped_since >= SQL_STOPPED_CONFIRM_S:
                            raise ReplicationStopped(name, st)
                    else:
                        stopped_since = None
                    if self.clock.monotonic() > deadline:
                        if st and st.last_error:
                            raise ReplicationStopped(name, st)
                        raise WaitTimeout(f"replication on {name} did not start within {timeout:g}s "
                                          f"(io={st.io_running if st else '-'} sql={st.sql_running if st else '-'})")
                    self.clock.sleep(0.05)
        except QueryError as e:
            raise WaitTimeout(f"replication on {name}: no answer within {timeout:g}s ({e.message})",
                              hint=f"check {name}: dbmigrate topology show") from None

    def stopped_with_error(self, name: str) -> ReplicaStatus | None:
        """`name`'s replica status when a replication thread of it stopped with an error (a
        stopped SQL thread, or an IO thread that gave up), else None; None too when it does not
        answer within probe_timeout_s (the caller's own wait says so)."""
        try:
            with self.topo.bounded(self.s.probe_timeout_s, name):
                st = self.insp(name).replica_status()
        except DbmigrateError:
            return None
        if st and ((st.sql_running == "No" and st.last_sql_error) or (st.io_running == "No" and st.last_io_error)):
            return st
        return None

    # -- 8. verify -----------------------------------------------------------
    def _require_primary(self, name: str) -> None:
        """The probe goes only to the server this run made primary, and only while it is one:
        the tool's login bypasses read_only, and a row written on a replica breaks its replication."""
        insp = self.insp(name)
        if insp.read_only():
            raise _never_primary(name, "it is read-only")
        st = insp.replica_status()
        if st is not None and (st.io_running == "Yes" or st.sql_running == "Yes"):
            raise _never_primary(name, "it replicates")

    def verify_writes_flow(self, run_id: str, timeout: float = 10, old_gone: bool = False) -> str:
        """Write a probe row on the new primary and see it arrive on every other server
        (the old primary excepted when it is gone). The write and each follower's wait are
        bounded by `timeout`: a write that waits (a full disk) fails the step, named."""
        followers = [*([] if old_gone else [self.old]), *self.topo.replicas]
        if self.dry_run:
            # Through the applier: in dry-run the probe is only described.
            self.apply(self.new).write_switchover_probe(run_id, self.new)
            return f"would write a probe row on {self.new} and wait up to {timeout:g}s for {', '.join(followers)}"
        try:
            with self.topo.bounded(timeout, self.new):
                self._require_primary(self.new)
                # Writes already waiting for disk space: say so without adding one (a write given
                # up on stays in doubt until its session ends, which a disk wait delays).
                waiting = self.insp(self.new).disk_full_waits()
                if waiting:
                    raise _disk_full(self.new, f"{_waiting_for_disk(waiting)}; no probe written", run_id)
                self.apply(self.new).write_switchover_probe(run_id, self.new)
                pos = self.insp(self.new).gtid_binlog_pos()
        except QueryError as e:
            raise self._probe_not_written(e, timeout, run_id) from None
        late = []
        for f in followers:
            try:
                with self.topo.bounded(timeout + ROUND_TRIP_MARGIN_S, f):
                    if not self.insp(f).wait_for_gtid(pos, timeout):
                        late.append(f)
            except DbmigrateError:
                late.append(f)
        # A follower whose replication stopped with an error is not late: it will never get
        # there by itself, and a run that said "done" would leave it broken unnoticed.
        stopped = {f: st for f in late if (st := self.stopped_with_error(f)) is not None}
        if self.old in late:
            # Without the reverse path a rollback could not bring the new writes back.
            why = f" ({_replication_error(stopped[self.old])})" if self.old in stopped else ""
            raise WaitTimeout(f"{self.old} did not receive the probe write from {self.new} within {timeout:g}s{why}",
                              hint="check reverse replication: dbmigrate topology show")
        if stopped:
            raise ReplicationStopped.after_cutover(self.new, stopped, run_id)
        reached = [f for f in followers if f not in late]
        said = f"a probe write on {self.new} reached {', '.join(reached) or 'no follower'}"
        if late:
            self.log(f"replica(s) {', '.join(late)} did not receive the probe within {timeout:g}s (lagging, their "
                     f"replication runs): check them (dbmigrate lag watch); the write path is healthy", "warning")
            said += f"; NOT yet on {', '.join(late)} (lagging; see the log)"
        return said

    def _probe_not_written(self, e: QueryError, timeout: float, run_id: str) -> DbmigrateError:
        """What a probe write that failed or did not return within `timeout` means: a full disk
        (the server shows the write waiting for space, or says so) is named as such."""
        waiting: list = []
        try:
            with self.topo.bounded(self.s.probe_timeout_s, self.new):
                waiting = self.insp(self.new).disk_full_waits()
        except DbmigrateError:
            pass
        if waiting or e.errno in DISK_FULL_ERRNOS or "errcode: 28" in e.message.lower():
            seen = _waiting_for_disk(waiting) if waiting else e.message
            return _disk_full(self.new, f"the probe write did not complete within {timeout:g}s ({seen})", run_id)
        return WaitTimeout(f"the probe write on {self.new} did not complete within {timeout:g}s: {e.message}",
                           hint=f"check {self.new} (dbmigrate topology show), then: dbmigrate resume {run_id}")


    # -- completing without the old primary (it died after the fence) --------
    def old_answers(self) -> bool:
        """Does the old primary answer within probe_timeout_s?"""
        try:
            with self.topo.bounded(self.s.probe_timeout_s, self.old):
                return self.insp(self.old).reachable()
        except DbmigrateError:
            return False

    def takeover_facts(self, final_pos: str) -> tuple[list[str], list[str]]:
        """(facts, problems) for promoting the candidate without the old primary: the candidate
        first applies what it received (nothing more can come), then must hold the old primary's
        final position and everything any answering replica applied or received."""
        facts, problems = [], []
        bound = self.s.catchup_timeout_s
        t0 = self.clock.monotonic()
        with self.topo.bounded(bound + self.s.probe_timeout_s, self.new):
            cand = self.insp(self.new)
            st = cand.replica_status()
            for target in (final_pos, st.retrieved_gtid if st else ""):
                left = bound - (self.clock.monotonic() - t0)
                if target and not cand.has_applied(target) and left > 0:
                    cand.wait_for_gtid(target, left)
            have = cand.gtid_executed()
            lacks = {k: v for k, v in cand.trx_behind(final_pos).items() if v}
        facts.append(f"{self.old}'s final position journaled at the fence: {final_pos or '(empty)'}")
        facts.append(f"{self.new} has applied {have or '(nothing)'}")
        if lacks:
            problems.append(f"{self.new} lacks {_describe_behind(lacks)} of {self.old}'s final position")
        for r in self.topo.replicas:
            try:
                with self.topo.bounded(self.s.probe_timeout_s, r):
                    insp = self.insp(r)
                    rst = insp.replica_status()
                    mine = insp.gtid_executed()
                    received = rst.retrieved_gtid if rst else ""
            except DbmigrateError as e:
                facts.append(f"replica {r} does not answer ({e.message}): left as it is")
                continue
            extra = {k: v for pos in (mine, received) if pos for k, v in cand.flavor.behind(pos, have).items() if v}
            if extra:
                problems.append(f"replica {r} has {_describe_behind(extra)} that {self.new} lacks")
            facts.append(f"replica {r} has applied {mine or '(nothing)'}" + (f", received {received}" if received else ""))
        return facts, problems

    def repoint_without_old(self) -> str:
        """Move every answering replica under the new primary (GTID positions: it sends each
        one what it lacks). A replica that cannot be moved is named and left as it is."""
        done, left = [], []
        for r in self.topo.replicas:
            try:
                with self.topo.bounded(self.s.replica_timeout_s, r):
                    if self.replicating_from(r, self.new):
                        continue
                    host, port = self._repl_addr(self.new)
                    a = self.apply(r)
                    a.stop_replica()
                    a.change_source(host, port, self.topo.repl)
                    a.start_replica()
                self.wait_replica_running(r, min(10.0, self.s.replica_timeout_s))
                done.append(r)
            except DbmigrateError as e:
                left.append(f"{r} ({e.message})")
                self.log(f"could not move {r} under {self.new}: {e.message}; repoint it by hand", "warning")
        said = f"repointed {', '.join(done) or 'no replica'} to {self.new}"
        return said + (f"; NOT moved: {'; '.join(left)}" if left else "")


# Errors that mean a full disk: ER_DISK_FULL, ER_RECORD_FILE_FULL ("the table is full"),
# ER_ERROR_ON_WRITE (with errcode 28, checked in the message).
DISK_FULL_ERRNOS = frozenset({1021, 1114})


def _waiting_for_disk(waiting: list[Session]) -> str:
    return f"{len(waiting)} session(s) wait for disk space there, the longest for {max(w.time for w in waiting)}s"


def _disk_full(name: str, seen: str, run_id: str) -> WaitTimeout:
    return WaitTimeout(f"disk full on {name}: {seen}; writes on {name} wait until space is freed",
                       hint=f"free space on {name} (its datadir and binlog directory: SHOW GLOBAL VARIABLES LIKE "
                            f"'log_bin_basename'); the waiting writes go on by themselves once there is room (MariaDB "
                            f"retries every 60 s); then: dbmigrate resume {run_id}")


def _replication_error(st: ReplicaStatus) -> str:
    if st.sql_running == "No" and st.last_sql_error:
        return f"SQL thread stopped: {st.last_sql_error}"
    return f"IO thread {'stopped' if st.io_running == 'No' else st.io_running.lower()}: {st.last_io_error}"


class ReplicationStopped(DbmigrateError):
    """A replica's replication stopped with an error: not lag, it will not catch up by itself."""

    def __init__(self, name: str, st: ReplicaStatus, hint: str | None = None):
        super().__init__(f"replication on {name} stopped with an error ({_replication_error(st)})",
                         hint=hint or f"fix it on {name} (SHOW SLAVE STATUS names the failing event), START SLAVE, "
                                      f"then resume the run")
        self.name, self.status = name, st

    @staticmethod
    def after_cutover(new: str, stopped: dict[str, ReplicaStatus], run_id: str) -> "DbmigrateError":
        """Writes flow on the new primary; a follower is broken. The run pauses there: nothing
        is undone (a switchover back would cost a second write outage for a read replica)."""
        from dbmigrate.engine.runner import RunPaused  # the engine's own exception: pause, undo nothing

        named = "; ".join(f"{n}: {_replication_error(st)}" for n, st in stopped.items())
        return RunPaused(f"writes flow on {new}, but replication stopped with an error on {named}; not lag: it will "
                         f"not catch up by itself",
                         hint=f"fix replication there (SHOW SLAVE STATUS names the failing event; START SLAVE), "
                              f"then: dbmigrate resume {run_id} (verifies again); or undo: dbmigrate rollback {run_id}")


def _describe_behind(behind: dict[str, int]) -> str:
    return ", ".join(f"{n} transaction(s) of domain {d}" for d, n in sorted(behind.items()))


def _never_primary(name: str, why: str) -> SafetyError:
    return SafetyError(f"{name} is not the primary any more ({why}): no probe is written there",
                       hint="another run may have moved the primary; see dbmigrate topology show")


def switch_back(sw: Switchover, candidate_opened: bool = True, router_switched: bool = True) -> str:
    """Converge to: `sw.old` writable primary, `sw.new` and the replicas replicating from it.

    Idempotent: each part checks first. Used by every undo of the promote
    procedure, so a rollback at any point ends in the same safe shape.
    `router_switched=False` says this run never completed a router switch: a router that
    does not answer was then not changed, and the undo goes on without it.
    A candidate that does not answer (frozen, dead) is asked once, within probe_timeout_s,
    then left alone: when it was never opened, the old primary is unfenced without it.
    """
    back = Switchover(sw.topo, old=sw.new, new=sw.old, settings=sw.s, router=sw.router,
                      dry_run=sw.dry_run, log=sw.log, record=sw.record, clock=sw.clock)
    said: list[str] = []
    new_writable = sw.writable_or_none(sw.new)
    try:
        old_writable = sw.writable(sw.old)
    except DbmigrateError as e:
        raise SafetyError(f"cannot switch back to {sw.old}: {e.message}",
                          hint=f"{sw.old} must answer to take writes again; if it is gone for good and {sw.new} has "
                               f"its final position: dbmigrate resume RUN --without-old-primary") from None
    if new_writable and old_writable:
        raise SafetyError(f"both {sw.old} and {sw.new} are writable",
                          hint="set read_only=ON by hand on the one that should not take writes")
    if new_writable:
        # The new primary may have taken writes: bring them to the old one first. A candidate
        # opened before its replication was stopped stops it now: the two must not replicate
        # from each other while the old one catches up.
        if _replicates_at_all(sw, sw.new):
            back.apply(sw.new).stop_replica()
        said += _follow(back, sw)
        sentence, pos = back.fence()
        said.append(sentence)
        try:
            said.append(back.wait_catchup(pos))
        except DbmigrateError:
            said.append(back.unfence_old(candidate_known_closed=True))
            raise
        said.append(back.open_candidate())
    elif not old_writable and new_writable is False and _has_writes_old_lacks(sw):
        # The new primary took writes and is read-only now (restarted, or fenced by hand):
        # its position is final; bring those writes to the old primary before it opens.
        said += _follow(back, sw)
        said.append(back.wait_catchup(back.insp(sw.new).gtid_binlog_pos()))
        said.append(back.open_candidate())
    elif not old_writable:
        # Nobody writable and nothing the old primary lacks: the candidate never took writes.
        said.append(sw.unfence_old(candidate_known_closed=not candidate_opened, candidate_writable=new_writable))
    said += _route_back(back, sw, router_switched)
    if new_writable:
        said.append(back.end_sessions(sw.new))
    if back.has_replication_config(sw.old):
        said.append(back.reset_new_replication())
    # Replicas still under sw.new must first apply everything sw.new wrote (it is
    # read-only now, so its position is final); sw.old's own position would be
    # unreachable for them, since it moves on with new writes.
    final_new = _binlog_pos_or_empty(back, sw.new) if new_writable is not None else ""
    # sw.new follows sw.old before the replicas move: one that cannot be moved (stuck,
    # lagging) stays under sw.new and still gets every write through it.
    if new_writable is not None and not back.replicates_from(sw.new, sw.old):
        back._make_replica(sw.new, sw.old)
        said.append(f"{sw.new} replicates from {sw.old} again")
    elif new_writable is not None:
        st = back.insp(sw.new).replica_status()
        if st and not st.running:
            back.apply(sw.new).start_replica()
            said.append(f"{sw.new} resumed replicating from {sw.old}")
    for r in sw.topo.replicas:
        if not back.replicating_from(r, sw.old):
            back._repoint(r, sw.old, final_new if back.replicates_from(r, sw.new) else "")
            said.append(f"repointed {r} to {sw.old}")
    return "; ".join(said) or f"{sw.old} is already the primary"


def _route_back(back: Switchover, sw: Switchover, router_switched: bool) -> list[str]:
    """Writes back to `sw.old` at the router; a router that does not answer is skipped only
    when this run never switched it (it still sends writes to `sw.old`)."""
    try:
        if back.router_points_to(sw.old):
            return []
        return [back.switch_router()]
    except RouterError as e:
        if router_switched:
            raise
        sw.log(f"the router did not answer ({e.message}); this run never switched it, so it still sends "
               f"writes to {sw.old}", "warning")
        return [f"router not changed (it did not answer: {e.message}); it still sends writes to {sw.old}"]


def _follow(back: Switchover, sw: Switchover) -> list[str]:
    """Make `sw.old` replicate from `sw.new` (or resume it), so that it gets what `sw.new` wrote."""
    said = []
    if not back.replicates_from(sw.old, sw.new):
        back._make_replica(sw.old, sw.new)
        said.append(f"{sw.old} replicates from {sw.new}")
    else:
        back.apply(sw.old).start_replica()
    back.wait_replica_running(sw.old)
    return said


def _replicates_at_all(sw: Switchover, name: str) -> bool:
    st = sw.insp(name).replica_status()
    return st is not None and (st.io_running == "Yes" or st.sql_running == "Yes")


def _has_writes_old_lacks(sw: Switchover) -> bool:
    """Did `sw.new` write anything `sw.old` has not applied? (Decides whether unfencing would lose it.)"""
    return not sw.insp(sw.old).has_applied(sw.insp(sw.new).gtid_binlog_pos())


def _binlog_pos_or_empty(sw: Switchover, name: str) -> str:
    try:
        return sw.insp(name).gtid_binlog_pos()
    except DbmigrateError:
        return ""
