"""Read one server's replication facts into a plain record (no decisions here)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector


@dataclass
class ServerFacts:
    name: str
    address: str
    flavor: str = ""
    version: str = ""
    server_id: int = 0
    read_only: bool | None = None
    gtid_executed: str = ""
    gtid_binlog_pos: str = ""
    binlog_format: str = ""
    log_bin: bool | None = None
    log_slave_updates: bool | None = None
    gtid_strict_mode: bool | None = None
    report_host: str = ""
    report_port: int = 0
    source: str | None = None  # host:port this server replicates from
    io_running: str | None = None
    sql_running: str | None = None
    seconds_behind: int | None = None
    last_error: str = ""
    replicas: list[str] = field(default_factory=list)  # host:port registered as replicas
    error: str | None = None

    @property
    def is_replica(self) -> bool:
        return self.source is not None

    @property
    def role(self) -> str:
        if self.error:
            return "unreachable"
        if self.is_replica:
            return "replica"
        return "primary" if self.read_only is False else "standalone-ro"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["role"] = self.role
        return d


def _on(v: Any) -> bool:
    return str(v).upper() in ("1", "ON", "YES")


def probe(server: Server) -> ServerFacts:
    facts = ServerFacts(server.name, server.address)
    insp = Inspector(server)
    facts.version = server.version
    facts.flavor = server.flavor.name
    v = insp.variables("server_id", "read_only", "binlog_format", "log_bin", "log_slave_updates",
                       "report_host", "report_port",
                       *server.flavor.strict_gtid_variables())
    facts.server_id = int(v["server_id"])
    facts.read_only = _on(v["read_only"])
    facts.binlog_format = str(v["binlog_format"])
    facts.log_bin = _on(v["log_bin"])
    facts.log_slave_updates = _on(v["log_slave_updates"])
    facts.gtid_strict_mode = _on(v["gtid_strict_mode"]) if "gtid_strict_mode" in v else None
    facts.report_host = str(v["report_host"] or "")
    facts.report_port = int(v["report_port"] or 0)
    facts.gtid_executed = insp.gtid_executed()
    facts.gtid_binlog_pos = insp.gtid_binlog_pos()
    st = insp.replica_status()
    if st is not None and st.source_host:
        facts.source = f"{st.source_host}:{st.source_port}"
        facts.io_running, facts.sql_running = st.io_running, st.sql_running
        facts.seconds_behind = st.seconds_behind
        facts.last_error = st.last_error
    facts.replicas = [f"{r['host']}:{r['port']}" for r in insp.replica_hosts() if r["host"]]
    return facts
