"""Capture a query digest: open a slow-log window (long_query_time=0) on a server
for N seconds, put the server's settings back, digest the log with pt-query-digest.

Crash safety: the server's previous settings are read and handed to `persist`
(a JSON file next to the capture, and the engine's journal later) BEFORE the
first change. If the tool dies mid-window, `restore(server, saved_settings)`
(CLI: `dbmigrate digest restore --from-file`) puts them back.

Only connections opened after the window opens are captured: long_query_time is
copied into each session at connect, so a pool's existing connections keep
their own value. The capture reports how many client sessions were already
connected, so that a thin capture can be explained.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Protocol

from dbmigrate.home import home
from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.db import slow_log_table
from dbmigrate.digest import slowlog_text
from dbmigrate.digest.model import Digest
from dbmigrate.clock import Clock
from dbmigrate.exceptions import DbmigrateError, SafetyError, UsageError
from dbmigrate.hosts import Host, LocalHost
from dbmigrate.tools import percona

SAVED_KIND = "dbmigrate.slow_log_window"
MAX_WINDOW_S = 86400.0  # long_query_time=0 for more than a day is not a capture, it is a misconfiguration
WINDOW_FILE_PREFIX = "dbmigrate-digest-"

Persist = Callable[[dict[str, Any]], None]
Progress = Callable[[str], None]


class RestoreFailed(DbmigrateError):
    """The slow-log settings could not be put back as saved."""


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")




# -- where the slow log lives -----------------------------------------------------
class SlowLogReader(Protocol):
    """Makes a server-side slow-log path readable here. The server writes the file on
    its own host: a remote server needs a reader that fetches it (ssh/scp, a sidecar,
    the cloud provider's log API); a local server's file is read in place."""

    def fetch(self, server_path: str, dest_dir: Path) -> Path: ...

    def exists(self, server_path: str) -> bool | None: ...  # None: cannot tell


class LocalFileReader:
    """The server runs on this machine (sandbox, or the tool runs on the DB host)."""

    def fetch(self, server_path: str, dest_dir: Path) -> Path:
        path = Path(server_path)
        if not path.is_file():
            raise UsageError(f"the server's slow log {server_path} is not readable on this machine",
                             hint="for a remote server copy the file here and run: dbmigrate digest capture --slow-log FILE")
        return path

    def exists(self, server_path: str) -> bool | None:
        return os.path.lexists(server_path)


class HostFileReader:
    """Through the server's host (local, ssh or none, as the inventory declares).

    A remote window's file is fetched here and digested on this machine rather
    than running pt-query-digest on the database host: the digest costs seconds
    of a core per 100k queries (about 4 s for a 26 MB log), which would land on
    a primary under load, and it would need Percona Toolkit installed on every
    database host. Measured on loopback (bench/hosts_over_ssh.py, a window of
    30,000 events, 8.5 MB, local path 1.8-2.0 s): fetching adds 0.15-0.27 s,
    digesting on the host adds 0.09-0.9 s (its per-event samples come back on
    stderr through ssh), so time does not favour the host either, and the
    transfer is about 0.1 s of it. The window's file is the tool's own, so it
    is removed from the host once copied.
    """

    def __init__(self, host: Host):
        self.host = host

    def fetch(self, server_path: str, dest_dir: Path) -> Path:
        if isinstance(self.host, LocalHost):
            return LocalFileReader().fetch(server_path, dest_dir)
        dest_dir.mkdir(parents=True, exist_ok=True)
        local = dest_dir / os.path.basename(server_path)
        self.host.fetch(server_path, local, timeout=900)
        if os.path.basename(server_path).startswith(WINDOW_FILE_PREFIX):
            self.host.remove(server_path, timeout=60)
        return local

    def exists(self, server_path: str) -> bool | None:
        try:
            return self.host.exists(server_path, timeout=60)
        except DbmigrateError:
            return None  # a host the tool may not enter: the capture's own fetch says so later


# -- saved settings ----------------------------------------------------------------
def saved_settings_file_writer(path: Path) -> Persist:
    """A persist callback that writes the saved settings atomically to a 0600 JSON file."""

    def write(saved: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(saved, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)

    return write


def load_saved_settings(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"saved-settings file {path} does not exist",
                         hint="it is written next to the capture as <capture>.saved-settings.json") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None
    if not isinstance(data, dict) or data.get("kind") != SAVED_KIND or not isinstance(data.get("variables"), dict):
        raise UsageError(f"{path} is not a dbmigrate slow-log saved-settings file",
                         hint=f"expected kind={SAVED_KIND!r} with a 'variables' mapping")
    return data


def restore(server: Server, saved_settings: dict[str, Any], *, applier: Applier | None = None) -> list[str]:
    """Put the slow-log settings back as saved (idempotent); verify them; return what changed.

    Usable on its own after a crash of the tool: needs only the server and the
    dict that was persisted before the window opened.
    """
    if saved_settings.get("address") and saved_settings["address"] != server.address:
        raise SafetyError(f"these settings were saved on {saved_settings['address']}, not {server.name} ({server.address})",
                          hint="pass the server the window was opened on")
    wanted: dict[str, Any] = saved_settings["variables"]
    applier = applier or Applier(server)
    current = Inspector(server).slow_log_settings()
    changed = []
    # Saved in restore order: long_query_time first (ends the flood), the file last.
    for name, value in wanted.items():
        if name in current and _same(current[name], value):
            continue
        applier.set_global(name, value)
        changed.append(f"{name}: {current.get(name)!r} -> {value!r}")
    if applier.dry_run:
        return changed
    after = Inspector(server).slow_log_settings()
    wrong = [f"{n}={after.get(n)!r} (wanted {v!r})" for n, v in wanted.items() if n in after and not _same(after[n], v)]
    if wrong:
        raise RestoreFailed(f"{server.name}: slow-log settings not restored: {', '.join(wrong)}",
                            hint="set them by hand with SET GLOBAL, then check with SHOW GLOBAL VARIABLES LIKE '%slow%'")
    return changed


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b)) < 1e-9
    return str(a).upper() == str(b).upper()


# -- the window written to mysql.slow_log ------------------------------------------
def table_window_marker(server: Server, current: dict[str, Any]) -> dict[str, Any]:
    """What a table window must remember: where it starts on the server's clock, and whether
    every row the table will hold is the window's own (then it is emptied afterwards)."""
    kinds = {k.strip().upper() for k in str(current.get("log_output") or "").split(",")}
    owned = "TABLE" not in kinds and slow_log_table.row_count(server) == 0
    return {"source": "table", "since": slow_log_table.server_now(server), "table_owned": owned}


def is_table_window(saved: dict[str, Any] | None) -> bool:
    return bool(saved and saved.get("source") == "table")


def read_table_window(server: Server, since: str, until: str | None, dest: Path) -> tuple[Path, int]:
    """The statements logged in [since, until) as a local slow-log file for pt-query-digest."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", encoding="utf-8") as out:
        n = slowlog_text.write(slow_log_table.rows_between(server, since, until), out)
    return dest, n


def table_window_is_open(server: Server) -> bool:
    settings = Inspector(server).slow_log_settings()
    return str(settings.get("log_output", "")).upper() == "TABLE" and _same(settings.get("long_query_time"), 0)


def release_table_window(server: Server, saved: dict[str, Any]) -> bool:
    """Empty mysql.slow_log after the window was read, only when it held nothing else."""
    if is_table_window(saved) and saved.get("table_owned"):
        slow_log_table.clear(server)
        return True
    return False


# -- the window ----------------------------------------------------------------------
class SlowLogWindow:
    """long_query_time=0 to a file of our own, undone by close() or, after a crash, restore().

        window = SlowLogWindow(server, persist=journal.store)
        window.open()          # persist(saved_settings) happens before any change
        ...                    # traffic
        window.close()
    """

    def __init__(self, server: Server, *, log_file: str | None = None, persist: Persist | None = None,
                 applier: Applier | None = None, clock: Clock | None = None, source: str = "file",
                 sample: int = 1):
        if source not in ("file", "table"):
            raise UsageError(f"a slow-log window goes to a file or the table, not {source!r}")
        if sample < 1:
            raise UsageError(f"a slow-log window logs 1 in N statements with N >= 1, not {sample}")
        self.sample = sample
        self.source = source
        self.server = server
        self.inspector = Inspector(server)
        self.applier = applier or Applier(server)
        self.persist = persist
        self.log_file = log_file
        self.saved_settings: dict[str, Any] | None = None
        self.opened_at: float | None = None
        self.closed_at: float | None = None
        self.sessions_before: int = 0
        self.clock = clock or Clock()

    @property
    def duration_s(self) -> float | None:
        if self.opened_at is None:
            return None
        return (self.closed_at or self.clock.monotonic()) - self.opened_at

    def default_log_file(self, current: dict[str, Any]) -> str:
        """A new file next to the server's own slow log (a directory it can write)."""
        existing = str(current.get("slow_query_log_file") or "")
        directory = os.path.dirname(existing) if os.path.isabs(existing) else \
            str(self.inspector.variable("datadir")).rstrip("/")
        return f"{directory}/{WINDOW_FILE_PREFIX}{_stamp()}-{os.getpid()}.slow.log"

    def open(self) -> dict[str, Any]:
        current = self.inspector.slow_log_settings()
        if os.path.basename(str(current.get("slow_query_log_file") or "")).startswith(WINDOW_FILE_PREFIX):
            # Saving these would make the next restore put long_query_time=0 back for good.
            raise SafetyError(
                f"{self.server.name} is already logging to a dbmigrate capture file "
                f"({current['slow_query_log_file']}, long_query_time={current.get('long_query_time')})",
                hint="an earlier capture did not finish: run dbmigrate digest restore --from-file <its .saved-settings.json>")
        if self.source == "table":
            log_file = None
            window = self.server.flavor.slow_log_table_window_settings(current)
        else:
            log_file = self.log_file or self.default_log_file(current)
            window = self.server.flavor.slow_log_window_settings(log_file, current)
        if self.sample > 1:
            # Sampled: the server writes 1 in N statements (less of the primary's time spent
            # logging under load); latencies stay comparable, counts and rates are 1/N.
            if "log_slow_rate_limit" not in window:
                raise UsageError(f"{self.server.name} ({self.server.flavor.name}) cannot sample its slow log "
                                 "(no log_slow_rate_limit)", hint="capture without sampling")
            window["log_slow_rate_limit"] = self.sample
        order = list(reversed(list(window)))  # undo in reverse: long_query_time first, the file last
        self.saved_settings = {
            "kind": SAVED_KIND, "version": 1, "server": self.server.name, "address": self.server.address,
            "flavor": self.server.flavor.name, "window_file": log_file, "opened_at": _now_iso(),
            "variables": {n: current[n] for n in order if n in current},
        }
        if self.source == "table":
            self.saved_settings.update(table_window_marker(self.server, current))
        self.sessions_before = len(self.inspector.sessions())
        if self.persist:
            self.persist(dict(self.saved_settings))
        try:
            for name, value in window.items():
                self.applier.set_global(name, value)
        except BaseException:
            restore(self.server, self.saved_settings, applier=self.applier)
            raise
        self.log_file = log_file
        self.opened_at = self.clock.monotonic()
        return self.saved_settings

    def close(self) -> list[str]:
        if self.saved_settings is None:
            return []
        self.closed_at = self.clock.monotonic()
        if self.source == "table" and not self.applier.dry_run:
            self.saved_settings["until"] = slow_log_table.server_now(self.server)
        return restore(self.server, self.saved_settings, applier=self.applier)

    def __enter__(self) -> "SlowLogWindow":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- capture ------------------------------------------------------------------------
@dataclass
class CaptureResult:
    digest_file: Path
    digest: Digest
    slow_log: str
    saved_settings_file: Path | None = None
    sessions_before: int = 0
    restored: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        d = self.digest
        sampled = int((d.source or {}).get("sampled_1_in") or 1)
        return (f"captured {d.query_count} queries in {len(d.classes)} classes over "
                f"{d.duration_s or 0:.1f}s" + (f" (1 in {sampled} statements logged: counts and rates are of "
                                               f"the sample, latencies comparable)" if sampled > 1 else "")
                + f"; digest in {self.digest_file}")


def default_digest_file(server_name: str) -> Path:
    return home() / "digests" / f"{server_name}-{_stamp()}.digest.json"


def saved_settings_path_for(digest_file: Path) -> Path:
    return digest_file.with_name(digest_file.name.removesuffix(".json").removesuffix(".digest") + ".saved-settings.json")


def mark_restored(path: Path, saved: dict[str, Any]) -> None:
    """Keep the file (an audit trail) but say it has been applied."""
    saved_settings_file_writer(path)({**saved, "restored_at": _now_iso()})


def capture_window(server: Server, seconds: float, out: str | Path | None = None, *,
                   saved_settings_file: str | Path | None = None, persist: Persist | None = None,
                   log_file: str | None = None, reader: SlowLogReader | None = None,
                   progress: Progress | None = None, clock: Clock | None = None,
                   source: str = "file", sample: int = 1) -> CaptureResult:
    """Open a slow-log window on `server` for `seconds`, restore, digest. The saved
    settings go to `saved_settings_file` (default: next to the digest) and to `persist`."""
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_WINDOW_S:
        raise UsageError(f"a capture window needs a number of seconds between 0 and {MAX_WINDOW_S:g}, not {seconds:g}",
                         hint="e.g. --seconds 30")
    reader = reader or LocalFileReader()
    if log_file is not None:
        if not os.path.isabs(log_file):
            raise UsageError(f"--server-log-file {log_file} is not an absolute path",
                             hint="name a new file on the server's host, e.g. /var/lib/mysql/capture.slow.log")
        if reader.exists(log_file):
            # mariadbd appends to an existing slow log: the digest would mix in older queries,
            # and the file (not ours) would be removed after the fetch.
            raise UsageError(f"--server-log-file {log_file} already exists: the server would append to it and the "
                             "digest would include whatever it held before", hint="name a file that does not exist yet")
    say = progress or (lambda msg: None)
    out = Path(out) if out else default_digest_file(server.name)
    saved_path = Path(saved_settings_file) if saved_settings_file else saved_settings_path_for(out)
    write_saved = saved_settings_file_writer(saved_path)

    def persist_all(saved: dict[str, Any]) -> None:
        write_saved(saved)
        if persist:
            persist(saved)

    clock = clock or Clock()
    if source == "table" and log_file:
        raise UsageError("a window read from the slow-log table has no file of its own",
                         hint="drop --server-log-file, or declare file access for the server")
    window = SlowLogWindow(server, log_file=log_file, persist=persist_all, clock=clock, source=source, sample=sample)
    restored: list[str] = []
    # open() is inside the try: an interrupt that lands just after the last SET
    # must still restore (open() itself undoes a half-applied window).
    try:
        window.open()
        where = window.log_file if source == "file" else "mysql.slow_log"
        say(f"window open on {server.name}: long_query_time=0 to {where} for {seconds:g}s "
            f"(previous settings saved in {saved_path})")
        clock.sleep(seconds)
    finally:
        if window.saved_settings is not None:
            restored = window.close()
            mark_restored(saved_path, window.saved_settings)
            say(f"window closed after {window.duration_s or 0:.1f}s; settings restored ({len(restored)} changed)")
    saved = window.saved_settings or {}
    if source == "table":
        out.parent.mkdir(parents=True, exist_ok=True)
        local_log, n = read_table_window(server, saved["since"], saved.get("until"),
                                         out.with_name(out.name.removesuffix(".json") + ".slow.log"))
        emptied = release_table_window(server, saved)
        say(f"read {n} statements from mysql.slow_log" + ("; the table is empty again" if emptied else
                                                          "; the table held other rows: left as it was"))
    else:
        local_log = reader.fetch(window.log_file or "", out.parent)
    where = str(window.log_file) if source == "file" else "mysql.slow_log"
    source_meta = {"kind": "window", "server": server.name, "address": server.address, "slow_log": where,
              "captured_at": window.saved_settings["opened_at"] if window.saved_settings else _now_iso(),
              "seconds": round(window.duration_s or 0, 3), "sessions_before": window.sessions_before,
              "sampled_1_in": sample}
    digest = digest_slow_log(local_log, out, duration_s=window.duration_s, source=source_meta)
    if source == "table":
        local_log.unlink(missing_ok=True)  # rebuilt from the table: the digest is what is kept
    return CaptureResult(out, digest, where, saved_path, window.sessions_before, restored)


def digest_slow_log(slow_log: str | Path, out: str | Path | None = None, *, duration_s: float | None = None,
                    source: dict[str, Any] | None = None) -> Digest:
    """pt-query-digest an existing slow log; the duration defaults to the span of its timestamps."""
    run = percona.run_query_digest(slow_log)
    meta = {"kind": "slow-log", "slow_log": str(slow_log), **(source or {}),
            "pt_query_digest_s": round(run.elapsed_s, 3)}
    digest = Digest.from_pt_json(run.report, run.samples, duration_s if duration_s else run.span_s, meta,
                                 where=str(slow_log))
    if out:
        digest.save(out)
    return digest
