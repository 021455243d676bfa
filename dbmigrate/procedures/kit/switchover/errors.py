"""What a switchover reports when a server cannot go on: replication stopped, a full disk."""

from __future__ import annotations

from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.db.inspector import Session
from dbmigrate.exceptions import DbmigrateError, SafetyError, WaitTimeout


# Errors that mean a full disk: ER_DISK_FULL, ER_RECORD_FILE_FULL ("the table is full"),
# ER_ERROR_ON_WRITE (with errcode 28, checked in the message).
DISK_FULL_ERRNOS = frozenset({1021, 1114})


def waiting_for_disk(waiting: list[Session]) -> str:
    return f"{len(waiting)} session(s) wait for disk space there, the longest for {max(w.time for w in waiting)}s"


def disk_full(name: str, seen: str, run_id: str) -> WaitTimeout:
    return WaitTimeout(f"disk full on {name}: {seen}; writes on {name} wait until space is freed",
                       hint=f"free space on {name} (its datadir and binlog directory: SHOW GLOBAL VARIABLES LIKE "
                            f"'log_bin_basename'); the waiting writes go on by themselves once there is room (MariaDB "
                            f"retries every 60 s); then: dbmigrate resume {run_id}")


def replication_error(st: ReplicaStatus) -> str:
    if st.sql_running == "No" and st.last_sql_error:
        return f"SQL thread stopped: {st.last_sql_error}"
    return f"IO thread {'stopped' if st.io_running == 'No' else st.io_running.lower()}: {st.last_io_error}"


class ReplicationStopped(DbmigrateError):
    """A replica's replication stopped with an error: not lag, it will not catch up by itself."""

    def __init__(self, name: str, st: ReplicaStatus, hint: str | None = None):
        super().__init__(f"replication on {name} stopped with an error ({replication_error(st)})",
                         hint=hint or f"fix it on {name} (SHOW SLAVE STATUS names the failing event), START SLAVE, "
                                      f"then resume the run")
        self.name, self.status = name, st

    @staticmethod
    def after_cutover(new: str, stopped: dict[str, ReplicaStatus], run_id: str) -> "DbmigrateError":
        """Writes flow on the new primary; a follower is broken. The run pauses there: nothing
        is undone (a switchover back would cost a second write outage for a read replica)."""
        from dbmigrate.engine.runner import RunPaused  # the engine's own exception: pause, undo nothing

        named = "; ".join(f"{n}: {replication_error(st)}" for n, st in stopped.items())
        return RunPaused(f"writes flow on {new}, but replication stopped with an error on {named}; not lag: it will "
                         f"not catch up by itself",
                         hint=f"fix replication there (SHOW SLAVE STATUS names the failing event; START SLAVE), "
                              f"then: dbmigrate resume {run_id} (verifies again); or undo: dbmigrate rollback {run_id}")


def describe_behind(behind: dict[str, int]) -> str:
    return ", ".join(f"{n} transaction(s) of domain {d}" for d, n in sorted(behind.items()))


def never_primary(name: str, why: str) -> SafetyError:
    return SafetyError(f"{name} is not the primary any more ({why}): no probe is written there",
                       hint="another run may have moved the primary; see dbmigrate topology show")
