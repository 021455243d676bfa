"""Percona Toolkit programs run as child processes.

pt-query-digest reads a slow-log *file*, so it needs no credentials at all; the
programs that connect (pt-heartbeat, pt-table-checksum) get theirs through
`private_defaults_file`, never on argv.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbmigrate.db.connection import TAG
from dbmigrate.exceptions import DbmigrateError, UsageError


class ToolMissing(DbmigrateError):
    """A required external program is not installed."""


class ToolFailed(DbmigrateError):
    """An external program ran and failed."""


SAMPLE_PREFIX = "dbm-sample"

# pt-query-digest has no p99 and only bucketed percentiles. This --filter runs in
# its pipeline after the fingerprint step and prints, for every event it keeps,
# the class checksum (uppercase md5 of the fingerprint, exactly what the JSON
# report calls `checksum`), Query_time and the event's unix timestamp. One run
# thus yields the report and the raw samples for exact percentiles.
# It also drops the tool's own statements (tagged /* dbmigrate */) so that the
# capture measures the application, not us. The code must be one expression.
_SAMPLE_FILTER = (
    "do { my $keep = ($event->{arg} || '') !~ m{" + TAG.strip().replace("*", "\\*") + "}; "
    "print STDERR '" + SAMPLE_PREFIX + "', \"\\t\", uc(Digest::MD5::md5_hex($event->{fingerprint} || '')), "
    "\"\\t\", ($event->{Query_time} || 0), \"\\t\", ($event->{timestamp} || ''), \"\\n\" if $keep; $keep }"
)


@dataclass
class QueryDigestRun:
    """What one pt-query-digest run produced."""

    report: dict[str, Any]                       # parsed --output json ({} for an empty log)
    samples: dict[str, list[float]]              # checksum -> Query_time of each event (seconds)
    first_ts: int | None = None                  # unix time of the first and last event, when logged
    last_ts: int | None = None
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def span_s(self) -> float | None:
        """Seconds between first and last event (1 s resolution), None if unknown."""
        if self.first_ts is None or self.last_ts is None:
            return None
        return float(max(1, self.last_ts - self.first_ts))


def pt_query_digest_path() -> str:
    path = shutil.which("pt-query-digest")
    if not path:
        raise ToolMissing("pt-query-digest is not installed",
                          hint="install Percona Toolkit (Debian/Ubuntu: apt-get install percona-toolkit)")
    return path


def query_digest_argv(slow_log: Path, *, exclude_own: bool = True) -> list[str]:
    argv = [pt_query_digest_path(), "--no-version-check", "--output", "json",
            # the default --limit 95%:20 silently drops classes
            "--limit", "100%:1000"]
    if exclude_own:
        argv += ["--filter", _SAMPLE_FILTER]
    return argv + [str(slow_log)]


def run_query_digest(slow_log: str | Path, *, timeout_s: float = 900, exclude_own: bool = True) -> QueryDigestRun:
    """Digest a slow-log file; returns the JSON report and per-class Query_time samples."""
    slow_log = Path(slow_log)
    if not slow_log.is_file():
        raise UsageError(f"slow log {slow_log} does not exist or is not a file",
                         hint="give the path of a slow query log readable on this machine")
    argv = query_digest_argv(slow_log, exclude_own=exclude_own)
    started = time.monotonic()
    samples: dict[str, list[float]] = {}
    first_ts: int | None = None
    last_ts: int | None = None
    other: list[str] = []
    # stdout (the JSON, tens of MB on big logs) goes to a temp file; stderr is
    # read line by line so that samples never sit in a pipe buffer. A timer kills
    # the child if it runs past the bound, which also ends the read loop.
    with tempfile.TemporaryFile(mode="w+", prefix="dbm-digest-", suffix=".json") as out_file:
        proc = subprocess.Popen(argv, stdout=out_file, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        expired = threading.Event()

        def _expire() -> None:
            expired.set()
            proc.kill()

        watchdog = threading.Timer(timeout_s, _expire)
        watchdog.start()
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith(SAMPLE_PREFIX + "\t"):
                    _, checksum, qt, ts = (line.rstrip("\n").split("\t") + [""])[:4]
                    samples.setdefault(checksum, []).append(float(qt or 0))
                    if ts.isdigit():
                        t = int(ts)
                        first_ts = t if first_ts is None else min(first_ts, t)
                        last_ts = t if last_ts is None else max(last_ts, t)
                elif line.strip():
                    other.append(line.rstrip())
            rc = proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if expired.is_set():
            raise ToolFailed(f"pt-query-digest did not finish {slow_log} within {timeout_s:g}s",
                             hint="digest a shorter window (it needs about 4 s per 100,000 queries)")
        out_file.seek(0)
        text = out_file.read()
    if rc != 0:
        raise ToolFailed(f"pt-query-digest failed on {slow_log} (exit {rc}): {' | '.join(other[-3:]) or 'no message'}",
                         hint="is the file a MySQL/MariaDB slow query log?")
    report: dict[str, Any] = {}
    if text.strip():  # an empty log gives an empty report
        try:
            report = json.loads(text)
        except json.JSONDecodeError as e:
            raise ToolFailed(f"pt-query-digest printed something that is not JSON ({e.msg} at line {e.lineno})",
                             hint="needs Percona Toolkit 3.x (--output json)") from None
    return QueryDigestRun(report, samples, first_ts, last_ts, time.monotonic() - started, other)
