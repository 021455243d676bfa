"""Where the application's writes stopped during a rehearsal, and why.

The fenced window is the outage a cutover causes: the gap between acknowledged
writes across the cutover's own window (from the fence step's start to the
router switch's end). Any other gap of the application's writes (a stall
during the baseline capture, a slow replica check) is not the fenced window:
it is reported apart, with the step it fell in, so a figure never blames the
fence for what happened elsewhere, nor hides it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Sequence

from dbmigrate.rehearsal.verify.report import Ack

OTHER_GAP_MIN_MS = 100.0  # shorter pauses of the writer are scheduling noise on a loaded machine
OTHER_GAPS_SHOWN = 5


@dataclass(frozen=True)
class WriteGap:
    ms: float
    start: float  # wall time of the ack before the gap
    end: float  # wall time of the ack after it
    steps: tuple[str, ...] = ()  # the run's steps that were running during the gap

    def to_dict(self) -> dict[str, Any]:
        return {"ms": round(self.ms, 1), "start": _iso(self.start), "end": _iso(self.end), "steps": list(self.steps)}


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wall(iso: str | None) -> float | None:
    if not iso:
        return None
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def cutover_window(steps: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """(start, end) wall times of the first cutover: the fence step's start to the router switch's end
    (the last finished step of the fence's phase when there is no router). None without a fence."""
    windows = cutover_windows(steps)
    return windows[0] if windows else None


def cutover_windows(steps: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """Every cutover of the run (a schema swap has two: to the altered replica and back), each from
    its fence step's start to the end of the router switch of its phase (else the phase's last step)."""
    forward = [s for s in steps if s.get("action", "run") == "run" and s.get("started_at")]
    windows = []
    for fence in (s for s in forward if s["name"].startswith("fence ")):
        start = _wall(fence["started_at"])
        if start is None:
            continue
        same_phase = [s for s in forward if s["phase"] == fence["phase"] and s.get("finished_at")
                      and (_wall(s["started_at"]) or 0) >= start]
        switch = [s for s in same_phase if s["name"] == "switch router"]
        last = switch[0] if switch else (same_phase[-1] if same_phase else fence)
        windows.append((start, _wall(last.get("finished_at")) or start))
    return windows


def _running(steps: Sequence[dict[str, Any]], start: float, end: float) -> tuple[str, ...]:
    names = []
    for s in steps:
        began, ended = _wall(s.get("started_at")), _wall(s.get("finished_at"))
        if began is None:
            continue
        if began < end and (ended is None or ended > start):
            label = ("undo " if s.get("action") == "undo" else "") + s["name"]
            if label not in names:
                names.append(label)
    return tuple(names)


def gaps_between(acks: Sequence[Ack]) -> list[WriteGap]:
    """Every interval between two consecutive acknowledgements, in ack order."""
    return [WriteGap((cur.mono - prev.mono) * 1000.0, prev.wall, cur.wall) for prev, cur in zip(acks, acks[1:])]


def write_gaps(acks: Sequence[Ack], steps: Sequence[dict[str, Any]], *,
               min_other_ms: float = OTHER_GAP_MIN_MS) -> dict[str, Any]:
    """The fenced window (the longest gap overlapping the cutover window) and, apart from it,
    the other gaps of at least `min_other_ms`, longest first, each with its steps."""
    windows = cutover_windows(steps)
    window = windows[0] if windows else None
    gaps = gaps_between(acks)
    inside = [any(g.start <= w[1] and g.end >= w[0] for w in windows) for g in gaps]
    fenced = max((g for g, i in zip(gaps, inside) if i), key=lambda g: g.ms, default=None)
    others = sorted((g for g, i in zip(gaps, inside) if not i and g.ms >= min_other_ms), key=lambda g: -g.ms)
    others = [WriteGap(g.ms, g.start, g.end, _running(steps, g.start, g.end) or ("between steps",))
              for g in others[:OTHER_GAPS_SHOWN]]
    longest = max(gaps, key=lambda g: g.ms, default=None)
    return {
        "fenced_ms": round(fenced.ms, 1) if fenced else None,
        "fenced_window": ({"start": _iso(window[0]), "end": _iso(window[1]),
                           "gap": fenced.to_dict() if fenced else None} if window else None),
        "other_write_gaps": [g.to_dict() for g in others],
        "longest_write_gap_ms": round(longest.ms, 1) if longest else None,
    }

