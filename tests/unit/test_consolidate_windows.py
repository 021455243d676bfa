"""A fleet's work outside its fenced windows waits while another server is fenced (bounded);
the fenced server's own thread never waits."""

from __future__ import annotations

import threading
import time

from dbmigrate.procedures.consolidate.windows import FencedWindows


def test_work_beside_a_window_waits_for_it_to_end_and_the_window_itself_never_waits():
    w = FencedWindows(max_wait_s=5)
    fenced, release, own = threading.Event(), threading.Event(), []

    def window():
        w.enter()
        fenced.set()
        own.append(w.wait_quiet())  # its own checkpoint: no wait
        release.wait(5)
        w.leave()

    t = threading.Thread(target=window)
    t.start()
    fenced.wait(5)
    threading.Timer(0.2, release.set).start()
    waited = w.wait_quiet()
    t.join(5)
    assert 0.15 <= waited < 2 and own == [0.0] and w.open_now() == 0
    assert w.wait_quiet() == 0.0  # nothing open: no wait at all


def test_a_window_that_stays_open_holds_the_others_only_for_the_bound():
    w = FencedWindows(max_wait_s=0.2)
    w.enter()  # (another thread's window, left open)
    done = []
    t = threading.Thread(target=lambda: done.append(w.wait_quiet()))
    start = time.monotonic()
    t.start()
    t.join(5)
    assert 0.15 <= done[0] < 1 and time.monotonic() - start < 2
    w.leave()
    assert w.open_now() == 0


def test_the_interpreter_switches_threads_sooner_only_while_a_window_is_open():
    import sys

    before = sys.getswitchinterval()
    w = FencedWindows()
    w.enter()
    w.enter()  # a second server fenced beside the first
    assert sys.getswitchinterval() == 0.0005
    w.leave()
    assert sys.getswitchinterval() == 0.0005  # one is still open
    w.leave()
    assert sys.getswitchinterval() == before
