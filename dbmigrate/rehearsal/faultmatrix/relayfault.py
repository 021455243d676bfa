"""The relay in the path (scenarios.relay_matrix): the cluster's router for a row, and the relay
itself as the fault.

A relay row routes the cluster through the relay (sandbox/relay.py: the inventory's router becomes
`kind: relay`, so sysbench and the zero-loss verifier write through it, and promote drives it); a
HAProxy row after it takes HAProxy back, flipped first to the writer of now (it was left alone
while the relay routed).

The faults, at the row's pause:
- `kill-relay`: kill -9, then the relay started again as systemd would (same flags; its -state
  file gives it the backend of its last move), at once (before the tool goes on) or `hold_s`
  later (the tool goes on meanwhile and finds nothing listening). At a `sending:` point (the move
  about to be sent) the relay is frozen first, the tool sends the move into its socket, and the
  relay is killed INFLIGHT_KILL_AFTER_S later, before the tool's wait for an answer ends: the move
  is in doubt, and the relay that answers next is a new process that never ran it.
- `freeze-relay`: SIGSTOP at the pause (the move is then sent into its socket), SIGCONT `hold_s` later.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from dbmigrate.rehearsal.faultmatrix import health
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay
from dbmigrate.routing import router_for


def use_router(cluster: Any, kind: str) -> None:
    """Make `kind` (haproxy or relay) the cluster's router, where the row's load writes."""
    boxes, name = cluster.boxes, cluster.name
    if kind == "relay":
        sandbox_relay.start(boxes, name)  # idempotent while it runs; its backend: the writable server
        return
    state = cluster.state
    if not state.relay:
        return
    sandbox_relay.stop(state)
    state = cluster.state
    state.relay = None
    state.save()
    boxes.write_inventory(state)
    inv = cluster.inventory
    writers = health.writers(health.shape(inv, name))
    if len(writers) == 1:  # HAProxy still sends writes where the relay rows found it
        router_for(inv, name).switch_writer(inv.cluster(name).servers[writers[0]])


class RelayOutage:
    """kill -9 of the sandbox's relay on entry (after a SIGSTOP at `frozen_at`, if given), started
    again on exit; how long it was out is measured."""

    def __init__(self, boxes: Any, name: str, frozen_at: float | None = None):
        self.boxes, self.name = boxes, name
        self.started_at = frozen_at
        self.back_at: float | None = None

    def __enter__(self) -> "RelayOutage":
        if self.started_at is None:
            self.started_at = time.monotonic()
        sandbox_relay.kill(self.boxes, self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        sandbox_relay.restart(self.boxes, self.name)
        self.back_at = time.monotonic()

    @property
    def out_ms(self) -> float:
        if self.started_at is None or self.back_at is None:
            return 0.0
        return (self.back_at - self.started_at) * 1000


def relay_pid(cluster: Any) -> int:
    return int(cluster.state.relay["pid"])


def freeze_now(cluster: Any, timeout_s: float = 2.0) -> float:
    """SIGSTOP the relay and wait until every thread of it is stopped (a thread stops when it next
    runs, which on loaded cores may come after the tool's request); returns when it was sent."""
    pid = relay_pid(cluster)
    os.kill(pid, signal.SIGSTOP)
    sent = time.monotonic()
    while not all_stopped(pid) and time.monotonic() < sent + timeout_s:
        time.sleep(0.001)
    return sent


@contextmanager
def frozen(cluster: Any) -> Iterator[None]:
    """The relay stopped (every thread seen stopped) until the block ends, then continued."""
    pid = relay_pid(cluster)
    freeze_now(cluster)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def all_stopped(pid: int, proc: Path = Path("/proc")) -> bool:
    """Is every thread of `pid` stopped (state T in /proc/PID/task/*/stat)?"""
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
        states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks]
    except (OSError, IndexError):
        return False
    return bool(states) and all(st in ("T", "t") for st in states)


def log_offset(cluster: Any) -> int:
    try:
        return Path(cluster.state.relay["log"]).stat().st_size
    except (OSError, KeyError, TypeError):
        return 0


WORTH_KEEPING = ("start", "state file", "hold", "move", "releas", "seq", "stale", "listen")


def log_since(cluster: Any, offset: int, limit: int = 3000) -> str:
    """The relay's log lines of the row (starts, holds, moves, releases), for its details."""
    relay = cluster.state.relay or {}
    try:
        with open(relay["log"], "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except (OSError, KeyError):
        return ""
    lines = [ln for ln in text.splitlines() if any(w in ln.lower() for w in WORTH_KEEPING)]
    return " | ".join(lines)[-limit:]


def moved_before_restart(log: str) -> bool | None:
    """From the row's relay log: did the relay run a move before it was started again (None: it
    was not started again)? At `in-move` that says whether the killed relay ran the move it got."""
    restart = log.find("relay: listening")
    if restart < 0:
        return None
    return "move: backend is now" in log[:restart]
