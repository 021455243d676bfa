"""7. Reverse: the old primary replicates from the new one, so that rollback is a switchover back."""

from __future__ import annotations

from dbmigrate.db.connection import QueryError
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.exceptions import DbmigrateError, WaitTimeout
from dbmigrate.procedures.kit.switchover.base import SwitchoverBase
from dbmigrate.procedures.kit.switchover.errors import ReplicationStopped
from dbmigrate.procedures.kit.switchover.settings import SQL_STOPPED_CONFIRM_S


class ReverseSteps(SwitchoverBase):
    # -- 7. reverse replication ---------------------------------------------
    def reverse_running(self) -> bool:
        return self.replicating_from(self.old, self.new)

    def start_reverse(self) -> str:
        self.make_replica(self.old, self.new)
        return f"{self.old} replicates from {self.new} (read-only): rollback loses nothing"

    def make_replica(self, name: str, source: str) -> None:
        host, port = self._repl_addr(source)
        self.drop_fence_expiry(name)
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
