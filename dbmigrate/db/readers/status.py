"""Reads of the server itself: reachability, identity, read_only, files, the slow log's settings,
the clock, and the InnoDB buffer pool."""

from __future__ import annotations

from typing import Any

from dbmigrate.db.readers.base import Reader
from dbmigrate.exceptions import DbmigrateError


class StatusReader(Reader):
    def reachable(self) -> bool:
        try:
            self.server.scalar("SELECT 1")
            return True
        except DbmigrateError:
            return False

    def trivial_round_trip(self) -> None:
        self.server.scalar("SELECT 1 AS one")

    def open_sessions(self, wait_timeout_s: float) -> None:
        """Open (and check) this server's sessions now, the ones for bounded waits and for a
        watchdog included, so that later statements and waits do not pay for a handshake."""
        self.server.scalar("SELECT 1")
        for side in (self.server.waiter(int(wait_timeout_s) + 5), self.server.watcher(int(wait_timeout_s) + 5)):
            side.scalar("SELECT 1")

    def server_id(self) -> int:
        return int(self.variable("server_id"))

    def version(self) -> str:
        return str(self.server.scalar("SELECT VERSION() AS v"))

    def redo_since_checkpoint_bytes(self) -> int | None:
        """Redo written since the last checkpoint (None where the server does not say): what a
        physical backup streams under its commit lock at its end, beside what the copy's span writes."""
        names = self.flavor.checkpoint_age_status()
        try:
            got = self.status(*names)
            values = [int(got[n]) for n in names]
        except (DbmigrateError, KeyError, ValueError):
            return None
        return values[0] if len(values) == 1 else max(0, values[0] - values[1])

    def datadir(self) -> str:
        return str(self.server.scalar("SELECT @@GLOBAL.datadir AS d"))

    def datadir_file(self, variable: str) -> str:
        """Absolute path of a file InnoDB names relative to the datadir (e.g. innodb_buffer_pool_filename)."""
        v = self.variables("datadir", variable)
        name = str(v[variable])
        return name if name.startswith("/") else str(v["datadir"]).rstrip("/") + "/" + name

    def log_basenames(self) -> list[str]:
        """File names (no directory) the binary and relay logs start with; empty when unset."""
        row = self.server.query("SELECT @@GLOBAL.log_bin_basename AS b, @@GLOBAL.relay_log_basename AS r")[0]
        return [str(v).rstrip("/").rsplit("/", 1)[-1] for v in (row["b"], row["r"]) if v]

    def server_clock(self) -> tuple[Any, Any]:
        """(UTC, local time) now by this server's clock, to the microsecond."""
        row = self.server.query("SELECT UTC_TIMESTAMP(6) AS utc_now, NOW(6) AS local_now")[0]
        return row["utc_now"], row["local_now"]

    def read_only(self) -> bool:
        return str(self.variable("read_only")) in ("1", "ON")

    def read_only_at(self) -> tuple[bool, float]:
        """(read_only, the server's clock when it answered, Unix seconds): on one host the
        servers share a clock, so answers from several servers can be put on one timeline."""
        row = self.server.query("SELECT @@GLOBAL.read_only AS ro, UNIX_TIMESTAMP(SYSDATE(6)) AS at")[0]
        return str(row["ro"]) in ("1", "ON"), float(row["at"])

    def event_scheduler_on(self) -> bool:
        """Does this server run scheduled events (the fence's expiry is one)?"""
        return str(self.variable("event_scheduler")).upper() in ("ON", "1")

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

    def slow_query_log_file(self) -> str:
        return str(self.server.scalar("SELECT @@GLOBAL.slow_query_log_file AS f"))

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
