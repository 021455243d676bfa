"""Every SQL difference between MariaDB and MySQL lives here, and only here.

MariaDB 10.11 is exercised against real servers by the test suite. The MySQL
side (8.0 up to 8.4 LTS) is written from the MySQL reference manual and covered
by unit tests of the generated SQL only. MySQL renamed its replication
statements across 8.0 and removed the old names in 8.4, so a MySQL flavor
knows its server's version and picks each statement by it:

- SHOW REPLICA STATUS, SHOW REPLICAS, START/STOP/RESET REPLICA: 8.0.22+
  (SHOW SLAVE STATUS, ... before; its columns say Master/Slave, not Source/Replica);
- CHANGE REPLICATION SOURCE TO with SOURCE_* options: 8.0.23+ (CHANGE MASTER TO before);
- SOURCE_POS_WAIT(): 8.0.26+ (MASTER_POS_WAIT() before);
- SHOW BINARY LOG STATUS: 8.2.0+ (SHOW MASTER STATUS before; gone in 8.4).

The rest needs 8.0 (information_schema.INNODB_TABLES) and is the same through
8.4: WAIT_FOR_EXECUTED_GTID_SET, super_read_only, performance_schema.global_status,
the MAX_EXECUTION_TIME hint, CHANGE REPLICATION FILTER ... FOR CHANNEL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dbmigrate.db import gtid


def sql_quote(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


# Fencing generations (db/generation.py): where each server keeps its own, and the named lock
# that orders a bump against a guarded statement in progress.
GENERATION_TABLE = "mysql.dbmigrate_generation"
GENERATION_LOCK = "dbmigrate_generation"
_GEN_READ = f"SELECT gen FROM {GENERATION_TABLE} WHERE id = 1"
_EVENT_DDL = re.compile(r"\b(CREATE|DROP)\b.*\bEVENT\b", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class ReplicaStatus:
    """Replica status with flavor-neutral names."""

    source_host: str
    source_port: int
    io_running: str  # Yes / No / Connecting
    sql_running: str
    seconds_behind: int | None
    last_io_error: str
    last_sql_error: str
    using_gtid: str
    channel: str = ""
    retrieved_gtid: str = ""
    executed_gtid: str = ""
    # Non-empty replication filters (Replicate_Do_DB, ...): name -> value as shown by the server.
    filters: dict[str, str] = field(default_factory=dict)
    sql_delay_s: int = 0  # a configured MASTER_DELAY / SOURCE_DELAY
    # Where in its source's binlog the SQL thread has applied up to (file, position).
    applied_source_file: str = ""
    applied_source_pos: int = 0

    @property
    def running(self) -> bool:
        return self.io_running == "Yes" and self.sql_running == "Yes"

    @property
    def last_error(self) -> str:
        return self.last_io_error or self.last_sql_error


# Filter columns of SHOW SLAVE STATUS / SHOW REPLICA STATUS. A filtered replica
# holds a subset of the data: promoting it silently loses the rest.
_COMMON_FILTERS = ("Replicate_Do_DB", "Replicate_Ignore_DB", "Replicate_Do_Table", "Replicate_Ignore_Table",
                   "Replicate_Wild_Do_Table", "Replicate_Wild_Ignore_Table")
MARIADB_FILTERS = _COMMON_FILTERS + ("Replicate_Do_Domain_Ids", "Replicate_Ignore_Domain_Ids")
MYSQL_FILTERS = _COMMON_FILTERS + ("Replicate_Rewrite_DB",)


def _conn(name: str) -> str:
    """A replication connection/channel name: letters, digits and _ only (it is also an identifier)."""
    if not name or not all(c.isalnum() or c == "_" for c in name) or len(name) > 64:
        raise ValueError(f"not a valid replication connection name: {name!r}")
    return name


def _filters(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, str]:
    return {n: str(row[n]) for n in names if row.get(n) not in (None, "")}


class Flavor:
    name = "abstract"

    # -- reads --
    def replica_status_sql(self) -> str: raise NotImplementedError
    def replica_hosts_sql(self) -> str: raise NotImplementedError
    def gtid_executed_sql(self) -> str: raise NotImplementedError
    def gtid_state_sql(self) -> str: raise NotImplementedError
    def parse_replica_status(self, row: dict[str, Any]) -> ReplicaStatus: raise NotImplementedError
    def read_only_privileges(self) -> set[str]: raise NotImplementedError
    def bypass_grantees_sql(self) -> str | None: raise NotImplementedError
    def role_edges_sql(self) -> str | None: raise NotImplementedError
    # Roles for a shape: rows (name, host) of every role; (user, host, role, role_host) of every
    # grant of a role (to a user, or to a role); (user, host, role, role_host) of default roles.
    def roles_sql(self) -> str: raise NotImplementedError
    def role_grants_sql(self) -> str: raise NotImplementedError
    def default_roles_sql(self) -> str: raise NotImplementedError
    def role_account(self, name: str, host: str) -> str: raise NotImplementedError
    def set_default_role_sql(self, role_account: str) -> str: raise NotImplementedError
    def global_status_sql(self, count: int) -> str: raise NotImplementedError
    # The status variables whose values give the redo written since the last checkpoint, and how.
    def checkpoint_age_status(self) -> tuple[str, ...]: raise NotImplementedError
    def innodb_tables_sql(self) -> str: raise NotImplementedError
    def with_statement_timeout(self, select: str, seconds: float) -> str: raise NotImplementedError
    statement_timeout_errnos: frozenset[int] = frozenset()

    # -- who holds what a fence waits for (LOCK TABLES ... WRITE, FLUSH TABLES WITH READ LOCK) --
    # Rows: id, user, command, time, mode, db, tbl; the session to leave out is the one %s.
    def lock_holders_sql(self) -> str: raise NotImplementedError
    def describe_lock(self, mode: str, db: str, table: str) -> str | None: raise NotImplementedError
    lock_holders_missing_errnos: frozenset[int] = frozenset()  # the lock table is not there
    lock_holders_source = ""  # where the answer comes from, for messages

    # A session waiting for disk space shows this state (the server retries the write by itself).
    disk_wait_states: tuple[str, ...] = ()

    # -- writes --
    def change_source_sql(self, host: str, port: int, user: str, password: str | None, *,
                          connect_retry: int = 1, ssl: bool = False) -> str: raise NotImplementedError
    def start_replica_sql(self) -> str: raise NotImplementedError
    def stop_replica_sql(self) -> str: raise NotImplementedError
    def restart_io_thread_sql(self) -> list[str]: raise NotImplementedError
    def reset_replica_all_sql(self) -> str: raise NotImplementedError
    def wait_for_gtid_sql(self) -> str: raise NotImplementedError
    def wait_for_gtid_reached(self, result: Any) -> bool: raise NotImplementedError
    def set_read_only_sql(self, on: bool, lock_wait_timeout: float | None = None) -> list[str]:
        raise NotImplementedError
    def prepare_as_replica_sql(self) -> list[str]: raise NotImplementedError
    def ddl_without_binlog_sql(self, statement: str) -> list[str]: raise NotImplementedError
    def replication_grants(self) -> str: raise NotImplementedError

    # -- the least privileges of the tool's accounts (docs/operations/privileges.md) --
    TOOL_PRIVILEGES: dict[str, tuple[tuple[str, tuple[str, ...], str], ...]] = {}

    def tool_privileges(self, account: str) -> tuple[tuple[str, tuple[str, ...], str], ...]:
        """(privilege, other privileges that also grant it, what needs it) for `admin` or `replication`."""
        return self.TOOL_PRIVILEGES[account]

    def missing_privileges(self, account: str, granted: set[str]) -> list[str]:
        """The global privileges `account` needs that `granted` (from SHOW GRANTS, on *.*) lacks."""
        have = {" ".join(g.replace("_", " ").split()).upper() for g in granted}
        if have & {"ALL", "ALL PRIVILEGES"}:
            return []
        return [name for name, also, _ in self.tool_privileges(account)
                if not {" ".join(x.replace("_", " ").split()).upper() for x in (name, *also)} & have]

    # -- the fence's expiry: a one-time EVENT that unfences the server unless cancelled --
    def fence_expiry_sql(self, seconds: float, generation: int | None = None) -> list[str]: raise NotImplementedError
    def cancel_fence_expiry_sql(self) -> list[str]: raise NotImplementedError

    # -- fencing generations (db/generation.py): a counter on each server, never binlogged ----
    def generation_bump_sql(self, run_id: str) -> list[str]: raise NotImplementedError
    def generation_read_sql(self) -> str: raise NotImplementedError
    def guarded_sql(self, generation: int, statements: list[str], lock_wait_s: int) -> list[str]: raise NotImplementedError
    def guard_columns_sql(self) -> str: raise NotImplementedError

    # -- this server's own transactions (errant-GTID checks around local changes) --
    def server_identity_sql(self) -> str: raise NotImplementedError
    def own_gtids(self, state: str, identity: str) -> list[str]: raise NotImplementedError

    # -- named replication connections (multi-source; file/position coordinates) --
    def named_source_sql(self, conn: str, host: str, port: int, user: str, password: str | None,
                         log_file: str, log_pos: int) -> str: raise NotImplementedError
    def named_filter_sql(self, conn: str, wild_do_tables: list[str]) -> str: raise NotImplementedError
    def named_source_gtid_sql(self, conn: str, host: str, port: int, user: str, password: str | None) -> str:
        raise NotImplementedError(f"{self.name}: a named connection from a GTID position is MariaDB's")
    def start_named_sql(self, conn: str) -> str: raise NotImplementedError
    def stop_named_sql(self, conn: str) -> str: raise NotImplementedError
    def reset_named_all_sql(self, conn: str) -> str: raise NotImplementedError
    def named_status_sql(self, conn: str) -> str: raise NotImplementedError
    def all_connections_sql(self) -> str: raise NotImplementedError
    def wait_for_position_sql(self, conn: str) -> str: raise NotImplementedError
    def binlog_coordinates_sql(self) -> str: raise NotImplementedError

    # -- slow log capture window --
    def slow_log_variables(self) -> tuple[str, ...]: raise NotImplementedError

    # -- ending client sessions --
    def kill_if_idle_sql(self, ids: list[int]) -> str | None:
        """One statement ending each of these sessions that is idle (Sleep) when the server runs
        it: the check and the KILL are microseconds apart, not a round trip. None: the flavor
        has no such statement (each session is then checked and ended in turn)."""
        return None
    def slow_log_window_settings(self, log_file: str, current: dict[str, Any]) -> dict[str, Any]: raise NotImplementedError

    def slow_log_table_window_settings(self, current: dict[str, Any]) -> dict[str, Any]:
        """The same window written to mysql.slow_log (hosts the tool cannot enter). Only TABLE:
        FILE would flood the server's own slow-log file, which nobody here can read or rotate.
        log_output is shared with the general log, which also goes to its table meanwhile."""
        settings = {n: v for n, v in self.slow_log_window_settings("", current).items() if n != "slow_query_log_file"}
        settings["log_output"] = "TABLE"
        return settings

    def clear_slow_log_table_sql(self) -> list[str]:
        """Empty mysql.slow_log on one session without writing it to the binary log."""
        raise NotImplementedError

    # -- server facts that exist in one flavor only --
    def gtid_binlog_pos_sql(self) -> str: raise NotImplementedError
    def read_only_and_binlog_pos_sql(self) -> str: raise NotImplementedError
    def strict_gtid_variables(self) -> tuple[str, ...]: raise NotImplementedError
    def gtid_mode_required(self) -> bool: raise NotImplementedError

    def for_version(self, version: str) -> "Flavor":
        """This flavor with the statement forms of that server version."""
        return self

    # -- GTID arithmetic --
    def behind(self, source_pos: str, replica_pos: str) -> dict[str, int]: raise NotImplementedError
    def written_by(self, gtid_text: str, server_id: int | str) -> bool: raise NotImplementedError
    def errant(self, candidate_state: str, source_state: str) -> list[str]: raise NotImplementedError
    def includes(self, pos: str, target: str) -> bool: raise NotImplementedError

    def received(self, st: ReplicaStatus, target: str) -> bool:
        """Has the replica's I/O thread received (or its SQL thread applied) all of `target`?"""
        return self.includes(st.retrieved_gtid, target) or self.includes(st.executed_gtid, target)


def _log_output_with_file(current: Any) -> str:
    """log_output that also writes to FILE, keeping TABLE if it was there (the general log shares it)."""
    kinds = [k.strip().upper() for k in str(current or "").split(",") if k.strip()]
    kinds = [k for k in kinds if k != "NONE"]
    if "FILE" not in kinds:
        kinds.append("FILE")
    return ",".join(kinds)


class MariaDB(Flavor):
    name = "mariadb"

    def replica_status_sql(self) -> str:
        return "SHOW SLAVE STATUS"

    def replica_hosts_sql(self) -> str:
        return "SHOW SLAVE HOSTS"

    def gtid_executed_sql(self) -> str:
        # gtid_current_pos is what this server has applied or written, per domain.
        return "SELECT @@GLOBAL.gtid_current_pos AS pos"

    def gtid_state_sql(self) -> str:
        return "SELECT @@GLOBAL.gtid_binlog_state AS pos"

    def parse_replica_status(self, row: dict[str, Any]) -> ReplicaStatus:
        sbm = row.get("Seconds_Behind_Master")
        return ReplicaStatus(
            source_host=row.get("Master_Host", ""), source_port=int(row.get("Master_Port") or 0),
            io_running=row.get("Slave_IO_Running", ""), sql_running=row.get("Slave_SQL_Running", ""),
            seconds_behind=None if sbm is None else int(sbm),
            last_io_error=row.get("Last_IO_Error", "") or "", last_sql_error=row.get("Last_SQL_Error", "") or "",
            using_gtid=row.get("Using_Gtid", ""), channel=row.get("Connection_name", "") or "",
            retrieved_gtid=row.get("Gtid_IO_Pos", "") or "", executed_gtid=row.get("Gtid_Slave_Pos", "") or "",
            filters=_filters(row, MARIADB_FILTERS), sql_delay_s=int(row.get("SQL_Delay") or 0),
            applied_source_file=row.get("Relay_Master_Log_File", "") or "",
            applied_source_pos=int(row.get("Exec_Master_Log_Pos") or 0),
        )

    def read_only_privileges(self) -> set[str]:
        # In MariaDB 10.11 READ ONLY ADMIN (and SUPER, which grants it) bypasses read_only.
        return {"SUPER", "READ ONLY ADMIN", "ALL PRIVILEGES"}

    def bypass_grantees_sql(self) -> str | None:
        # USER_PRIVILEGES lists ALL PRIVILEGES expanded, so READ_ONLY ADMIN shows up for it too.
        return ("SELECT GRANTEE AS grantee FROM information_schema.USER_PRIVILEGES "
                "WHERE PRIVILEGE_TYPE IN ('SUPER', 'READ_ONLY ADMIN', 'READ ONLY ADMIN')")

    def role_edges_sql(self) -> str | None:
        # One row per role granted to a user or to another role (Host '' for a role).
        return "SELECT User AS user, Host AS host, Role AS role FROM mysql.roles_mapping"

    # MariaDB: a role is a name alone (mysql.user with is_role='Y', an empty host); its grants
    # are in mysql.roles_mapping (Host '' when granted to another role); one default role per
    # account, in mysql.user.
    def roles_sql(self) -> str:
        return "SELECT User AS name, '' AS host FROM mysql.user WHERE is_role = 'Y' ORDER BY User"

    def role_grants_sql(self) -> str:
        return ("SELECT User AS user, Host AS host, Role AS role, '' AS role_host FROM mysql.roles_mapping "
                "ORDER BY User, Host, Role")

    def default_roles_sql(self) -> str:
        return ("SELECT User AS user, Host AS host, default_role AS role, '' AS role_host FROM mysql.user "
                "WHERE default_role <> '' AND is_role = 'N' ORDER BY User, Host")

    def role_account(self, name: str, host: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def set_default_role_sql(self, role_account: str) -> str:
        return f"SET DEFAULT ROLE {role_account} FOR %s@%s"

    def global_status_sql(self, count: int) -> str:
        return ("SELECT VARIABLE_NAME AS n, VARIABLE_VALUE AS v FROM information_schema.GLOBAL_STATUS "
                f"WHERE VARIABLE_NAME IN ({','.join(['%s'] * count)})")

    def checkpoint_age_status(self) -> tuple[str, ...]:
        return ("innodb_checkpoint_age",)  # bytes of redo since the last checkpoint, as one figure

    def innodb_tables_sql(self) -> str:
        # NAME is 'schema/table' in filename encoding; SPACE is what ib_buffer_pool lines name.
        return "SELECT NAME AS name, SPACE AS space FROM information_schema.INNODB_SYS_TABLES"

    def with_statement_timeout(self, select: str, seconds: float) -> str:
        return f"SET STATEMENT max_statement_time={max(0.001, seconds):.3f} FOR {select}"

    statement_timeout_errnos = frozenset({1969})  # ER_STATEMENT_TIMEOUT

    def lock_holders_sql(self) -> str:
        # Needs the metadata_lock_info plugin (plugin_load_add on every node); without it the
        # table is unknown (1109) and the caller falls back to what PROCESSLIST can tell.
        # GET_LOCK's user locks show as MDL_SHARED_NO_WRITE too (LOCK_TYPE 'User lock', the lock's
        # name as TABLE_SCHEMA, measured on 10.11): they block no write, so they are left out.
        return ("SELECT m.THREAD_ID AS id, p.USER AS user, p.COMMAND AS command, p.TIME AS time, "
                "m.LOCK_MODE AS mode, m.TABLE_SCHEMA AS db, m.TABLE_NAME AS tbl "
                "FROM information_schema.METADATA_LOCK_INFO m JOIN information_schema.PROCESSLIST p "
                "ON p.ID = m.THREAD_ID WHERE m.THREAD_ID NOT IN (%s, CONNECTION_ID()) "
                "AND m.LOCK_TYPE <> 'User lock' AND (m.LOCK_MODE IN "
                "('MDL_SHARED_NO_READ_WRITE', 'MDL_SHARED_NO_WRITE', 'MDL_EXCLUSIVE') "
                "OR m.LOCK_MODE LIKE 'MDL_BACKUP_FTWRL%%') ORDER BY m.THREAD_ID")

    def describe_lock(self, mode: str, db: str, table: str) -> str | None:
        where = f"{db}.{table}" if table else ""
        if mode.startswith("MDL_BACKUP_FTWRL"):
            return "FLUSH TABLES WITH READ LOCK"
        return {"MDL_SHARED_NO_READ_WRITE": f"LOCK TABLES {where} WRITE",
                "MDL_SHARED_NO_WRITE": f"a write-blocking lock on {where} (LOCK TABLES or a copying ALTER)",
                "MDL_EXCLUSIVE": f"an exclusive lock on {where} (DDL)"}.get(mode)

    lock_holders_missing_errnos = frozenset({1109})  # ER_UNKNOWN_TABLE: the plugin is not loaded
    lock_holders_source = "information_schema.METADATA_LOCK_INFO"
    disk_wait_states = ("Waiting for someone to free space",)  # measured on 10.11, binlog on a full disk

    def change_source_sql(self, host: str, port: int, user: str, password: str | None, *, connect_retry: int=1, ssl: bool=False) -> str:
        parts = [f"MASTER_HOST={sql_quote(host)}", f"MASTER_PORT={int(port)}", f"MASTER_USER={sql_quote(user)}"]
        if password is not None:
            parts.append(f"MASTER_PASSWORD={sql_quote(password)}")
        parts += ["MASTER_USE_GTID=slave_pos", f"MASTER_CONNECT_RETRY={int(connect_retry)}"]
        if ssl:
            parts.append("MASTER_SSL=1")
        return "CHANGE MASTER TO " + ", ".join(parts)

    def start_replica_sql(self) -> str:
        return "START SLAVE"

    def stop_replica_sql(self) -> str:
        return "STOP SLAVE"

    def restart_io_thread_sql(self) -> list[str]:
        return ["STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD"]

    def reset_replica_all_sql(self) -> str:
        return "RESET SLAVE ALL"

    def wait_for_gtid_sql(self) -> str:
        # Returns 0 when reached, -1 on timeout.
        return "SELECT MASTER_GTID_WAIT(%s, %s) AS r"

    def wait_for_gtid_reached(self, result: Any) -> bool:
        return result is not None and int(result) == 0

    def set_read_only_sql(self, on: bool, lock_wait_timeout: float | None = None) -> list[str]:
        sql = f"SET GLOBAL read_only={'ON' if on else 'OFF'}"
        if lock_wait_timeout is not None:
            return [f"SET STATEMENT lock_wait_timeout={max(1, int(lock_wait_timeout))} FOR {sql}"]
        return [sql]

    def prepare_as_replica_sql(self) -> list[str]:
        # A former primary has an empty gtid_slave_pos: start from what it wrote itself.
        return ["SET GLOBAL gtid_slave_pos=@@GLOBAL.gtid_binlog_pos"]

    # The body is spelled unlike the tool's own unfence (`SET GLOBAL read_only=OFF`), so that
    # whoever watches statements (the journal, a fault harness) never takes the fence for it.
    # The event lives in the `mysql` schema (always there), is neither binlogged nor replicated
    # (sql_log_bin=0), and is PRESERVEd once it has fired: a NOT PRESERVE event drops itself
    # with a binlogged DROP EVENT, which stops every replica (the event exists only here).
    # read_only does not stop the tool's account (READ ONLY ADMIN), so the cancel works fenced.
    FENCE_EXPIRY_EVENT = "mysql.dbmigrate_fence_expiry"

    def fence_expiry_sql(self, seconds: float, generation: int | None = None) -> list[str]:
        # With a generation the body unfences only while the server's generation is still the one
        # the fence carried and the server does not replicate: an expiry set under an older
        # decision (or re-armed by a fence request that landed late) can never open a server that
        # a later decision made a replica, or fenced again.
        body = "SET @@GLOBAL.read_only=0"
        if generation is not None:
            body = (f"BEGIN IF GET_LOCK('{GENERATION_LOCK}', 10) = 1 THEN "
                    f"IF ({_GEN_READ}) = {int(generation)} AND (SELECT VARIABLE_VALUE FROM "
                    f"information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVES_RUNNING') = 0 THEN "
                    f"{body}; END IF; DO RELEASE_LOCK('{GENERATION_LOCK}'); END IF; END")
        return [f"SET STATEMENT sql_log_bin=0 FOR CREATE OR REPLACE EVENT {self.FENCE_EXPIRY_EVENT} ON SCHEDULE "
                f"AT CURRENT_TIMESTAMP + INTERVAL {max(1, int(round(seconds)))} SECOND ON COMPLETION PRESERVE "
                f"DO {body}"]

    # The generation lives in the `mysql` schema (always there, like the expiry event) and is
    # written with sql_log_bin=0: each server holds its own, nothing replicates. A bump waits
    # for a guarded statement in progress (the named lock), so that once it returns, every
    # statement sent under an older generation has either run (and is seen by what is read
    # next) or will do nothing. Measured on 10.11: an anonymous compound statement runs as one
    # request from the driver; CREATE EVENT inside one needs EXECUTE IMMEDIATE (error 1576).
    def generation_bump_sql(self, run_id: str) -> list[str]:
        return [f"SET STATEMENT sql_log_bin=0 FOR CREATE TABLE IF NOT EXISTS {GENERATION_TABLE} "
                f"(id TINYINT UNSIGNED PRIMARY KEY, gen BIGINT UNSIGNED NOT NULL, run_id VARCHAR(64) NOT NULL, "
                f"at DATETIME(6) NOT NULL) ENGINE=InnoDB",
                f"BEGIN NOT ATOMIC DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN DO RELEASE_LOCK('{GENERATION_LOCK}'); "
                f"RESIGNAL; END; IF GET_LOCK('{GENERATION_LOCK}', 60) = 1 THEN "
                f"SET STATEMENT sql_log_bin=0 FOR INSERT INTO {GENERATION_TABLE} (id, gen, run_id, at) VALUES "
                f"(1, 1, {sql_quote(run_id)}, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE gen = gen + 1, "
                f"run_id = VALUES(run_id), at = VALUES(at); DO RELEASE_LOCK('{GENERATION_LOCK}'); "
                f"ELSE SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the generation lock stayed held for 60s'; "
                f"END IF; END"]

    def generation_read_sql(self) -> str:
        return f"SELECT ({_GEN_READ}) AS gen"

    def guarded_sql(self, generation: int, statements: list[str], lock_wait_s: int) -> list[str]:
        # Each statement keeps the tool's tag (who watches the wire still recognises it); event
        # DDL runs through EXECUTE IMMEDIATE, the one way a compound statement may hold it.
        body = " ".join(f"EXECUTE IMMEDIATE {sql_quote(sql)};" if _EVENT_DDL.search(sql) else f"/* dbmigrate */ {sql};"
                        for sql in statements)
        return [f"BEGIN NOT ATOMIC DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN DO RELEASE_LOCK('{GENERATION_LOCK}'); "
                f"RESIGNAL; END; SET @dbmigrate_ran = 0; "
                f"IF GET_LOCK('{GENERATION_LOCK}', {max(1, int(lock_wait_s))}) = 1 THEN "
                f"IF ({_GEN_READ}) = {int(generation)} THEN {body} SET @dbmigrate_ran = 1; END IF; "
                f"DO RELEASE_LOCK('{GENERATION_LOCK}'); END IF; END"]

    def guard_columns_sql(self) -> str:
        return f"@dbmigrate_ran AS dbmigrate_ran, ({_GEN_READ}) AS dbmigrate_gen"

    def cancel_fence_expiry_sql(self) -> list[str]:
        return [f"SET STATEMENT sql_log_bin=0 FOR DROP EVENT IF EXISTS {self.FENCE_EXPIRY_EVENT}"]

    def ddl_without_binlog_sql(self, statement: str) -> list[str]:
        # One statement: the setting cannot outlive it, even if the connection is
        # replaced between two statements (measured on 10.11: the session keeps sql_log_bin=1).
        return [f"SET STATEMENT sql_log_bin=0 FOR {statement}"]

    def server_identity_sql(self) -> str:
        return "SELECT @@GLOBAL.server_id AS id"

    def own_gtids(self, state: str, identity: str) -> list[str]:
        # A binlog state keeps one entry per (domain, server_id): ours are the ones with our server_id.
        return [str(g) for g in gtid.parse_mariadb(state) if str(g.server_id) == str(identity)]

    # Everything that decides what reaches the slow log. Order matters on restore:
    # long_query_time first (stops the flood), the file last.
    _SLOW_LOG_EVERYTHING = ("admin,filesort,filesort_on_disk,filesort_priority_queue,full_join,full_scan,"
                            "query_cache,query_cache_miss,tmp_table,tmp_table_on_disk")

    def slow_log_variables(self) -> tuple[str, ...]:
        return ("long_query_time", "slow_query_log", "log_slow_rate_limit", "log_slow_filter",
                "log_slow_verbosity", "min_examined_row_limit", "log_output", "slow_query_log_file")

    def clear_slow_log_table_sql(self) -> list[str]:
        return ["SET STATEMENT sql_log_bin=0 FOR TRUNCATE TABLE mysql.slow_log"]

    def slow_log_window_settings(self, log_file: str, current: dict[str, Any]) -> dict[str, Any]:
        # Applied in this order: point at our file and log every statement type,
        # then switch logging on, and long_query_time=0 last.
        return {
            "slow_query_log_file": log_file,
            "log_output": _log_output_with_file(current.get("log_output")),
            "log_slow_rate_limit": 1,             # >1 samples sessions: we need them all
            "log_slow_filter": self._SLOW_LOG_EVERYTHING,  # the default: no statement type filtered out
            "log_slow_verbosity": "",             # query plans/EXPLAIN per statement would be costly at long_query_time=0
            "min_examined_row_limit": 0,
            "slow_query_log": 1,
            "long_query_time": 0,
        }

    def behind(self, source_pos: str, replica_pos: str) -> dict[str, int]:
        return {str(d): n for d, n in gtid.mariadb_behind(source_pos, replica_pos).items()}

    def errant(self, candidate_state: str, source_state: str) -> list[str]:
        return [str(g) for g in gtid.mariadb_errant(candidate_state, source_state)]

    def includes(self, pos: str, target: str) -> bool:
        return gtid.mariadb_includes(pos, target)

    # -- named connections: CHANGE MASTER 'name', one per source (multi-source replication) --
    def named_source_sql(self, conn: str, host: str, port: int, user: str, password: str | None, log_file: str, log_pos: int) -> str:
        parts = [f"MASTER_HOST={sql_quote(host)}", f"MASTER_PORT={int(port)}", f"MASTER_USER={sql_quote(user)}"]
        if password is not None:
            parts.append(f"MASTER_PASSWORD={sql_quote(password)}")
        parts += ["MASTER_USE_GTID=no", f"MASTER_LOG_FILE={sql_quote(log_file)}", f"MASTER_LOG_POS={int(log_pos)}",
                  "MASTER_CONNECT_RETRY=1"]
        return f"CHANGE MASTER {sql_quote(_conn(conn))} TO " + ", ".join(parts)

    def named_source_gtid_sql(self, conn: str, host: str, port: int, user: str, password: str | None) -> str:
        # Starts from @@gtid_slave_pos, which the caller sets first (a physical copy's position).
        parts = [f"MASTER_HOST={sql_quote(host)}", f"MASTER_PORT={int(port)}", f"MASTER_USER={sql_quote(user)}"]
        if password is not None:
            parts.append(f"MASTER_PASSWORD={sql_quote(password)}")
        parts += ["MASTER_USE_GTID=slave_pos", "MASTER_CONNECT_RETRY=1"]
        return f"CHANGE MASTER {sql_quote(_conn(conn))} TO " + ", ".join(parts)

    def named_filter_sql(self, conn: str, wild_do_tables: list[str]) -> str:
        # Per-connection filter; the connection must exist and be stopped.
        return f"SET GLOBAL `{_conn(conn)}`.replicate_wild_do_table={sql_quote(','.join(wild_do_tables))}"

    def start_named_sql(self, conn: str) -> str:
        return f"START SLAVE {sql_quote(_conn(conn))}"

    def stop_named_sql(self, conn: str) -> str:
        return f"STOP SLAVE {sql_quote(_conn(conn))}"

    def kill_if_idle_sql(self, ids: list[int]) -> str | None:
        # An anonymous compound statement runs as one request (MariaDB 10.1+); KILL takes the
        # cursor's value. Measured on 10.11: a Sleep session ended, a busy one beside it left.
        listed = ",".join(str(int(i)) for i in ids)
        # 1094: the session left by itself between the check and the KILL.
        return ("BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR 1094 BEGIN END; "
                f"FOR s IN (SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN ({listed}) "
                "AND COMMAND = 'Sleep') DO KILL CONNECTION s.ID; END FOR; END")

    def reset_named_all_sql(self, conn: str) -> str:
        return f"RESET SLAVE {sql_quote(_conn(conn))} ALL"

    def named_status_sql(self, conn: str) -> str:
        return f"SHOW SLAVE {sql_quote(_conn(conn))} STATUS"

    def all_connections_sql(self) -> str:
        return "SHOW ALL SLAVES STATUS"

    def wait_for_position_sql(self, conn: str) -> str:
        # (file, pos, timeout): >= 0 reached, -1 timed out, NULL not running
        return f"SELECT MASTER_POS_WAIT(%s, %s, %s, {sql_quote(_conn(conn))}) AS r"

    def binlog_coordinates_sql(self) -> str:
        return "SHOW MASTER STATUS"

    def gtid_binlog_pos_sql(self) -> str:
        return "SELECT @@GLOBAL.gtid_binlog_pos AS pos"

    def read_only_and_binlog_pos_sql(self) -> str:
        return "SELECT @@GLOBAL.read_only AS ro, @@GLOBAL.gtid_binlog_pos AS pos"

    # Measured on 10.11 (each statement the tool sends, tried by an account without the privilege):
    # SUPER no longer covers READ_ONLY ADMIN; it still covers the others it is listed beside.
    TOOL_PRIVILEGES = {
        "admin": (
            ("SELECT", (), "read mysql.user, SHOW GRANTS of other accounts, information_schema"),
            ("PROCESS", (), "every session (drain, long transactions), information_schema.INNODB_TRX"),
            ("READ_ONLY ADMIN", (), "SET GLOBAL read_only (the fence and the open), DDL on read-only replicas"),
            ("SUPER", (), "SET GLOBAL of the slow log, event_scheduler and the buffer pool dump/load"),
            ("CONNECTION ADMIN", ("SUPER",), "KILL the application's sessions"),
            ("REPLICATION SLAVE ADMIN", ("SUPER",), "STOP/START SLAVE, CHANGE MASTER, gtid_slave_pos"),
            ("SLAVE MONITOR", ("REPLICA MONITOR", "SUPER"), "SHOW SLAVE STATUS"),
            ("BINLOG MONITOR", ("SUPER",), "SHOW MASTER STATUS, the binlog position"),
            ("REPLICATION MASTER ADMIN", (), "SHOW SLAVE HOSTS (topology discovery)"),
            ("BINLOG ADMIN", ("SUPER",), "sql_log_bin=0 for DDL that must not replicate (schema swap, grants)"),
            ("CREATE", (), "heartbeat, lease and scratch schemas; the fencing generation table; CREATE TABLE and CREATE INDEX of a schema swap"),
            ("DROP", (), "the scratch schema of the DDL check; DROP INDEX of a schema swap"),
            ("ALTER", (), "ALTER TABLE of a schema swap"),
            ("INDEX", (), "CREATE INDEX and DROP INDEX of a schema swap"),
            ("INSERT", (), "heartbeat and cluster lease rows, the fencing generation"),
            ("UPDATE", (), "heartbeat and cluster lease rows, the fencing generation"),
            ("DELETE", (), "heartbeat and cluster lease rows"),
            ("EVENT", (), "the fence's server-side expiry"),
            ("RELOAD", (), "mariadb-backup and pt-table-checksum (per their manuals)"),
            ("LOCK TABLES", (), "mariadb-backup (per its manual)"),
            ("REPLICATION SLAVE", ("REPLICATION REPLICA",), "read a binlog: the post-fence audit, errant transactions "
                                                            "in check"),
        ),
        "replication": (
            ("REPLICATION SLAVE", ("REPLICATION REPLICA",), "replicas read the binlog (the login check only logs in)"),
        ),
    }

    def replication_grants(self) -> str:
        # 10.5+ split REPLICATION CLIENT: SLAVE MONITOR shows replica status, BINLOG MONITOR the binlogs.
        return "REPLICATION SLAVE, SLAVE MONITOR, BINLOG MONITOR ON *.*"

    def strict_gtid_variables(self) -> tuple[str, ...]:
        return ("gtid_strict_mode",)

    def gtid_mode_required(self) -> bool:
        return False  # MariaDB always writes GTIDs

    def written_by(self, gtid_text: str, server_id: int | str) -> bool:
        # domain-server_id-sequence: the middle part names the server that wrote it.
        parts = str(gtid_text).split("-")
        return len(parts) == 3 and parts[1] == str(server_id)


def _version_tuple(version: str) -> tuple[int, int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


# SHOW SLAVE STATUS (before 8.0.22) names in the SHOW REPLICA STATUS vocabulary.
_OLD_STATUS_WORDS = (("Seconds_Behind_Master", "Seconds_Behind_Source"), ("Master_", "Source_"),
                     ("Slave_", "Replica_"))


def _replica_vocabulary(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for name, value in row.items():
        for old, new in _OLD_STATUS_WORDS:
            if old in name:
                out.setdefault(name.replace(old, new), value)
                break
    return out


class MySQL(Flavor):
    """MySQL 8.0 to 8.4. Statements renamed during 8.0 are picked by the server's
    version; without one, the current forms (8.4 LTS) are used."""

    name = "mysql"
    REPLICA_WORDS = (8, 0, 22)      # SHOW REPLICA STATUS, SHOW REPLICAS, START/STOP/RESET REPLICA
    SOURCE_OPTIONS = (8, 0, 23)     # CHANGE REPLICATION SOURCE TO ... SOURCE_*
    SOURCE_POS_WAIT = (8, 0, 26)
    BINARY_LOG_STATUS = (8, 2, 0)   # SHOW BINARY LOG STATUS; SHOW MASTER STATUS is gone in 8.4
    CURRENT = (8, 4, 0)

    def __init__(self, version: tuple[int, int, int] = CURRENT):
        self.version = version

    def __repr__(self) -> str:
        return f"MySQL({'.'.join(map(str, self.version))})"

    def for_version(self, version: str) -> "MySQL":
        parsed = _version_tuple(version)
        if parsed is None or parsed == self.version:
            return self
        return _mysql_at(parsed)

    def _since(self, version: tuple[int, int, int]) -> bool:
        return self.version >= version

    @property
    def _replica(self) -> str:
        return "REPLICA" if self._since(self.REPLICA_WORDS) else "SLAVE"

    @property
    def _source(self) -> str:
        """Option prefix of CHANGE ... TO (SOURCE_HOST or MASTER_HOST)."""
        return "SOURCE" if self._since(self.SOURCE_OPTIONS) else "MASTER"

    def _change_source_head(self) -> str:
        return "CHANGE REPLICATION SOURCE TO " if self._since(self.SOURCE_OPTIONS) else "CHANGE MASTER TO "

    def replica_status_sql(self) -> str:
        return f"SHOW {self._replica} STATUS"

    def replica_hosts_sql(self) -> str:
        return "SHOW REPLICAS" if self._since(self.REPLICA_WORDS) else "SHOW SLAVE HOSTS"

    def gtid_executed_sql(self) -> str:
        return "SELECT @@GLOBAL.gtid_executed AS pos"

    def gtid_state_sql(self) -> str:
        return "SELECT @@GLOBAL.gtid_executed AS pos"

    def parse_replica_status(self, row: dict[str, Any]) -> ReplicaStatus:
        row = _replica_vocabulary(row)
        sbs = row.get("Seconds_Behind_Source")
        return ReplicaStatus(
            source_host=row.get("Source_Host", ""), source_port=int(row.get("Source_Port") or 0),
            io_running=row.get("Replica_IO_Running", ""), sql_running=row.get("Replica_SQL_Running", ""),
            seconds_behind=None if sbs is None else int(sbs),
            last_io_error=row.get("Last_IO_Error", "") or "", last_sql_error=row.get("Last_SQL_Error", "") or "",
            using_gtid="Auto_Position" if str(row.get("Auto_Position")) == "1" else "No",
            channel=row.get("Channel_Name", "") or "",
            retrieved_gtid=row.get("Retrieved_Gtid_Set", "") or "", executed_gtid=row.get("Executed_Gtid_Set", "") or "",
            filters=_filters(row, MYSQL_FILTERS), sql_delay_s=int(row.get("SQL_Delay") or 0),
            applied_source_file=row.get("Relay_Source_Log_File", "") or "",
            applied_source_pos=int(row.get("Exec_Source_Log_Pos") or 0),
        )

    def read_only_privileges(self) -> set[str]:
        # super_read_only blocks even these, which is why set_read_only uses it.
        return {"SUPER", "CONNECTION_ADMIN", "ALL PRIVILEGES"}

    def bypass_grantees_sql(self) -> str | None:
        return None  # the fence sets super_read_only, which no account bypasses

    def role_edges_sql(self) -> str | None:
        return None

    # MySQL 8 (from its manual; not run here): a role is an account (name@host, locked, host '%'
    # unless named); mysql.role_edges holds each grant of a role (FROM = the role, TO = who
    # holds it), mysql.default_roles the roles an account's sessions start with (several).
    def roles_sql(self) -> str:
        return "SELECT DISTINCT FROM_USER AS name, FROM_HOST AS host FROM mysql.role_edges ORDER BY 1, 2"

    def role_grants_sql(self) -> str:
        return ("SELECT TO_USER AS user, TO_HOST AS host, FROM_USER AS role, FROM_HOST AS role_host "
                "FROM mysql.role_edges ORDER BY 1, 2, 3")

    def default_roles_sql(self) -> str:
        return ("SELECT USER AS user, HOST AS host, DEFAULT_ROLE_USER AS role, DEFAULT_ROLE_HOST AS role_host "
                "FROM mysql.default_roles ORDER BY 1, 2, 3")

    def role_account(self, name: str, host: str) -> str:
        return "`" + name.replace("`", "``") + "`@`" + (host or "%").replace("`", "``") + "`"

    def set_default_role_sql(self, role_account: str) -> str:
        return f"SET DEFAULT ROLE {role_account} TO %s@%s"

    def global_status_sql(self, count: int) -> str:
        # information_schema.GLOBAL_STATUS is gone in 8.0; performance_schema has it.
        return ("SELECT VARIABLE_NAME AS n, VARIABLE_VALUE AS v FROM performance_schema.global_status "
                f"WHERE VARIABLE_NAME IN ({','.join(['%s'] * count)})")

    def checkpoint_age_status(self) -> tuple[str, ...]:
        # 8.0.30+ (manual, "InnoDB redo log"): the age is current LSN minus checkpoint LSN. Not run here.
        return ("innodb_redo_log_current_lsn", "innodb_redo_log_checkpoint_lsn")

    def innodb_tables_sql(self) -> str:
        return "SELECT NAME AS name, SPACE AS space FROM information_schema.INNODB_TABLES"

    def with_statement_timeout(self, select: str, seconds: float) -> str:
        # The optimizer hint must follow the SELECT keyword; it applies to read-only SELECTs only.
        ms = max(1, int(seconds * 1000))
        head, rest = select.lstrip()[:6], select.lstrip()[6:]
        return f"{head} /*+ MAX_EXECUTION_TIME({ms}) */{rest}"

    statement_timeout_errnos = frozenset({3024})  # ER_QUERY_TIMEOUT

    def lock_holders_sql(self) -> str:
        # performance_schema.metadata_locks (instrumented by default in 8.0): table locks by
        # LOCK TABLES or DDL, and the global read lock and commit lock that FTWRL holds.
        return ("SELECT t.PROCESSLIST_ID AS id, t.PROCESSLIST_USER AS user, t.PROCESSLIST_COMMAND AS command, "
                "t.PROCESSLIST_TIME AS time, CONCAT(m.OBJECT_TYPE, ':', m.LOCK_TYPE) AS mode, "
                "m.OBJECT_SCHEMA AS db, m.OBJECT_NAME AS tbl FROM performance_schema.metadata_locks m "
                "JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID "
                "WHERE m.LOCK_STATUS = 'GRANTED' AND t.PROCESSLIST_ID NOT IN (%s, CONNECTION_ID()) AND "
                "((m.OBJECT_TYPE = 'TABLE' AND m.LOCK_TYPE IN ('SHARED_NO_READ_WRITE', 'SHARED_NO_WRITE', "
                "'EXCLUSIVE')) OR (m.OBJECT_TYPE = 'GLOBAL' AND m.LOCK_TYPE = 'SHARED')) ORDER BY id")

    def describe_lock(self, mode: str, db: str, table: str) -> str | None:
        where = f"{db}.{table}" if table else ""
        return {"GLOBAL:SHARED": "FLUSH TABLES WITH READ LOCK",
                "TABLE:SHARED_NO_READ_WRITE": f"LOCK TABLES {where} WRITE",
                "TABLE:SHARED_NO_WRITE": f"a write-blocking lock on {where} (LOCK TABLES or a copying ALTER)",
                "TABLE:EXCLUSIVE": f"an exclusive lock on {where} (DDL)"}.get(mode)

    lock_holders_missing_errnos = frozenset({1146, 1142})  # performance_schema off, or no right to read it
    lock_holders_source = "performance_schema.metadata_locks"
    disk_wait_states = ("Waiting for disk space",)

    def _source_parts(self, host: str, port: int, user: str, password: str | None) -> list[str]:
        x = self._source
        parts = [f"{x}_HOST={sql_quote(host)}", f"{x}_PORT={int(port)}", f"{x}_USER={sql_quote(user)}"]
        if password is not None:
            parts.append(f"{x}_PASSWORD={sql_quote(password)}")
        return parts

    def change_source_sql(self, host: str, port: int, user: str, password: str | None, *, connect_retry: int=1, ssl: bool=False) -> str:
        x = self._source
        parts = self._source_parts(host, port, user, password)
        parts += [f"{x}_AUTO_POSITION=1", f"{x}_CONNECT_RETRY={int(connect_retry)}", f"GET_{x}_PUBLIC_KEY=1"]
        if ssl:
            parts.append(f"{x}_SSL=1")
        return self._change_source_head() + ", ".join(parts)

    def start_replica_sql(self) -> str:
        return f"START {self._replica}"

    def stop_replica_sql(self) -> str:
        return f"STOP {self._replica}"

    def restart_io_thread_sql(self) -> list[str]:
        return [f"STOP {self._replica} IO_THREAD", f"START {self._replica} IO_THREAD"]

    def reset_replica_all_sql(self) -> str:
        return f"RESET {self._replica} ALL"

    def wait_for_gtid_sql(self) -> str:
        # Returns 0 when reached, 1 on timeout.
        return "SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s) AS r"

    def wait_for_gtid_reached(self, result: Any) -> bool:
        return result is not None and int(result) == 0

    def set_read_only_sql(self, on: bool, lock_wait_timeout: float | None = None) -> list[str]:
        # super_read_only=ON implies read_only=ON; turning off needs both, in this order.
        if on:
            bound = [f"SET SESSION lock_wait_timeout={max(1, int(lock_wait_timeout))}"] if lock_wait_timeout else []
            return [*bound, "SET GLOBAL super_read_only=ON"]
        return ["SET GLOBAL super_read_only=OFF", "SET GLOBAL read_only=OFF"]

    def prepare_as_replica_sql(self) -> list[str]:
        return []  # auto-position needs no seeding

    # Written from the MySQL 8.0/8.4 manual, not run here (no MySQL server on these machines).
    # Events may not live in the `mysql` schema on 8.x: the tool's own schema, created unlogged.
    # super_read_only refuses DDL from every account, so the cancel lifts it for its DROP EVENT
    # and puts back what was there (read_only stays ON throughout: no application write).
    FENCE_EXPIRY_EVENT = "dbmigrate.fence_expiry"

    def fence_expiry_sql(self, seconds: float, generation: int | None = None) -> list[str]:
        body = "SET @@GLOBAL.read_only=0"
        if generation is not None:  # as MariaDB's: only under the same generation, never on a replica
            body = (f"BEGIN IF GET_LOCK('{GENERATION_LOCK}', 10) = 1 THEN IF (SELECT gen FROM "
                    f"{self.GENERATION_TABLE} WHERE id = 1) = {int(generation)} AND (SELECT COUNT(*) FROM "
                    f"performance_schema.replication_applier_status WHERE SERVICE_STATE = 'ON') = 0 THEN {body}; "
                    f"END IF; DO RELEASE_LOCK('{GENERATION_LOCK}'); END IF; END")
        return ["SET SESSION sql_log_bin=0", "CREATE DATABASE IF NOT EXISTS dbmigrate",
                f"DROP EVENT IF EXISTS {self.FENCE_EXPIRY_EVENT}",
                f"CREATE EVENT {self.FENCE_EXPIRY_EVENT} ON SCHEDULE AT CURRENT_TIMESTAMP + INTERVAL "
                f"{max(1, int(round(seconds)))} SECOND ON COMPLETION PRESERVE DO {body}",
                "SET SESSION sql_log_bin=1"]

    # Fencing generations, written from the MySQL 8.0/8.4 manual and not run here. MySQL has no
    # anonymous compound statement: a stored procedure, created once (unlogged) with the table,
    # takes the generation and one statement, and runs it (PREPARE/EXECUTE) under the same named
    # lock and check as MariaDB's compound. Statements PREPARE refuses (event DDL) are sent as
    # they are: the expiry's body checks the generation itself. super_read_only refuses every
    # write, so the bump lifts it for its own and puts back what was there (read_only stays ON).
    GENERATION_TABLE = "dbmigrate.generation"
    GUARD_PROCEDURE = "dbmigrate.guarded"

    def generation_bump_sql(self, run_id: str) -> list[str]:
        lock = f"'{GENERATION_LOCK}'"
        return ["SET @dbmigrate_sro=@@GLOBAL.super_read_only", "SET SESSION sql_log_bin=0",
                "SET GLOBAL super_read_only=OFF", "CREATE DATABASE IF NOT EXISTS dbmigrate",
                f"CREATE TABLE IF NOT EXISTS {self.GENERATION_TABLE} (id TINYINT UNSIGNED PRIMARY KEY, "
                f"gen BIGINT UNSIGNED NOT NULL, run_id VARCHAR(64) NOT NULL, at DATETIME(6) NOT NULL) ENGINE=InnoDB",
                f"CREATE PROCEDURE IF NOT EXISTS {self.GUARD_PROCEDURE}(IN expected BIGINT UNSIGNED, IN stmt TEXT, "
                f"IN lock_wait INT) SQL SECURITY INVOKER BEGIN DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN "
                f"DO RELEASE_LOCK({lock}); RESIGNAL; END; SET @dbmigrate_ran = 0; IF GET_LOCK({lock}, lock_wait) = 1 "
                f"THEN IF (SELECT gen FROM {self.GENERATION_TABLE} WHERE id = 1) = expected THEN "
                f"SET @dbmigrate_stmt = stmt; PREPARE dbmigrate_guarded FROM @dbmigrate_stmt; "
                f"EXECUTE dbmigrate_guarded; DEALLOCATE PREPARE dbmigrate_guarded; SET @dbmigrate_ran = 1; END IF; "
                f"DO RELEASE_LOCK({lock}); END IF; END",
                f"DO GET_LOCK({lock}, 60)",
                f"INSERT INTO {self.GENERATION_TABLE} (id, gen, run_id, at) VALUES (1, 1, {sql_quote(run_id)}, "
                f"UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE gen = gen + 1, run_id = VALUES(run_id), at = VALUES(at)",
                f"DO RELEASE_LOCK({lock})",
                "SET GLOBAL super_read_only=@dbmigrate_sro", "SET SESSION sql_log_bin=1"]

    def generation_read_sql(self) -> str:
        return f"SELECT (SELECT gen FROM {self.GENERATION_TABLE} WHERE id = 1) AS gen"

    def guarded_sql(self, generation: int, statements: list[str], lock_wait_s: int) -> list[str]:
        return [sql if re.search(r"\b(CREATE|DROP)\b.*\bEVENT\b", sql, re.I | re.S) or sql.upper().startswith("SET SESSION")
                else f"CALL {self.GUARD_PROCEDURE}({int(generation)}, {sql_quote(sql)}, {max(1, int(lock_wait_s))})"
                for sql in statements]

    def guard_columns_sql(self) -> str:
        return f"@dbmigrate_ran AS dbmigrate_ran, (SELECT gen FROM {self.GENERATION_TABLE} WHERE id = 1) AS dbmigrate_gen"

    def cancel_fence_expiry_sql(self) -> list[str]:
        return ["SET @dbmigrate_sro=@@GLOBAL.super_read_only", "SET SESSION sql_log_bin=0",
                "SET GLOBAL super_read_only=OFF", f"DROP EVENT IF EXISTS {self.FENCE_EXPIRY_EVENT}",
                "SET GLOBAL super_read_only=@dbmigrate_sro", "SET SESSION sql_log_bin=1"]

    def ddl_without_binlog_sql(self, statement: str) -> list[str]:
        # SET_VAR cannot set sql_log_bin: the three statements must share one session
        # (callers use a dedicated connection and check for own GTIDs afterwards).
        return ["SET SESSION sql_log_bin=0", statement, "SET SESSION sql_log_bin=1"]

    def server_identity_sql(self) -> str:
        return "SELECT @@GLOBAL.server_uuid AS id"

    def own_gtids(self, state: str, identity: str) -> list[str]:
        own = {u: iv for u, iv in gtid.parse_mysql_set(state).items() if u.lower() == str(identity).lower()}
        return [gtid.mysql_format(own)] if own else []

    def slow_log_variables(self) -> tuple[str, ...]:
        return ("long_query_time", "slow_query_log", "log_slow_admin_statements", "min_examined_row_limit",
                "log_output", "slow_query_log_file")

    def clear_slow_log_table_sql(self) -> list[str]:
        # MySQL has no SET STATEMENT: the session's sql_log_bin is switched off and back on.
        return ["SET SESSION sql_log_bin=0", "TRUNCATE TABLE mysql.slow_log", "SET SESSION sql_log_bin=1"]

    def slow_log_window_settings(self, log_file: str, current: dict[str, Any]) -> dict[str, Any]:
        return {
            "slow_query_log_file": log_file,
            "log_output": _log_output_with_file(current.get("log_output")),
            "log_slow_admin_statements": 1,
            "min_examined_row_limit": 0,
            "slow_query_log": 1,
            "long_query_time": 0,
        }

    def behind(self, source_pos: str, replica_pos: str) -> dict[str, int]:
        missing = gtid.mysql_subtract(gtid.parse_mysql_set(source_pos), gtid.parse_mysql_set(replica_pos))
        return {u: gtid.mysql_count({u: iv}) for u, iv in missing.items()}

    def errant(self, candidate_state: str, source_state: str) -> list[str]:
        extra = gtid.mysql_subtract(gtid.parse_mysql_set(candidate_state), gtid.parse_mysql_set(source_state))
        return [gtid.mysql_format({u: iv}) for u, iv in sorted(extra.items())]

    def includes(self, pos: str, target: str) -> bool:
        return not gtid.mysql_subtract(gtid.parse_mysql_set(target), gtid.parse_mysql_set(pos))

    def received(self, st: ReplicaStatus, target: str) -> bool:
        # Retrieved_Gtid_Set holds only what this connection received: joined with what was executed.
        both = ",".join(x for x in (st.retrieved_gtid, st.executed_gtid) if x)
        return self.includes(both, target)

    # -- named connections: replication channels --
    def named_source_sql(self, conn: str, host: str, port: int, user: str, password: str | None, log_file: str, log_pos: int) -> str:
        x = self._source
        parts = self._source_parts(host, port, user, password)
        parts += [f"{x}_AUTO_POSITION=0", f"{x}_LOG_FILE={sql_quote(log_file)}", f"{x}_LOG_POS={int(log_pos)}",
                  f"{x}_CONNECT_RETRY=1", f"GET_{x}_PUBLIC_KEY=1"]
        return self._change_source_head() + ", ".join(parts) + f" FOR CHANNEL {sql_quote(_conn(conn))}"

    def named_filter_sql(self, conn: str, wild_do_tables: list[str]) -> str:
        patterns = ", ".join(sql_quote(p) for p in wild_do_tables)
        return f"CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=({patterns}) FOR CHANNEL {sql_quote(_conn(conn))}"

    def start_named_sql(self, conn: str) -> str:
        return f"START {self._replica} FOR CHANNEL {sql_quote(_conn(conn))}"

    def stop_named_sql(self, conn: str) -> str:
        return f"STOP {self._replica} FOR CHANNEL {sql_quote(_conn(conn))}"

    def reset_named_all_sql(self, conn: str) -> str:
        return f"RESET {self._replica} ALL FOR CHANNEL {sql_quote(_conn(conn))}"

    def named_status_sql(self, conn: str) -> str:
        return f"SHOW {self._replica} STATUS FOR CHANNEL {sql_quote(_conn(conn))}"

    def all_connections_sql(self) -> str:
        return self.replica_status_sql()  # one row per channel

    def wait_for_position_sql(self, conn: str) -> str:
        fn = "SOURCE_POS_WAIT" if self._since(self.SOURCE_POS_WAIT) else "MASTER_POS_WAIT"
        return f"SELECT {fn}(%s, %s, %s, {sql_quote(_conn(conn))}) AS r"

    def binlog_coordinates_sql(self) -> str:
        return "SHOW BINARY LOG STATUS" if self._since(self.BINARY_LOG_STATUS) else "SHOW MASTER STATUS"

    def gtid_binlog_pos_sql(self) -> str:
        return self.gtid_executed_sql()  # what it has written is what it has executed

    def read_only_and_binlog_pos_sql(self) -> str:
        return "SELECT @@GLOBAL.read_only AS ro, @@GLOBAL.gtid_executed AS pos"

    # From the MySQL 8.0 manual (not measured on this machine): dynamic privileges instead of SUPER.
    TOOL_PRIVILEGES = {
        "admin": (
            ("SELECT", (), "read mysql.user, SHOW GRANTS of other accounts, performance_schema"),
            ("PROCESS", (), "every session (drain, long transactions), information_schema.INNODB_TRX"),
            ("SYSTEM_VARIABLES_ADMIN", ("SUPER",), "SET GLOBAL read_only and super_read_only, the slow log, "
                                                   "event_scheduler, the buffer pool dump/load"),
            ("CONNECTION_ADMIN", ("SUPER",), "KILL the application's sessions; write while read_only is on"),
            ("REPLICATION_SLAVE_ADMIN", ("SUPER",), "STOP/START REPLICA, CHANGE REPLICATION SOURCE"),
            ("REPLICATION CLIENT", (), "SHOW REPLICA STATUS, SHOW BINARY LOG STATUS"),
            ("REPLICATION SLAVE", ("REPLICATION REPLICA",), "SHOW REPLICAS (topology discovery); read a binlog"),
            ("SESSION_VARIABLES_ADMIN", ("SYSTEM_VARIABLES_ADMIN", "SUPER"),
             "sql_log_bin=0 for DDL that must not replicate"),
            ("CREATE", (), "heartbeat, lease and scratch schemas; the fencing generation table; CREATE TABLE and CREATE INDEX of a schema swap"),
            ("DROP", (), "the scratch schema of the DDL check; DROP INDEX of a schema swap"),
            ("ALTER", (), "ALTER TABLE of a schema swap"),
            ("INDEX", (), "CREATE INDEX and DROP INDEX of a schema swap"),
            ("INSERT", (), "heartbeat and cluster lease rows, the fencing generation"),
            ("UPDATE", (), "heartbeat and cluster lease rows, the fencing generation"),
            ("DELETE", (), "heartbeat and cluster lease rows"),
            ("EVENT", (), "the fence's server-side expiry"),
            ("RELOAD", (), "pt-table-checksum (per its manual)"),
            ("LOCK TABLES", (), "backups (per their manuals)"),
            ("CREATE ROUTINE", (), "the fencing generations' guard procedure (dbmigrate.guarded), created once"),
            ("EXECUTE", (), "CALL of the fencing generations' guard procedure"),
        ),
        "replication": (
            ("REPLICATION SLAVE", ("REPLICATION REPLICA",), "replicas read the binlog (the login check only logs in)"),
        ),
    }

    def replication_grants(self) -> str:
        # SLAVE MONITOR and BINLOG MONITOR are MariaDB's; REPLICATION CLIENT covers both here.
        return "REPLICATION SLAVE, REPLICATION CLIENT ON *.*"

    def strict_gtid_variables(self) -> tuple[str, ...]:
        return ()

    def gtid_mode_required(self) -> bool:
        return True  # GTID switchover needs gtid_mode=ON

    def written_by(self, gtid_text: str, server_id: int | str) -> bool:
        return False  # MySQL GTIDs name a server_uuid, not a server_id


MARIADB = MariaDB()
MYSQL = MySQL()
_MYSQL_BY_VERSION: dict[tuple[int, int, int], MySQL] = {MySQL.CURRENT: MYSQL}


def _mysql_at(version: tuple[int, int, int]) -> MySQL:
    return _MYSQL_BY_VERSION.setdefault(version, MySQL(version))


def detect(version: str) -> Flavor:
    """The flavor family of a server version string (statement forms of its newest release)."""
    return MARIADB if "mariadb" in version.lower() else MYSQL


def for_server(version: str) -> Flavor:
    """The flavor that speaks to a server of exactly this version."""
    return detect(version).for_version(version)
