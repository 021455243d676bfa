"""2. Catch up: inside the fenced window, the candidate applies the final position."""

from __future__ import annotations

from dbmigrate.db.connection import QueryError
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.db.readers.replication import ReplicationReader
from dbmigrate.exceptions import WaitTimeout
from dbmigrate.procedures.kit.switchover.converge import require_applying
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.settings import FIRST_CATCHUP_WAIT_S, IO_STALL_S


class CatchUp:
    """2. Inside the fenced window: the candidate applies the old primary's final position."""

    def __init__(self, on: StepInputs):
        self.on = on
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.dry_run, self.log, self.clock = on.dry_run, on.log, on.clock

    def caught_up(self, position: str) -> bool:
        return self.on.insp(self.new).has_applied(position)

    def wait_catchup(self, position: str) -> str:
        """Inside the fenced window: one MASTER_GTID_WAIT on the session opened beforehand."""
        if self.dry_run:
            return (f"would wait up to {self.s.catchup_timeout_s:g}s for {self.new} to apply "
                    f"{position or f'the final position of {self.old}'}")
        bound = self.s.catchup_timeout_s
        t0 = self.clock.monotonic()  # the bound counts from here, time blocked on the candidate included
        try:
            with self.topo.bounded(bound, self.new):
                insp = self.on.insp(self.new)
                # The fence follows convergence, so the position is usually applied within a few ms:
                # a short first wait spares the replica status read inside the window.
                if insp.wait_for_gtid(position, min(FIRST_CATCHUP_WAIT_S, bound)):
                    return f"{self.new} applied {position} in {(self.clock.monotonic() - t0) * 1000:.1f} ms"
                if self._wait_renewing_stalled_io(insp, require_applying(insp, self.new), position, t0, bound):
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

    def _wait_renewing_stalled_io(self, insp: ReplicationReader, st: ReplicaStatus, position: str, t0: float,
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
            now = insp.replica_status()
            if now is None:
                return False
            st = now
            if insp.flavor.received(st, position) or st.retrieved_gtid != seen:
                seen = st.retrieved_gtid  # it receives: the SQL thread is what it waits for
                continue
            self.log(f"{self.new} received nothing from {self.old} for {IO_STALL_S:g}s while behind: "
                     f"its replication connection is renewed", "warning")
            self.on.apply(self.new).restart_replica_io()
            renewed = True
        return False
