"""The heartbeat table's statements: one method per statement.

One row per primary (server_id, ts DATETIME(6) in UTC). dbmigrate writes its
own table; pt-heartbeat's table is only read. What the figures mean (lag,
freshness) is decided in `dbmigrate.lag`, not here.
"""

from __future__ import annotations

import re
from typing import Any

from dbmigrate.db.connection import Server

_TABLE = re.compile(r"^[A-Za-z0-9_$]+\.[A-Za-z0-9_$]+$")


def valid_table(table: str) -> bool:
    """'db.table' with plain identifier characters (it is pasted into statements)."""
    return bool(_TABLE.match(table))


class HeartbeatSQL:
    """The heartbeat statements for one table on one server."""

    def __init__(self, server: Server, table: str):
        if not valid_table(table):
            raise ValueError(f"not a db.table name: {table!r}")
        self.server = server
        self.database, self.name = table.split(".")

    @property
    def quoted(self) -> str:
        return f"`{self.database}`.`{self.name}`"

    # -- writes ------------------------------------------------------------------
    def create_database(self) -> None:
        self.server.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")

    def create_table(self) -> None:
        self.server.execute(f"CREATE TABLE IF NOT EXISTS {self.quoted} (server_id INT UNSIGNED NOT NULL PRIMARY KEY, "
                            f"ts DATETIME(6) NOT NULL) ENGINE=InnoDB COMMENT='dbmigrate replication heartbeat'")

    def beat_unless_read_only(self) -> int:
        """Write this server's heartbeat; 0 rows when read_only is ON. One statement checks
        and writes: the tool's own account bypasses read_only, a heartbeat must not."""
        return self.server.execute(
            f"REPLACE INTO {self.quoted} (server_id, ts) SELECT @@server_id, UTC_TIMESTAMP(6) FROM DUAL "
            f"WHERE @@GLOBAL.read_only = 0")

    # -- reads -------------------------------------------------------------------
    def own_ts(self) -> Any:
        """The heartbeat this server wrote itself (None when absent)."""
        return self.server.scalar(f"SELECT ts FROM {self.quoted} WHERE server_id = @@server_id")

    def ts_of(self, origin_server_id: int) -> Any:
        """The heartbeat of `origin_server_id` as applied here (None when absent)."""
        rows = self.server.query(f"SELECT ts FROM {self.quoted} WHERE server_id = %s", (origin_server_id,))
        return rows[0]["ts"] if rows else None

    def newest_ts(self) -> Any:
        """The newest heartbeat of any origin (None when the table is empty)."""
        rows = self.server.query(f"SELECT ts FROM {self.quoted} ORDER BY ts DESC LIMIT 1")
        return rows[0]["ts"] if rows else None

    def row_count(self) -> int:
        return int(self.server.scalar(f"SELECT COUNT(*) FROM {self.quoted}") or 0)
