"""Reads of replication: GTID positions, binlog coordinates, replica status, named replication
connections (channels), and bounded waits for a position to be applied."""

from __future__ import annotations

import math
from typing import Any, Collection

from dbmigrate.db.connection import ROUND_TRIP_MARGIN_S
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.db.readers.base import Reader
from dbmigrate.exceptions import DbmigrateError


class ReplicationReader(Reader):
    def gtid_executed(self) -> str:
        """What this server has applied or written (MariaDB gtid_current_pos, MySQL gtid_executed)."""
        return self.server.scalar(self.flavor.gtid_executed_sql()) or ""

    def gtid_binlog_pos(self) -> str:
        """What this server has written to its binlog: the target a successor must reach."""
        return self.server.scalar(self.flavor.gtid_binlog_pos_sql()) or ""

    def gtid_state(self) -> str:
        """Binlog state with one entry per origin, for errant-transaction checks."""
        return self.server.scalar(self.flavor.gtid_state_sql()) or ""

    def own_gtids(self) -> list[str]:
        """Transactions this server wrote itself, per its binlog state (on a replica: errant ones)."""
        identity = str(self.server.scalar(self.flavor.server_identity_sql()))
        return self.flavor.own_gtids(self.gtid_state(), identity)

    def gtid_mode_problem(self) -> str | None:
        """Why this server cannot take part in a GTID switchover, or None."""
        if not self.flavor.gtid_mode_required():
            return None
        mode = str(self.variable("gtid_mode")).upper()
        return None if mode == "ON" else f"gtid_mode={mode}"

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

    def binlog_coordinates(self) -> tuple[str, int]:
        """(binlog file, position) this server has written up to."""
        rows = self.server.query(self.flavor.binlog_coordinates_sql())
        if not rows:
            raise DbmigrateError(f"{self.server.name} has no binary log", hint="enable log_bin: a source needs it")
        return str(rows[0]["File"]), int(rows[0]["Position"])

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

    def binlog_dump_threads(self) -> int:
        return int(self.server.scalar(
            "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%%'") or 0)

    def replica_hosts(self) -> list[dict[str, Any]]:
        """Replicas that registered with report_host/report_port."""
        out = []
        for r in self.server.query(self.flavor.replica_hosts_sql()):
            out.append({"server_id": int(r.get("Server_id") or r.get("Server_Id") or 0),
                        "host": r.get("Host") or "", "port": int(r.get("Port") or 0)})
        return out

    def replica_status(self) -> ReplicaStatus | None:
        rows = self.server.query(self.flavor.replica_status_sql())
        return self.flavor.parse_replica_status(rows[0]) if rows else None

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

    def connection_status(self, conn: str) -> dict[str, Any] | None:
        """Raw status row of one named replication connection, or None if it does not exist."""
        for r in self.server.query(self.flavor.all_connections_sql()):
            if (r.get("Connection_name") or r.get("Channel_Name") or "") == conn:
                return r
        return None

    def named_replica_status(self, conn: str) -> ReplicaStatus | None:
        """Status of one named replication connection (channel), flavor-neutral; None if absent."""
        row = self.connection_status(conn)
        return None if row is None else self.flavor.parse_replica_status(row)

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

    def applied_through(self, conn: str, log_file: str, log_pos: int) -> bool:
        """Has connection `conn` applied its source's (file, pos)? One status read, no wait."""
        row = self.connection_status(conn)
        if row is None:
            return False
        f = row.get("Relay_Master_Log_File") or row.get("Relay_Source_Log_File") or ""
        p = row.get("Exec_Master_Log_Pos") or row.get("Exec_Source_Log_Pos") or 0
        return (str(f), int(p)) >= (log_file, int(log_pos))

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
