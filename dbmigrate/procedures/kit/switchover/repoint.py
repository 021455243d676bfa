"""6. Repoint: the other replicas follow the new primary."""

from __future__ import annotations

from dbmigrate.exceptions import DbmigrateError, WaitTimeout
from dbmigrate.procedures.kit.switchover.errors import ReplicationStopped
from dbmigrate.procedures.kit.switchover.inputs import StepInputs


class RepointReplicas:
    """6. The other replicas follow the new primary."""

    def __init__(self, on: StepInputs):
        self.on = on
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.dry_run, self.log = on.dry_run, on.log

    def replicas_repointed(self) -> bool:
        return all(self.on.replicating_from(r, self.new) for r in self.topo.replicas)

    def repoint_replicas(self, position: str) -> str:
        """Move the other replicas under the new primary. A replica that cannot be moved
        (lagging, broken) stays under the old primary, which replicates from the new one
        next: it still receives every write, and rolling the whole cutover back for a
        read replica would cost a second write outage. It is named, to move later."""
        done, left = [], []
        for r in self.topo.replicas:
            if self.on.replicating_from(r, self.new):
                continue
            try:
                self.repoint(r, self.new, position)
                done.append(r)
            except DbmigrateError as e:
                left.append(f"{r} ({e.message})")
                self.log(f"left {r} under {self.old}: {e.message}; repoint it later (dbmigrate resume RUN)")
        said = f"repointed {', '.join(done) or 'no replica'} to {self.new}"
        return said + (f"; left under {self.old}: {'; '.join(left)}" if left else "")

    def repoint(self, replica: str, source: str, position: str) -> None:
        """Let the replica apply `position` from its current source, then move it to `source`;
        the whole of it within replica_timeout_s (a frozen replica included)."""
        with self.topo.bounded(self.s.replica_timeout_s, replica):
            self._repoint_within(replica, source, position)

    def _repoint_within(self, replica: str, source: str, position: str) -> None:
        insp = self.on.insp(replica)
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
        host, port = self.on.repl_addr(source)
        a = self.on.apply(replica)
        a.stop_replica()
        a.change_source(host, port, self.topo.repl)
        a.start_replica()

    def _restart_if_stopped(self, replica: str) -> None:
        """A replica left by a repoint cut short (STOP SLAVE: both threads stopped, no error)
        applies nothing: start it on its current source so that it can reach the position it
        must wait for. A replica stuck otherwise (a thread stopped by hand, an error) is left
        for the operator and named by the repoint."""
        st = self.on.insp(replica).replica_status()
        if st is not None and st.io_running == "No" and st.sql_running == "No" and not st.last_error:
            self.on.apply(replica).start_replica()
