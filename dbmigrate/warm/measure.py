"""Buffer pool measurements: resident pages and a hit ratio taken from counter deltas.

Lifetime counters say nothing about the pool right now (a server that was warm
for a month and restarted an hour ago still shows 99.9 %), so a hit ratio is
always the delta of two snapshots around a window of reads.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from dbmigrate.db.inspector import Inspector


@dataclass(frozen=True)
class PoolSnapshot:
    taken_at: float
    read_requests: int
    reads: int  # requests that had to go to disk
    pages_data: int
    pages_free: int
    pages_total: int
    pages_by_table: dict[str, int] | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HitRatio:
    """Hit ratio over one window: 1 - disk reads / page requests."""

    read_requests: int
    reads: int
    seconds: float
    queries: int = 0

    @property
    def ratio(self) -> float | None:
        if self.read_requests <= 0:
            return None
        return max(0.0, 1.0 - self.reads / self.read_requests)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = None if self.ratio is None else round(self.ratio, 5)
        return d


def snapshot(inspector: Inspector, per_table: bool = False, schemas: list[str] | None = None) -> PoolSnapshot:
    c = inspector.buffer_pool_counters()
    by_table = inspector.buffer_pool_pages_by_table(schemas) if per_table else None
    return PoolSnapshot(time.time(), c["read_requests"], c["reads"], c["pages_data"], c["pages_free"],
                        c["pages_total"], by_table)


def hit_ratio_between(before: PoolSnapshot, after: PoolSnapshot, queries: int = 0) -> HitRatio:
    return HitRatio(read_requests=max(0, after.read_requests - before.read_requests),
                    reads=max(0, after.reads - before.reads),
                    seconds=round(max(0.0, after.taken_at - before.taken_at), 3), queries=queries)


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r * 100:.2f}%"
