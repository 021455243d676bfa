"""The cluster lease row (dbmigrate.cluster_lease) on the cluster's servers: the SQL half of
dbmigrate.engine.lease.

Every write is conditional on `@@GLOBAL.read_only=0`, so a renewal aimed at a server that
has become a replica matches no row and writes nothing (no GTID of its own there, even for
an account that bypasses read_only); the store then looks for the server that takes writes.
Each server gets a session of its own here: renewals run on a background thread.
"""

from __future__ import annotations

from typing import Any

from dbmigrate.db.connection import Server
from dbmigrate.engine.lease import LeaseRow, may_take
from dbmigrate.exceptions import DbmigrateError

_TABLE = "dbmigrate.cluster_lease"
_COLUMNS = "run_id, holder, host, pid, expires_at, UTC_TIMESTAMP(6) AS now"


def _row(rows: list[dict[str, Any]]) -> LeaseRow | None:
    if not rows:
        return None
    r = rows[0]
    return LeaseRow(run_id=r["run_id"] or "", holder=r["holder"] or "", host=r["host"] or "", pid=int(r["pid"] or 0),
                    expires_at=r["expires_at"], now=r["now"])


class SqlLease:
    """The engine's LeaseStore over the cluster's servers (the primary first)."""

    def __init__(self, servers: dict[str, Server], primary: str, bound_s: float = 3.0) -> None:
        self.servers = servers
        self.primary = primary  # where the lease was last written
        self.bound_s = bound_s  # one server's answer, so that a frozen one does not hold a renewal
        self._sessions: dict[str, Server] = {}
        self._identity: tuple[str, str, int] | None = None  # (holder, host, pid) of the run taking it

    def _session(self, name: str) -> Server:
        if name not in self._sessions:
            self._sessions[name] = self.servers[name].dedicated()
        return self._sessions[name]

    def read(self, name: str, cluster: str) -> LeaseRow | None:
        s = self._session(name)
        with s.bounded(self.bound_s):
            if not self._has_table(s):
                return None
            return _row(s.query(f"SELECT {_COLUMNS} FROM {_TABLE} WHERE cluster=%s", (cluster,)))

    @staticmethod
    def _has_table(s: Server) -> bool:
        # Asked first: CREATE ... IF NOT EXISTS is binlogged even when the table exists.
        return bool(s.scalar("SELECT COUNT(*) AS n FROM information_schema.TABLES "
                             "WHERE TABLE_SCHEMA='dbmigrate' AND TABLE_NAME='cluster_lease'"))

    def _host(self) -> str:
        return self._identity[1] if self._identity is not None else ""

    def _order(self) -> list[str]:
        return [self.primary, *[n for n in self.servers if n != self.primary]]

    def _writable(self) -> str | None:
        """The first server that answers and takes writes (the last primary first), or None."""
        for name in self._order():
            try:
                s = self._session(name)
                with s.bounded(self.bound_s):
                    if str(s.scalar("SELECT @@GLOBAL.read_only AS ro")) not in ("1", "ON"):
                        return name
            except DbmigrateError:
                continue
        return None

    def take(self, cluster: str, run_id: str, holder: str, host: str, pid: int,
             ttl_s: float) -> tuple[bool, LeaseRow | None]:
        """Take the lease on the server that takes writes. Inside a fenced window (or with the
        old primary gone) none does: the row any server carries decides, and the first renewal
        on a writable server writes it."""
        self._identity = (holder, host, pid)
        target = self._writable()
        if target is None:
            for name in self._order():
                try:
                    row = self.read(name, cluster)
                except DbmigrateError:
                    continue
                return may_take(row, run_id, self._host()), row
            raise DbmigrateError(f"no server of cluster '{cluster}' answers: the cluster lease cannot be checked")
        self.primary = target
        return self._take_on(target, cluster, run_id, ttl_s)

    def _take_on(self, name: str, cluster: str, run_id: str, ttl_s: float) -> tuple[bool, LeaseRow | None]:
        assert self._identity is not None, "take() sets the identity first"
        holder, host, pid = self._identity
        s = self._session(name)
        with s.bounded(self.bound_s + ttl_s / 3):
            if not self._has_table(s):
                s.execute("CREATE DATABASE IF NOT EXISTS dbmigrate")
                s.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (cluster VARCHAR(64) PRIMARY KEY, "
                          "run_id VARCHAR(64) NOT NULL, holder VARCHAR(255) NOT NULL, host VARCHAR(255) NOT NULL, "
                          "pid INT NOT NULL, acquired_at DATETIME(6) NULL, expires_at DATETIME(6) NULL)")
            # The row exists before anyone locks it: two runs starting together then queue on one
            # row lock (no gap locks, no deadlock) and the second sees the first's lease.
            s.execute(f"INSERT IGNORE INTO {_TABLE} (cluster, run_id, holder, host, pid) VALUES (%s, '', '', '', 0)",
                      (cluster,))
            s.execute("BEGIN")
            try:
                row = _row(s.query(f"SELECT {_COLUMNS} FROM {_TABLE} WHERE cluster=%s FOR UPDATE", (cluster,)))
                if not may_take(row, run_id, self._host()):
                    s.execute("ROLLBACK")
                    return False, row
                s.execute(f"UPDATE {_TABLE} SET run_id=%s, holder=%s, host=%s, pid=%s, acquired_at=UTC_TIMESTAMP(6), "
                          "expires_at=UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND WHERE cluster=%s AND @@GLOBAL.read_only=0",
                          (run_id, holder, host, pid, int(ttl_s * 1e6), cluster))
                s.execute("COMMIT")
            except BaseException:
                s.close()  # an open transaction dies with its session
                raise
        return True, row

    def renew(self, cluster: str, run_id: str, ttl_s: float) -> tuple[str, LeaseRow | None]:
        """Renew on the server that takes writes (the last one first). Only a writable server's row
        decides that the lease is lost: a replica's row may lag behind the primary's. A lease that
        was only checked (no server took writes at the start) is written here, once one does."""
        for name in self._order():
            try:
                s = self._session(name)
                with s.bounded(self.bound_s):
                    if str(s.scalar("SELECT @@GLOBAL.read_only AS ro")) in ("1", "ON"):
                        continue
                    # Still conditional: the server may have been fenced since the question.
                    if self._has_table(s) and s.execute(
                            f"UPDATE {_TABLE} SET expires_at=UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND "
                            "WHERE cluster=%s AND run_id=%s AND @@GLOBAL.read_only=0",
                            (int(ttl_s * 1e6), cluster, run_id)):
                        self.primary = name
                        return "renewed", None
                    row = self.read(name, cluster)
                if row is not None and row.run_id == run_id:
                    continue  # ours, but the UPDATE missed it: fenced since the question
                if may_take(row, run_id, self._host()) and self._identity is not None:
                    taken, row = self._take_on(name, cluster, run_id, ttl_s)
                    if taken:
                        self.primary = name
                        return "renewed", None
            except DbmigrateError:
                continue  # down or frozen: ask the others
            return "lost", row
        return "unwritable", None

    def release(self, cluster: str, run_id: str) -> None:
        for name in [self.primary, *[n for n in self.servers if n != self.primary]]:
            # Twice: a switchover's seal ends every session on the fenced server but its own, this
            # lease's among them, and a write is not retried on a new connection by itself. The
            # UPDATE only clears this run's own row, so sending it again changes nothing else.
            for _attempt in range(2):
                try:
                    s = self._session(name)
                    with s.bounded(self.bound_s):
                        if s.execute(f"UPDATE {_TABLE} SET run_id='', expires_at=NULL "
                                     "WHERE cluster=%s AND run_id=%s AND @@GLOBAL.read_only=0", (cluster, run_id)):
                            return
                    break
                except DbmigrateError:
                    self._drop(name)

    def _drop(self, name: str) -> None:
        """Forget `name`'s session (ended, or in doubt): the next statement there opens a new one."""
        s = self._sessions.pop(name, None)
        if s is not None:
            s.close()

    def close(self) -> None:
        for s in self._sessions.values():
            s.close()
        self._sessions.clear()

