"""While one old server of a fleet is fenced, the fleet's other work in this process waits.

A fenced window is write downtime for one old server's applications. The work the other fleet
workers do outside their own windows (copy checks before a fence, account checks, the
application's login, polls and forward connections after one) shares this process and the
cores with it, and it is never in a hurry: at its checkpoints it waits until no window is
open, at most `max_wait_s` per checkpoint (so that a window that stays open long, a fence
retried or put back, holds nothing for longer than that). A thread inside its own window
never waits.
"""

from __future__ import annotations

import threading
import time


class FencedWindows:
    def __init__(self, max_wait_s: float = 2.0) -> None:
        self.max_wait_s = max_wait_s
        self._cond = threading.Condition()
        self._open = 0
        self._mine = threading.local()
        self.waited_s = 0.0  # in all, by every checkpoint (the bench reads it from the sentences)

    def enter(self) -> None:
        """This thread's server is about to be fenced."""
        self._mine.depth = getattr(self._mine, "depth", 0) + 1
        with self._cond:
            self._open += 1

    def leave(self) -> None:
        """Its window ended (its instance opened, or it was put back)."""
        self._mine.depth = max(0, getattr(self._mine, "depth", 0) - 1)
        with self._cond:
            self._open = max(0, self._open - 1)
            if not self._open:
                self._cond.notify_all()

    def open_now(self) -> int:
        return self._open

    def wait_quiet(self) -> float:
        """A checkpoint of work outside any window: return once no window is open (at most
        max_wait_s); the seconds waited."""
        if getattr(self._mine, "depth", 0) or not self._open:
            return 0.0
        t = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: self._open == 0, timeout=self.max_wait_s)
        waited = time.monotonic() - t
        with self._cond:
            self.waited_s += waited
        return waited


# One per process: every fleet in it shares the same cores.
WINDOWS = FencedWindows()
