"""The fleet benchmark's arithmetic, apart from any server: write gaps inside a window, samples
inside windows, the windows each old server spent in a fleet stage (from the journal's
metrics), the process tree whose memory counts as the tool's, and the ratios across N."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Optional

from dbmigrate.procedures.consolidate.throttle import percentile

Window = tuple[float, float]  # epoch seconds, start and end


def epoch(iso: str) -> float:
    """The journal's UTC ISO timestamps as epoch seconds (acks carry time.time())."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def gap_in(times: list[float], t0: float, t1: float) -> Optional[float]:
    """The longest pause (ms) between two consecutive acks that overlaps [t0, t1]; the pause an
    application saw because of what happened in that window. None when no ack came after t0
    (the writer never wrote again: not a gap but an outage, reported as such)."""
    ordered = sorted(times)
    longest = None
    for a, b in zip(ordered, ordered[1:]):
        if b >= t0 and a <= t1:
            longest = max(longest or 0.0, (b - a) * 1000)
    if not ordered or ordered[-1] < t0:
        return None
    return longest if longest is not None else 0.0


def gap_around(times: list[float], t0: float, t1: float) -> Optional[Window]:
    """The longest pause between two consecutive acks that overlaps [t0, t1], as (last ack before
    it, first ack after it); None when there is none."""
    ordered = sorted(times)
    best: Optional[Window] = None
    for a, b in zip(ordered, ordered[1:]):
        if b >= t0 and a <= t1 and (best is None or b - a > best[1] - best[0]):
            best = (a, b)
    return best


def where_gap(gap: Window, fenced: Optional[Window], others_fenced: list[Window],
              others_cutting: list[Window]) -> dict:
    """Where a server's longest pause lay against its own fenced window (before the fence, in it,
    after the open; its start from the fence), and what the rest of the fleet did meanwhile: how
    many other servers were fenced, how many were in their cutover outside their window."""
    a, b = gap
    if fenced is None:
        where = "no window"
    elif b <= fenced[0]:
        where = "before the fence"
    elif a >= fenced[1]:
        where = "after the open"
    else:
        where = "in the window"
    fenced_beside = sum(1 for w in others_fenced if _overlap(w, gap))
    return {"ms": round((b - a) * 1000, 1), "where": where,
            "from_fence_ms": None if fenced is None else round((a - fenced[0]) * 1000, 1),
            "window_ms": None if fenced is None else round((fenced[1] - fenced[0]) * 1000, 1),
            "others_fenced": fenced_beside,
            "others_cutting_outside_window": sum(1 for w in others_cutting if _overlap(w, gap)) - fenced_beside}


def within(samples: Iterable[tuple[float, float]], windows: Iterable[Window]) -> list[float]:
    """The values of (when, value) samples taken inside any of the windows."""
    ws = list(windows)
    return [v for t, v in samples if any(a <= t <= b for a, b in ws)]


def stage_windows(metrics: list[dict], stage: str) -> dict[str, Window]:
    """Per old server, when its `stage` (seed, cutover) began and ended, from the fleet's
    `fleet_server_s` metrics: a `started` event, then one `done` or `failed` event."""
    began: dict[str, float] = {}
    out: dict[str, Window] = {}
    for m in metrics:
        if m["name"] != "fleet_server_s" or m["labels"].get("stage") != stage:
            continue
        server, status, at = m["labels"]["server"], m["labels"]["status"], epoch(m["at"])
        if status == "started":
            began[server] = at
        elif status in ("done", "failed") and server in began:
            out[server] = (began[server], at)
    return out


def most_at_once(windows: Iterable[Window]) -> int:
    """How many windows overlapped at the busiest moment (the concurrency actually reached)."""
    events = sorted([(a, 1) for a, _ in windows] + [(b, -1) for _, b in windows], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def p50_max(values: list[Optional[float]]) -> tuple[Optional[float], Optional[float]]:
    known = [v for v in values if v is not None]
    if not known:
        return None, None
    return percentile(known, 50), max(known)


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 2) if a is not None and b else None


# A figure "does not grow" when the largest fleet's is within this factor of the smallest's:
# a shared 2-core machine moves single figures by that much between runs.
NOISE = 1.2


def scaling_verdicts(rows: list[dict]) -> dict:
    """Largest N against smallest: wall time per MB moved (no faster than the data: <= 1),
    the per-server cutover gap p50 and max (beyond the writer's own pace, which is slower per
    server as N grows), and the sources' p99.9 during seeding."""
    lo, hi = min(rows, key=lambda r: r["n"]), max(rows, key=lambda r: r["n"])
    figures = {
        "wall_per_mb": ratio(hi["wall_s_per_mb"], lo["wall_s_per_mb"]),
        "gap_p50": ratio(hi["gap_ms"]["beyond_pace_p50"], lo["gap_ms"]["beyond_pace_p50"]),
        "gap_max": ratio(hi["gap_ms"]["beyond_pace_max"], lo["gap_ms"]["beyond_pace_max"]),
        "source_p999": ratio(hi["source_p999_ms"]["seeding"], lo["source_p999_ms"]["seeding"]),
    }
    return {"between": [lo["n"], hi["n"]], "ratios": figures, "noise_factor": NOISE,
            "met": {k: (v is not None and v <= NOISE) for k, v in figures.items()}}


def fenced_windows(metrics: list[dict]) -> dict[str, Window]:
    """Per old server, its fenced window: the `fenced_window_ms` metric is journaled as the
    window ends, with its length."""
    return {m["labels"]["source"]: (epoch(m["at"]) - m["value"] / 1000, epoch(m["at"]))
            for m in metrics if m["name"] == "fenced_window_ms"}


def _overlap(a: Window, b: Window) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def beside_each_window(fenced: dict[str, Window], cutovers: dict[str, Window]) -> dict[str, dict[str, int]]:
    """For each server's fenced window, how many other servers were fenced at the same time, and
    how many were in their cutover but outside their own window (checks before the fence, the
    sessions and accounts after it): the work that shares the tool and the CPU with the window."""
    out = {}
    for s, w in fenced.items():
        others = [o for o in cutovers if o != s and _overlap(w, cutovers[o])]
        in_window = [o for o in others if o in fenced and _overlap(w, fenced[o])]
        out[s] = {"fenced": len(in_window), "outside_window": len(others) - len(in_window)}
    return out


def split_by(values: dict[str, float], key: dict[str, dict[str, int]], field: str) -> dict[str, Optional[float]]:
    """p50 of the values whose server had none of `field` beside it, and of those that had some."""
    alone = [v for s, v in values.items() if key.get(s, {}).get(field, 0) == 0]
    beside = [v for s, v in values.items() if key.get(s, {}).get(field, 0) > 0]
    return {"none_beside": percentile(alone, 50), "some_beside": percentile(beside, 50),
            "servers_none": len(alone), "servers_some": len(beside)}


def window_parts(sentence: str) -> dict[str, Optional[float]]:
    """From a server's cutover sentence: the fence itself (read_only=ON), the time from the fence
    to the instance having applied the final position, and the whole window (fence to open)."""
    import re

    def ms(pattern: str) -> Optional[float]:
        m = re.search(pattern, sentence)
        return float(m.group(1)) if m else None

    return {"fence_ms": ms(r"\(read_only=ON\) in ([\d.]+) ms"), "caught_up_ms": ms(r"caught up in ([\d.]+) ms"),
            "window_ms": ms(r"after ([\d.]+) ms fenced")}


def window_part_figures(metrics: list[dict]) -> dict[str, dict[str, Optional[float]]]:
    """p50 and max over the servers of each part of the fenced window (the cutover's
    `fenced_part_ms` metrics, in the order the parts happen)."""
    by_part: dict[str, list[float]] = {}
    for m in metrics:
        if m["name"] == "fenced_part_ms":
            by_part.setdefault(m["labels"]["part"], []).append(m["value"])
    return {part: {"p50": round(percentile(v, 50), 1), "max": round(max(v), 1)} for part, v in by_part.items()}
