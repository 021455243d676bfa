"""The tool's share of a busy host's CPU, from a run's exec until its first fenced window.

Where the tool shares cores with a server and its application (a database host, a rehearsal),
its own CPU is the application's latency: a run's start-up and preflight take 0.3-0.5 s of a
core, and a writer beside it on a busy 2-core host saw its p99 gap double while that CPU was
spent, whatever the process's priority (nice +10 and SCHED_IDLE alike, bench/stall_beside_load.py).
What the writer pays for is the burst, not the share the scheduler grants: the same CPU spent
in bursts of about 1 ms, each followed by a pause, left its p99 where it was with no process
beside it. Outside the window the tool is never in a hurry, so on a busy host it paces itself:
after each burst it sleeps until its CPU is back within its share of the wall time since exec.

Where it paces: before each module it imports (the start-up is mostly imports) and before each
statement it sends. From just before the first fence (`stop`) it never pauses again, so the
window itself is not slowed; nor on an idle host, where nothing is gained and the start-up stays
quick.

DBMIGRATE_CPU_SHARE: `auto` (default: 0.1 while the host is busy, else off), a share in (0, 1],
or `off`.
"""

from __future__ import annotations

import os
import sys
import threading
import time

AUTO_SHARE = 0.1
BURST_S = 0.001  # CPU spent before a pause
BUSY_PRESSURE_PCT = 10.0  # /proc/pressure/cpu "some avg10": tasks waited for a core that share of the time

_lock = threading.Lock()
_share: float | None = None
_cpu0 = 0.0
_wall0 = 0.0
_paused_s = 0.0


def requested(environ: dict[str, str] | None = None) -> float | None:
    """The share asked for: None (off), a fraction, or AUTO (decided by the host's load)."""
    raw = (environ if environ is not None else os.environ).get("DBMIGRATE_CPU_SHARE", "auto").strip().lower()
    if raw in ("", "auto"):
        return AUTO_SHARE if host_busy() else None
    if raw in ("off", "0", "1", "none"):
        return None
    try:
        share = float(raw)
    except ValueError:
        return AUTO_SHARE if host_busy() else None
    return share if 0 < share < 1 else None


def cpu_pressure_pct(text: str) -> float | None:
    """`some avg10` of /proc/pressure/cpu's text, or None."""
    for line in text.splitlines():
        if line.startswith("some "):
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key == "avg10":
                    try:
                        return float(value)
                    except ValueError:
                        return None
    return None


def host_busy() -> bool:
    """Tasks have been waiting for a core (PSI), or, without PSI, more runnable than cores."""
    try:
        with open("/proc/pressure/cpu") as f:
            pct = cpu_pressure_pct(f.read())
        if pct is not None:
            return pct >= BUSY_PRESSURE_PCT
    except OSError:
        pass
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except OSError:
        return False


class _PacingFinder:
    """First on sys.meta_path: pauses before each module is found, then lets the others find it."""

    def find_spec(self, name, path=None, target=None):
        pace()
        return None


_finder = _PacingFinder()


def begin(share: float | None = None) -> float | None:
    """Pace from now (the share given, or the one asked for); returns the share, None if off."""
    global _share, _cpu0, _wall0, _paused_s
    share = requested() if share is None else share
    if not share:
        return None
    with _lock:
        _share, _cpu0, _wall0, _paused_s = share, time.process_time(), time.monotonic(), 0.0
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    return share


def stop() -> None:
    """No pause from now on (just before a fence; the end of a run)."""
    global _share
    with _lock:
        _share = None
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass


def pacing() -> bool:
    return _share is not None


def share() -> float | None:
    return _share


def paused_s() -> float:
    """How long this process paused so far (reports, benches)."""
    return _paused_s


def pace() -> None:
    """Sleep until the process's CPU is back within its share of the wall time since `begin`."""
    global _paused_s
    share = _share
    if share is None:
        return
    owed = (time.process_time() - _cpu0) - share * (time.monotonic() - _wall0) - BURST_S
    if owed > 0:
        pause = owed / share
        time.sleep(pause)
        _paused_s += pause
