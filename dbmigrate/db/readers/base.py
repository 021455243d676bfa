"""What every reader shares: the server, its flavor, and global variables and status counters."""

from __future__ import annotations

from typing import Any

from dbmigrate.db.connection import Server


class Reader:
    def __init__(self, server: Server):
        self.server = server
        self.flavor = server.flavor

    def variables(self, *names: str) -> dict[str, Any]:
        cols = ", ".join(f"@@GLOBAL.{n} AS `{n}`" for n in names)
        return self.server.query(f"SELECT {cols}")[0]

    def variable(self, name: str) -> Any:
        return self.variables(name)[name]

    def status(self, *names: str) -> dict[str, str]:
        rows = self.server.query(self.flavor.global_status_sql(len(names)), tuple(n.upper() for n in names))
        return {r["n"].lower(): r["v"] for r in rows}
