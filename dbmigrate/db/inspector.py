"""All reads of server state go through here: one method per question."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Collection

from dbmigrate.db.connection import ROUND_TRIP_MARGIN_S, QueryError, Server
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.exceptions import DbmigrateError


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


class Inspector:
    def __init__(self, server: Server):
        self.server = server
        self.flavor = server.flavor

    def variables(self, *names: str) -> dict[str, Any]:
        cols = ", ".join(f"@@GLOBAL.{n} AS `{n}`" for n in names)
        return self.server.query(f"SELECT {cols}")[0]

    def variable(self, name: str) -> Any:
        return self.variables(name)[name]

    @property
    def login_user(self) -> str:
        """The account this tool is connected as (its own sessions are never ended)."""
        return self.server.credentials.user

    def reachable(self) -> bool:
        try:
            self.server.scalar("SELECT 1")
            return True
        except DbmigrateError:
            return False

    def has_applied(self, position: str) -> bool:
        """Has this server applied (or written) every transaction of `position`?"""
        return self.flavor.includes(self.gtid_executed(), position)

    def missing_from(self, position: str) -> str:
        """The part of `position` this server has not applied yet, as text (transactions per domain)."""
        behind = self.flavor.behind(position, self.gtid_executed())
        return ", ".join(f"{n} transaction(s) of {d}" for d, n in sorted(behind.items())) or "nothing"

    def trx_behind(self, position: str) -> dict[str, int]:
        """Transactions of `position` this server has not applied yet, per domain (or server uuid)."""
        return self.flavor.behind(position, self.gtid_executed())

    def gtid_mode_problem(self) -> str | None:
        """Why this server cannot take part in a GTID switchover, or None."""
        if not self.flavor.gtid_mode_required():
            return None
        mode = str(self.variable("gtid_mode")).upper()
        return None if mode == "ON" else f"gtid_mode={mode}"

    def open_transactions(self) -> list[tuple[int, str]]:
        """(session id, user) of every session with an open InnoDB transaction."""
        rows = self.server.query(
            "SELECT t.trx_mysql_thread_id AS id, p.USER AS user FROM information_schema.INNODB_TRX t "
            "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id")
        return [(int(r["id"]), r["user"]) for r in rows]

    def connection_id(self) -> int:
        """The id of this tool's main session on the server (what KILL QUERY would name)."""
        return self.server.session_id

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

    def apply_backlog_bytes(self, source_file: str, source_pos: int, transactions_behind: int) -> int:
        """Bytes of its source's binlog, up to (source_file, source_pos), that this replica has
        not applied yet (received or not). Across a binlog rotation only the part in the source's
        current file is counted (a lower bound), and nothing when no transaction is missing."""
        st = self.replica_status()
        if st is None or not st.applied_source_file:
            return 0
        if st.applied_source_file == source_file:
            return max(0, source_pos - st.applied_source_pos)
        return source_pos if transactions_behind else 0

    def binlog_start_states(self) -> list[tuple[str, str]]:
        """(binlog file, GTID state at its start), oldest first: where to begin reading for a
        given GTID without scanning older files. MariaDB writes that state as each file's
        Gtid_list event; elsewhere (or without it) the state is ''."""
        out = []
        for r in self.server.query("SHOW BINARY LOGS"):
            name, state = str(r["Log_name"]), ""
            if self.flavor.name == "mariadb":
                for e in self.server.query("SHOW BINLOG EVENTS IN %s LIMIT 4", (name,)):
                    if e.get("Event_type") == "Gtid_list":
                        state = str(e.get("Info") or "").strip().strip("[]")
                        break
            out.append((name, state))
        return out

    def read_only(self) -> bool:
        return str(self.variable("read_only")) in ("1", "ON")

    def event_scheduler_on(self) -> bool:
        """Does this server run scheduled events (the fence's expiry is one)?"""
        return str(self.variable("event_scheduler")).upper() in ("ON", "1")

    def read_only_at(self) -> tuple[bool, float]:
        """(read_only, the server's clock when it answered, Unix seconds): on one host the
        servers share a clock, so answers from several servers can be put on one timeline."""
        row = self.server.query("SELECT @@GLOBAL.read_only AS ro, UNIX_TIMESTAMP(SYSDATE(6)) AS at")[0]
        return str(row["ro"]) in ("1", "ON"), float(row["at"])

    def server_id(self) -> int:
        return int(self.variable("server_id"))

    def gtid_executed(self) -> str:
        """What this server has applied or written (MariaDB gtid_current_pos, MySQL gtid_executed)."""
        return self.server.scalar(self.flavor.gtid_executed_sql()) or ""

    def row_lock_waits(self) -> int:
        """Transactions waiting for an InnoDB row lock now. A fence set now would wait behind
        each of them, and every write behind the fence (see FenceWatch). A status counter, kept
        live by InnoDB: information_schema.INNODB_TRX is a cache that is refreshed only when
        nobody read it for 0.1 s, so a loop polling it would see the same rows for ever."""
        rows = self.server.query("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_current_waits'")
        return int(rows[0]["Value"]) if rows else 0

    def gtid_binlog_pos(self) -> str:
        """What this server has written to its binlog: the target a successor must reach."""
        return self.server.scalar(self.flavor.gtid_binlog_pos_sql()) or ""

    def read_only_and_binlog_pos(self) -> tuple[bool, str]:
        """read_only and what the binlog holds, in one round trip (inside a fenced window)."""
        row = self.server.query(self.flavor.read_only_and_binlog_pos_sql())[0]
        return str(row["ro"]) in ("1", "ON"), row["pos"] or ""

    def read_only_sessions_count_and_binlog_pos(self, users: Collection[str]) -> tuple[bool, int, str]:
        """read_only, how many sessions (other than this one) `users` have, and what the binlog
        holds, in one round trip (inside a fenced window)."""
        marks = ", ".join(["%s"] * len(users)) or "NULL"
        row = self.server.query(
            "SELECT q.ro AS ro, q.pos AS pos, (SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            f"WHERE ID <> CONNECTION_ID() AND USER IN ({marks})) AS n "
            f"FROM ({self.flavor.read_only_and_binlog_pos_sql()}) q", tuple(sorted(users)))[0]
        return str(row["ro"]) in ("1", "ON"), int(row["n"] or 0), row["pos"] or ""

    def gtid_state(self) -> str:
        """Binlog state with one entry per origin, for errant-transaction checks."""
        return self.server.scalar(self.flavor.gtid_state_sql()) or ""

    def own_gtids(self) -> list[str]:
        """Transactions this server wrote itself, per its binlog state (on a replica: errant ones)."""
        identity = str(self.server.scalar(self.flavor.server_identity_sql()))
        return self.flavor.own_gtids(self.gtid_state(), identity)

    def replica_status(self) -> ReplicaStatus | None:
        rows = self.server.query(self.flavor.replica_status_sql())
        return self.flavor.parse_replica_status(rows[0]) if rows else None

    def replica_hosts(self) -> list[dict[str, Any]]:
        """Replicas that registered with report_host/report_port."""
        out = []
        for r in self.server.query(self.flavor.replica_hosts_sql()):
            out.append({"server_id": int(r.get("Server_id") or r.get("Server_Id") or 0),
                        "host": r.get("Host") or "", "port": int(r.get("Port") or 0)})
        return out

    def binlog_dump_threads(self) -> int:
        return int(self.server.scalar(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%%'") or 0)

    def read_only_bypass_users(self) -> set[str]:
        """Names of accounts whose sessions can still write while read_only is ON (directly or through a role)."""
        sql, roles_sql = self.flavor.bypass_grantees_sql(), self.flavor.role_edges_sql()
        if sql is None:
            return set()
        grantees = [r["grantee"] for r in self.server.query(sql)]
        edges = [(r["user"], r["role"]) for r in self.server.query(roles_sql)] if roles_sql else []
        # A role's own privileges are not in USER_PRIVILEGES: read them with SHOW GRANTS.
        privileges = self.flavor.read_only_privileges()
        grantees += [f"'{role}'" for role in {r for _u, r in edges} if grants_bypass(self.role_grants(role), privileges)]
        return bypassing_users(grantees, edges)

    def role_grants(self, role: str) -> list[str]:
        rows = self.server.query("SHOW GRANTS FOR %s", (role,))
        return [next(iter(r.values())) for r in rows]

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

    def oldest_transaction_age(self) -> tuple[float, dict[str, Any] | None]:
        rows = self.server.query(
            "SELECT trx_id, trx_mysql_thread_id AS thread_id, trx_started, "
            "TIMESTAMPDIFF(MICROSECOND, trx_started, NOW(6)) / 1e6 AS age_s "
            "FROM information_schema.INNODB_TRX ORDER BY trx_started LIMIT 1")
        if not rows:
            return 0.0, None
        return float(rows[0]["age_s"] or 0), rows[0]

    def own_grants(self) -> list[str]:
        """SHOW GRANTS of the account this session logged in as."""
        rows = self.server.query("SHOW GRANTS FOR CURRENT_USER()")
        return [next(iter(r.values())) for r in rows]

    def grants(self, user: str, host: str = "%") -> list[str]:
        rows = self.server.query("SHOW GRANTS FOR %s@%s", (user, host))
        return [next(iter(r.values())) for r in rows]

    def user_exists(self, user: str) -> bool:
        return bool(self.server.scalar("SELECT COUNT(*) AS n FROM mysql.user WHERE User=%s", (user,)))

    def wait_for_gtid(self, position: str, timeout_s: float) -> bool:
        """Block until this replica has applied `position` (bounded). True when reached.

        Runs on a session of its own whose read timeout outlasts the wait (an open
        connection keeps the timeout it was opened with)."""
        left = self.server.remaining()
        if left is not None:
            # Under a bound: the server-side wait ends before the bound does, so that the
            # reply (reached or not) still arrives in time; a frozen server hits the bound.
            timeout_s = max(0.0, min(timeout_s, left - ROUND_TRIP_MARGIN_S))
        waiter = self.server.waiter(int(timeout_s) + 5)
        return self.flavor.wait_for_gtid_reached(waiter.scalar(self.flavor.wait_for_gtid_sql(), (position, timeout_s)))

    def open_sessions(self, wait_timeout_s: float) -> None:
        """Open (and check) this server's sessions now, the ones for bounded waits and for a
        watchdog included, so that later statements and waits do not pay for a handshake."""
        self.server.scalar("SELECT 1")
        for side in (self.server.waiter(int(wait_timeout_s) + 5), self.server.watcher(int(wait_timeout_s) + 5)):
            side.scalar("SELECT 1")

    def schemas(self) -> list[str]:
        rows = self.server.query(
            "SELECT SCHEMA_NAME AS s FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN "
            "('mysql','information_schema','performance_schema','sys')")
        return [r["s"] for r in rows]

    # -- lag and heartbeat -----------------------------------------------------
    def server_clock(self) -> tuple[Any, Any]:
        """(UTC, local time) now by this server's clock, to the microsecond."""
        row = self.server.query("SELECT UTC_TIMESTAMP(6) AS utc_now, NOW(6) AS local_now")[0]
        return row["utc_now"], row["local_now"]

    # -- data consistency ------------------------------------------------------
    def checksum_differences(self, replicate_table: str) -> list[dict[str, Any]]:
        """Tables whose chunks differ in pt-table-checksum's replicate table, as this replica
        computed them: [{'db', 'tbl', 'chunks', 'replica_rows', 'primary_rows'}]."""
        db, _, tbl = replicate_table.partition(".")
        if not (db and tbl and (db + tbl).replace("_", "").replace("$", "").isalnum()):
            raise ValueError(f"not a db.table name: {replicate_table!r}")
        return self.server.query(
            "SELECT db, tbl, COUNT(*) AS chunks, SUM(this_cnt) AS replica_rows, SUM(master_cnt) AS primary_rows "
            f"FROM `{db}`.`{tbl}` WHERE master_cnt <> this_cnt OR master_crc <> this_crc "
            "OR ISNULL(master_crc) <> ISNULL(this_crc) GROUP BY db, tbl ORDER BY db, tbl")

    def slow_log_settings(self) -> dict[str, Any]:
        """The slow-log variables of this flavor, as JSON-safe values of the right type
        (numbers stay numbers: SET GLOBAL long_query_time='10' is refused)."""
        out: dict[str, Any] = {}
        for name, value in self.variables(*self.flavor.slow_log_variables()).items():
            if isinstance(value, (bytes, bytearray)):
                value = value.decode()
            elif value is not None and not isinstance(value, (int, float, str)):
                value = float(value)  # Decimal
            out[name] = value
        return out

    def status(self, *names: str) -> dict[str, str]:
        rows = self.server.query(self.flavor.global_status_sql(len(names)), tuple(n.upper() for n in names))
        return {r["n"].lower(): r["v"] for r in rows}

    def user_hosts(self, user: str) -> list[str]:
        """Host parts of the accounts named `user` (for SHOW GRANTS FOR user@host)."""
        rows = self.server.query("SELECT Host AS h FROM mysql.user WHERE User=%s ORDER BY Host", (user,))
        return [str(r["h"]) for r in rows]

    def privilege_holders(self, schemas: list[str], include_global: bool, roles: bool = False) -> list[tuple[str, str]]:
        """(user, host) of every account with a privilege on one of `schemas`, at any level:
        schema (a LIKE pattern that covers it counts), table, column, routine, and global when
        asked. Roles (MariaDB: an empty host) and anonymous accounts are left out; with
        `roles`, only the roles are returned, as (role, '')."""
        if not schemas:
            return []
        from dbmigrate.db.grants import like_matches

        found: set[tuple[str, str]] = set()
        for r in self.server.query("SELECT User AS u, Host AS h, Db AS d FROM mysql.db WHERE User <> ''"):
            if any(like_matches(str(r["d"]), s) for s in schemas):
                found.add((str(r["u"]), str(r["h"])))
        marks = ", ".join(["%s"] * len(schemas))
        for table in ("tables_priv", "columns_priv", "procs_priv"):
            for r in self.server.query(f"SELECT DISTINCT User AS u, Host AS h FROM mysql.{table} "
                                       f"WHERE User <> '' AND Db IN ({marks})", tuple(schemas)):
                found.add((str(r["u"]), str(r["h"])))
        if include_global:
            for r in self.server.query(
                    "SELECT User AS u, Host AS h FROM mysql.user WHERE User <> '' AND Host <> '' AND "
                    "(Select_priv='Y' OR Insert_priv='Y' OR Update_priv='Y' OR Delete_priv='Y')"):
                found.add((str(r["u"]), str(r["h"])))
        return sorted(a for a in found if (a[1] == "") == roles)  # MariaDB's roles have an empty host

    # What can change an application's data or tables: the privilege columns of mysql.user and
    # mysql.db, and the values of tables_priv's and columns_priv's SETs that do.
    _WRITE_COLUMNS = ("Insert_priv", "Update_priv", "Delete_priv", "Create_priv", "Drop_priv", "Alter_priv",
                      "Index_priv", "Create_view_priv", "Trigger_priv")
    _WRITE_TABLE_PRIVS = ("Insert", "Update", "Delete", "Create", "Drop", "Alter", "Index", "Create View", "Trigger")
    _WRITE_COLUMN_PRIVS = ("Insert", "Update")

    def schema_writers(self, schemas: list[str]) -> dict[tuple[str, str], set[str]]:
        """(user, host) -> the levels at which it can write one of `schemas`: 'global', 'schema'
        (a LIKE pattern that covers it counts), 'table', 'column', and 'role R' for a write
        privilege held through role R (granted directly or through another role). Anonymous
        accounts are left out; roles appear only through their members."""
        from dbmigrate.db.grants import like_matches

        any_write = " OR ".join(f"{c}='Y'" for c in self._WRITE_COLUMNS)
        found: dict[tuple[str, str], set[str]] = {}

        def add(user: Any, host: Any, level: str) -> None:
            found.setdefault((str(user), str(host)), set()).add(level)

        for r in self.server.query(f"SELECT User AS u, Host AS h FROM mysql.user WHERE User <> '' AND ({any_write})"):
            add(r["u"], r["h"], "global")
        for r in self.server.query(f"SELECT User AS u, Host AS h, Db AS d FROM mysql.db WHERE User <> '' AND "
                                   f"({any_write})"):
            if any(like_matches(str(r["d"]), s) for s in schemas):
                add(r["u"], r["h"], "schema")
        if schemas:
            marks = ", ".join(["%s"] * len(schemas))
            for table, column, privs, level in (("tables_priv", "Table_priv", self._WRITE_TABLE_PRIVS, "table"),
                                                ("columns_priv", "Column_priv", self._WRITE_COLUMN_PRIVS, "column")):
                writes = " OR ".join(f"FIND_IN_SET('{p}', {column})" for p in privs)
                for r in self.server.query(f"SELECT DISTINCT User AS u, Host AS h FROM mysql.{table} "
                                           f"WHERE User <> '' AND Db IN ({marks}) AND ({writes})", tuple(schemas)):
                    add(r["u"], r["h"], level)
        # MariaDB's roles have an empty host: their writes reach the users that hold them.
        roles = {u for u, h in found if h == ""}
        users = {a: levels for a, levels in found.items() if a[1] != ""}
        edges_sql = self.flavor.role_edges_sql()
        if roles and edges_sql:
            edges = [(str(r["user"]), str(r["host"]), str(r["role"])) for r in self.server.query(edges_sql)]
            via = {r: r for r in roles}  # role -> the writing role it leads to
            while True:
                more = {u: via[role] for u, h, role in edges if h == "" and role in via and u not in via}
                if not more:
                    break
                via.update(more)
            for user, host, role in edges:
                if host and role in via:
                    users.setdefault((user, host), set()).add(f"role {via[role]}")
        return users

    def role_members(self, roles: set[str]) -> list[tuple[str, str, str]]:
        """(user, host, role) for every grant of one of `roles`, and of a role that holds one of
        them, to a user or another role (a role's host is '')."""
        if not roles:
            return []
        edges = [(str(r["user"]), str(r["host"]), str(r["role"]))
                 for r in self.server.query("SELECT User AS user, Host AS host, Role AS role FROM mysql.roles_mapping")]
        wanted, out = set(roles), list[tuple[str, str, str]]()
        while True:
            more = [e for e in edges if e[2] in wanted and e not in out]
            if not more:
                return sorted(out)
            out += more
            wanted |= {u for u, h, _ in more if h == ""}

    def role_exists(self, role: str) -> bool:
        return bool(self.server.scalar("SELECT COUNT(*) AS n FROM mysql.user WHERE User=%s AND Host='' AND "
                                       "is_role='Y'", (role,)))

    def default_role(self, user: str, host: str) -> str:
        """The role a user's sessions start with ('' for none)."""
        return str(self.server.scalar("SELECT default_role AS r FROM mysql.user WHERE User=%s AND Host=%s",
                                      (user, host)) or "")

    def data_size_bytes(self) -> int:
        """Data + index bytes of the user schemas (a rough size of what a copy must hold)."""
        return int(self.server.scalar(
            "SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) AS n FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA NOT IN ('mysql','information_schema','performance_schema','sys')") or 0)

    # -- InnoDB buffer pool --------------------------------------------------
    BUFFER_POOL_COUNTERS = ("Innodb_buffer_pool_read_requests", "Innodb_buffer_pool_reads",
                            "Innodb_buffer_pool_pages_data", "Innodb_buffer_pool_pages_free",
                            "Innodb_buffer_pool_pages_total")

    def buffer_pool_counters(self) -> dict[str, int]:
        """Page requests, misses and page counts; keys without the Innodb_buffer_pool_ prefix."""
        raw = self.status(*self.BUFFER_POOL_COUNTERS)
        return {n.lower().removeprefix("innodb_buffer_pool_"): int(raw.get(n.lower()) or 0)
                for n in self.BUFFER_POOL_COUNTERS}

    def buffer_pool_dump_status(self) -> str:
        return str(self.status("Innodb_buffer_pool_dump_status").get("innodb_buffer_pool_dump_status") or "")

    def buffer_pool_load_status(self) -> str:
        return str(self.status("Innodb_buffer_pool_load_status").get("innodb_buffer_pool_load_status") or "")

    def buffer_pool_pages_by_table(self, schemas: list[str] | None = None) -> dict[str, int]:
        """Resident pages per table ('schema.table'). Scans the whole pool under its mutexes:
        seconds on a pool of hundreds of GB, so callers make it optional."""
        rows = self.server.query(
            "SELECT TABLE_NAME AS t, COUNT(*) AS n FROM information_schema.INNODB_BUFFER_PAGE "
            "WHERE TABLE_NAME IS NOT NULL GROUP BY TABLE_NAME")
        out: dict[str, int] = {}
        for r in rows:
            parts = [p.strip("`") for p in str(r["t"]).split("`.`")]
            if len(parts) != 2:
                continue  # the InnoDB dictionary (SYS_*) has no schema
            name = f"{parts[0]}.{parts[1]}"
            if schemas is None or parts[0] in schemas:
                out[name] = int(r["n"])
        return out

    def innodb_tablespaces(self) -> dict[str, int]:
        """{'schema/table' (InnoDB's encoded name): tablespace id} for every InnoDB table."""
        return {str(r["name"]): int(r["space"]) for r in self.server.query(self.flavor.innodb_tables_sql())}

    def datadir_file(self, variable: str) -> str:
        """Absolute path of a file InnoDB names relative to the datadir (e.g. innodb_buffer_pool_filename)."""
        v = self.variables("datadir", variable)
        name = str(v[variable])
        return name if name.startswith("/") else str(v["datadir"]).rstrip("/") + "/" + name

    # -- tables ----------------------------------------------------------------
    def table_info(self, schema: str, table: str) -> dict[str, Any] | None:
        """Engine and on-disk size of a table, or None when it does not exist."""
        rows = self.server.query(
            "SELECT ENGINE AS engine, COALESCE(DATA_LENGTH,0) + COALESCE(INDEX_LENGTH,0) AS bytes, "
            "TABLE_ROWS AS est_rows FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table))
        return rows[0] if rows else None

    def table_indexes(self, schema: str, table: str) -> list[dict[str, Any]]:
        """Indexes in key order: [{'name', 'columns': [(column, data_type)], 'parts': [(column, prefix
        length or None, descending)], 'unique', 'type'}], PRIMARY first."""
        rows = self.server.query(
            "SELECT s.INDEX_NAME AS idx, s.COLUMN_NAME AS col, s.NON_UNIQUE AS non_unique, c.DATA_TYPE AS dtype, "
            "s.INDEX_TYPE AS itype, s.SUB_PART AS sub_part, s.COLLATION AS coll "
            "FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c "
            "ON c.TABLE_SCHEMA=s.TABLE_SCHEMA AND c.TABLE_NAME=s.TABLE_NAME AND c.COLUMN_NAME=s.COLUMN_NAME "
            "WHERE s.TABLE_SCHEMA=%s AND s.TABLE_NAME=%s ORDER BY s.INDEX_NAME='PRIMARY' DESC, s.INDEX_NAME, "
            "s.SEQ_IN_INDEX", (schema, table))
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            ix = out.setdefault(r["idx"], {"name": r["idx"], "columns": [], "parts": [],
                                           "unique": not int(r["non_unique"]),
                                           "type": str(r["itype"] or "BTREE").upper()})
            ix["columns"].append((r["col"], str(r["dtype"]).lower()))
            ix["parts"].append((r["col"], int(r["sub_part"]) if r["sub_part"] is not None else None,
                                str(r["coll"] or "") == "D"))
        return list(out.values())

    def table_columns(self, schema: str, table: str) -> list[tuple[str, str]]:
        """(column, full column type) in table order; empty when the table does not exist."""
        rows = self.server.query(
            "SELECT COLUMN_NAME AS c, COLUMN_TYPE AS t FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (schema, table))
        return [(str(r["c"]), str(r["t"]).lower()) for r in rows]

    def tables_matching(self, schema: str, regex: str) -> list[str]:
        """Base tables of `schema` whose name matches `regex` (server-side REGEXP), as 'schema.table'."""
        rows = self.server.query(
            "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_TYPE='BASE TABLE' "
            "AND TABLE_NAME REGEXP %s ORDER BY TABLE_NAME", (schema, regex))
        return [f"{schema}.{r['t']}" for r in rows]

    def key_range(self, schema: str, table: str, column: str) -> tuple[Any, Any]:
        row = self.server.query(f"SELECT MIN(`{column}`) AS lo, MAX(`{column}`) AS hi FROM `{schema}`.`{table}`")[0]
        return row["lo"], row["hi"]

    def table_sizes(self, tables: list[str]) -> dict[str, int]:
        """Data + index bytes of each 'schema.table' that exists."""
        pairs = [t.split(".", 1) for t in tables if "." in t]
        if not pairs:
            return {}
        marks = " OR ".join(["(TABLE_SCHEMA = %s AND TABLE_NAME = %s)"] * len(pairs))
        rows = self.server.query("SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t, DATA_LENGTH + INDEX_LENGTH AS n "
                                 f"FROM information_schema.TABLES WHERE {marks}", tuple(x for p in pairs for x in p))
        return {f"{r['s']}.{r['t']}": int(r["n"] or 0) for r in rows}

    # -- shards and named replication connections (consolidation) ------------------
    def schema_sizes(self, schemas: list[str]) -> dict[str, int]:
        """Data + index bytes per schema, for the schemas that exist (an empty one counts 0)."""
        if not schemas:
            return {}
        marks = ", ".join(["%s"] * len(schemas))
        rows = self.server.query(
            "SELECT s.SCHEMA_NAME AS s, COALESCE(SUM(t.DATA_LENGTH + t.INDEX_LENGTH), 0) AS n "
            "FROM information_schema.SCHEMATA s LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME "
            f"WHERE s.SCHEMA_NAME IN ({marks}) GROUP BY s.SCHEMA_NAME", tuple(schemas))
        return {str(r["s"]): int(r["n"]) for r in rows}

    def userstat_enabled(self) -> bool:
        """MariaDB/Percona per-table statistics (information_schema.TABLE_STATISTICS) are being collected."""
        try:
            return str(self.variable("userstat")) in ("1", "ON")
        except Exception:  # MySQL has no userstat
            return False

    def rows_touched_by_schema(self, schemas: list[str]) -> dict[str, int]:
        """Rows read + changed per schema since userstat was turned on (a counter)."""
        if not schemas:
            return {}
        marks = ", ".join(["%s"] * len(schemas))
        rows = self.server.query(
            "SELECT TABLE_SCHEMA AS s, SUM(ROWS_READ + ROWS_CHANGED) AS n FROM information_schema.TABLE_STATISTICS "
            f"WHERE TABLE_SCHEMA IN ({marks}) GROUP BY TABLE_SCHEMA", tuple(schemas))
        return {str(r["s"]): int(r["n"] or 0) for r in rows}

    def base_tables(self, schema: str) -> list[str]:
        rows = self.server.query(
            "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_TYPE='BASE TABLE' "
            "ORDER BY TABLE_NAME", (schema,))
        return [str(r["t"]) for r in rows]

    def table_checksums(self, schema: str) -> dict[str, int | None]:
        """CHECKSUM TABLE of every base table of `schema` (reads every row: size it before calling)."""
        tables = self.base_tables(schema)
        if not tables:
            return {}
        rows = self.server.query("CHECKSUM TABLE " + ", ".join(f"`{schema}`.`{t}`" for t in tables))
        return {str(r["Table"]).split(".", 1)[1]: (None if r["Checksum"] is None else int(r["Checksum"])) for r in rows}

    def checksum_layout(self, schema: str, table: str) -> tuple[list[str], str | None, int]:
        """(columns, the single integer primary key column or None, average row bytes) of a base
        table: what chunked checksums need to cut it into key ranges."""
        cols = [c for c, _t in self.table_columns(schema, table)]
        rows = self.server.query(
            "SELECT k.COLUMN_NAME AS c, c.DATA_TYPE AS t FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA=k.TABLE_SCHEMA AND c.TABLE_NAME=k.TABLE_NAME "
            "AND c.COLUMN_NAME=k.COLUMN_NAME "
            "WHERE k.CONSTRAINT_NAME='PRIMARY' AND k.TABLE_SCHEMA=%s AND k.TABLE_NAME=%s", (schema, table))
        key = str(rows[0]["c"]) if len(rows) == 1 and str(rows[0]["t"]) in (
            "tinyint", "smallint", "mediumint", "int", "bigint") else None
        avg = self.server.scalar("SELECT COALESCE(AVG_ROW_LENGTH, 0) AS n FROM information_schema.TABLES "
                                 "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (schema, table))
        return cols, key, int(avg or 0)

    def next_chunk_start(self, schema: str, table: str, key: str, after: int | None, rows: int) -> int | None:
        """The key `rows` rows past `after` (from the first row when None): where the next chunk
        starts; None past the last row. Reads only the primary key's index."""
        where = "" if after is None else f"WHERE `{key}` >= %s "
        got = self.server.scalar(f"SELECT `{key}` AS k FROM `{schema}`.`{table}` {where}ORDER BY `{key}` "
                                 f"LIMIT 1 OFFSET {int(rows) if after is not None else 0}",
                                 None if after is None else (int(after),))
        return None if got is None else int(got)

    def chunk_checksum(self, schema: str, table: str, columns: list[str], key: str | None,
                       lo: int | None, hi: int | None) -> str:
        """'rows:crc' of the rows of one key range [lo, hi) (lo/hi None: open; key None: the
        whole table). Every column is compared as bytes (mixed charsets, blobs), NULL apart
        from the empty string. The same query on both sides, so the result is comparable."""
        values = ", ".join(f"CAST(`{c}` AS BINARY)" for c in columns)
        nulls = ", ".join(f"ISNULL(`{c}`)" for c in columns)
        conds, args = [], []
        if key is not None and lo is not None:
            conds.append(f"`{key}` >= %s")
            args.append(int(lo))
        if key is not None and hi is not None:
            conds.append(f"`{key}` < %s")
            args.append(int(hi))
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        row = self.server.query(
            f"SELECT COUNT(*) AS n, COALESCE(BIT_XOR(CRC32(CONCAT_WS('#', {values}, CONCAT({nulls})))), 0) AS c "
            f"FROM `{schema}`.`{table}`{where}", tuple(args) or None)[0]
        return f"{int(row['n'])}:{int(row['c'])}"

    def binlog_coordinates(self) -> tuple[str, int]:
        """(binlog file, position) this server has written up to."""
        rows = self.server.query(self.flavor.binlog_coordinates_sql())
        if not rows:
            from dbmigrate.exceptions import DbmigrateError

            raise DbmigrateError(f"{self.server.name} has no binary log", hint="enable log_bin: a source needs it")
        return str(rows[0]["File"]), int(rows[0]["Position"])

    def connection_status(self, conn: str) -> dict[str, Any] | None:
        """Raw status row of one named replication connection, or None if it does not exist."""
        for r in self.server.query(self.flavor.all_connections_sql()):
            if (r.get("Connection_name") or r.get("Channel_Name") or "") == conn:
                return r
        return None

    def connection_running(self, conn: str) -> bool | None:
        """Whether named connection `conn` has both threads running (the IO one may still be
        connecting); None when it does not exist."""
        row = self.connection_status(conn)
        if row is None:
            return None
        st = self.flavor.parse_replica_status(row)
        return st.io_running in ("Yes", "Connecting") and st.sql_running == "Yes"

    def connection_names(self) -> list[str]:
        return [str(r.get("Connection_name") or r.get("Channel_Name") or "")
                for r in self.server.query(self.flavor.all_connections_sql())]

    def wait_for_position(self, conn: str, log_file: str, log_pos: int, timeout_s: float) -> bool:
        """Block until connection `conn` has applied the source's (file, pos); True when reached."""
        waiter = self.server
        old = waiter.read_timeout
        # The server's wait takes whole seconds: a fraction below one would become 0, which
        # waits without end. Shorter bounds poll instead (applied_through).
        timeout = max(1, math.ceil(timeout_s))
        waiter.read_timeout = max(old, timeout + 5)
        try:
            r = waiter.scalar(self.flavor.wait_for_position_sql(conn), (log_file, int(log_pos), timeout))
        finally:
            waiter.read_timeout = old
        return r is not None and int(r) >= 0

    def applied_through(self, conn: str, log_file: str, log_pos: int) -> bool:
        """Has connection `conn` applied its source's (file, pos)? One status read, no wait."""
        row = self.connection_status(conn)
        if row is None:
            return False
        f = row.get("Relay_Master_Log_File") or row.get("Relay_Source_Log_File") or ""
        p = row.get("Exec_Master_Log_Pos") or row.get("Exec_Source_Log_Pos") or 0
        return (str(f), int(p)) >= (log_file, int(log_pos))

    def version(self) -> str:
        return str(self.server.scalar("SELECT VERSION() AS v"))

    def datadir(self) -> str:
        return str(self.server.scalar("SELECT @@GLOBAL.datadir AS d"))

    def log_basenames(self) -> list[str]:
        """File names (no directory) the binary and relay logs start with; empty when unset."""
        row = self.server.query("SELECT @@GLOBAL.log_bin_basename AS b, @@GLOBAL.relay_log_basename AS r")[0]
        return [str(v).rstrip("/").rsplit("/", 1)[-1] for v in (row["b"], row["r"]) if v]

    def tables_in(self, schemas: list[str]) -> int:
        """How many base tables the given schemas hold (0 when none exists)."""
        if not schemas:
            return 0
        marks = ", ".join(["%s"] * len(schemas))
        return int(self.server.scalar(
            f"SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({marks}) "
            "AND TABLE_TYPE='BASE TABLE'", tuple(schemas)))

    def integer_key_tables(self, schemas: list[str]) -> list[tuple[str, str, str, int]]:
        """(schema, table, column, rows) of tables keyed by one integer column, biggest first."""
        if not schemas:
            return []
        marks = ", ".join(["%s"] * len(schemas))
        rows = self.server.query(
            "SELECT k.TABLE_SCHEMA AS s, k.TABLE_NAME AS t, MIN(k.COLUMN_NAME) AS c, MAX(t.TABLE_ROWS) AS n "
            "FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA=k.TABLE_SCHEMA AND c.TABLE_NAME=k.TABLE_NAME "
            "AND c.COLUMN_NAME=k.COLUMN_NAME "
            "JOIN information_schema.TABLES t ON t.TABLE_SCHEMA=k.TABLE_SCHEMA AND t.TABLE_NAME=k.TABLE_NAME "
            f"WHERE k.CONSTRAINT_NAME='PRIMARY' AND k.TABLE_SCHEMA IN ({marks}) "
            "AND c.DATA_TYPE IN ('tinyint','smallint','mediumint','int','bigint') "
            "GROUP BY k.TABLE_SCHEMA, k.TABLE_NAME HAVING COUNT(*)=1 ORDER BY n DESC, s, t", tuple(schemas))
        return [(str(r["s"]), str(r["t"]), str(r["c"]), int(r["n"] or 0)) for r in rows]

    def point_read(self, schema: str, table: str, column: str, key: int) -> None:
        """One indexed read, the latency probe's query: what an application's lookup costs right now."""
        self.server.query(f"SELECT * FROM `{schema}`.`{table}` WHERE `{column}` >= %s ORDER BY `{column}` LIMIT 1",
                          (int(key),))

    def reach_table(self, schema: str, table: str) -> None:
        """Can this session read the table (privileges, existence)? No row is read."""
        self.server.query(f"SELECT 1 AS one FROM `{schema}`.`{table}` LIMIT 0")

    def explain_error(self, statement: str, schema: str | None) -> tuple[int, str] | None:
        """EXPLAIN an application's statement (its default schema set first): the error the
        server gives for it (unknown index, column, table ...), or None. Nothing is executed;
        use a session of its own (Server.dedicated): the default schema stays set."""
        try:
            if schema:
                self.server.execute(f"USE `{schema.replace('`', '``')}`")
            self.server.query("EXPLAIN " + statement)
            return None
        except QueryError as e:
            return (e.errno or 0, e.message)

    def trivial_round_trip(self) -> None:
        self.server.scalar("SELECT 1 AS one")

    # -- used by the procedures
    def named_replica_status(self, conn: str) -> ReplicaStatus | None:
        """Status of one named replication connection (channel), flavor-neutral; None if absent."""
        row = self.connection_status(conn)
        return None if row is None else self.flavor.parse_replica_status(row)

    def account_exists(self, user: str, host: str) -> bool:
        return bool(self.server.scalar("SELECT COUNT(*) AS n FROM mysql.user WHERE User=%s AND Host=%s",
                                       (user, host)))

    def create_user_statement(self, user: str, host: str) -> str:
        """SHOW CREATE USER: the account as a statement another server can replay (it may carry a hash)."""
        return str(self.server.scalar("SHOW CREATE USER %s@%s", (user, host)))

    def slow_query_log_file(self) -> str:
        return str(self.server.scalar("SELECT @@GLOBAL.slow_query_log_file AS f"))
