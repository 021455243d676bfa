"""How a capture keeps off the server's back: one read at a time, each followed by a pause in
proportion to what it took, so that its reads (and the tool's own work on their rows) take at
most `share` of the wall clock. A read of 10 ms at share 0.05 is followed by 190 ms of nothing:
the primary's writers meet the capture in small pieces, never in a burst.

    pace = Pacer(share=0.05)
    with pace:
        rows = reader.something()
    for batch in pace.each(reader.sample(...)):   # a pause after each batch
        ...
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

# On a host the primary shares, a single writing session lost about as much of its time as the
# reads took (bench/shape_capture_cost.py): 0.05 keeps that to about 5%.
DEFAULT_SHARE = 0.05
MAX_PAUSE_S = 5.0  # one slow read (a cold cache) does not stop the capture for long


class Pacer:
    def __init__(self, share: float = DEFAULT_SHARE, *, max_pause_s: float = MAX_PAUSE_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        if not 0 < share <= 1:
            raise ValueError(f"a capture's share of the time is in (0, 1], not {share}")
        self.share, self.max_pause_s = share, max_pause_s
        self.clock, self.sleep = clock, sleep
        self.reads, self.busy_s, self.paused_s = 0, 0.0, 0.0
        self._started: float | None = None

    def __enter__(self) -> "Pacer":
        self._started = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        started, self._started = self._started, None
        if started is not None:
            self._pause_after(self.clock() - started)

    def each(self, reads: Iterable[T]) -> Iterator[T]:
        """The items of a generator of reads, with a pause after each (its time and the caller's work)."""
        it = iter(reads)
        while True:
            started = self.clock()
            try:
                item = next(it)
            except StopIteration:
                return
            yield item  # the caller's work on the item counts as the read's
            self._pause_after(self.clock() - started)

    def _pause_after(self, spent: float) -> None:
        self.reads += 1
        self.busy_s += spent
        pause = min(self.max_pause_s, spent * (1 - self.share) / self.share)
        if pause > 0:
            self.sleep(pause)
            self.paused_s += pause

    def summary(self) -> dict[str, float]:
        return {"share": self.share, "reads": self.reads, "busy_s": round(self.busy_s, 3),
                "paused_s": round(self.paused_s, 3)}
