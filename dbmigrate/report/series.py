"""Turning raw samples into the compact series a report stores and draws. Pure functions.

Times are wall-clock epoch seconds everywhere a series is stored, so samples taken
by different threads and processes (the verifier, the read workload, the lag
sampler, the journal's step times) line up on one axis.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Iterable, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of already sorted values; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(round(q / 100.0 * len(sorted_values), 9)))  # 99.9% of 1000 is rank 999, not 1000
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize_ms(values: Iterable[float]) -> dict[str, Any]:
    """count, avg, p50, p95, p99, p99.9 and max of latencies in ms (rounded to µs)."""
    v = sorted(values)
    if not v:
        return {"count": 0}

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {"count": len(v), "avg_ms": r(sum(v) / len(v)), "p50_ms": r(percentile(v, 50)),
            "p95_ms": r(percentile(v, 95)), "p99_ms": r(percentile(v, 99)), "p999_ms": r(percentile(v, 99.9)),
            "max_ms": r(v[-1])}


def bin_counts(walls: Iterable[float], bin_ms: float = 10.0) -> dict[str, Any]:
    """Events per bin: {"start": epoch of bin 0, "bin_ms": .., "counts": [..]} (empty bins are 0,
    which is the point: a fenced window shows as a run of zeros)."""
    ts = sorted(walls)
    if not ts:
        return {"start": None, "bin_ms": bin_ms, "counts": []}
    width = bin_ms / 1000.0
    start = math.floor(ts[0] / width) * width
    counts = [0] * (int((ts[-1] - start) / width) + 1)
    for t in ts:
        counts[min(int((t - start) / width), len(counts) - 1)] += 1
    return {"start": round(start, 3), "bin_ms": bin_ms, "counts": counts}


def per_second_latency(samples: Iterable[tuple[float, float]]) -> list[list[float]]:
    """(epoch, ms) samples -> [[second, p50, p99, count], ...] for each second that had samples."""
    by_second: dict[int, list[float]] = {}
    for wall, ms in samples:
        by_second.setdefault(int(wall), []).append(ms)
    out = []
    for sec in sorted(by_second):
        v = sorted(by_second[sec])
        out.append([float(sec), round(percentile(v, 50) or 0.0, 3), round(percentile(v, 99) or 0.0, 3), len(v)])
    return out


def split_at(samples: Iterable[tuple[float, float]], at: float | None) -> tuple[list[float], list[float]]:
    """Values of (epoch, value) samples before and after `at` (all before when at is None)."""
    before: list[float] = []
    after: list[float] = []
    for wall, v in samples:
        (after if at is not None and wall >= at else before).append(v)
    return before, after


def iso_to_epoch(text: str | None) -> float | None:
    """The journal's timestamps ('2026-01-02T03:04:05.678Z') as epoch seconds."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def cpu_percent(ticks_before: int, ticks_after: int, seconds: float, hz: int = 100) -> float | None:
    """CPU use of a process over a window, in % of one core, from /proc ticks (utime+stime)."""
    if seconds <= 0:
        return None
    return round((ticks_after - ticks_before) / hz / seconds * 100.0, 1)
