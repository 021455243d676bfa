"""The fence watchdog's hand-off with the fenced window, on a fake side session whose reads
can be held: a fence that returns while the early look is still on the server is not kept
waiting for it, and the next watchdog on that session waits for it instead."""

from __future__ import annotations

import threading
import time

from dbmigrate.procedures.kit.fence_watch import FenceWatch


class SlowSession:
    """The watchdog's session: row_lock_waits() answers only once `release` is set."""

    def __init__(self, waits: int = 0):
        self.server = self  # FenceWatch keys sessions by their server
        self.release = threading.Event()
        self.looking = threading.Event()
        self.waits = waits
        self.killed: list[int] = []
        self.reads_in_flight = 0
        self.most_in_flight = 0

    def row_lock_waits(self) -> int:
        self.reads_in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.reads_in_flight)
        self.looking.set()
        self.release.wait(5)
        self.reads_in_flight -= 1
        return self.waits

    def fence_blockers(self, fence_id: int) -> list:
        return []

    def kill_query(self, session_id: int) -> None:
        self.killed.append(session_id)


def watch(session: SlowSession, block_s: float = 1.0) -> FenceWatch:
    return FenceWatch(session, session, fence_id=7, block_s=block_s, early_s=0.001)


def test_a_fence_that_returns_during_the_early_look_does_not_wait_for_it():
    session = SlowSession(waits=1)  # the look would find a row-lock wait, too late
    w = watch(session)
    with w:
        assert session.looking.wait(2)  # the fence is "running"; the early look is on the server
        returned = time.monotonic()
    # The fence returned: leaving the block did not wait for the held read (5 s at most).
    assert time.monotonic() - returned < 0.5 and session.reads_in_flight == 1
    session.release.set()
    time.sleep(0.05)
    # Its read answered after the fence was done: it acted on nothing.
    assert session.killed == [] and w.acted_after_s is None and not w.gave_up


def test_the_next_watchdog_on_the_session_waits_for_the_one_not_waited_for():
    session = SlowSession(waits=0)
    with watch(session):
        assert session.looking.wait(2)
    threading.Timer(0.1, session.release.set).start()
    started = time.monotonic()
    with watch(session):  # a retried fence: its watchdog starts once the earlier read answered
        waited = time.monotonic() - started
    assert waited >= 0.09 and session.most_in_flight == 1


def test_a_watchdog_that_found_a_row_lock_wait_ends_the_fence_and_is_waited_for():
    session = SlowSession(waits=1)
    session.release.set()
    w = watch(session)
    with w:
        deadline = time.monotonic() + 2
        while not session.killed and time.monotonic() < deadline:  # the fence "blocks" until killed
            time.sleep(0.001)
    assert set(session.killed) == {7} and w.gave_up and w.acted_after_s is not None
    assert "fence killed" in w.timeline and "blockers read" in w.timeline  # joined: all it did is known
