"""Statements in doubt: a change the tool gave up waiting for may still be executed.

A statement that timed out or lost its connection has not failed: its packets may sit in a
kernel's retransmit queue (a partition, a frozen host) and land seconds later, on a session
the server still holds open. Measured: a `SET GLOBAL read_only=OFF` given up after 5 s
landed 1.5 s after the tool had read the server as read-only and unfenced the old primary.

So every mutating statement given up on is recorded, per server address, in the registry of
the process's safety ledger (db/ledger.py), which every handle of the process is given, and the
server answers no other statement of this process until the doubt is settled: a fresh
session ends the one the statement went on (`KILL CONNECTION`) and sees it gone from the
processlist. Only then is a read of that server the truth. Where the server cannot be
reached, the doubt stays, and every read of it fails with `InDoubtUnsettled`, which the
switchover's decisions treat as "may have done it" (never unfence while an open is in
doubt). The records are journaled (see `add_listener`), so `resume` and `rollback` in a
new process settle them before deciding.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Protocol

from dbmigrate.exceptions import DbmigrateError

UNKNOWN_THREAD = 1094  # KILL of a session that is already gone
# How long settling waits for a killed session to leave the processlist (a statement in
# progress ends at its next kill check; SET GLOBAL read_only waits on a lock, which is one).
SETTLE_GONE_S = 2.0
SETTLE_POLL_S = 0.02


@dataclass(frozen=True)
class InDoubt:
    """One statement given up on: where it went, on which session, and what it said (redacted)."""

    server: str  # the inventory's name
    address: str  # host:port, how this tool reaches it
    session_id: int
    user: str  # the account of that session: a restarted server may reuse the id for another
    statement: str
    at: float  # wall clock when it was given up

    def said(self) -> str:
        return f"'{self.statement}' on {self.server} (session {self.session_id})"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InDoubt":
        return cls(server=str(d["server"]), address=str(d["address"]), session_id=int(d["session_id"]),
                   user=str(d.get("user", "")), statement=str(d["statement"]), at=float(d.get("at", 0.0)))


Listener = Callable[[list[InDoubt]], None]  # called with every unsettled record after each change


class InDoubtRegistry:
    """One per process, in its ledger (db/ledger.py): every handle on the same address (twins,
    other steps' handles) sees the doubt."""

    def __init__(self) -> None:
        self._by_address: dict[str, list[InDoubt]] = {}
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def pending(self, address: str) -> list[InDoubt]:
        # Read without the lock on the hot path: an empty dict costs one lookup per statement.
        return list(self._by_address.get(address, ()))

    def all(self) -> list[InDoubt]:
        with self._lock:
            return [d for ds in self._by_address.values() for d in ds]

    def add(self, doubt: InDoubt) -> None:
        with self._lock:
            self._by_address.setdefault(doubt.address, []).append(doubt)
        self._changed()

    def settled(self, doubt: InDoubt) -> None:
        with self._lock:
            left = [d for d in self._by_address.get(doubt.address, []) if d != doubt]
            if left:
                self._by_address[doubt.address] = left
            else:
                self._by_address.pop(doubt.address, None)
        self._changed()

    def load(self, doubts: list[InDoubt]) -> None:
        """Records journaled by an earlier process of the same run (resume, rollback)."""
        with self._lock:
            for d in doubts:
                if d not in self._by_address.get(d.address, []):
                    self._by_address.setdefault(d.address, []).append(d)

    def clear(self) -> None:
        with self._lock:
            self._by_address.clear()

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def _changed(self) -> None:
        snapshot = self.all()
        for fn in list(self._listeners):
            fn(snapshot)


class _Session(Protocol):
    """What settling needs of a fresh session (a `Server` handle of its own)."""

    def execute(self, sql: str, params: tuple[Any, ...] | None = None) -> int: ...
    def query(self, sql: str, params: tuple[Any, ...] | None = None) -> list[dict[str, Any]]: ...


def settle_on(session: _Session, doubt: InDoubt, gone_within_s: float = SETTLE_GONE_S,
              sleep: Callable[[float], None] = time.sleep) -> str:
    """End the session `doubt` went on, from `session`, and see it gone. Returns what was found.
    Raises (the session's own errors) when the server does not answer: still in doubt."""
    def ours() -> bool:
        rows = session.query("SELECT USER AS u FROM information_schema.PROCESSLIST WHERE ID = %s",
                             (doubt.session_id,))
        # Another account on that id: the server restarted and reused it; ours is gone.
        return bool(rows) and (not doubt.user or rows[0]["u"] == doubt.user)

    if not ours():
        return f"session {doubt.session_id} on {doubt.server} was already gone"
    try:
        session.execute(f"KILL CONNECTION {int(doubt.session_id)}")
    except DbmigrateError as e:
        if getattr(e, "errno", None) != UNKNOWN_THREAD:
            raise
    deadline = time.monotonic() + gone_within_s
    while ours():
        if time.monotonic() >= deadline:
            raise DbmigrateError(f"{doubt.server}: session {doubt.session_id} was killed but is still in the "
                                 f"processlist after {gone_within_s:g}s")
        sleep(SETTLE_POLL_S)
    return f"ended session {doubt.session_id} on {doubt.server}"
