"""One run per cluster: a named lock on the primary (NamedLocks), mirrored in the journal.

The DB lock (GET_LOCK over a dedicated session held for the whole run) is the
truth: it vanishes when the holder's connection dies, even after a SIGKILL.
The journal entry says who holds it, so a refusal can name the run, the
operator and since when. A journal entry whose DB lock is free is stale and
is taken over; a DB lock without a journal entry still refuses, because
someone we cannot see (another journal, another tool) is at work.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Protocol

from dbmigrate.engine.journal import Journal
from dbmigrate.engine.lease import Lease
from dbmigrate.exceptions import DbmigrateError, LockHeld

# MySQL/MariaDB reject lock names longer than 64 characters.
_MAX_LOCK_NAME = 64


class NamedLocks(Protocol):
    """A server's named locks, held by one session (dbmigrate.db.named_lock implements it)."""

    def try_lock(self, name: str) -> int | None: ...  # 1 taken, 0 held by someone, None: error
    def release_lock(self, name: str) -> None: ...
    def lock_holder(self, name: str) -> Any: ...  # connection id, or None
    def lock_is_free(self, name: str) -> bool: ...
    def end_session(self, connection_id: int) -> None: ...  # KILL CONNECTION


def lock_name(cluster: str) -> str:
    name = f"dbmigrate:{cluster}"
    if len(name) <= _MAX_LOCK_NAME:
        return name
    digest = hashlib.sha1(cluster.encode()).hexdigest()[:10]
    return f"{name[: _MAX_LOCK_NAME - 11]}~{digest}"


def holder_alive(holder: str | None, pid: int | None) -> bool | None:
    """Does the process `pid` of `holder` (user@host) exist? None when that cannot be told from
    here: a holder on another machine, or this very process."""
    import os
    import socket

    if not pid or str(holder or "").rpartition("@")[2] != socket.gethostname() or int(pid) == os.getpid():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user's
    return True


def _local_holder(entry: dict[str, Any]) -> bool | None:
    """Does the journaled lock holder's process exist? (None: cannot be told from here.)"""
    return holder_alive(entry.get("holder"), entry.get("pid"))


def _alive_here(entry: dict[str, Any]) -> bool:
    """Is the journaled lock holder a live process on this machine?"""
    return _local_holder(entry) is True


def _dead_here(entry: dict[str, Any]) -> bool:
    """Is the journaled lock holder provably gone: a process of this machine, not this one, that
    no longer exists? (A holder on another machine cannot be proven gone from here.)"""
    return _local_holder(entry) is False


# How long the lock may take to be freed once a dead holder's session was ended.
DEAD_HOLDER_GONE_S = 5.0


class ClusterLock:
    """Usage: `with ClusterLock(session, cluster, journal, run_id): ...` or acquire()/release()."""

    def __init__(self, session: NamedLocks, cluster: str, journal: Journal, run_id: str,
                 lease: Lease | None = None) -> None:
        self.session = session
        self.cluster = cluster
        self.journal = journal
        self.run_id = run_id
        self.name = lock_name(cluster)
        self.held = False
        # The lease follows the primary (a replicated row); GET_LOCK stays on the session's server.
        self.lease = lease
        if lease is not None and lease.keepalive is None:
            lease.keepalive = self.keepalive

    def keepalive(self) -> None:
        """Keep the GET_LOCK session busy enough that no idle timeout ends it (and the lock with it)."""
        if self.held:
            self.session.lock_holder(self.name)

    def stop_reason(self) -> str | None:
        """Why the run must stop at its next step boundary (its lease was lost), or None."""
        return self.lease.stop_reason() if self.lease is not None else None

    def acquire(self) -> None:
        # The lease first: it serializes runs on the primary's row and names the holder when refused.
        if self.lease is not None:
            try:
                self.lease.acquire()
            except LockHeld:
                # Held by a run this journal knows: its own words say more (since when, resume or not).
                entry, row = self.journal.active_lock(self.cluster), self.lease.refused_by
                if entry is not None and row is not None and entry["run_id"] == row.run_id:
                    self._refuse(entry)
                raise
        try:
            self._acquire_session_lock()
        except BaseException:
            if self.lease is not None:
                lease, self.lease = self.lease, None
                lease.release(keep_row=lease.was_ours)
            raise

    def _acquire_session_lock(self) -> None:
        entry = self.journal.active_lock(self.cluster)
        got = self.session.try_lock(self.name)
        if got is None:
            raise DbmigrateError(
                f"GET_LOCK('{self.name}') returned NULL on the primary of cluster '{self.cluster}'",
                hint="the server could not create the lock (out of memory or killed); check the primary",
            )
        if got != 1:
            got = self._take_from_dead_process(entry)
        if got != 1:
            self._refuse(entry)
        if entry is not None and entry["run_id"] != self.run_id and _alive_here(entry):
            # The database lock was free *here*, but the run the journal names is alive: it
            # holds the lock on the server that was primary when it started (a switchover
            # moves the primary), so this is no stale entry.
            self.session.release_lock(self.name)
            raise LockHeld(
                f"cluster '{self.cluster}' is being changed by run {entry['run_id']} "
                f"({entry['holder']} pid {entry['pid']}, alive) since {entry['since']}",
                hint=f"its lock is on the server that was primary when it started; wait for it: "
                     f"dbmigrate runs show {entry['run_id']}")
        self.held = True
        if entry is not None and entry["run_id"] != self.run_id:
            # The DB lock was free, so whoever the journal names is gone.
            self.journal.mark_lock_stale(
                entry["id"], f"taken over by run {self.run_id}: the database lock was no longer held"
            )
        if entry is None or entry["run_id"] != self.run_id:
            self.journal.take_lock(self.cluster, self.run_id)

    def _take_from_dead_process(self, entry: dict[str, Any] | None) -> int:
        """The lock is held by an earlier process of this run that is provably gone (a process of
        this machine that no longer exists) and whose session a partition kept open: that session
        is ended and the lock taken. Returns GET_LOCK's answer (1: taken)."""
        if entry is None or entry["run_id"] != self.run_id or not _dead_here(entry):
            return 0
        connection = self.session.lock_holder(self.name)
        if connection is None:
            return int(self.session.try_lock(self.name) or 0)
        self.session.end_session(int(connection))
        deadline = time.monotonic() + DEAD_HOLDER_GONE_S
        while True:
            got = int(self.session.try_lock(self.name) or 0)
            if got == 1 or time.monotonic() >= deadline:
                return got
            time.sleep(0.05)

    def _refuse(self, entry: dict[str, Any] | None) -> None:
        connection = self.session.lock_holder(self.name)
        by_connection = f" (MySQL connection {connection})" if connection is not None else ""
        if entry is not None and entry["run_id"] == self.run_id:
            import socket

            here = str(entry.get("holder") or "").rpartition("@")[2] == socket.gethostname()
            end_it = (f"if it is gone (a partition can keep its session open), end its session on the primary: "
                      f"KILL CONNECTION {connection}; then run the command again") if connection is not None else ""
            raise LockHeld(
                f"run {self.run_id} is still active on cluster '{self.cluster}': "
                f"{entry['holder']} pid {entry['pid']} holds the lock{by_connection}",
                hint=("the earlier process of this run is alive; stop it before resuming" if here else
                      f"the earlier process of this run may be alive (it is not on this machine, so this cannot "
                      f"tell); {end_it or 'stop it before resuming'}"),
            )
        if entry is not None:
            raise LockHeld(
                f"cluster '{self.cluster}' is locked by run {entry['run_id']} "
                f"({entry['holder']} pid {entry['pid']}) since {entry['since']}{by_connection}",
                hint=f"wait for that run to finish, or inspect it: dbmigrate runs show {entry['run_id']}",
            )
        raise LockHeld(
            f"cluster '{self.cluster}': database lock '{self.name}' is held{by_connection} "
            f"but no run in journal {self.journal.path} holds it",
            hint="another dbmigrate (with another journal) or another tool is working on this cluster; "
            "find it in SHOW PROCESSLIST before going on",
        )

    def is_free(self) -> bool:
        """Read-only probe (for status displays); does not take the lock."""
        return self.session.lock_is_free(self.name)

    def release(self) -> None:
        if not self.held:
            return
        try:
            if self.lease is not None:
                lease, self.lease = self.lease, None
                lease.release()
        finally:
            self._release_session_lock()

    def _release_session_lock(self) -> None:
        try:
            self.session.release_lock(self.name)
        finally:
            # Closing the session releases the DB lock anyway; the journal entry must not linger.
            self.held = False
            self.journal.release_lock(self.cluster, self.run_id)

    def __enter__(self) -> "ClusterLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
