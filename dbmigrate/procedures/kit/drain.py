"""Ending client sessions on a server before it changes role: one rule for every procedure.

Protected (never waited for, never ended): the tool's own login, the replication
user, the server's own threads, and any admin user the playbook names. Everyone
else is a client: first given a bounded time to finish (open transactions, or the
whole session when the server must be quiet for DDL), then ended if allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError
from dbmigrate.db.readers.sessions import Session, SessionReader
from dbmigrate.clock import Clock

SERVER_THREADS = frozenset({"system user", "event_scheduler"})
UNKNOWN_THREAD = 1094  # KILL of a session that ended by itself


def protected_users(insp: SessionReader, repl_user: str | None, admin_users: Iterable[str] = ()) -> frozenset[str]:
    """The users whose sessions a drain never waits for nor ends."""
    return frozenset({*admin_users, insp.login_user, *([repl_user] if repl_user else []), *SERVER_THREADS})


@dataclass
class Drained:
    open_at_start: int = 0  # client transactions (or sessions) open when the drain began
    waited_s: float = 0.0
    left: list[Session] = field(default_factory=list)  # client sessions still there after the wait
    ended: int = 0  # sessions ended by KILL CONNECTION
    idle: int = 0  # of `left`, sessions idle (a pool's kept connections: they never close by themselves)


def busy_sessions(insp: SessionReader, protected: frozenset[str], *, idle_counts: bool) -> list[Session]:
    """Client sessions a drain waits for. An idle session without an open transaction is a
    pool's kept connection: it never closes by itself, so waiting for it only costs the whole
    bound; when it may be ended (`idle_counts` False) it is not waited for."""
    sessions = [s for s in insp.sessions() if s.user not in protected]
    if idle_counts or not sessions:
        return sessions
    in_trx = {i for i, _user in insp.open_transactions()}
    return [s for s in sessions if s.command != "Sleep" or s.id in in_trx]


# Open transactions come from information_schema.INNODB_TRX, a cache that InnoDB refreshes
# only when nobody has read it for 0.1 s: polled every 10 ms it showed a transaction as open
# for as long as the polling went on, 0.8 s after it committed. Sessions (PROCESSLIST) are live.
TRANSACTIONS_POLL_S, SESSIONS_POLL_S = 0.11, 0.01


def drain(insp: SessionReader, applier: Applier, protected: frozenset[str], *, timeout_s: float,
          until: Literal["transactions", "sessions"] = "transactions", end: bool = True,
          clock: Clock | None = None, poll_s: float | None = None) -> Drained:
    """Wait (bounded) until no client transaction (or session) is open, then end the
    client sessions left when `end` (all of them: a fenced server takes no new work).
    With `until="sessions"` and `end`, idle sessions (pooled connections) are not waited for."""
    poll_s = poll_s or (TRANSACTIONS_POLL_S if until == "transactions" else SESSIONS_POLL_S)
    clock = clock or Clock()
    started = clock.monotonic()
    first = None
    while True:
        if until == "transactions":
            busy = [user for _id, user in insp.open_transactions() if user not in protected]
        else:
            busy = [s.user for s in busy_sessions(insp, protected, idle_counts=not end)]
        first = len(busy) if first is None else first
        waited = clock.monotonic() - started
        if not busy or waited >= timeout_s:
            break
        clock.sleep(min(poll_s, timeout_s - waited))
    result = Drained(open_at_start=first or 0, waited_s=clock.monotonic() - started)
    result.left = [s for s in insp.sessions() if s.user not in protected]
    result.idle = sum(1 for s in result.left if s.command == "Sleep")
    if end:
        for sess in result.left:
            try:
                applier.kill_connection(sess.id)
                result.ended += 1
            except QueryError as e:
                if e.errno != UNKNOWN_THREAD:
                    raise
    return result


# A session still logging in (the router's placeholder holding a slot, an application's
# connection half made) has no statement to lose; it is not the application's yet.
NOT_YET_CLIENTS = frozenset({"unauthenticated user"})


@dataclass
class EndedWhenIdle:
    ended_idle: int = 0  # ended while idle: the pool meets a dead kept connection, nothing cut
    ended_at_deadline: int = 0  # still busy or in a transaction when the bound ran out
    waited_s: float = 0.0
    spared: int = 0  # client sessions of other routes (readers) left alone


def end_when_idle(insp: SessionReader, applier: Applier, protected: frozenset[str], *, timeout_s: float,
                  only_hosts: Callable[[], set[str]] | None = None,
                  spare_hosts: Callable[[], set[str]] | None = None, clock: Clock | None = None,
                  poll_s: float = 0.005) -> EndedWhenIdle:
    """End each client session as soon as it is idle (no statement running, no transaction
    open): a pool then meets a dead kept connection, which a pool that checks before reuse
    retries on a new one, instead of a 1290 or a statement cut. Sessions still running or in
    a transaction when `timeout_s` runs out are ended then. Call it while the router holds new
    connections (or after the route changed), else the pool's new connections come back here.

    `only_hosts()` names the client addresses (host:port) to end, e.g. the sessions that came
    through the writer route: every other client session (reads on a server that stays a
    reader) is left alone. `spare_hosts()` the other way round: the client addresses left
    alone (the sessions that came through the reader route), every other one ended."""
    clock = clock or Clock()
    started = clock.monotonic()
    wanted = only_hosts() if only_hosts is not None else None
    spare = spare_hosts() if spare_hosts is not None else set()
    result = EndedWhenIdle()
    while True:
        # A session already ended stays listed as 'Killed' until it leaves: not ended twice.
        clients = [s for s in insp.sessions() if s.user not in protected and s.user not in NOT_YET_CLIENTS
                   and s.command not in ("Connect", "Killed")]
        if wanted is not None:
            result.spared = sum(1 for s in clients if not _from(s.host, wanted))
            clients = [s for s in clients if _from(s.host, wanted)]
        if spare:
            kept = sum(1 for s in clients if _from(s.host, spare))
            result.spared = kept if wanted is None else result.spared + kept
            clients = [s for s in clients if not _from(s.host, spare)]
        if not clients:
            break
        waited = clock.monotonic() - started
        if waited >= timeout_s:
            result.ended_at_deadline += _kill(applier, clients)
            break
        idle = [s for s in clients if s.command == "Sleep"]
        if idle:
            in_trx = insp.sessions_in_transaction()
            idle = [s for s in idle if s.id not in in_trx]
        if idle:
            # The server checks "still idle" and ends the session in one statement where it
            # can: a statement that arrived since the list was read is not cut.
            if applier.kill_if_idle([s.id for s in idle]):
                still = {s.id for s in insp.sessions() if s.command != "Killed"}
                result.ended_idle += sum(1 for s in idle if s.id not in still)
            else:
                result.ended_idle += _kill(applier, idle)
            continue  # look again at once: the sessions ended leave, the busy ones may be idle now
        clock.sleep(min(poll_s, max(0.0, timeout_s - waited)))
    result.waited_s = clock.monotonic() - started
    return result


def _from(host: str, wanted: set[str]) -> bool:
    """Is a PROCESSLIST host ("ip:port") one of `wanted` ("ip:port"), the port deciding
    when the name differs (localhost against 127.0.0.1)?"""
    if host in wanted:
        return True
    port = host.rpartition(":")[2]
    return bool(port) and any(w.rpartition(":")[2] == port and w.rpartition(":")[0] in ("127.0.0.1", "::1", "localhost")
                              and host.rpartition(":")[0] in ("127.0.0.1", "::1", "localhost") for w in wanted)


def _kill(applier: Applier, sessions: Iterable[Session]) -> int:
    ended = 0
    for sess in sessions:
        try:
            applier.kill_connection(sess.id)
            ended += 1
        except QueryError as e:
            if e.errno != UNKNOWN_THREAD:
                raise
    return ended
