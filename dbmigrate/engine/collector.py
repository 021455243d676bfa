"""Python's cyclic garbage collector, held off during a fenced window.

A collection stops the whole process: measured during switchovers under load, 0.5-2 ms
for the young generations and up to 90 ms for a full one. Inside a fenced window every
such pause is write downtime. The window lasts milliseconds and allocates little, so
collection is simply held off from just before it (`hold`) until it closes (`release`);
the runner releases it too when a run ends, whatever happened. No collection is run
before it: a full one took 18-35 ms of CPU there (8.5 ms for the tool's modules alone),
up to 238 ms of wall time on a saturated machine, just before the fence, on cores the
servers may share, and it would prevent nothing the hold does not.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_held = False


def hold() -> None:
    """Hold collection off until `release`."""
    global _held
    with _lock:
        if _held or not gc.isenabled():
            return  # already held, or disabled by someone else: not ours to manage
        gc.disable()
        _held = True


def release() -> None:
    """Let collection run again if `hold` held it off; a no-op otherwise."""
    global _held
    with _lock:
        if _held:
            gc.enable()
            _held = False


def held() -> bool:
    return _held
