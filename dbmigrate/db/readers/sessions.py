"""Reads of sessions: who runs what, what the fence waits for (running statements, lock holders),
open transactions, heavy work in flight, and which accounts write past read_only. What a drain
waits for and what may be ended is read here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dbmigrate.db.connection import QueryError, Server
from dbmigrate.db.readers.accounts import AccountReader
from dbmigrate.db.readers.base import Reader


@dataclass(frozen=True)
class Session:
    id: int
    user: str
    host: str
    db: str | None
    command: str
    time: int
    state: str | None
    info: str | None = None  # the statement running, when asked for
    lock_wait: bool = False  # its transaction waits for a row lock (InnoDB), when asked for


@dataclass(frozen=True)
class HeavyWork:
    """Work whose apply takes long and whose size a count of transactions does not show: a
    DDL running (on a primary, or applied by a replica's SQL thread), or a transaction that
    has modified many rows and not committed yet."""

    kind: str  # "DDL" or "transaction"
    session: int
    user: str
    seconds: int  # running for
    info: str = ""  # the statement, shortened
    rows: int = 0  # rows modified so far (a transaction)

    def describe(self) -> str:
        if self.kind == "DDL":
            return f"a DDL running for {self.seconds}s (session {self.session}, {self.user}): {self.info!r}"
        return (f"a transaction that has modified {self.rows:,} rows in {self.seconds}s and not committed "
                f"(session {self.session}, {self.user}{': ' + repr(self.info) if self.info else ''})")


@dataclass(frozen=True)
class LockHolder:
    """A session holding a lock that the fence (or every write) waits for."""

    id: int
    user: str
    command: str
    time: int
    locks: tuple[str, ...]

    def describe(self) -> str:
        doing = "idle" if self.command == "Sleep" else self.command.lower()
        return f"session {self.id} ({self.user}, {doing} for {self.time}s) holds {', '.join(self.locks)}"


# Statements whose apply time depends on the table's size, not on the rows they change.
_DDL = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:SET\s+STATEMENT\s+.+?\s+FOR\s+)?"
                  r"(ALTER|CREATE|DROP|RENAME|TRUNCATE|OPTIMIZE|REPAIR)\s", re.IGNORECASE | re.DOTALL)


def is_ddl(statement: str | None) -> bool:
    return bool(statement and _DDL.match(statement))


def _account_name(grantee: str) -> str:
    """"'app'@'%'" or "'role'" -> the user (or role) name."""
    return grantee.split("@", 1)[0].strip().strip("'`\"")


def grants_bypass(grant_lines: list[str], privileges: set[str]) -> bool:
    """Does any global grant line (SHOW GRANTS) carry one of `privileges`? READ_ONLY ADMIN and
    READ ONLY ADMIN are the same privilege."""
    wanted = {p.replace("_", " ") for p in privileges}
    for line in grant_lines:
        m = re.match(r"^\s*GRANT\s+(.+?)\s+ON\s+\*\.\*\s+TO\s", line, re.IGNORECASE | re.DOTALL)
        if m and {" ".join(p.split()).upper().replace("_", " ") for p in m.group(1).split(",")} & wanted:
            return True
    return False


def bypassing_users(direct_grantees: list[str], role_edges: list[tuple[str, str]]) -> set[str]:
    """Names of accounts that bypass read_only: those granted it directly, and every user or role
    granted (through any chain of roles) a role that has it. `role_edges` is (grantee, role)."""
    names = {_account_name(g) for g in direct_grantees}
    while True:
        more = {user for user, role in role_edges if role in names and user not in names}
        if not more:
            return names
        names |= more


class SessionReader(Reader):
    def __init__(self, server: Server):
        super().__init__(server)
        self._accounts = AccountReader(server)  # a role's own grants (read_only_bypass_users)

    @property
    def login_user(self) -> str:
        """The account this tool is connected as (its own sessions are never ended)."""
        return self.server.credentials.user

    def connection_id(self) -> int:
        """The id of this tool's main session on the server (what KILL QUERY would name)."""
        return self.server.session_id

    def sessions(self, exclude_system: bool = True) -> list[Session]:
        rows = self.server.query(
            "SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE FROM information_schema.PROCESSLIST "
            "WHERE ID <> CONNECTION_ID()")
        out = [Session(int(r["ID"]), r["USER"], r["HOST"] or "", r["DB"], r["COMMAND"], int(r["TIME"] or 0), r["STATE"])
               for r in rows]
        if exclude_system:
            out = [s for s in out if s.user not in ("system user", "event_scheduler")
                   and not s.command.startswith("Binlog Dump") and s.command != "Daemon"]
        return out

    def open_transactions(self) -> list[tuple[int, str]]:
        """(session id, user) of every session with an open InnoDB transaction."""
        rows = self.server.query(
            "SELECT t.trx_mysql_thread_id AS id, p.USER AS user FROM information_schema.INNODB_TRX t "
            "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id")
        return [(int(r["id"]), r["user"]) for r in rows]

    def sessions_in_transaction(self) -> set[int]:
        """Ids of sessions with an active InnoDB transaction, read live from the engine's status
        (INNODB_TRX is a cache refreshed at most every 0.1 s: a transaction begun since is
        missing there, one ended since still shown)."""
        row = self.server.query("SHOW ENGINE INNODB STATUS")
        text = str((row[0] if row else {}).get("Status") or "")
        return parse_active_transactions(text)

    def oldest_transaction_age(self) -> tuple[float, dict[str, Any] | None]:
        rows = self.server.query(
            "SELECT trx_id, trx_mysql_thread_id AS thread_id, trx_started, "
            "TIMESTAMPDIFF(MICROSECOND, trx_started, NOW(6)) / 1e6 AS age_s "
            "FROM information_schema.INNODB_TRX ORDER BY trx_started LIMIT 1")
        if not rows:
            return 0.0, None
        return float(rows[0]["age_s"] or 0), rows[0]

    def fence_blockers(self, fence_id: int) -> list[Session]:
        """Statements the fence (session `fence_id`, setting read_only=ON) is waiting for:
        every other client statement still running that is not itself waiting behind the
        fence (those only wait for it, on the backup / global read / commit lock)."""
        rows = self.server.query(
            "SELECT p.ID, p.USER, p.HOST, p.DB, p.COMMAND, p.TIME, p.STATE, LEFT(p.INFO, 120) AS INFO, "
            "(SELECT COUNT(*) FROM information_schema.INNODB_TRX t WHERE t.trx_mysql_thread_id = p.ID "
            "AND t.trx_state = 'LOCK WAIT') AS LOCK_WAIT "
            "FROM information_schema.PROCESSLIST p WHERE p.ID NOT IN (%s, CONNECTION_ID()) "
            "AND p.COMMAND IN ('Query', 'Execute') AND p.USER NOT IN ('system user', 'event_scheduler') "
            "AND COALESCE(p.STATE, '') NOT LIKE 'Waiting for backup lock%%' "
            "AND COALESCE(p.STATE, '') NOT LIKE 'Waiting for global read lock%%' "
            "AND COALESCE(p.STATE, '') NOT LIKE 'Waiting for commit lock%%'", (int(fence_id),))
        return [Session(int(r["ID"]), r["USER"], r["HOST"] or "", r["DB"], r["COMMAND"], int(r["TIME"] or 0),
                        r["STATE"], r["INFO"], lock_wait=bool(int(r["LOCK_WAIT"] or 0))) for r in rows]

    def lock_holders(self, exclude_id: int) -> tuple[list[LockHolder], str]:
        """Sessions holding a table write lock (LOCK TABLES ... WRITE), an exclusive table lock
        or the global read lock (FLUSH TABLES WITH READ LOCK): an idle holder is no running
        statement, yet the fence waits for it. Returns (holders, note): the note says where the
        server could not tell (MariaDB without the metadata_lock_info plugin: the tables in use
        only, from SHOW OPEN TABLES)."""
        try:
            rows = self.server.query(self.flavor.lock_holders_sql(), (int(exclude_id),))
        except QueryError as e:
            if e.errno not in self.flavor.lock_holders_missing_errnos:
                raise
            in_use = [f"{r['Database']}.{r['Table']}" for r in self.server.query("SHOW OPEN TABLES WHERE In_use > 0")]
            return [], (f"{self.flavor.lock_holders_source} cannot be read, so the holder of a table lock or of "
                        f"FLUSH TABLES WITH READ LOCK is not named (MariaDB: load the metadata_lock_info plugin); "
                        f"tables in use: {', '.join(in_use) or 'none'}")
        holders: dict[int, LockHolder] = {}
        for r in rows:
            what = self.flavor.describe_lock(str(r["mode"]), str(r["db"] or ""), str(r["tbl"] or ""))
            if what is None:
                continue
            sid = int(r["id"])
            h = holders.get(sid) or LockHolder(sid, str(r["user"] or ""), str(r["command"] or ""),
                                                int(r["time"] or 0), ())
            if what not in h.locks:
                h = LockHolder(h.id, h.user, h.command, h.time, h.locks + (what,))
            holders[sid] = h
        return list(holders.values()), ""

    def row_lock_waits(self) -> int:
        """Transactions waiting for an InnoDB row lock now. A fence set now would wait behind
        each of them, and every write behind the fence (see FenceWatch). A status counter, kept
        live by InnoDB: information_schema.INNODB_TRX is a cache that is refreshed only when
        nobody read it for 0.1 s, so a loop polling it would see the same rows for ever."""
        rows = self.server.query("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_current_waits'")
        return int(rows[0]["Value"]) if rows else 0

    def disk_full_waits(self) -> list[Session]:
        """Sessions whose write waits for disk space (the server retries it by itself, every
        60 s on MariaDB, for as long as the disk stays full)."""
        states = self.flavor.disk_wait_states
        if not states:
            return []
        marks = " OR ".join(["STATE LIKE %s"] * len(states))
        rows = self.server.query(
            "SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE, LEFT(INFO, 120) AS INFO FROM information_schema.PROCESSLIST "
            f"WHERE ID <> CONNECTION_ID() AND ({marks})", tuple(f"{st}%" for st in states))
        return [Session(int(r["ID"]), r["USER"], r["HOST"] or "", r["DB"], r["COMMAND"], int(r["TIME"] or 0),
                        r["STATE"], r["INFO"]) for r in rows]

    def heavy_work_in_flight(self, min_rows: int) -> list[HeavyWork]:
        """On a primary: DDL statements running, and transactions that modified at least
        `min_rows` rows and have not committed. Each becomes one transaction in the binlog
        whose apply on a replica takes about as long as it took here, or longer."""
        out = []
        for r in self.server.query(
                "SELECT ID AS id, USER AS user, TIME AS time, LEFT(INFO, 200) AS info "
                "FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND IN ('Query', 'Execute') "
                "AND USER NOT IN ('system user', 'event_scheduler') AND INFO IS NOT NULL"):
            if is_ddl(r["info"]):
                out.append(HeavyWork("DDL", int(r["id"]), str(r["user"]), int(r["time"] or 0),
                                     " ".join(str(r["info"]).split())[:80]))
        # INNODB_TRX is a cache refreshed at most every 0.1 s: good enough for a look, not for a 1 ms poll.
        for r in self.server.query(
                "SELECT t.trx_mysql_thread_id AS id, p.USER AS user, t.trx_rows_modified AS n, "
                "TIMESTAMPDIFF(SECOND, t.trx_started, NOW()) AS age, LEFT(p.INFO, 80) AS info "
                "FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p "
                "ON p.ID = t.trx_mysql_thread_id WHERE t.trx_rows_modified >= %s AND t.trx_mysql_thread_id <> "
                "CONNECTION_ID()", (int(min_rows),)):
            out.append(HeavyWork("transaction", int(r["id"]), str(r["user"] or ""), int(r["age"] or 0),
                                 " ".join(str(r["info"] or "").split()), rows=int(r["n"] or 0)))
        return out

    def applying_heavy(self) -> list[HeavyWork]:
        """On a replica: DDL statements its replication threads are applying now."""
        rows = self.server.query(
            "SELECT ID AS id, USER AS user, TIME AS time, LEFT(INFO, 200) AS info FROM information_schema.PROCESSLIST "
            "WHERE USER = 'system user' AND INFO IS NOT NULL")
        return [HeavyWork("DDL", int(r["id"]), "replication", int(r["time"] or 0), " ".join(str(r["info"]).split())[:80])
                for r in rows if is_ddl(r["info"])]

    def read_only_bypass_users(self) -> set[str]:
        """Names of accounts whose sessions can still write while read_only is ON (directly or through a role)."""
        sql, roles_sql = self.flavor.bypass_grantees_sql(), self.flavor.role_edges_sql()
        if sql is None:
            return set()
        grantees = [r["grantee"] for r in self.server.query(sql)]
        edges = [(r["user"], r["role"]) for r in self.server.query(roles_sql)] if roles_sql else []
        # A role's own privileges are not in USER_PRIVILEGES: read them with SHOW GRANTS.
        privileges = self.flavor.read_only_privileges()
        grantees += [f"'{role}'" for role in {r for _u, r in edges}
                     if grants_bypass(self._accounts.role_grants(role), privileges)]
        return bypassing_users(grantees, edges)


_TRX_HEAD = re.compile(r"^---TRANSACTION [^,]+, (ACTIVE|not started)")
_TRX_THREAD = re.compile(r"(?:MySQL|MariaDB) thread id (\d+)")


def parse_active_transactions(status: str) -> set[int]:
    """Session ids of the ACTIVE transactions in SHOW ENGINE INNODB STATUS's TRANSACTIONS section
    (a 'not started' entry is a session without a transaction)."""
    ids: set[int] = set()
    active = False
    for line in status.splitlines():
        head = _TRX_HEAD.match(line)
        if head:
            active = head.group(1) == "ACTIVE"
            continue
        if line.startswith("---") or line.startswith("--------"):
            active = False
        found = _TRX_THREAD.search(line) if active else None
        if found:
            ids.add(int(found.group(1)))
            active = False
    return ids
