"""sysbench as a load generator: prepare, run, cleanup, and a background run for
load during a switchover.

Credentials never reach argv (where `ps` shows them to every local user): the
password goes to sysbench through the MYSQL_PWD environment variable, which
Debian's sysbench 1.0.20 honours through libmariadb when no --mysql-password is
given (checked: the same command with MYSQL_PWD unset is refused with "using
password: NO"). A process's environment is readable only by its owner and root.

Every run is wrapped in `timeout`: with --mysql-ignore-errors, sysbench loops
forever on a read-only server (error 1290) and ignores --time.

sysbench 1.0.20 crashes on its first reconnect after a router flips to a new
primary (upstream bug #527, fix never merged). So a background load is not
expected to survive a switchover: call BackgroundRun.restart() after the flip,
and measure the switchover itself with dbmigrate.rehearsal.verify.

It acts as the application: sysbench sends the workload's statements itself,
through the router, and none of them are dbmigrate's own reads or writes of
server state (those go through `dbmigrate.db`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from dbmigrate.db.credentials import Credentials
from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.redact import redact

WORKLOADS = ("oltp_write_only", "oltp_read_write", "oltp_read_only")


class SysbenchError(DbmigrateError):
    """sysbench failed, timed out, or printed no report."""


@dataclass(frozen=True)
class IntervalSample:
    """One `--report-interval` line."""

    t_s: float
    threads: int
    tps: float
    qps: float
    latency_p95_ms: float
    errors_per_s: float
    reconnects_per_s: float


@dataclass
class SysbenchResult:
    workload: str
    tps: float | None = None
    qps: float | None = None
    transactions: int | None = None
    queries: int | None = None
    errors: int | None = None  # ignored errors
    reconnects: int | None = None
    latency_avg_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_max_ms: float | None = None
    total_time_s: float | None = None
    intervals: list[IntervalSample] = field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False

    @property
    def complete(self) -> bool:
        """sysbench printed its final report."""
        return self.tps is not None

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "intervals"}
        d["intervals"] = [s.__dict__ for s in self.intervals]
        return d


_INTERVAL = re.compile(
    r"^\[\s*(?P<t>[\d.]+)s\s*\]\s+thds:\s*(?P<thds>\d+)\s+tps:\s*(?P<tps>[\d.]+)\s+qps:\s*(?P<qps>[\d.]+)"
    r".*?lat \(ms,\d+%\):\s*(?P<lat>[\d.]+)\s+err/s:\s*(?P<err>[\d.]+)\s+reconn/s:\s*(?P<reconn>[\d.]+)", re.M)
_COUNTER = r"^\s*{name}:\s+(\d+)\s+\(([\d.]+) per sec\.\)"
_LATENCY = r"^\s*{name}:\s+([\d.]+)\s*$"


def parse_intervals(text: str) -> list[IntervalSample]:
    """The `[ Ns ] thds: ... tps: ... qps: ... lat (ms,95%): ... err/s: ... reconn/s: ...` lines."""
    return [IntervalSample(float(m["t"]), int(m["thds"]), float(m["tps"]), float(m["qps"]), float(m["lat"]),
                           float(m["err"]), float(m["reconn"])) for m in _INTERVAL.finditer(text)]


def parse_report(text: str, workload: str = "") -> SysbenchResult:
    """Parse sysbench 1.0 output (final report and interval lines; a missing report leaves None)."""
    r = SysbenchResult(workload, intervals=parse_intervals(text))

    def counter(name: str) -> tuple[int, float] | None:
        m = re.search(_COUNTER.format(name=re.escape(name)), text, re.M)
        return (int(m[1]), float(m[2])) if m else None

    def latency(name: str) -> float | None:
        section = text.split("Latency (ms):", 1)
        if len(section) < 2:
            return None
        m = re.search(_LATENCY.format(name=re.escape(name)), section[1], re.M)
        return float(m[1]) if m else None

    if (t := counter("transactions")) is not None:
        r.transactions, r.tps = t
    if (q := counter("queries")) is not None:
        r.queries, r.qps = q
    if (e := counter("ignored errors")) is not None:
        r.errors = e[0]
    if (c := counter("reconnects")) is not None:
        r.reconnects = c[0]
    r.latency_avg_ms = latency("avg")
    r.latency_max_ms = latency("max")
    r.latency_p95_ms = latency("95th percentile")
    if m := re.search(r"^\s*total time:\s+([\d.]+)s", text, re.M):
        r.total_time_s = float(m[1])
    return r


def _binary(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise SysbenchError(f"{name} is not installed", hint="apt-get install sysbench")
    return found


class Sysbench:
    """One sysbench workload against host:port (normally the router's writer port) as the app user."""

    def __init__(self, host: str, port: int, credentials: Credentials, *, workload: str = "oltp_write_only",
                 db: str = "sbtest", tables: int = 4, table_size: int = 10_000, threads: int = 4,
                 extra_args: Sequence[str] = ()):
        if workload not in WORKLOADS:
            raise UsageError(f"unknown sysbench workload {workload!r}", hint=f"use one of {', '.join(WORKLOADS)}")
        for a in extra_args:
            if "password" in a.lower():
                raise UsageError("sysbench arguments must not carry a password", hint="credentials go through the environment")
        self.host, self.port, self.credentials = host, port, credentials
        self.workload, self.db = workload, db
        self.tables, self.table_size, self.threads = tables, table_size, threads
        self.extra_args = list(extra_args)

    @classmethod
    def for_cluster(cls, inventory, cluster: str, host: str | None = None, **kw) -> "Sysbench":
        spec = inventory.cluster(cluster)
        creds = inventory.app_credentials(cluster)
        if creds is None:
            raise UsageError(f"cluster {cluster} has no app_credentials in {inventory.path}",
                             hint="load runs as the application user, so that read_only fences it")
        address = spec.write_address()  # where the applications write
        if address is not None:
            return cls(host or address[0], address[1], creds, **kw)
        primary = spec.primary_hint() or next(iter(spec.servers))
        s = spec.servers[primary]
        return cls(s.host, s.port, creds, **kw)

    # -- command lines -------------------------------------------------------
    def command(self, action: str, *, time_s: int | None = None, rate: int | None = None,
                report_interval: int | None = None, ignore_errors: str | None = None) -> list[str]:
        """argv for sysbench (no password: see env())."""
        if action not in ("prepare", "run", "cleanup"):
            raise UsageError(f"unknown sysbench action {action!r}")
        cmd = [_binary("sysbench"), self.workload, "--db-driver=mysql", f"--mysql-host={self.host}",
               f"--mysql-port={self.port}", f"--mysql-user={self.credentials.user}", f"--mysql-db={self.db}",
               f"--tables={self.tables}", f"--table-size={self.table_size}", f"--threads={self.threads}"]
        if action == "run":
            cmd += ["--percentile=95", f"--time={int(time_s or 10)}"]
            if rate:
                cmd.append(f"--rate={int(rate)}")
            if report_interval:
                cmd.append(f"--report-interval={int(report_interval)}")  # whole seconds only in 1.0.20
            if ignore_errors:
                cmd.append(f"--mysql-ignore-errors={ignore_errors}")
        return cmd + self.extra_args + [action]

    def env(self) -> dict[str, str]:
        # sysbench 1.0.20 has no defaults-file option and libmariadb reads option
        # files only when the program asks for them, so MYSQL_PWD is the one way
        # to hand it a password off argv. Only this child gets it; password_env
        # variables were already taken out of os.environ when they were read.
        env = {k: v for k, v in os.environ.items() if k != "MYSQL_PWD"}
        if self.credentials.password is not None:
            env["MYSQL_PWD"] = self.credentials.password  # read by libmariadb; never on argv
        return env

    # -- foreground runs -----------------------------------------------------
    def _run(self, argv: list[str], timeout_s: float) -> tuple[int, str, bool]:
        wrapped = [_binary("timeout"), "--kill-after=5", f"{timeout_s:g}", *argv]
        proc = subprocess.run(wrapped, env=self.env(), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        out = proc.stdout + proc.stderr
        return proc.returncode, out, proc.returncode in (124, 137)

    def _fail(self, action: str, rc: int, out: str, timed_out: bool, timeout_s: float) -> SysbenchError:
        lines = out.strip().splitlines()
        # The server's own error (e.g. "Access denied") says more than sysbench's last
        # lines, and its threads print them in any order.
        cause = [ln for ln in lines if "error" in ln.lower() and ("denied" in ln.lower() or "(" in ln)][:1]
        tail = " | ".join(cause + [ln for ln in lines[-4:] if ln not in cause])
        if timed_out:
            return SysbenchError(f"sysbench {self.workload} {action} did not finish within {timeout_s:g}s: {redact(tail)}",
                                 hint="a read-only server makes sysbench retry forever; is the writer fenced?")
        return SysbenchError(f"sysbench {self.workload} {action} failed (exit {rc}) on {self.host}:{self.port}: {redact(tail)}",
                             hint="check that the app user can reach the server and has rights on the schema")

    def prepare(self, timeout_s: float = 600) -> None:
        """Create and fill the tables (drop leftovers with cleanup() first)."""
        rc, out, to = self._run(self.command("prepare"), timeout_s)
        if rc != 0:
            raise self._fail("prepare", rc, out, to, timeout_s)

    def cleanup(self, timeout_s: float = 120) -> None:
        rc, out, to = self._run(self.command("cleanup"), timeout_s)
        if rc != 0:
            raise self._fail("cleanup", rc, out, to, timeout_s)

    def run(self, time_s: int = 10, *, rate: int | None = None, report_interval: int | None = None,
            ignore_errors: str | None = None, timeout_s: float | None = None) -> SysbenchResult:
        timeout_s = timeout_s or time_s + max(15.0, time_s * 0.5)
        rc, out, to = self._run(self.command("run", time_s=time_s, rate=rate, report_interval=report_interval,
                                             ignore_errors=ignore_errors), timeout_s)
        result = parse_report(out, self.workload)
        result.exit_code, result.timed_out = rc, to
        if rc != 0 or not result.complete:
            raise self._fail("run", rc, out, to, timeout_s)
        return result

    # -- background runs -----------------------------------------------------
    def start_background(self, time_s: int = 3600, *, rate: int | None = None, report_interval: int = 1,
                         ignore_errors: str | None = None, timeout_s: float | None = None) -> "BackgroundRun":
        run = BackgroundRun(self, time_s, rate, report_interval, ignore_errors, timeout_s)
        run.start()
        return run


class BackgroundRun:
    """sysbench run in the background (its own process group), output to a file.

    stop() ends it and parses what it printed: the interval samples always, the
    final report only when it ran to its end. After a router flip, call restart():
    sysbench 1.0.20 cannot reconnect to a new primary (bug #527)."""

    def __init__(self, bench: Sysbench, time_s: int, rate: int | None, report_interval: float,
                 ignore_errors: str | None, timeout_s: float | None):
        self.bench = bench
        self.time_s, self.rate, self.report_interval, self.ignore_errors = time_s, rate, report_interval, ignore_errors
        self.timeout_s = timeout_s or time_s + 30
        self.proc: subprocess.Popen | None = None
        self.output: Path | None = None
        self.started_at: float | None = None
        self.previous: list[SysbenchResult] = []  # results of runs before each restart()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.alive:
            raise SysbenchError("this background sysbench is already running")
        argv = self.bench.command("run", time_s=self.time_s, rate=self.rate, report_interval=self.report_interval,
                                  ignore_errors=self.ignore_errors)
        fd, path = tempfile.mkstemp(prefix="dbmigrate-sysbench-", suffix=".log")
        self.output = Path(path)
        with os.fdopen(fd, "wb") as out:
            self.proc = subprocess.Popen([_binary("timeout"), "--kill-after=5", f"{self.timeout_s:g}", *argv],
                                         env=self.bench.env(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.started_at = time.monotonic()

    def text(self) -> str:
        return self.output.read_text(errors="replace") if self.output and self.output.exists() else ""

    def samples(self) -> list[IntervalSample]:
        """Interval samples printed so far (TPS over time)."""
        return parse_intervals(self.text())

    def wait_for_samples(self, count: int, timeout_s: float = 30) -> list[IntervalSample]:
        deadline = time.monotonic() + timeout_s
        while True:
            s = self.samples()
            if len(s) >= count:
                return s
            if not self.alive:
                raise SysbenchError(f"background sysbench exited after {len(s)} samples: "
                                    f"{redact(' | '.join(self.text().strip().splitlines()[-3:]))}")
            if time.monotonic() > deadline:
                raise SysbenchError(f"background sysbench printed {len(s)} of {count} samples within {timeout_s:g}s")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 10) -> SysbenchResult:
        """Stop the run (SIGTERM to its own process group, SIGKILL if needed) and parse its output."""
        if self.proc is None:
            raise SysbenchError("background sysbench was never started")
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # timeout and sysbench: our own group only
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        result = parse_report(self.text(), self.bench.workload)
        result.exit_code = self.proc.returncode
        result.timed_out = self.proc.returncode in (124, 137)
        if self.output:
            self.output.unlink(missing_ok=True)
            self.output = None
        return result

    def restart(self) -> SysbenchResult:
        """Stop (keeping the result in `previous`) and start again: call after a router flip."""
        result = self.stop()
        self.previous.append(result)
        self.start()
        return result
