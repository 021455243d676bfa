"""0. Converge: before the fence, the candidate comes within reach of the old primary."""

from __future__ import annotations

from dataclasses import dataclass

from dbmigrate.db.connection import QueryError
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.db.inspector import Inspector
from dbmigrate.db.readers.replication import ReplicationReader
from dbmigrate.exceptions import DbmigrateError, RefusedWait
from dbmigrate.procedures.kit.fence import CalmWait
from dbmigrate.procedures.kit.switchover.fence import OldPrimaryFence
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.router import WriterRouter
from dbmigrate.procedures.kit.switchover.settings import FAR_TIMES, SIZE_LOOK_POLL_S
from dbmigrate.procedures.kit.switchover.state import SwitchoverState


@dataclass
class _SizeSeen:
    """What the convergence saw of work too big for the window, across its looks."""

    running: str = ""  # heavy work seen running on the old primary at the last look
    drained: str = ""  # the same, once it ended
    drain_to: str | None = None  # the old primary's position once it ended: the candidate must apply it


class Convergence:
    """0. Before the fence: the candidate comes within reach, and the window is prepared (the
    old primary's fence checks its GTID mode and reads who bypasses read_only)."""

    def __init__(self, on: StepInputs, state: SwitchoverState, fence: OldPrimaryFence,
                 router: WriterRouter | None):
        self.on, self.state, self.fence, self.router = on, state, fence, router
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.dry_run, self.log, self.clock = on.dry_run, on.log, on.clock

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
        old, new = self.on.insp(self.old), self.on.insp(self.new)
        delay = require_applying(new, self.new).sql_delay_s
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
        self.on.insp(self.old).open_sessions(self.s.fence_timeout_s)
        self.on.insp(self.new).open_sessions(self.s.catchup_timeout_s)
        self.fence.require_gtid_mode()
        self.state.old_fence.expiry_s()  # read now: not inside the window
        self.state.window_ready = True
        # Grants (and roles' grants) are read now: inside the window only the sessions are.
        bypass = self.fence.bypass_users()
        prepare = getattr(self.router, "prepare_switch", None)
        if prepare is not None:
            prepare(self.on.server(self.new), self.on.server(self.old))
        return bypass


def require_applying(insp: ReplicationReader, new: str) -> ReplicaStatus:
    """The candidate `new`'s replica status, while its SQL thread applies (else it is refused)."""
    st = insp.replica_status()
    if st is None or st.sql_running != "Yes":
        raise DbmigrateError(f"{new} is not applying replication (SQL thread {st.sql_running if st else 'absent'}"
                             f"{': ' + st.last_error if st and st.last_error else ''})",
                             hint="fix replication on the candidate and run again")
    return st
