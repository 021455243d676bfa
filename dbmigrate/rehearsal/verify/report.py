"""What the zero-loss verifier found: acknowledged writes, losses per server, the
longest write gap (the fenced window as an application sees it) and errors."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass(frozen=True)
class Ack:
    """One acknowledged write: its id, when the ack arrived, and which server took it."""

    id: int
    mono: float  # time.monotonic(): for gaps
    wall: float  # time.time(): for reports
    server_id: int | None = None


@dataclass(frozen=True)
class Gap:
    ms: float
    after_id: int
    before_id: int
    start_wall: float
    end_wall: float

    @property
    def start(self) -> str:
        return _iso(self.start_wall)

    @property
    def end(self) -> str:
        return _iso(self.end_wall)


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def longest_gap(acks: Sequence[Ack]) -> Gap | None:
    """The longest time between two consecutive acknowledgements (in ack order).
    None with fewer than two acks: no gap can be measured."""
    best: Gap | None = None
    for prev, cur in zip(acks, acks[1:]):
        ms = (cur.mono - prev.mono) * 1000.0
        if best is None or ms > best.ms:
            best = Gap(round(ms, 3), prev.id, cur.id, prev.wall, cur.wall)
    return best


@dataclass
class VerifyReport:
    acknowledged: int
    first_id: int | None
    last_id: int | None
    lost: dict[str, list[int]]  # server name -> acknowledged ids missing there
    caught_up: dict[str, bool]  # server name -> all ids found within the wait
    errors: dict[str, int]
    gap: Gap | None
    duration_s: float
    acks_by_server_id: dict[int, int] = field(default_factory=dict)

    @property
    def max_gap_ms(self) -> float | None:
        return self.gap.ms if self.gap else None

    @property
    def lost_total(self) -> int:
        return sum(len(v) for v in self.lost.values())

    @property
    def ok(self) -> bool:
        return self.acknowledged > 0 and self.lost_total == 0

    def summary(self) -> str:
        if self.acknowledged == 0:
            return "no write was acknowledged: nothing verified"
        lost = ", ".join(f"{n}: {len(ids)}" for n, ids in self.lost.items() if ids)
        gap = f"{self.gap.ms:.1f} ms (after id {self.gap.after_id}, {self.gap.start} -> {self.gap.end})" if self.gap else "n/a"
        errs = ", ".join(f"{k}={v}" for k, v in sorted(self.errors.items())) or "none"
        return (f"{self.acknowledged} acknowledged writes (ids {self.first_id}..{self.last_id}) in {self.duration_s:.1f}s; "
                f"lost: {lost or 'none'} on {len(self.lost)} server(s); longest gap {gap}; errors: {errs}")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "acknowledged": self.acknowledged, "first_id": self.first_id, "last_id": self.last_id,
                "lost": {n: ids[:100] for n, ids in self.lost.items()},
                "lost_count": {n: len(ids) for n, ids in self.lost.items()},
                "caught_up": self.caught_up, "max_gap_ms": self.max_gap_ms,
                "gap_start": self.gap.start if self.gap else None, "gap_end": self.gap.end if self.gap else None,
                "gap_after_id": self.gap.after_id if self.gap else None, "errors": dict(self.errors),
                "duration_s": round(self.duration_s, 3),
                "acks_by_server_id": {str(k): v for k, v in self.acks_by_server_id.items()}}


def zero_loss_gate(report: VerifyReport) -> tuple[bool, str, dict[str, Any]]:
    """Gate: every acknowledged write is on every checked server."""
    details = report.to_dict()
    if report.acknowledged == 0:
        return False, "the verifier got no write acknowledged: the check proves nothing", details
    if report.lost_total:
        where = ", ".join(f"{len(ids)} on {n}" for n, ids in report.lost.items() if ids)
        return False, f"acknowledged writes are missing: {where}", details
    return True, (f"all {report.acknowledged} acknowledged writes present on {len(report.lost)} server(s); "
                  f"longest gap {report.max_gap_ms} ms"), details
