"""3. Open: the candidate takes writes, once the old primary's fence is seen holding."""

from __future__ import annotations

from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.state import SwitchoverState


class OpenCandidate:
    """3. The candidate takes writes, once the old primary's fence (in the state) is seen holding."""

    def __init__(self, on: StepInputs, state: SwitchoverState):
        self.on, self.state = on, state
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.dry_run, self.clock = on.dry_run, on.clock

    def is_open(self) -> bool:
        st = self.on.insp(self.new).replica_status()
        return self.on.writable(self.new) and (st is None or st.sql_running != "Yes")

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
            self.state.old_fence.before_open(self.new)
        a = self.on.apply(self.new)
        with self.topo.bounded(self.s.catchup_timeout_s, self.new):
            if stop_replica:
                a.stop_replica()
            a.set_read_only(False)
        took = f"in {(self.clock.monotonic() - t0) * 1000:.1f} ms"
        if stop_replica:
            return f"{self.new} stopped replicating and is writable (read_only=OFF) {took}"
        return f"{self.new} is writable (read_only=OFF) {took}; its replication stops after the router flip"
