"""A query window read on the wire: every statement the server receives on its MySQL port,
whatever the session set (its own long_query_time), however it was sent (server-side prepared
statements over the binary protocol), from sessions connected before the window too.

tcpdump runs on the server's host (tools/wire.py, through hosts/), tshark dissects here, the
dissector pairs commands with replies (digest/wire_dissect.py), and each statement is written
as a slow-log entry with its time, account and default database, so that pt-query-digest
summarises the window into the digest's usual model. Nothing on the server changes: no
setting to restore after a crash; the host's tcpdump stops on its own at its time limit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from dbmigrate.db.connection import Server
from dbmigrate.digest import slowlog_text
from dbmigrate.digest.model import Digest
from dbmigrate.digest.wire_dissect import Dissector, Statement, WireCounts, client_ports
from dbmigrate.clock import Clock
from dbmigrate.hosts import Host
from dbmigrate.tools.wire import DEFAULT_MAX_BYTES, DEFAULT_SNAP, TapLimits, TapStats, WireTap, check_available

Progress = Callable[[str], None]
SLACK_S = 30.0  # the host's tcpdump outlives the planned window by this much at most


class WireWindow:
    """Open: tcpdump on the host streams to tshark here; `take()` hands over the statements
    completed since the last take; `close()` stops the tap and returns its counts."""

    def __init__(self, server: Server, host: Host, *, max_seconds: float, snap: int = DEFAULT_SNAP,
                 max_bytes: int = DEFAULT_MAX_BYTES, interface: str = "any", clock: Clock | None = None):
        self.server, self.host = server, host
        self.limits = TapLimits(seconds=max_seconds, snap=snap, max_bytes=max_bytes, interface=interface)
        self.dissector = Dissector(server.port)
        self.clock = clock or Clock()
        self._lock = threading.Lock()
        self._new: list[Statement] = []
        self._tap: WireTap | None = None
        self.opened_at: float | None = None
        self.closed_at: float | None = None
        self.stats: TapStats | None = None

    def check(self) -> None:
        """Refuses (WireUnavailable) before anything starts when the wire cannot be read."""
        check_available(self.host, self.server.port, self.limits.interface)

    def _on_frame(self, frame: list[str]) -> None:
        with self._lock:
            s = self.dissector.feed(frame)
            if s is not None:
                self._new.append(s)

    def open(self) -> "WireWindow":
        # The sessions already connected: their account and database, which their handshake
        # (before the window) carried, from the processlist.
        from dbmigrate.db.inspector import Inspector

        self.dissector.known = client_ports(Inspector(self.server).sessions())
        self._tap = WireTap(self.host, self.server.port, self.limits, self._on_frame).start()
        self.opened_at = self.clock.monotonic()
        return self

    def take(self) -> list[Statement]:
        with self._lock:
            got, self._new = self._new, []
        return got

    def close(self) -> TapStats:
        if self._tap is not None:
            self.stats = self._tap.stop()
            self._tap = None
            self.closed_at = self.clock.monotonic()
        return self.stats or TapStats()

    @property
    def counts(self) -> WireCounts:
        return self.dissector.counts

    @property
    def duration_s(self) -> float | None:
        if self.opened_at is None:
            return None
        return (self.closed_at or self.clock.monotonic()) - self.opened_at

    def alive(self) -> bool:
        return self._tap is not None and self._tap.alive()


def write_entries(statements: list[Statement], out: TextIO) -> int:
    return slowlog_text.write((s.slow_log_row() for s in statements), out)


def wire_source(server: Server, window: WireWindow) -> dict[str, Any]:
    c, stats = window.counts, window.stats or TapStats()
    return {"kind": "wire", "server": server.name, "address": server.address,
            "seconds": round(window.duration_s or 0, 3), "statements": c.statements,
            "prepared_executions": c.prepared_executions, "sessions": c.sessions,
            "sessions_before": c.sessions_before, "unresolved_executions": c.unknown_executions,
            "errors": c.errors, "bytes": stats.bytes, "truncated_at_max_bytes": stats.truncated,
            "dropped_by_kernel": stats.dropped_by_kernel, "dissection_unfinished": stats.unfinished,
            "snap_bytes": window.limits.snap, "session_sets": window.dissector.session_sets}


@dataclass
class WireCapture:
    digest_file: Path
    digest: Digest
    source: dict[str, Any]

    def sentence(self) -> str:
        s, d = self.source, self.digest
        return (f"captured {d.query_count} statements in {len(d.classes)} classes over {d.duration_s or 0:.1f}s on "
                f"the wire ({s['prepared_executions']} prepared executions, {s['sessions']} session(s), "
                f"{s['sessions_before']} connected before the window)" + unseen_note(s)
                + f"; digest in {self.digest_file}")


def unseen_note(source: dict[str, Any]) -> str:
    notes = []
    if source.get("unresolved_executions"):
        notes.append(f"{source['unresolved_executions']} execution(s) of statements prepared before the window "
                     f"opened (their text was not on the wire): not in the digest")
    if source.get("dropped_by_kernel"):
        notes.append(f"{source['dropped_by_kernel']} packet(s) dropped by the kernel (tcpdump's buffer was full: "
                     f"statements on those streams may be missing)")
    if source.get("dissection_unfinished"):
        notes.append("tshark had not dissected the whole capture in time (a starved machine): statements missing")
    if source.get("truncated_at_max_bytes"):
        notes.append(f"the capture stopped at its byte limit ({source['bytes']} bytes)")
    return "; " + "; ".join(notes) if notes else ""


def capture_wire_window(server: Server, host: Host, seconds: float, out: Path, *, progress: Progress | None = None,
                        clock: Clock | None = None, snap: int = DEFAULT_SNAP, max_bytes: int = DEFAULT_MAX_BYTES,
                        interface: str = "any") -> WireCapture:
    from dbmigrate.digest.window import digest_slow_log

    say, clock = progress or (lambda m: None), clock or Clock()
    window = WireWindow(server, host, max_seconds=seconds + SLACK_S, snap=snap, max_bytes=max_bytes,
                        interface=interface, clock=clock)
    window.check()
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.with_name(out.name.removesuffix(".json") + ".wire.slow.log")
    window.open()
    say(f"window open on {server.name}: tcpdump of port {server.port} on {host.name} (snap {snap} bytes, at most "
        f"{max_bytes // (1024 * 1024)} MB, nice 19), dissected by tshark, for {seconds:g}s; no setting changed")
    try:
        clock.sleep(seconds)
    finally:
        window.close()
    with open(log, "w", encoding="utf-8") as f:
        n = write_entries(window.take(), f)
    source = wire_source(server, window)
    say(f"window closed after {window.duration_s or 0:.1f}s: {n} statement(s), "
        f"{source['prepared_executions']} prepared execution(s)")
    digest = digest_slow_log(log, out, duration_s=window.duration_s, source=source)
    log.unlink(missing_ok=True)
    return WireCapture(out, digest, source)
