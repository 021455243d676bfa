"""The tool's CPU priority, on request (DBMIGRATE_NICE=N): lowered by N from the start of a run
until its first fenced window, the one it started with from there on.

Where the tool shares cores with a server or the application (a small host, a rehearsal, a
database host the tool runs on), its own CPU is the application's latency: its start-up and
preflight take 0.3-0.9 s of a core, and the writer beside it waited up to 350 ms at those
moments on a saturated 2-core machine. Outside the window the tool is never in a hurry, so it
yields the cores (nice +10); from just before a fence until the candidate opens it runs at
the priority it started with, so that the window itself is not slowed.

Off unless asked for: measured on a saturated 2-core machine (load average 15-20), a run at
nice +10 sent its first statement 4-27 s after exec instead of 1-2 s, and its preflight and
baseline took as much longer (the baseline window, long_query_time=0, stays open that much
longer on the primary). Where the tool shares a host with a busy server, ask for a small value.

Lowering is done only where it can be undone: raising a priority back needs root or an
RLIMIT_NICE that allows it; without either the priority is left alone. Every thread of the
process is moved (on Linux a thread has its own nice value, and one started while lowered
inherits it).
"""

from __future__ import annotations

import os
import resource
import threading
from contextlib import contextmanager
from typing import Iterator

NICE_OUTSIDE_WINDOW = 10  # the value the tests use; runs take DBMIGRATE_NICE (0: unchanged)

_lock = threading.Lock()
_original: int | None = None  # the process's priority when the run began
_in_run = False
_lowered = False
_windowed = False  # a fenced window began in this run: full priority until it ends
_amount = NICE_OUTSIDE_WINDOW


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]  # not Linux: the calling thread (the process on other systems)


def _set_all(value: int) -> None:
    for tid in _threads():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, value)
        except (OSError, PermissionError):
            pass  # a thread that just ended


def _can_restore(original: int) -> bool:
    if os.geteuid() == 0:
        return True
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NICE)  # allows a nice value down to 20 - soft
    except (AttributeError, ValueError, OSError):
        return False
    return soft == resource.RLIM_INFINITY or 20 - soft <= original


def requested() -> int:
    """How much lower a run's priority should be before its first fence (DBMIGRATE_NICE, default 0)."""
    try:
        return max(0, min(19, int(os.environ.get("DBMIGRATE_NICE", "0"))))
    except ValueError:
        return 0


def begin_run(nice: int | None = None) -> None:
    """A run begins: the tool yields the cores until a fenced window asks for them back."""
    global _original, _in_run, _windowed, _amount
    amount = requested() if nice is None else nice
    if amount <= 0:
        return
    with _lock:
        if _in_run:
            return
        _windowed = False
        try:
            _original = os.getpriority(os.PRIO_PROCESS, 0)
        except OSError:
            return
        if not _can_restore(_original):
            return
        _in_run = True
        _amount = amount
    outside_window()


def outside_window() -> None:
    global _lowered
    with _lock:
        if not _in_run or _lowered or _windowed or _original is None:
            return
        _set_all(min(19, _original + _amount))
        _lowered = True


def inside_window() -> None:
    """From just before the first fence: the priority the run began with, until the run ends."""
    global _lowered, _windowed
    with _lock:
        _windowed = _in_run
        if _lowered and _original is not None:
            _set_all(_original)
            _lowered = False


def end_run() -> None:
    """The run ended: the priority it began with, for good (the process may go on: tests, the TUI)."""
    global _in_run
    inside_window()
    with _lock:
        _in_run = False


def lowered() -> bool:
    return _lowered


@contextmanager
def yielding(amount: int) -> Iterator[None]:
    """The calling thread, and the programs it starts, `amount` lower for a while (a capture
    that shares cores with a primary); the other threads as they are. Left alone where it
    could not be raised back afterwards."""
    tid = threading.get_native_id()
    try:
        original = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        original = None
    if amount <= 0 or original is None or not _can_restore(original):
        yield
        return
    os.setpriority(os.PRIO_PROCESS, tid, min(19, original + amount))
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, tid, original)
