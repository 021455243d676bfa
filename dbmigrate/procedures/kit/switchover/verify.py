"""8. Verify: writes flow on the new primary, read back from the servers."""

from __future__ import annotations

from dbmigrate.db.connection import ROUND_TRIP_MARGIN_S, QueryError
from dbmigrate.db.inspector import Session
from dbmigrate.exceptions import DbmigrateError, WaitTimeout
from dbmigrate.procedures.kit.switchover.errors import (DISK_FULL_ERRNOS, ReplicationStopped, disk_full,
                                                       never_primary, replication_error, waiting_for_disk)
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.reverse import ReverseReplication


class VerifyWrites:
    """8. Writes flow on the new primary; a follower whose replication stopped is told from
    a late one by the reverse replication's read."""

    def __init__(self, on: StepInputs, reverse: ReverseReplication):
        self.on, self.reverse = on, reverse
        self.topo, self.old, self.new, self.s = on.topo, on.old, on.new, on.params
        self.dry_run, self.log = on.dry_run, on.log

    def _require_primary(self, name: str) -> None:
        """The probe goes only to the server this run made primary, and only while it is one:
        the tool's login bypasses read_only, and a row written on a replica breaks its replication."""
        insp = self.on.insp(name)
        if insp.read_only():
            raise never_primary(name, "it is read-only")
        st = insp.replica_status()
        if st is not None and (st.io_running == "Yes" or st.sql_running == "Yes"):
            raise never_primary(name, "it replicates")

    def verify_writes_flow(self, run_id: str, timeout: float | None = None, old_gone: bool = False) -> str:
        """Write a probe row on the new primary and see it arrive on every other server
        (the old primary excepted when it is gone). The write and each follower's wait are
        bounded by `timeout` (default verify_timeout_s): a write that waits (a full disk) fails
        the step, named."""
        timeout = self.s.verify_timeout_s if timeout is None else timeout
        followers = [*([] if old_gone else [self.old]), *self.topo.replicas]
        if self.dry_run:
            # Through the applier: in dry-run the probe is only described.
            self.on.apply(self.new).write_switchover_probe(run_id, self.new)
            return f"would write a probe row on {self.new} and wait up to {timeout:g}s for {', '.join(followers)}"
        try:
            with self.topo.bounded(timeout, self.new):
                self._require_primary(self.new)
                # Writes already waiting for disk space: say so without adding one (a write given
                # up on stays in doubt until its session ends, which a disk wait delays).
                waiting = self.on.insp(self.new).disk_full_waits()
                if waiting:
                    raise disk_full(self.new, f"{waiting_for_disk(waiting)}; no probe written", run_id)
                self.on.apply(self.new).write_switchover_probe(run_id, self.new)
                pos = self.on.insp(self.new).gtid_binlog_pos()
        except QueryError as e:
            raise self._probe_not_written(e, timeout, run_id) from None
        late = []
        for f in followers:
            try:
                with self.topo.bounded(timeout + ROUND_TRIP_MARGIN_S, f):
                    if not self.on.insp(f).wait_for_gtid(pos, timeout):
                        late.append(f)
            except DbmigrateError:
                late.append(f)
        # A follower whose replication stopped with an error is not late: it will never get
        # there by itself, and a run that said "done" would leave it broken unnoticed.
        stopped = {f: st for f in late if (st := self.reverse.stopped_with_error(f)) is not None}
        if self.old in late:
            # Without the reverse path a rollback could not bring the new writes back.
            why = f" ({replication_error(stopped[self.old])})" if self.old in stopped else ""
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
        waiting: list[Session] = []
        try:
            with self.topo.bounded(self.s.probe_timeout_s, self.new):
                waiting = self.on.insp(self.new).disk_full_waits()
        except DbmigrateError:
            pass
        if waiting or e.errno in DISK_FULL_ERRNOS or "errcode: 28" in e.message.lower():
            seen = waiting_for_disk(waiting) if waiting else e.message
            return disk_full(self.new, f"the probe write did not complete within {timeout:g}s ({seen})", run_id)
        return WaitTimeout(f"the probe write on {self.new} did not complete within {timeout:g}s: {e.message}",
                           hint=f"check {self.new} (dbmigrate topology show), then: dbmigrate resume {run_id}")
