"""One real mariadbd process: config file, datadir, start, stop (by pid)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import mysql.connector

from dbmigrate.clock import Clock, wait_until
from dbmigrate.exceptions import SandboxError, WaitTimeout

SERVER_BINARIES = ("mariadbd", "mysqld")
INSTALL_BINARIES = ("mariadb-install-db", "mysql_install_db")


def _find(candidates: tuple[str, ...]) -> str:
    for name in candidates:
        for d in (None, "/usr/sbin", "/usr/bin", "/usr/local/bin"):
            found = shutil.which(name, path=d) if d else shutil.which(name)
            if found:
                return found
    raise SandboxError(f"{candidates[0]} is not installed",
                       hint="install Debian's mariadb-server (apt-get install mariadb-server mariadb-client)")


class PortConflict(SandboxError):
    """The free port we picked was bound by someone else before mariadbd started."""


def rewrite_config(spec: "InstanceSpec") -> None:
    spec.config_path.write_text(render_config(spec))


@dataclass
class InstanceSpec:
    name: str
    port: int
    server_id: int
    dir: Path
    buffer_pool_mb: int = 64
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def datadir(self) -> Path:
        return self.dir / "data"

    @property
    def config_path(self) -> Path:
        return self.dir / "my.cnf"

    @property
    def socket(self) -> Path:
        return self.dir / "mysqld.sock"

    @property
    def pid_file(self) -> Path:
        return self.dir / "mysqld.pid"

    @property
    def error_log(self) -> Path:
        return self.dir / "error.log"

    @property
    def slow_log(self) -> Path:
        return self.dir / "slow.log"


def render_config(spec: InstanceSpec) -> str:
    settings: dict[str, str | int | None] = {
        "datadir": str(spec.datadir),
        "port": spec.port,
        "socket": str(spec.socket),
        "pid-file": str(spec.pid_file),
        "log-error": str(spec.error_log),
        # A private tmpdir: every mariadbd deletes '#sql*' files in its tmpdir at startup,
        # which broke other instances' mariadb-install-db running at the same time in /tmp,
        # and other programs' /tmp cleanup can delete on-disk temp tables mid-query (errno 6).
        "tmpdir": str(spec.dir / "tmp"),
        "bind-address": "127.0.0.1",
        # Every instance starts read-only, as production servers should: a restarted
        # replica must not take writes, and a primary is made writable on purpose.
        "read_only": "ON",
        # The fence's expiry is a scheduled event: a tool frozen inside a cutover's window cannot
        # hold the server read-only past it (production servers need the same setting).
        "event_scheduler": "ON",
        "server_id": spec.server_id,
        "report_host": "127.0.0.1",
        "report_port": spec.port,
        "log_bin": "mysql-bin",
        "relay_log": "relay-bin",
        "binlog_format": "ROW",
        "binlog_row_metadata": "FULL",
        "gtid_strict_mode": 1,
        "log_slave_updates": 1,
        "skip-name-resolve": None,
        "innodb_buffer_pool_size": f"{spec.buffer_pool_mb}M",
        "innodb_log_file_size": "48M",
        "innodb_flush_log_at_trx_commit": 2,
        "sync_binlog": 0,
        "performance_schema": "OFF",
        # Lets a blocked fence name the session holding LOCK TABLES ... WRITE or FTWRL
        # (information_schema.METADATA_LOCK_INFO). Loaded on every node, as plugins must be.
        "plugin_load_add": "metadata_lock_info",
        "max_connections": 300,
        "slow_query_log_file": str(spec.slow_log),
        "character-set-server": "utf8mb4",
        "collation-server": "utf8mb4_general_ci",
    }
    settings.update(spec.extra)
    lines = ["# written by dbmigrate sandbox", "[mariadbd]"]
    for k, v in settings.items():
        lines.append(k if v is None else f"{k}={v}")
    return "\n".join(lines) + "\n"


class Instance:
    def __init__(self, spec: InstanceSpec):
        self.spec = spec
        self._proc: subprocess.Popen | None = None

    # -- lifecycle -----------------------------------------------------------
    def install(self) -> subprocess.Popen:
        """Write the config and start mariadb-install-db (returns the process; call finish_install)."""
        self.spec.dir.mkdir(parents=True, exist_ok=True)
        (self.spec.dir / "tmp").mkdir(exist_ok=True)
        self.spec.config_path.write_text(render_config(self.spec))
        cmd = [_find(INSTALL_BINARIES), f"--defaults-file={self.spec.config_path}",
               "--auth-root-authentication-method=normal", "--skip-test-db"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        log = open(self.spec.dir / "install.log", "wb")
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def finish_install(self, proc: subprocess.Popen, timeout: float = 120) -> None:
        rc = proc.wait(timeout)
        if rc != 0:
            tail = (self.spec.dir / "install.log").read_text()[-800:]
            raise SandboxError(f"mariadb-install-db failed for {self.spec.name} (exit {rc}): {tail}")

    def start(self) -> None:
        (self.spec.dir / "tmp").mkdir(exist_ok=True)
        cmd = [_find(SERVER_BINARIES), f"--defaults-file={self.spec.config_path}"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        out = open(self.spec.dir / "stdout.log", "ab")
        # A session of its own: Ctrl-C in the terminal that started the sandbox does not kill it.
        self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)

    def wait_ready(self, timeout: float = 60, clock: Clock | None = None) -> None:
        def accepts() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                if "Address already in use" in self._error_tail(20):
                    raise PortConflict(f"port {self.spec.port} of {self.spec.name} was taken by another process")
                raise SandboxError(f"{self.spec.name} exited during startup (exit {self._proc.returncode}): "
                                   f"{self._error_tail()}", hint=f"see {self.spec.error_log}")
            try:
                self.root_connection(timeout=1).close()
                return True
            except mysql.connector.Error:
                return False

        try:
            wait_until(accepts, timeout=timeout, interval=0.05, clock=clock, what=f"{self.spec.name} to accept connections")
        except WaitTimeout:
            raise SandboxError(f"{self.spec.name} did not accept connections within {timeout:g}s: {self._error_tail()}",
                               hint=f"see {self.spec.error_log}") from None

    def _error_tail(self, lines: int = 5) -> str:
        """The last lines of the error log, for a one-line reason."""
        try:
            tail = self.spec.error_log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return "(no error log)"
        return " | ".join(line.strip() for line in tail if line.strip()) or "(error log empty)"

    def root_connection(self, timeout: float = 5):
        """Local root over the unix socket: only used to bootstrap the sandbox."""
        return mysql.connector.connect(unix_socket=str(self.spec.socket), user="root", password="",
                                       connection_timeout=max(1, int(timeout)), autocommit=True, use_pure=True)

    def root_server(self, timeout: float = 5):
        """The same local root login as a Server handle, for statements through db/."""
        from dbmigrate.db.connection import Server
        from dbmigrate.db.credentials import Credentials

        return Server(self.spec.name, "127.0.0.1", self.spec.port, Credentials("root", ""),
                      connect_timeout=timeout, unix_socket=str(self.spec.socket))

    def pid(self) -> int | None:
        try:
            return int(self.spec.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return self._proc.pid if self._proc and self._proc.poll() is None else None

    def is_running(self) -> bool:
        pid = self.pid()
        return pid is not None and pid_alive(pid)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM our own pid, wait for exit; SIGKILL after the timeout."""
        pid = self.pid()
        if pid is None:
            return
        stop_pid(pid, timeout)
        if self._proc is not None:
            self._proc.wait(5)
        self.spec.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """Hard kill (for failure-path tests): no clean shutdown."""
        pid = self.pid()
        if pid is not None:
            stop_pid(pid, 0, sig=signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait(5)


def pid_alive(pid: int) -> bool:
    try:
        # Reap it if it is our own exited child, so that a zombie does not look alive.
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        return state != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_pid(pid: int, timeout: float, sig: int = signal.SIGTERM, clock: Clock | None = None) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    while True:
        try:
            wait_until(lambda: not pid_alive(pid), timeout=timeout, interval=0.05, clock=clock,
                       what=f"process {pid} to exit")
            return
        except WaitTimeout:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            timeout = 10  # then SIGKILL again, until it is gone
