"""Every SQL difference between MariaDB and MySQL lives here, and only here.

MariaDB 10.11 is exercised against real servers by the test suite. The MySQL
8.0.23+/8.4 side is written from the MySQL reference manual (SHOW REPLICA STATUS,
CHANGE REPLICATION SOURCE TO, WAIT_FOR_EXECUTED_GTID_SET, super_read_only) and is
covered by unit tests of the generated SQL only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dbmigrate.db import gtid


def sql_quote(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


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

    @property
    def running(self) -> bool:
        return self.io_running == "Yes" and self.sql_running == "Yes"

    @property
    def last_error(self) -> str:
        return self.last_io_error or self.last_sql_error


class Flavor:
    name = "abstract"

    # -- reads --
    def replica_status_sql(self) -> str: raise NotImplementedError
    def replica_hosts_sql(self) -> str: raise NotImplementedError
    def gtid_executed_sql(self) -> str: raise NotImplementedError
    def gtid_state_sql(self) -> str: raise NotImplementedError
    def parse_replica_status(self, row: dict[str, Any]) -> ReplicaStatus: raise NotImplementedError
    def read_only_privileges(self) -> set[str]: raise NotImplementedError
    def global_status_sql(self, count: int) -> str: raise NotImplementedError
    def innodb_tables_sql(self) -> str: raise NotImplementedError
    def with_statement_timeout(self, select: str, seconds: float) -> str: raise NotImplementedError
    statement_timeout_errnos: frozenset[int] = frozenset()

    # -- writes --
    def change_source_sql(self, host: str, port: int, user: str, password: str | None, *,
                          connect_retry: int = 1, ssl: bool = False) -> str: raise NotImplementedError
    def start_replica_sql(self) -> str: raise NotImplementedError
    def stop_replica_sql(self) -> str: raise NotImplementedError
    def reset_replica_all_sql(self) -> str: raise NotImplementedError
    def wait_for_gtid_sql(self) -> str: raise NotImplementedError
    def wait_for_gtid_reached(self, result: Any) -> bool: raise NotImplementedError
    def set_read_only_sql(self, on: bool) -> list[str]: raise NotImplementedError
    def prepare_as_replica_sql(self) -> list[str]: raise NotImplementedError

    # -- GTID arithmetic --
    def behind(self, source_pos: str, replica_pos: str) -> dict[str, int]: raise NotImplementedError
    def errant(self, candidate_state: str, source_state: str) -> list[str]: raise NotImplementedError
    def includes(self, pos: str, target: str) -> bool: raise NotImplementedError


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
        )

    def read_only_privileges(self) -> set[str]:
        # In MariaDB 10.11 READ ONLY ADMIN (and SUPER, which grants it) bypasses read_only.
        return {"SUPER", "READ ONLY ADMIN", "ALL PRIVILEGES"}

    def global_status_sql(self, count: int) -> str:
        return ("SELECT VARIABLE_NAME AS n, VARIABLE_VALUE AS v FROM information_schema.GLOBAL_STATUS "
                f"WHERE VARIABLE_NAME IN ({','.join(['%s'] * count)})")

    def innodb_tables_sql(self) -> str:
        # NAME is 'schema/table' in filename encoding; SPACE is what ib_buffer_pool lines name.
        return "SELECT NAME AS name, SPACE AS space FROM information_schema.INNODB_SYS_TABLES"

    def with_statement_timeout(self, select: str, seconds: float) -> str:
        return f"SET STATEMENT max_statement_time={max(0.001, seconds):.3f} FOR {select}"

    statement_timeout_errnos = frozenset({1969})  # ER_STATEMENT_TIMEOUT

    def change_source_sql(self, host, port, user, password, *, connect_retry=1, ssl=False) -> str:
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

    def reset_replica_all_sql(self) -> str:
        return "RESET SLAVE ALL"

    def wait_for_gtid_sql(self) -> str:
        # Returns 0 when reached, -1 on timeout.
        return "SELECT MASTER_GTID_WAIT(%s, %s) AS r"

    def wait_for_gtid_reached(self, result) -> bool:
        return result is not None and int(result) == 0

    def set_read_only_sql(self, on: bool) -> list[str]:
        return [f"SET GLOBAL read_only={'ON' if on else 'OFF'}"]

    def prepare_as_replica_sql(self) -> list[str]:
        # A former primary has an empty gtid_slave_pos: start from what it wrote itself.
        return ["SET GLOBAL gtid_slave_pos=@@GLOBAL.gtid_binlog_pos"]

    def behind(self, source_pos, replica_pos):
        return {str(d): n for d, n in gtid.mariadb_behind(source_pos, replica_pos).items()}

    def errant(self, candidate_state, source_state):
        return [str(g) for g in gtid.mariadb_errant(candidate_state, source_state)]

    def includes(self, pos, target):
        return gtid.mariadb_includes(pos, target)


class MySQL(Flavor):
    """MySQL 8.0.23+ / 8.4 (terminology: source/replica)."""

    name = "mysql"

    def replica_status_sql(self) -> str:
        return "SHOW REPLICA STATUS"

    def replica_hosts_sql(self) -> str:
        return "SHOW REPLICAS"

    def gtid_executed_sql(self) -> str:
        return "SELECT @@GLOBAL.gtid_executed AS pos"

    def gtid_state_sql(self) -> str:
        return "SELECT @@GLOBAL.gtid_executed AS pos"

    def parse_replica_status(self, row: dict[str, Any]) -> ReplicaStatus:
        sbs = row.get("Seconds_Behind_Source")
        return ReplicaStatus(
            source_host=row.get("Source_Host", ""), source_port=int(row.get("Source_Port") or 0),
            io_running=row.get("Replica_IO_Running", ""), sql_running=row.get("Replica_SQL_Running", ""),
            seconds_behind=None if sbs is None else int(sbs),
            last_io_error=row.get("Last_IO_Error", "") or "", last_sql_error=row.get("Last_SQL_Error", "") or "",
            using_gtid="Auto_Position" if str(row.get("Auto_Position")) == "1" else "No",
            channel=row.get("Channel_Name", "") or "",
            retrieved_gtid=row.get("Retrieved_Gtid_Set", "") or "", executed_gtid=row.get("Executed_Gtid_Set", "") or "",
        )

    def read_only_privileges(self) -> set[str]:
        # super_read_only blocks even these, which is why set_read_only uses it.
        return {"SUPER", "CONNECTION_ADMIN", "ALL PRIVILEGES"}

    def global_status_sql(self, count: int) -> str:
        # information_schema.GLOBAL_STATUS is gone in 8.0; performance_schema has it.
        return ("SELECT VARIABLE_NAME AS n, VARIABLE_VALUE AS v FROM performance_schema.global_status "
                f"WHERE VARIABLE_NAME IN ({','.join(['%s'] * count)})")

    def innodb_tables_sql(self) -> str:
        return "SELECT NAME AS name, SPACE AS space FROM information_schema.INNODB_TABLES"

    def with_statement_timeout(self, select: str, seconds: float) -> str:
        # The optimizer hint must follow the SELECT keyword; it applies to read-only SELECTs only.
        ms = max(1, int(seconds * 1000))
        head, rest = select.lstrip()[:6], select.lstrip()[6:]
        return f"{head} /*+ MAX_EXECUTION_TIME({ms}) */{rest}"

    statement_timeout_errnos = frozenset({3024})  # ER_QUERY_TIMEOUT

    def change_source_sql(self, host, port, user, password, *, connect_retry=1, ssl=False) -> str:
        parts = [f"SOURCE_HOST={sql_quote(host)}", f"SOURCE_PORT={int(port)}", f"SOURCE_USER={sql_quote(user)}"]
        if password is not None:
            parts.append(f"SOURCE_PASSWORD={sql_quote(password)}")
        parts += ["SOURCE_AUTO_POSITION=1", f"SOURCE_CONNECT_RETRY={int(connect_retry)}",
                  "GET_SOURCE_PUBLIC_KEY=1"]
        if ssl:
            parts.append("SOURCE_SSL=1")
        return "CHANGE REPLICATION SOURCE TO " + ", ".join(parts)

    def start_replica_sql(self) -> str:
        return "START REPLICA"

    def stop_replica_sql(self) -> str:
        return "STOP REPLICA"

    def reset_replica_all_sql(self) -> str:
        return "RESET REPLICA ALL"

    def wait_for_gtid_sql(self) -> str:
        # Returns 0 when reached, 1 on timeout.
        return "SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s) AS r"

    def wait_for_gtid_reached(self, result) -> bool:
        return result is not None and int(result) == 0

    def set_read_only_sql(self, on: bool) -> list[str]:
        # super_read_only=ON implies read_only=ON; turning off needs both, in this order.
        if on:
            return ["SET GLOBAL super_read_only=ON"]
        return ["SET GLOBAL super_read_only=OFF", "SET GLOBAL read_only=OFF"]

    def prepare_as_replica_sql(self) -> list[str]:
        return []  # auto-position needs no seeding

    def behind(self, source_pos, replica_pos):
        missing = gtid.mysql_subtract(gtid.parse_mysql_set(source_pos), gtid.parse_mysql_set(replica_pos))
        return {u: gtid.mysql_count({u: iv}) for u, iv in missing.items()}

    def errant(self, candidate_state, source_state):
        extra = gtid.mysql_subtract(gtid.parse_mysql_set(candidate_state), gtid.parse_mysql_set(source_state))
        return [gtid.mysql_format({u: iv}) for u, iv in sorted(extra.items())]

    def includes(self, pos, target):
        return not gtid.mysql_subtract(gtid.parse_mysql_set(target), gtid.parse_mysql_set(pos))


MARIADB = MariaDB()
MYSQL = MySQL()


def detect(version: str) -> Flavor:
    return MARIADB if "mariadb" in version.lower() else MYSQL
