"""Pacing a seeding copy so that the old server keeps serving its applications.

The copy's bytes pass through a relay in this process (hosts.pipe.stream with a
relay), and a valve in that relay sets the pace: a byte rate, or paused. A
watcher next to it times a probe query on the old server and reads its replicas'
lag, and closes the valve while either is past the playbook's limit.

Why a relay and not mariadb-backup's own `--throttle`: that option counts I/O
operations per second, is fixed when the backup starts, and cannot pause; the
relay is in bytes per second (what disks and links are sized in), changes at
once, pauses without ending the backup, and measures progress for rate and ETA.
While the relay is paused, mariadb-backup blocks on its output; its redo log copy
keeps running into a temporary file (it streams that file last), so a pause does
not lose redo the copy needs.

Why a probe and not performance_schema: MariaDB ships with performance_schema
off (turning it on needs a restart) and its digest tables have no quantiles,
so a p99.9 cannot be read from them. Timing one indexed point read (or SELECT 1
when no shard table has an integer key) a hundred times a second costs the
server next to nothing and sees what an application sees: queueing for CPU,
disk and locks.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import IO, Any, Callable, Optional

CHUNK = 1 << 20
MB = 1_000_000


@dataclass(frozen=True)
class Limits:
    cap_bps: Optional[float]  # bytes per second; None: no cap
    max_p999_ms: Optional[float]
    max_lag_s: Optional[float]


@dataclass(frozen=True)
class Decision:
    rate_bps: Optional[float]  # None: full speed; 0: paused
    reason: str

    @property
    def paused(self) -> bool:
        return self.rate_bps == 0


def decide(limits: Limits, p999_ms: Optional[float], lag_s: Optional[float]) -> Decision:
    """Paused past a limit; half pace within 20% of it (so the copy eases off before it
    hurts); otherwise the cap. Unknown figures (no samples yet) do not pause."""
    over, near = [], []
    if limits.max_p999_ms is not None and p999_ms is not None:
        if p999_ms > limits.max_p999_ms:
            over.append(f"source p99.9 {p999_ms:.1f} ms > {limits.max_p999_ms:g} ms")
        elif p999_ms > 0.8 * limits.max_p999_ms:
            near.append(f"source p99.9 {p999_ms:.1f} ms near {limits.max_p999_ms:g} ms")
    if limits.max_lag_s is not None and lag_s is not None:
        if lag_s > limits.max_lag_s:
            over.append(f"replica lag {lag_s:g} s > {limits.max_lag_s:g} s")
        elif lag_s > 0.8 * limits.max_lag_s:
            near.append(f"replica lag {lag_s:g} s near {limits.max_lag_s:g} s")
    if over:
        return Decision(0, "paused: " + "; ".join(over))
    cap = f"capped at {limits.cap_bps / MB:g} MB/s" if limits.cap_bps else "full speed"
    if near:
        # Half of the cap; with no cap, half of what the copy did recently is set by the caller.
        return Decision(limits.cap_bps / 2 if limits.cap_bps else -1.0, "half pace: " + "; ".join(near))
    return Decision(limits.cap_bps, cap)


def percentile(samples: list[float], q: float) -> Optional[float]:
    """Nearest-rank percentile (q in 0..100); None without samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered) / 100 - 1e-9) - 1)]


def eta_s(done: int, total: Optional[int], rate_bps: float) -> Optional[float]:
    if not total or rate_bps <= 0 or done >= total:
        return None if not total or done < total else 0.0
    return (total - done) / rate_bps


# Shown before the copy ends: at most this share of the total (never "100%").
MAX_RUNNING_SHARE = 0.99


@dataclass(frozen=True)
class Progress:
    """What a copy's progress may honestly say while it runs.

    `total` is the estimate of what will be copied, grown when the copy outgrows it (then
    `grown` is set and the ETA is unknown: nothing says how much more comes); `pct` stays
    at most 99 until the copy has ended, and `eta_s` at least 1 s; no estimate (or one
    of 0 bytes) gives no share and no ETA, never "of ~0 MB"."""

    done: int
    total: Optional[int]
    estimate: Optional[int]
    pct: Optional[float]
    eta_s: Optional[float]
    grown: bool
    finished: bool

    def share_text(self) -> str:
        if self.finished:
            return f"{mb_text(self.done)} copied (done)"
        if self.total is None or self.pct is None:
            return f"{mb_text(self.done)} copied"
        past = f", past the estimate of {mb_text(self.estimate or 0)}" if self.grown else ""
        return f"{mb_text(self.done)} of ~{mb_text(self.total)} ({math.floor(self.pct + 1e-6):.0f}%{past})"

    def eta_text(self) -> str:
        return "?" if self.eta_s is None else f"{self.eta_s:.0f} s"


def mb_text(n: float) -> str:
    """Megabytes with enough digits that a non-zero amount never reads as 0 MB."""
    v = n / MB
    if v >= 10 or v == 0:
        return f"{v:,.0f} MB"
    return f"{v:.1f} MB" if v >= 0.1 else f"{v:.2f} MB" if v >= 0.01 else f"{n / 1000:,.0f} kB"


def progress_of(done: int, estimate: Optional[int], rate_bps: float, finished: bool = False) -> Progress:
    if finished:
        return Progress(done, done, estimate, 100.0, 0.0, bool(estimate and done > estimate), True)
    if not estimate or estimate <= 0:
        return Progress(done, None, None, None, None, False, False)
    grown = done >= estimate
    # Past 99% of the estimate the total shown grows with the copy, so that no share computed
    # from these bytes (here or on a board) reads 100% before the end.
    total = estimate if done <= MAX_RUNNING_SHARE * estimate else math.ceil(done / MAX_RUNNING_SHARE)
    pct = min(100 * MAX_RUNNING_SHARE, 100 * done / total)
    eta = None if grown or rate_bps <= 0 else max(1.0, (estimate - done) / rate_bps)
    return Progress(done, total, estimate, pct, eta, grown, False)


class Valve:
    """A token bucket whose rate can change (or drop to 0: paused) while bytes flow."""

    def __init__(self, rate_bps: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        self._cond = threading.Condition()
        self._rate = rate_bps
        self._tokens = 0.0
        self._clock = clock
        self._last = clock()
        self.paused_s = 0.0
        self.closed = False

    @property
    def rate(self) -> Optional[float]:
        return self._rate

    def set(self, rate_bps: Optional[float]) -> None:
        with self._cond:
            self._refill()
            self._rate = rate_bps
            self._cond.notify_all()

    def close(self) -> None:
        """Let everything through (the copy is being torn down)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def _refill(self) -> None:
        now = self._clock()
        if self._rate:
            # A quarter second of burst keeps the pace smooth without a long catch-up after a pause.
            self._tokens = min(self._tokens + (now - self._last) * self._rate, max(self._rate / 4, CHUNK))
        self._last = now

    def take(self, n: int) -> None:
        """Block until `n` bytes may pass."""
        with self._cond:
            while not self.closed:
                self._refill()
                if self._rate is None:
                    return
                if self._rate == 0:
                    started = self._clock()
                    self._cond.wait(0.2)
                    self.paused_s += self._clock() - started
                    continue
                if self._tokens >= n or self._tokens >= max(self._rate / 4, CHUNK):
                    self._tokens -= n
                    return
                self._cond.wait(min(1.0, (n - self._tokens) / self._rate))


class Meter:
    """Bytes that passed, and the recent rate (over the last few seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = 5.0):
        self.clock = clock
        self.started = clock()
        self.bytes = 0
        self._marks: deque[tuple[float, int]] = deque([(self.started, 0)])
        self._window = window_s
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n
            now = self.clock()
            self._marks.append((now, self.bytes))
            while len(self._marks) > 2 and now - self._marks[1][0] > self._window:
                self._marks.popleft()

    def recent_rate(self) -> float:
        with self._lock:
            (t0, b0), now = self._marks[0], self.clock()
            return (self.bytes - b0) / (now - t0) if now > t0 else 0.0

    def average_rate(self) -> float:
        elapsed = self.clock() - self.started
        return self.bytes / elapsed if elapsed > 0 else 0.0


def relay(valve: Valve, meter: Meter, chunk: int = CHUNK) -> Callable[[IO[bytes], IO[bytes]], None]:
    """The pipe's relay: read what the producer wrote, wait for the valve, pass it on."""

    def copy(src: IO[bytes], dst: IO[bytes]) -> None:
        read = getattr(src, "read1", src.read)  # whatever is there now, so pacing stays fine-grained
        while True:
            data = read(chunk)
            if not data:
                return
            valve.take(len(data))
            dst.write(data)
            meter.add(len(data))

    return copy


class Watcher(threading.Thread):
    """Times probes on the old server, reads lag, and sets the valve; reports progress.

    probe() runs one probe query; lag() returns the worst replica lag in seconds (or
    None); cap() returns the current cap in bytes/s (a live override may change it);
    report(text, figures) receives a progress line every `progress_every_s`.
    """

    def __init__(self, valve: Valve, meter: Meter, *, probe: Callable[[], object],
                 lag: Callable[[], Optional[float]], cap: Callable[[], Optional[float]], limits: Limits,
                 total_bytes: Optional[int], probe_per_s: float, window_s: float, progress_every_s: float,
                 report: Callable[[str, dict[str, Any]], None], clock: Callable[[], float] = time.monotonic,
                 held: Callable[[], bool] = lambda: False,
                 write_probe: Optional[Callable[[], object]] = None, write_probe_per_s: float = 10,
                 locked: Callable[[], Optional[str]] = lambda: None):
        super().__init__(daemon=True, name="seed-watcher")
        self.valve, self.meter, self.probe, self.lag, self.cap = valve, meter, probe, lag, cap
        self.limits, self.total = limits, total_bytes
        self.interval = 1 / probe_per_s
        self.window_s, self.progress_every_s = window_s, progress_every_s
        self.report, self.clock, self.held = report, clock, held
        self.locked = locked
        self.samples: deque[tuple[float, float]] = deque()
        # Writes: (start, ms, under the backup's lock). A commit that waited on the backup's own
        # lock says nothing pacing can change (the copy is never paced then): kept for the
        # record (longest_write_ms), left out of decisions.
        self.write_probe = write_probe
        self.write_interval = 1 / write_probe_per_s
        self.write_samples: deque[tuple[float, float, bool]] = deque()
        self.longest_write_ms: Optional[float] = None
        self.longest_write_under_lock_ms: Optional[float] = None
        self.worst_write_p999_ms: Optional[float] = None
        self.stop_flag = threading.Event()
        self.decision = Decision(limits.cap_bps, "starting")
        self.pauses = 0
        self.worst_p999_ms: Optional[float] = None
        self.probe_errors = 0
        self.lag_s: Optional[float] = None
        self._in_flight_since: Optional[float] = None
        self._write_in_flight: Optional[tuple[float, bool]] = None

    def p999_ms(self) -> Optional[float]:
        return percentile(self.window_ms(), 99.9)

    def write_p999_ms(self) -> Optional[float]:
        return percentile(self.write_window_ms(), 99.9)

    def run(self) -> None:
        prober = threading.Thread(target=self._probe_loop, daemon=True, name="seed-probe")
        if self.limits.max_p999_ms is not None:
            prober.start()
            if self.write_probe is not None:
                threading.Thread(target=self._write_probe_loop, daemon=True, name="seed-write-probe").start()
        next_lag = 0.0
        next_report = self.clock() + self.progress_every_s
        while not self.stop_flag.is_set():
            now = self.clock()
            if now >= next_lag and self.limits.max_lag_s is not None:
                try:
                    self.lag_s = self.lag()
                except Exception:
                    self.lag_s = None
                next_lag = now + 1.0
            self._decide()
            if now >= next_report:
                self.report(*self.progress())
                next_report = now + self.progress_every_s
            self.stop_flag.wait(0.25)

    def _probe_loop(self) -> None:
        """Probes in a thread of their own: a probe stuck on a stalled server still counts,
        as an in-flight sample, in the decisions the watcher keeps making."""
        while not self.stop_flag.is_set():
            started = self.clock()
            self._in_flight_since = started
            try:
                t = time.perf_counter()
                self.probe()
                self.samples.append((started, (time.perf_counter() - t) * 1000))
            except Exception:
                self.probe_errors += 1  # an unreachable source shows up as the copy failing
            finally:
                self._in_flight_since = None
            while self.samples and self.clock() - self.samples[0][0] > self.window_s:
                self.samples.popleft()
            self.stop_flag.wait(self.interval)

    def _write_probe_loop(self) -> None:
        """One small committed write on the source at a time (the tool's heartbeat row): how long
        a commit takes there now, which a read cannot see (a commit lock lets reads through)."""
        assert self.write_probe is not None
        while not self.stop_flag.is_set():
            started = self.clock()
            under_lock = self.locked() is not None
            self._write_in_flight = (started, under_lock)
            try:
                t = time.perf_counter()
                self.write_probe()
                ms = (time.perf_counter() - t) * 1000
                under_lock = under_lock or self.locked() is not None
                self.write_samples.append((started, ms, under_lock))
                self._note_write(ms, under_lock)
            except Exception:
                self.probe_errors += 1
            finally:
                self._write_in_flight = None
            while self.write_samples and self.clock() - self.write_samples[0][0] > self.window_s:
                self.write_samples.popleft()
            self.stop_flag.wait(self.write_interval)

    def _note_write(self, ms: float, under_lock: bool) -> None:
        self.longest_write_ms = max(self.longest_write_ms or 0.0, ms)
        if under_lock:
            self.longest_write_under_lock_ms = max(self.longest_write_under_lock_ms or 0.0, ms)

    def window_ms(self) -> list[float]:
        out = [ms for _, ms in list(self.samples)]
        since = self._in_flight_since
        if since is not None:
            out.append((self.clock() - since) * 1000)
        return out

    def write_window_ms(self) -> list[float]:
        """The writes of the window that pacing answers for (not those under the backup's lock)."""
        out = [ms for _, ms, under_lock in list(self.write_samples) if not under_lock]
        flight = self._write_in_flight
        if flight is not None and not flight[1] and self.locked() is None:
            out.append((self.clock() - flight[0]) * 1000)
        return out

    def _decide(self) -> None:
        limits = Limits(self.cap(), self.limits.max_p999_ms, self.limits.max_lag_s)
        lock = self.locked()
        if lock is not None:
            # The backup holds a lock on the source: every byte held back here stretches it.
            self.decision = Decision(None, lock)
            self.valve.set(None)
            return
        limit = self.limits.max_p999_ms

        def trusted(window: list[float]) -> Optional[float]:
            # A p99.9 of a few samples says little, except that it is past the limit: slow probes
            # (a hurting source) are exactly when samples are few.
            p = percentile(window, 99.9)
            over = p is not None and limit is not None and p > limit
            return p if (len(window) >= 20 or over) else None

        reads, writes = trusted(self.window_ms()), trusted(self.write_window_ms())
        if writes is not None:
            self.worst_write_p999_ms = max(self.worst_write_p999_ms or 0.0, writes)
        known = [v for v in (reads, writes) if v is not None]
        trusted_p999 = max(known) if known else None
        if trusted_p999 is not None:
            self.worst_p999_ms = max(self.worst_p999_ms or 0.0, trusted_p999)
        d = decide(limits, trusted_p999, self.lag_s)
        if self.held():
            d = Decision(0, "paused by the operator (consolidate throttle RUN --resume lets it go on)")
        rate = d.rate_bps
        if rate is not None and rate < 0:  # half pace with no cap: half of the recent rate
            rate = max(self.meter.recent_rate() / 2, CHUNK)
        if d.paused and not self.decision.paused:
            self.pauses += 1
        self.decision = Decision(rate, d.reason)
        self.valve.set(rate)

    def progress(self, finished: bool = False) -> tuple[str, dict[str, Any]]:
        done = self.meter.bytes
        rate = self.meter.average_rate() if finished else self.meter.recent_rate()
        pr = progress_of(done, self.total, rate, finished)
        reads, writes = self.p999_ms(), self.write_p999_ms()
        p999 = max((v for v in (reads, writes) if v is not None), default=None)
        figures = {"bytes": done, "total_bytes": pr.total, "estimate_bytes": pr.estimate,
                   "pct": None if pr.pct is None else round(pr.pct, 1), "estimate_grown": pr.grown,
                   "rate_mb_s": round(rate / MB, 2), "eta_s": None if pr.eta_s is None else round(pr.eta_s),
                   "source_p999_ms": p999, "source_read_p999_ms": reads, "source_write_p999_ms": writes,
                   "longest_write_ms": self.longest_write_ms, "lag_s": self.lag_s,
                   "throttle": self.decision.reason, "paused_s": round(self.valve.paused_s, 1)}
        eta = "" if finished else f", ETA {pr.eta_text()}"
        text = (f"{pr.share_text()} at {rate / MB:.1f} MB/s{eta}; {self.decision.reason}"
                + (f"; source p99.9 reads {reads:.1f} ms" if reads is not None else "")
                + (f", writes {writes:.1f} ms" if writes is not None else ""))
        return text, figures

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(5)


def random_key(lo: int, hi: int) -> int:
    return random.randint(lo, hi) if hi >= lo else lo
