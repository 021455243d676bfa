"""The tool yields the cores from the start of a run until its first fenced window, and has
its own priority back from there and after the run."""

from __future__ import annotations

import os
import threading

import pytest

from dbmigrate import priority


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority back needs root or RLIMIT_NICE")
def test_lowered_until_the_window_then_back_for_every_thread():
    start = os.getpriority(os.PRIO_PROCESS, 0)
    priority.begin_run(priority.NICE_OUTSIDE_WINDOW)
    try:
        assert priority.lowered()
        assert os.getpriority(os.PRIO_PROCESS, 0) == min(19, start + priority.NICE_OUTSIDE_WINDOW)
        seen = []
        t = threading.Thread(target=lambda: (seen.append(os.getpriority(os.PRIO_PROCESS, 0)),
                                             threading.Event().wait(0.2)))
        t.start()
        priority.inside_window()
        t.join()
        assert not priority.lowered() and os.getpriority(os.PRIO_PROCESS, 0) == start
        assert seen == [min(19, start + priority.NICE_OUTSIDE_WINDOW)]  # a thread started while lowered
        priority.outside_window()
        assert not priority.lowered()  # once a window began, the run keeps its full priority
    finally:
        priority.end_run()
    assert os.getpriority(os.PRIO_PROCESS, 0) == start


def test_end_run_restores_even_without_a_window():
    start = os.getpriority(os.PRIO_PROCESS, 0)
    priority.begin_run(3)
    priority.end_run()
    assert os.getpriority(os.PRIO_PROCESS, 0) == start and not priority.lowered()


def test_unchanged_unless_asked_for(monkeypatch):
    monkeypatch.delenv("DBMIGRATE_NICE", raising=False)
    priority.begin_run()
    assert not priority.lowered()
    monkeypatch.setenv("DBMIGRATE_NICE", "not a number")
    assert priority.requested() == 0
    monkeypatch.setenv("DBMIGRATE_NICE", "5")
    assert priority.requested() == 5
