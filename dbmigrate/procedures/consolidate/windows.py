"""While one old server of a fleet is fenced, the fleet's other work in this process waits.

A fenced window is write downtime for one old server's applications. The work the other fleet
workers do outside their own windows (copy checks before a fence, account checks, the
application's login, polls and forward connections after one) shares this process and the
cores with it, and it is never in a hurry: at its checkpoints it waits until no window is
open, at most `max_wait_s` per checkpoint (so that a window that stays open long, a fence
retried or put back, holds nothing for longer than that). A thread inside its own window
never waits.

While a window is open the interpreter also hands its lock over sooner (a switch interval of
0.5 ms instead of 5): each statement of the window returns to a thread that may otherwise wait
up to 5 ms for the lock held by another thread's Python work (the MariaDB protocol here is pure
Python). Measured with `bench/fleet.py` (16 old servers, 4 at a time), one run each way: the
fenced windows' median was 15 ms at 5 ms, 10 ms at 0.5 ms.
"""

from __future__ import annotations

import sys
import threading
import time

SWITCH_INTERVAL_IN_WINDOW_S = 0.0005


class FencedWindows:
    def __init__(self, max_wait_s: float = 2.0) -> None:
        self.max_wait_s = max_wait_s
        self._cond = threading.Condition()
        self._open = 0
        self._switch = sys.getswitchinterval()  # the process's own, put back when the last window ends
        self._mine = threading.local()
        self.waited_s = 0.0  # in all, by every checkpoint (the bench reads it from the sentences)

    def enter(self) -> None:
        """This thread's server is about to be fenced."""
        self._mine.depth = getattr(self._mine, "depth", 0) + 1
        with self._cond:
            if not self._open:
                self._switch = sys.getswitchinterval()
                sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL_IN_WINDOW_S))
            self._open += 1

    def leave(self) -> None:
        """Its window ended (its instance opened, or it was put back)."""
        self._mine.depth = max(0, getattr(self._mine, "depth", 0) - 1)
        with self._cond:
            self._open = max(0, self._open - 1)
            if not self._open:
                sys.setswitchinterval(self._switch)
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
