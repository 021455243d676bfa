"""CPU used by a local process over a window, from /proc (sandbox servers run on this host)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, TypeVar

from dbmigrate.report.series import cpu_percent

T = TypeVar("T")
HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_ticks(pid: int) -> int | None:
    """utime + stime of a process in clock ticks; None when it is gone."""
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted after the name


def measure_cpu(pid: int | None, server: str, work: Callable[[], T]) -> tuple[T, dict[str, Any] | None]:
    """Run `work` and return its result with the CPU the process used meanwhile (% of one core)."""
    before = process_ticks(pid) if pid else None
    t0 = time.monotonic()
    result = work()
    seconds = time.monotonic() - t0
    after = process_ticks(pid) if pid else None
    if before is None or after is None:
        return result, None
    return result, {"server": server, "pct": cpu_percent(before, after, seconds, HZ), "seconds": round(seconds, 2)}
