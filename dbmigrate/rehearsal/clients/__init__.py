"""Application connection pools (Go database/sql-like, HikariCP-like, naive) that count what an
application sees of a switchover: errors by class and the longest call."""

from dbmigrate.rehearsal.clients.pools import (
    KINDS, ClientProcess, ClientSet, DsnAddress, FixedAddress, console_line, create_table,
)

__all__ = ["KINDS", "ClientProcess", "ClientSet", "DsnAddress", "FixedAddress", "console_line", "create_table"]
