"""The cluster lease: one row per cluster in the tool's schema, written on the primary and
replicated with everything else, so that whichever server is primary carries it.

A session lock (GET_LOCK) lives on one server and dies with one connection; after a
switchover the primary is another server, and a second operator (with another journal)
would take a fresh GET_LOCK there. The lease row follows the cluster instead: a run takes
it on the primary, renews it while it lives (a background thread, on whichever server is
writable: a fenced window only pauses renewal), and every run checks it before starting.
A run that finds its lease taken by another run, or expired, stops at the next step
boundary. Times are the servers' own (UTC_TIMESTAMP), never this machine's.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Protocol

from dbmigrate.exceptions import LockHeld

LEASE_TTL_S = 30.0  # a run that stops renewing loses the cluster after this long
RENEW_EVERY_S = LEASE_TTL_S / 6


@dataclass(frozen=True)
class LeaseRow:
    run_id: str
    holder: str
    host: str
    pid: int
    expires_at: datetime | None
    now: datetime  # the server's clock when the row was read

    @property
    def live(self) -> bool:
        return bool(self.run_id) and self.expires_at is not None and self.expires_at > self.now

    def describe(self) -> str:
        left = (self.expires_at - self.now).total_seconds() if self.expires_at else 0.0
        return (f"run {self.run_id} ({self.holder} on {self.host} pid {self.pid}; lease "
                f"{'expires in %.0fs' % left if left > 0 else 'expired'})")


def may_take(row: LeaseRow | None, run_id: str, host: str = "") -> bool:
    """A lease can be taken when nobody holds it, it expired, this run holds it already, or its
    holder was a process on this host (`host`) that is gone (killed: it renews nothing)."""
    return row is None or not row.live or row.run_id == run_id or bool(host) and holder_gone(row, host)


def holder_gone(row: LeaseRow, host: str) -> bool:
    """Is the row's holder a process of this host that no longer exists? Another host's is
    never taken as gone: only its expiry says so."""
    if row.host != host or row.pid <= 0 or row.pid == os.getpid():
        return False
    try:
        os.kill(row.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def expiry(now: datetime, ttl_s: float) -> datetime:
    return now + timedelta(seconds=ttl_s)


class LeaseStore(Protocol):
    """Where the lease row lives (dbmigrate.db.lease implements it over the cluster's servers)."""

    def take(self, cluster: str, run_id: str, holder: str, host: str, pid: int,
             ttl_s: float) -> tuple[bool, LeaseRow | None]:
        """Take (or keep) the lease on the primary: (taken, the row found before)."""
        ...

    def renew(self, cluster: str, run_id: str, ttl_s: float) -> tuple[str, LeaseRow | None]:
        """("renewed" | "lost" | "unwritable", the row when lost): unwritable when no server takes writes."""
        ...

    def release(self, cluster: str, run_id: str) -> None: ...

    def close(self) -> None: ...


class Lease:
    """A run's hold on the cluster lease, renewed in the background until released."""

    def __init__(self, store: LeaseStore, cluster: str, run_id: str, holder: str, host: str, pid: int,
                 ttl_s: float = LEASE_TTL_S, renew_every_s: float = RENEW_EVERY_S,
                 keepalive: Callable[[], None] | None = None) -> None:
        self.store = store
        self.cluster, self.run_id = cluster, run_id
        self.holder, self.host, self.pid = holder, host, pid
        self.ttl_s, self.renew_every_s = ttl_s, renew_every_s
        self.keepalive = keepalive  # e.g. a ping of the session that holds GET_LOCK
        self.lost_reason: str | None = None
        self.renewals = 0
        self.was_ours = False  # this run held it already (a resume): a refusal must not clear it
        self.refused_by: LeaseRow | None = None  # the row that refused acquire()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        taken, row = self.store.take(self.cluster, self.run_id, self.holder, self.host, self.pid, self.ttl_s)
        if not taken:
            self.store.close()
            assert row is not None
            self.refused_by = row
            raise LockHeld(f"cluster '{self.cluster}' is leased to {row.describe()}",
                           hint="another run (maybe with another journal, on another machine) is changing this "
                                "cluster; wait for it, or find it by its run id")
        self.was_ours = row is not None and row.live and row.run_id == self.run_id
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.run_id}", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every_s):
            self.renew_once()

    def renew_once(self) -> None:
        """One renewal; a lost lease is remembered (the run stops at its next step boundary)."""
        try:
            if self.keepalive is not None:
                self.keepalive()
            outcome, row = self.store.renew(self.cluster, self.run_id, self.ttl_s)
        except Exception as exc:  # a server down mid-renewal: the next round tries again
            outcome, row = f"error: {exc}", None
        if outcome == "renewed":
            self.renewals += 1
        elif outcome == "lost" and self.lost_reason is None:
            self.lost_reason = (f"the cluster lease was taken over by {row.describe()}" if row is not None and
                                row.run_id else "the cluster lease was released by someone else")

    def stop_reason(self) -> str | None:
        return self.lost_reason

    def release(self, keep_row: bool = False) -> None:
        """Stop renewing and clear the row (unless `keep_row`: another process of this run may hold it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_every_s + 10)
        try:
            if self.lost_reason is None and not keep_row:
                self.store.release(self.cluster, self.run_id)
        finally:
            self.store.close()
