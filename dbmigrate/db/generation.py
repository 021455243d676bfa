"""Fencing generations: a statement sent under an older decision can never undo a newer one.

Each server keeps a counter of its own (written with sql_log_bin=0: nothing replicates). Every
decision a process of a run makes (a run, a resume, a rollback, the rollback a run starts by
itself) bumps the counter on each server it touches, on its first statement there and before
anything is read of that server: it holds the cluster lock by then. Every statement that
changes a server's role (fence, open, the fence expiry's create and drop, replication changes)
is sent wrapped in a check of the generation its process bumped to, on the server, in the same
request: when it lands after a later decision bumped the counter again (a dead process's
packets retransmitted after a partition heals), it does nothing. The fence's expiry event
carries the generation too, and unfences only under it, and only while the server does not
replicate. The bump waits for a guarded statement in progress (a named lock on the server),
so once it has returned what the new decision reads is final.

This is the fencing token of leases and lock services (Chubby's sequencers), held by the
resource itself. Statements that carry no generation (DDL, KILL, writes of a schema swap) are
covered by the write-ahead intent instead (db/intent.py): a later process ends their session.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from dbmigrate.exceptions import DbmigrateError, SafetyError

if TYPE_CHECKING:
    from dbmigrate.db.connection import Server

log = logging.getLogger("dbmigrate.sql")

# How long a guarded statement waits on the server for a bump in progress (a bump takes
# milliseconds; the statement's own bound cuts this shorter).
GUARD_LOCK_WAIT_S = 10
# The bump's own bound where its caller set none: it takes milliseconds, but FLUSH TABLES WITH
# READ LOCK (a backup's) blocks its write for as long as it is held. Past the bound the bump is in
# doubt and ended like any statement given up on; a process's later decision then keeps the
# generation it held (below), a new process refuses. Above GUARD_LOCK_WAIT_S: a guarded statement
# that got the named lock first is waited for.
BUMP_BOUND_S = GUARD_LOCK_WAIT_S + 2.0
NO_SUCH_TABLE = 1146


class Superseded(SafetyError):
    """A role change was not made: a later decision bumped the server's generation first."""


class Generations:
    """The generation this process's decision holds on each server (by address); one per process,
    in its ledger (db/ledger.py). Armed only while a run holds its cluster lock (never for reads of
    other commands, which must not supersede a run in progress)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._per_address: dict[str, threading.Lock] = {}
        self._known: dict[str, int] = {}
        # What this process held before its latest decision: kept when a new decision cannot bump
        # a server (a global read lock there, a server that does not answer).
        self._previous: dict[str, int] = {}
        self.run_id: str | None = None
        self._local = threading.local()

    @property
    def armed(self) -> bool:
        return self.run_id is not None

    def arm(self, run_id: str) -> None:
        """From now on the first statement to each server bumps its generation (a new decision)."""
        with self._lock:
            self.run_id = run_id
            self._known.clear()
            self._previous.clear()

    def new_decision(self) -> None:
        """A later decision in the same process (the rollback a failed run starts): every server
        is bumped again before it is next touched."""
        with self._lock:
            self._previous = {**self._previous, **self._known}
            self._known.clear()

    def forget(self, address: str) -> None:
        """The server at `address` was replaced (a physical copy brought another server's counter
        with its datadir): the next statement there bumps again, above whatever it holds now."""
        with self._lock:
            self._known.pop(address, None)
            self._previous.pop(address, None)

    def disarm(self) -> None:
        with self._lock:
            self.run_id = None
            self._known.clear()
            self._previous.clear()

    def current(self, address: str) -> int | None:
        """The generation this decision holds on `address` (None: none bumped, or not armed)."""
        return self._known.get(address) if self.armed else None

    def known(self) -> dict[str, int]:
        with self._lock:
            return dict(self._known)

    def ensure(self, server: "Server") -> None:
        """Before a statement to `server`: bump its generation once per decision (a no-op when not
        armed, when already bumped, and for the bump's own statements)."""
        run_id = self.run_id
        if run_id is None or server.address in self._known or getattr(self._local, "bumping", False):
            return
        with self._lock:
            per = self._per_address.setdefault(server.address, threading.Lock())
        with per:
            if server.address in self._known or self.run_id is None:
                return
            self._local.bumping = True
            try:
                gen = bump(server, run_id)
            except DbmigrateError as e:
                # A later decision of this same process (its own undo) keeps the generation it
                # holds there when the bump cannot be made (FLUSH TABLES WITH READ LOCK blocks the
                # bump's write; a server that does not answer). That stays safe: this process's
                # own earlier statements are in doubt and ended before anything else is sent there
                # (db/in_doubt.py), and every other process's carry an older generation. A new
                # process has nothing to keep: its bump must succeed.
                kept = self._previous.get(server.address)
                if kept is None or isinstance(e, SafetyError):
                    raise
                log.warning("%s: generation not bumped (%s): this process keeps %d", server.name, e.message, kept)
                gen = kept
            finally:
                self._local.bumping = False
            with self._lock:
                if self.run_id is not None:
                    self._known[server.address] = gen
            log.info("%s: generation %d (run %s)", server.name, gen, run_id)


def bump(server: "Server", run_id: str) -> int:
    """Bump `server`'s generation (the table created first when missing); returns the new one.
    Bounded by BUMP_BOUND_S, or by the caller's bound when that is tighter."""
    flavor = server.flavor
    with server.bounded(BUMP_BOUND_S):
        return int(server.scalar_after(flavor.generation_bump_sql(run_id), flavor.generation_read_sql()))


def read(server: "Server") -> int | None:
    """The generation `server` holds now (None: never bumped)."""
    try:
        value = server.scalar(server.flavor.generation_read_sql())
    except DbmigrateError as e:  # the table does not exist yet: no decision was ever made there
        if getattr(e, "errno", None) == NO_SUCH_TABLE:
            return None
        raise
    return None if value is None else int(value)


def send_guarded(server: "Server", statements: list[str], read_after: str | None = None) -> list[dict[str, Any]]:
    """Send `statements` as one request that runs them only under the generation `server`'s ledger
    holds there (as they are when no generation is armed). With `read_after`, its rows are returned
    (read in the same round trip). Raises Superseded when a later decision bumped the server."""
    gen = server.ledger.generations.current(server.address)
    if gen is None:
        if read_after is None:
            for sql in statements:
                server.execute(sql)
            return []
        return server.query_after(statements, read_after)
    flavor = server.flavor
    guarded = flavor.guarded_sql(gen, statements, GUARD_LOCK_WAIT_S)
    # Whether they ran, and the server's generation, ride along the read: one round trip still.
    check = flavor.guard_columns_sql()
    if read_after is None:
        read = f"SELECT {check}"
    else:
        head, _, rest = read_after.partition(" ")
        assert head.upper() == "SELECT", read_after
        read = f"SELECT {check}, {rest}"
    rows = server.query_after(guarded, read)
    result = rows[0] if rows else {}
    out = [{k: v for k, v in r.items() if k not in ("dbmigrate_ran", "dbmigrate_gen")} for r in rows] \
        if read_after is not None else []
    ran, now = result.get("dbmigrate_ran"), result.get("dbmigrate_gen")
    if not ran:
        if now is not None and int(now) != gen:
            raise Superseded(f"{server.name}: not changed: a later decision took over there (generation {int(now)}, "
                             f"this run holds {gen}); nothing this run sends there can change it now",
                             hint="another process of this cluster's runs decided after this one: see dbmigrate runs")
        raise SafetyError(f"{server.name}: not changed: the generation lock there stayed held for "
                          f"{GUARD_LOCK_WAIT_S}s", hint=f"check who holds GET_LOCK('dbmigrate_generation') on {server.name}")
    return out

