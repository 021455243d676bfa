"""The Percona Toolkit programs that connect to servers: pt-heartbeat (a
background heartbeat writer) and pt-table-checksum (data consistency of
replicas). Credentials reach them through a private 0600 defaults file
(`--defaults-file`), never argv; the file lives as long as the child does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import private_defaults_file
from dbmigrate.db.heartbeat import HeartbeatSQL
from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock, wait_until
from dbmigrate.exceptions import DbmigrateError, WaitTimeout
from dbmigrate.redact import redact
from dbmigrate.tools.percona import ToolFailed, ToolMissing


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise ToolMissing(f"{name} is not installed", hint="apt-get install percona-toolkit")
    return path


def _dsn(server: Server) -> str:
    return f"h={server.host},P={server.port}"


class PtHeartbeat:
    """pt-heartbeat --update on the primary, in the background, until stop().

    FACTS of Percona Toolkit 3.2.1 with MariaDB 10.11: --skew 0 is refused (0.01
    works), --interval down to 0.01 s works. dbmigrate reads its table with SQL
    (`dbmigrate.lag.HeartbeatTable.pt_heartbeat()`), which is faster and finer
    than `pt-heartbeat --check`.
    """

    def __init__(self, primary: Server, *, database: str = "percona", interval_s: float = 0.1,
                 clock: Clock | None = None):
        self.primary, self.database, self.interval_s = primary, database, interval_s
        self.clock = clock
        self.proc: subprocess.Popen[bytes] | None = None
        self._defaults: contextlib.ExitStack | None = None
        self._log: Path | None = None

    def argv(self, defaults_file: str) -> list[str]:
        return [_tool("pt-heartbeat"), f"--defaults-file={defaults_file}", "--update", "--create-table",
                "--database", self.database, "--interval", f"{self.interval_s:g}", "--skew", "0.01",
                "--no-version-check", _dsn(self.primary)]

    def start(self, ready_timeout_s: float = 10) -> "PtHeartbeat":
        # --create-table creates the table, not its database.
        table = HeartbeatSQL(self.primary, f"{self.database}.heartbeat")
        table.create_database()
        stack = contextlib.ExitStack()
        cnf = stack.enter_context(private_defaults_file(self.primary.credentials))
        log = Path(cnf).with_suffix(".log")
        stack.callback(lambda: log.unlink(missing_ok=True))
        self._defaults, self._log = stack, log
        with open(log, "wb") as out:
            proc = self.proc = subprocess.Popen(self.argv(cnf), stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

        def has_a_row() -> bool:
            if proc.poll() is not None:
                text = redact(log.read_text(errors="replace")[-600:])
                self.stop()
                raise ToolFailed(f"pt-heartbeat exited (code {proc.returncode}) on {self.primary.name}: {text}")
            with contextlib.suppress(DbmigrateError):
                return table.row_count() > 0
            return False

        try:
            wait_until(has_a_row, timeout=ready_timeout_s, interval=0.1, clock=self.clock,
                       what=f"pt-heartbeat's first row on {self.primary.name}")
        except WaitTimeout:
            self.stop()
            raise ToolFailed(f"pt-heartbeat wrote no row to {self.database}.heartbeat on {self.primary.name} "
                             f"within {ready_timeout_s:g}s") from None
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self._defaults is not None:
            self._defaults.close()
            self._defaults = None

    def __enter__(self) -> "PtHeartbeat":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ChecksumReport:
    """pt-table-checksum's verdict, read back per replica from the replicate table."""

    exit_code: int
    tables: int
    diffs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # replica -> differing tables
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.diffs.values()) and not self.errors

    def verdict(self, replica: str) -> str:
        """same, differs, or not compared (the run failed before this replica's checksums were read)."""
        if replica not in self.diffs:
            return "not compared"
        return "differs" if self.diffs[replica] else "same"

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "exit_code": self.exit_code, "tables": self.tables, "diffs": self.diffs,
                "errors": self.errors}


def table_checksum(primary: Server, replicas: list[Server], databases: list[str], *,
                   replicate: str = "percona.checksums", timeout_s: float = 900) -> ChecksumReport:
    """Run pt-table-checksum on the primary and read each replica's differing chunks.

    pt-table-checksum finds replicas through SHOW SLAVE HOSTS (report_host and
    report_port), and names them by hostname; on one machine several replicas
    share a name, so the verdict per replica comes from its own replicate table.
    With ROW replicas it needs --no-check-binlog-format; it then uses STATEMENT
    for its own session only, so the replicas compute their own checksums.
    """
    if not databases:
        raise DbmigrateError("name the databases to checksum", hint="e.g. --databases app,shop")
    with private_defaults_file(primary.credentials) as cnf:
        argv = [_tool("pt-table-checksum"), f"--defaults-file={cnf}", "--no-check-binlog-format",
                "--no-version-check", "--replicate", replicate, "--databases", ",".join(databases),
                "--recursion-method", "hosts", "--chunk-time", "0.2", _dsn(primary)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ToolFailed(f"pt-table-checksum did not finish within {timeout_s:g}s") from None
    # Exit status is a bit mask: 16 = DIFFS; anything else but 0 is an error of the run.
    errors = [redact(line) for line in proc.stderr.splitlines() if line.strip()] if proc.returncode & ~16 else []
    tables = sum(1 for line in proc.stdout.splitlines()[1:] if line.strip() and line.split()[-1].count(".") == 1)
    report = ChecksumReport(proc.returncode, tables, errors=errors)
    if errors:
        # The replicate table still holds an earlier run's rows: reading it now would
        # report "same" for a comparison that never happened.
        report.errors.insert(0, f"pt-table-checksum failed (exit {proc.returncode}); no replica was compared")
        return report
    if tables == 0:
        report.errors.append(f"pt-table-checksum compared no table in {', '.join(databases)}")
        return report
    final = Inspector(primary).gtid_binlog_pos()
    for r in replicas:
        if not Inspector(r).wait_for_gtid(final, 60):  # its own checksums must have been computed
            report.errors.append(f"{r.name} did not apply the checksum queries within 60s")
            continue
        rows = Inspector(r).checksum_differences(replicate)
        report.diffs[r.name] = [{"table": f"{x['db']}.{x['tbl']}", "chunks": int(x["chunks"]),
                                 "replica_rows": int(x["replica_rows"] or 0),
                                 "primary_rows": int(x["primary_rows"] or 0)} for x in rows]
    return report
