"""Who is writable, every few milliseconds: a watcher of @@read_only on every server.

One thread per server polls on its own connection (a frozen server must not blind the
watcher to the others) and keeps (time, writable) samples. Answered samples carry the
server's own clock at execution (SYSDATE(6)); servers on one host share that clock, so
samples of different servers are on one timeline, free of the watcher's scheduling delays.
A server that does not answer counts as not writable (it takes no writes), timed by the
watcher's clock.

Between two consecutive samples of one server that agree (both writable, or both not),
the server is taken to have stayed that way; between two that disagree, it is unknown.
From these spans come:
- moments with two or more writable servers: spans where two servers were surely
  writable at once (never a guess from a sample that may be stale);
- intervals with no writable server: spans where every server was surely not writable.
Both are exact to within one poll interval.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError

Sample = tuple[float, bool]  # (Unix time, writable)


@dataclass(frozen=True)
class Interval:
    start: float
    end: float
    servers: tuple[str, ...] = ()  # for two-writable intervals: who was writable

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1000.0


def certain_spans(samples: list[Sample], writable: bool) -> list[tuple[float, float]]:
    """Spans between consecutive samples that both say `writable` (sorted by time)."""
    out: list[tuple[float, float]] = []
    for (t0, w0), (t1, w1) in zip(samples, samples[1:]):
        if w0 == writable and w1 == writable and t1 >= t0:
            if out and out[-1][1] == t0:
                out[-1] = (out[-1][0], t1)
            else:
                out.append((t0, t1))
    return out


def _sweep(spans: Mapping[str, list[tuple[float, float]]]) -> list[tuple[float, float, frozenset[str]]]:
    """Elementary intervals of the time line, each with the servers whose spans cover it."""
    points = sorted({t for ss in spans.values() for s in ss for t in s})
    out = []
    for a, b in zip(points, points[1:]):
        mid = (a + b) / 2
        inside = frozenset(n for n, ss in spans.items() if any(s <= mid <= e for s, e in ss))
        out.append((a, b, inside))
    return out


def _merge(pieces: Iterable[tuple[float, float, tuple[str, ...]]]) -> list[Interval]:
    out: list[Interval] = []
    for a, b, who in pieces:
        if out and out[-1].end == a:
            prev = out[-1]
            out[-1] = Interval(prev.start, b, tuple(sorted(set(prev.servers) | set(who))))
        else:
            out.append(Interval(a, b, tuple(sorted(who))))
    return out


def two_writable(timelines: Mapping[str, list[Sample]]) -> list[Interval]:
    """Intervals where at least two servers were surely writable at once."""
    spans = {n: certain_spans(s, True) for n, s in timelines.items()}
    return _merge((a, b, tuple(w)) for a, b, w in _sweep(spans) if len(w) >= 2)


def no_writer(timelines: Mapping[str, list[Sample]]) -> list[Interval]:
    """Intervals where every server was surely not writable."""
    spans = {n: certain_spans(s, False) for n, s in timelines.items()}
    everyone = frozenset(timelines)
    return _merge((a, b, ()) for a, b, w in _sweep(spans) if w == everyone and everyone)


@dataclass
class MonitorReport:
    samples: dict[str, int]
    polls_per_s: float
    two_writable: list[Interval] = field(default_factory=list)
    no_writer: list[Interval] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def longest_no_writer_ms(self) -> float:
        return round(max((i.ms for i in self.no_writer), default=0.0), 1)

    @property
    def two_writable_moments(self) -> int:
        return len(self.two_writable)

    def to_dict(self) -> dict:
        return {"samples": self.samples, "polls_per_s": round(self.polls_per_s, 1), "errors": self.errors,
                "two_writable": [{"ms": round(i.ms, 1), "servers": list(i.servers)} for i in self.two_writable],
                "no_writer_ms": [round(i.ms, 1) for i in self.no_writer],
                "longest_no_writer_ms": self.longest_no_writer_ms}


class WritableMonitor:
    """Start, let things happen, stop() -> MonitorReport."""

    def __init__(self, servers: Mapping[str, tuple[str, int, Credentials]], interval_s: float = 0.005,
                 timeout_s: int = 1, sockets: Mapping[str, str] | None = None):
        self.addresses = dict(servers)  # name -> (host, port, credentials)
        # name -> unix socket: polled there instead, so that a partitioned port does not blind the watcher
        self.sockets = dict(sockets or {})
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.timelines: dict[str, list[Sample]] = {n: [] for n in servers}
        self.errors: dict[str, int] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = self._stopped = 0.0

    @classmethod
    def for_cluster(cls, inventory, cluster: str, **kw) -> "WritableMonitor":
        spec = inventory.cluster(cluster)
        servers = {n: (s.host, s.port, inventory.credentials_for(s)) for n, s in spec.servers.items()}
        return cls(servers, **kw)

    def start(self) -> "WritableMonitor":
        self._started = time.monotonic()
        for name in self.addresses:
            t = threading.Thread(target=self._poll, args=(name,), name=f"writable-monitor-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _poll(self, name: str) -> None:
        host, port, credentials = self.addresses[name]
        server = Server(name, host, port, credentials, connect_timeout=self.timeout_s,
                        read_timeout=self.timeout_s, retries=0, unix_socket=self.sockets.get(name))
        insp = Inspector(server)
        line = self.timelines[name]
        next_due = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    read_only, at = insp.read_only_at()
                    line.append((at, not read_only))
                except DbmigrateError:
                    server.close()
                    line.append((time.time(), False))  # no answer: it takes no writes
                    self.errors[name] = self.errors.get(name, 0) + 1
                next_due = max(next_due + self.interval_s, time.monotonic())  # a poll every interval_s
                self._stop.wait(max(0.0, next_due - time.monotonic()))
        finally:
            server.close()

    def stop(self) -> MonitorReport:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s * 3 + 2)
        self._stopped = time.monotonic()
        return self.report()

    def report(self) -> MonitorReport:
        lines = {n: sorted(s) for n, s in self.timelines.items()}
        seconds = max((self._stopped or time.monotonic()) - self._started, 1e-9)
        total = sum(len(s) for s in lines.values())
        return MonitorReport(samples={n: len(s) for n, s in lines.items()},
                             polls_per_s=total / seconds / max(len(lines), 1),
                             two_writable=two_writable(lines), no_writer=no_writer(lines), errors=dict(self.errors))

