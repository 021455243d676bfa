"""7. Reverse: the old primary replicates from the new one, so that rollback is a switchover back."""

from __future__ import annotations

from dbmigrate.db.connection import QueryError
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.exceptions import DbmigrateError, WaitTimeout
from dbmigrate.procedures.kit.fence import hold_read_only
from dbmigrate.procedures.kit.switchover.errors import ReplicationStopped
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.settings import SQL_STOPPED_CONFIRM_S


class ReverseReplication:
    """7. The old primary replicates from the new one; and the reads of a replica's threads
    that the verification and the takeover use too."""

    def __init__(self, on: StepInputs):
        self.on = on
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.dry_run, self.clock = on.dry_run, on.clock

    def reverse_running(self) -> bool:
        return self.on.replicating_from(self.old, self.new)

    def start_reverse(self) -> str:
        self.make_replica(self.old, self.new)
        return f"{self.old} replicates from {self.new} (read-only)"

    def errant_on_old(self) -> list[str]:
        """GTIDs the old primary logged that the new one never had: written on the old primary
        after its final position (a session that bypassed read_only, a write made by hand).
        Read from the binlog states, the old primary's (a replica now) first, so that the new
        primary's live writes cannot look errant."""
        with self.topo.bounded(self.s.probe_timeout_s, self.old, self.new):
            old_state = self.on.insp(self.old).gtid_state()
            new_state = self.on.insp(self.new).gtid_state()
        return self.on.insp(self.old).flavor.errant(old_state, new_state)

    def require_old_wrote_nothing(self, run_id: str) -> str:
        """The old primary wrote nothing of its own after the final position, and its replication
        back runs: only then does a rollback lose nothing. Otherwise the run pauses (writes flow
        on the new primary; nothing is undone) and says what the old primary holds."""
        if self.dry_run:
            return f"would check that {self.old} wrote nothing of its own after its final position"
        errant = self.errant_on_old()
        stopped = self.stopped_with_error(self.old)
        if not errant and stopped is None:
            return f"{self.old} wrote nothing of its own after its final position: rollback loses nothing"
        from dbmigrate.engine.runner import RunPaused  # the engine's own exception: pause, undo nothing
        from dbmigrate.procedures.kit.switchover.errors import replication_error

        said = []
        if errant:
            said.append(f"{self.old} wrote {len(errant)} transaction(s) of its own after its final position that "
                        f"{self.new} never had (errant GTID(s) {', '.join(errant[:5])}"
                        f"{f' +{len(errant) - 5} more' if len(errant) > 5 else ''})")
        if stopped is not None:
            said.append(f"its replication from {self.new} stopped with an error ({replication_error(stopped)})")
        return_hint = (f"writes flow on {self.new}; a rollback now would lose what {self.new} wrote since or clash "
                       f"with those transactions. Read them on {self.old} (mariadb-binlog, from its binlog "
                       f"state), decide whether to apply them on {self.new} by hand; then rebuild {self.old} as a "
                       f"replica of {self.new} (or remove those transactions there) and: dbmigrate resume {run_id}")
        raise RunPaused("; ".join(said) + f"; a rollback to {self.old} as it stands would clash with them",
                        hint=return_hint)

    def make_replica(self, name: str, source: str) -> None:
        host, port = self.on.repl_addr(source)
        self.on.drop_fence_expiry(name)
        a = self.on.apply(name)
        hold_read_only(a)  # already fenced, or read-only: it takes no writes as a replica
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
                    st = self.on.insp(name).replica_status()
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
                st = self.on.insp(name).replica_status()
        except DbmigrateError:
            return None
        if st and ((st.sql_running == "No" and st.last_sql_error) or (st.io_running == "No" and st.last_io_error)):
            return st
        return None
