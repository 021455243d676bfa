"""1. Fence: the old primary stops taking writes (through the kit's fence), is sealed before the
candidate opens, or is unfenced when the candidate is known closed.
"""

from __future__ import annotations

from typing import Any, Callable

from dbmigrate.db.connection import ROUND_TRIP_MARGIN_S, QueryError
from dbmigrate.exceptions import DbmigrateError, SafetyError
from dbmigrate.procedures.kit.drain import UNKNOWN_THREAD, drain, end_when_idle, protected_users
from dbmigrate.routing import haproxy_hold
from dbmigrate.routing.holds import ConnectionHold, HeldRoute, hold_of
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.router import WriterRouter
from dbmigrate.procedures.kit.switchover.state import SwitchoverState


class OldPrimaryFence:
    """1. The old primary's side of the window: fenced through the kit's Fence (kit/fence.py,
    kept in the state), its sessions held and ended, sealed before the candidate opens, or
    unfenced when the candidate is known closed."""

    def __init__(self, on: StepInputs, state: SwitchoverState, router: WriterRouter | None):
        self.on, self.state, self.router = on, state, router
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.dry_run, self.log, self.clock = on.dry_run, on.log, on.clock

    def is_fenced(self) -> bool:
        return self.on.insp(self.old).read_only()

    def fence(self, before_retry: Callable[[], object] | None = None) -> tuple[str, str]:
        """read_only on the old primary through the kit's fence (kit/fence.py): tried up to
        fence_attempts times when one attempt gives up blocked, or its candidate did not apply the
        final position within fenced_catchup_budget_s (writes flow for fence_retry_pause_s in
        between); returns (sentence, final position). `before_retry` runs before each new
        attempt: the candidate may have fallen behind while writes flowed, and the caller
        converges again (its calm wait too) so that the catch-up stays outside the window."""
        if not self.dry_run and not self.state.window_ready:
            self.require_gtid_mode()
        fenced = self.state.old_fence.fence(self._applied_within, before_retry, calm=False)
        return fenced.sentence, fenced.position

    def name_fence_blocker(self, error: DbmigrateError) -> DbmigrateError:
        """A fence that gave up: a lock held on the old primary (FLUSH TABLES WITH READ LOCK, a
        table write lock) is its cause, and the headline says so, not the clean-up that waited
        behind the same lock (the expiry's DROP EVENT). Asked within probe_timeout_s; the error
        is returned as it was when no holder is seen."""
        if self.dry_run or " could not be fenced: " in error.message:
            return error
        try:
            with self.topo.bounded(self.s.probe_timeout_s, self.old):
                insp = self.on.insp(self.old)
                holders, _ = insp.lock_holders(insp.connection_id())
        except DbmigrateError:
            return error
        own = self.topo.own_sessions(self.old)
        holders = [h for h in holders if h.id not in own]
        # The global read lock first: the fence's own statements wait behind it whatever else is held.
        holders.sort(key=lambda h: not any(lock.endswith("WITH READ LOCK") for lock in h.locks))
        if not holders:
            return error
        named = "; ".join(h.describe() for h in holders)
        error.message = (f"{self.old} could not be fenced: {named}, and the fence (read_only=ON, its expiry "
                         f"event) waits behind it ({error.message})")
        error.hint = (f"nothing was opened; release that lock (a backup tool's FLUSH TABLES WITH READ LOCK ends with "
                      f"its backup; or KILL the session on {self.old}), then run again")
        return error

    def _applied_within(self, position: str, budget_s: float) -> bool:
        """Inside the fenced window: has the candidate applied the final position within the budget?"""
        with self.topo.bounded(budget_s + ROUND_TRIP_MARGIN_S, self.new):
            applied = self.on.insp(self.new).wait_for_gtid(position, budget_s)
        if applied:
            self.state.applied_at_fence = position
        return applied

    def require_gtid_mode(self) -> None:
        problem = self.on.insp(self.old).gtid_mode_problem()
        if problem:
            # Without GTIDs the final position would be empty and the catch-up wait a no-op.
            raise SafetyError(f"{self.old} runs with {problem}",
                              hint="switchovers need gtid_mode=ON and enforce_gtid_consistency=ON")

    def require_fence_holds(self, expires_at: float | None) -> None:
        """Refuse to open the candidate when the old primary's fence expires (or expired) before
        the open can have landed: the expiry would make the old primary writable beside it."""
        self.state.old_fence.require_not_expiring(expires_at, self.new)

    def end_sessions(self, name: str | None = None) -> str:
        """Wait (bounded) for open app transactions on a fenced server, then end its app sessions:
        through HAProxy, which tells which sessions came by its reader route, every other one (the
        readers' sessions on a server that stays a reader are never ended, hold or not)."""
        name = name or self.old
        drained, killed, spared = self._drain(name)
        kept = f"; {spared} reader session(s) left alone" if spared else ""
        return f"{name}: {drained} open app transaction(s) at the start, {killed} app session(s) ended{kept}"

    def _drain(self, name: str) -> tuple[int, int, int]:
        """Wait (bounded) for open app transactions to end, then end app sessions."""
        if self.dry_run:
            return 0, 0, 0
        insp = self.on.insp(name)
        if not insp.reachable():
            return 0, 0, 0  # unreachable: it has no sessions we could end, and takes no writes (fenced)
        protected = protected_users(insp, self.topo.repl.user, self.s.admin_users)
        if haproxy_hold.haproxy_of(self.router) is not None:
            # Independent of the hold: HAProxy tells which sessions came through its reader
            # route; those stay, every other client session is ended (when idle, bounded).
            if not self.s.kill_app_sessions:
                return 0, 0, 0
            readers = haproxy_hold.reader_route_hosts(self.router, self.on.server(name))
            ended = end_when_idle(insp, self.on.apply(name), protected, timeout_s=self.s.fence_drain_timeout_s,
                                  spare_hosts=lambda: readers, clock=self.clock)
            return ended.ended_at_deadline, ended.ended_idle + ended.ended_at_deadline, ended.spared
        done = drain(insp, self.on.apply(name), protected, timeout_s=self.s.fence_drain_timeout_s,
                     until="transactions", end=self.s.kill_app_sessions, clock=self.clock)
        return done.open_at_start, done.ended, 0

    # -- the edges of the window: new connections held, the old writer's sessions ended when idle
    # (HAProxy) or held and moved with the flip (the relay); routing/holds.py picks the hold
    @property
    def holding(self) -> ConnectionHold | None:
        return hold_of(self.router)

    def holds_new_connections(self) -> bool:
        kind = self.holding
        return (not self.dry_run and self.s.hold_new_connections and self.s.kill_app_sessions
                and kind is not None and kind.can_hold(self.router))

    def hold_and_end_idle(self, name: str | None = None,
                          journal: Callable[[HeldRoute], None] | None = None) -> str:
        """Just before the fence: the router holds new connections in its queue, then each of
        `name`'s writer-route sessions is ended as soon as it is idle (in-flight statements
        finish; transactions get fence_drain_timeout_s, then end). A pool that checks a kept
        connection before reuse meets a dead one and opens a new one, which waits in the queue
        until the candidate opens: no 1290, no statement cut. Empty when the router cannot hold.
        Through the relay no session is ended: each is held at its next boundary, and the wait
        (fence_drain_timeout_s) is until none is busy or in a transaction; the flip moves them."""
        name = name or self.old
        kind = self.holding
        if kind is None or not self.holds_new_connections():
            return ""
        kind.hold_new_connections(self.router, self.on.server(name), journal)
        quiet = kind.quiesce(self.router, self.s.fence_drain_timeout_s, self.clock)
        if quiet is not None:
            return quiet
        insp = self.on.insp(name)
        protected = protected_users(insp, self.topo.repl.user, self.s.admin_users)
        writers = haproxy_hold.writer_route_hosts(self.router, self.on.server(name))
        t0 = self.clock.monotonic()
        done = end_when_idle(insp, self.on.apply(name), protected, timeout_s=self.s.fence_drain_timeout_s,
                             only_hosts=lambda: writers, clock=self.clock)
        late = f", {done.ended_at_deadline} still busy at {self.s.fence_drain_timeout_s:g}s ended" \
            if done.ended_at_deadline else ""
        return (f"new connections held by the router; {done.ended_idle} writer session(s) on {name} ended when "
                f"idle{late} in {(self.clock.monotonic() - t0) * 1000:.0f} ms")

    def release_hold(self, to_new: str | None = None) -> str:
        """End the hold: with `to_new`, the writer flip to it first (held connections go there at
        once); without, the held connections go on to the old writer. A no-op without a hold."""
        kind = self.holding
        if self.dry_run or kind is None:
            return ""
        if to_new is None:
            return kind.release(self.router)
        other = self.old if to_new == self.new else self.new
        return kind.release(self.router, self.on.server(to_new), self.on.server(other))

    def current_hold(self) -> HeldRoute | None:
        kind = self.holding
        return kind.current_hold(self.router) if kind is not None else None

    def release_leftover_hold(self, saved: dict[str, Any] | None) -> str:
        """The router's hold put back: this process's, or one a process that died left (journaled)."""
        kind = self.holding
        if self.dry_run or kind is None:
            return ""
        return kind.release_leftover(self.router, saved)

    def is_holding(self) -> bool:
        return self.current_hold() is not None

    def seal_old(self, bypass: set[str] | None = None) -> tuple[str, str]:
        """Before the candidate opens: the old primary must still be read-only, and every session
        of an account that bypasses read_only is ended, so that nothing can commit there after
        the final position is read. Returns (sentence, final position). Bounded like the fence:
        inside the window a frozen old primary costs the bound, and no ping precedes a statement."""
        bypass = self.bypass_users() if bypass is None else bypass
        with self.topo.bounded(self.s.fence_timeout_s, self.old):
            return self._seal_old(bypass)

    def _seal_old(self, bypass: set[str]) -> tuple[str, str]:
        insp = self.on.insp(self.old)
        # Before the read that proves the fence holds: once the expiry is dropped, nothing but
        # an operator can unfence the old primary, so "still fenced" stays true through the open.
        self.state.old_fence.cancel_expiry()
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
        own = self.topo.own_sessions(self.old)
        for sess in insp.sessions():
            if sess.user in bypass and sess.id not in own:
                self.state.sealed_sessions.append(sess)
                try:
                    self.on.apply(self.old).kill_connection(sess.id)
                    ended += 1
                except QueryError as e:
                    if e.errno != UNKNOWN_THREAD:
                        raise
        if not ended:
            return "", pos  # only this tool's own sessions: the position read with the fence check is final
        # Read after the sessions were ended: a commit of theirs before that is in it.
        pos = insp.gtid_binlog_pos()
        return (f"ended {ended} session(s) of accounts that bypass read_only on {self.old}; " if ended else ""), pos

    def _require_still_fenced(self, fenced: bool) -> None:
        self.state.old_fence.require_fenced(fenced, self.new)

    def bypass_users(self) -> set[str]:
        """Accounts whose sessions can write past read_only. The tool's own account is one of
        them: another client logged in as it (an operator's ALTER) writes past the fence like
        any other, so the seal ends its sessions too, sparing only this tool's own session ids."""
        insp = self.on.insp(self.old)
        return insp.read_only_bypass_users() - {self.topo.repl.user, "system user", "event_scheduler"}

    def unfence_old(self, candidate_known_closed: bool, candidate_writable: "bool | None | object" = ...) -> str:
        """Make the old primary writable again, only if the candidate cannot take writes.
        `candidate_writable` is what a caller already found (None: it did not answer); by
        default the candidate is asked, within probe_timeout_s."""
        if not self.is_fenced():
            return f"{self.old} is already writable"
        cand_writable = self.on.writable_or_none(self.new) if candidate_writable is ... else candidate_writable
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
        self.state.old_fence.unfence()
        return f"unfenced {self.old} (read_only=OFF): it takes writes again"
