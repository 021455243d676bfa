"""Sampling a cluster while a run goes on, for the run's report: replica lag and the writer's round trip.

It is an observer: it never decides anything, never slows a step (its own thread,
short timeouts) and a failed sample is counted, not raised. The samples are saved
in the journal as the run's evidence after the run, under the run's id.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from dbmigrate.app.monitor import ClusterMonitor
from dbmigrate.engine.journal import Journal
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.report import model as m
from dbmigrate.report.series import per_second_latency

PROBE_SOURCE = "round trip of a read_only query on the writable server, sampled by dbmigrate"


class ClusterSampler:
    """Every `interval_s`: which server is writable, its round trip and each replica's heartbeat lag."""

    def __init__(self, inventory_path: Path, cluster: str, *, interval_s: float = 0.25,
                 write_heartbeat: bool = True) -> None:
        self.inventory_path, self.cluster = inventory_path, cluster
        self.interval_s = interval_s
        self.write_heartbeat = write_heartbeat
        self.lag: list[list[Any]] = []         # [epoch, replica, ms or None]
        self.probe: list[tuple[float, float]] = []  # (epoch, ms)
        self.writers: list[list[Any]] = []     # [epoch, writer or None] when it changes
        self.failed = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "ClusterSampler":
        self._thread = threading.Thread(target=self._loop, name="report-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> "ClusterSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        try:
            monitor = ClusterMonitor(self.inventory_path, self.cluster, write_heartbeat=self.write_heartbeat)
        except (DbmigrateError, OSError):
            self.failed += 1
            return
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                self.take(monitor)
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
            # The run's end state always makes it in, however late the last tick was on a busy host.
            self.take(monitor)
        finally:
            monitor.close()

    def take(self, monitor: ClusterMonitor) -> None:
        """One sample; a failure is counted, never raised."""
        try:
            s = monitor.sample()
        except Exception:  # an observer must never take the run down
            self.failed += 1
            return
        self.samples += 1
        now = time.time()
        if not self.writers or self.writers[-1][1] != s.writer:
            self.writers.append([round(now, 3), s.writer])
        if s.latency_ms is not None:
            self.probe.append((now, s.latency_ms))
        for lag in s.lag:
            self.lag.append([round(now, 3), lag.name, None if lag.lag_ms is None else round(lag.lag_ms, 2)])

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {m.SAMPLER: {"interval_s": self.interval_s, "samples": self.samples,
                                           "failed": self.failed}}
        if self.lag:
            out[m.LAG] = {"source": "pt-heartbeat-style row written on the writable server, read on each replica",
                          "points": self.lag, "writers": self.writers}
        if self.probe:
            out[m.LATENCY] = {"source": PROBE_SOURCE, "points": per_second_latency(self.probe)}
        return out

    def save(self, journal_path: Path, run_id: str, *, keep: tuple[str, ...] = ()) -> None:
        """Into the run's evidence; names in `keep` already recorded by a finer source stay."""
        with Journal(journal_path) as journal:
            have = journal.evidence(run_id)
            for name, value in self.evidence().items():
                if name in keep and name in have:
                    continue
                journal.record_evidence(run_id, name, value)
