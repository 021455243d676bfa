"""Fault injection: pause the tool at a named point so that a test harness can kill it there.

Off by default: nothing happens unless DBMIGRATE_FAULT_PAUSE is set. It exists for the
fault matrix (kill -9, SIGTERM, SIGINT at every step boundary and inside the cutover's
steps) and has no use in production.

    DBMIGRATE_FAULT_PAUSE=before:<step>        when the step has started (journaled), before it does anything
    DBMIGRATE_FAULT_PAUSE=after:<step>         when the step has finished (journaled), before the next one
    DBMIGRATE_FAULT_PAUSE=in:<step>:<text>     right after the first statement or router command containing
                                               <text> (case-insensitive) that the tool sent during <step>
    DBMIGRATE_FAULT_PAUSE=sending:<step>:<text> right BEFORE that statement or router command is sent (the
                                               harness cuts its target off, then releases it into the cut)
    DBMIGRATE_FAULT_PAUSE_FILE=<path>          written when paused ("<pid> <point>"); the pause lasts until the
                                               harness removes it, at most DBMIGRATE_FAULT_PAUSE_S seconds (30)

<step> is the start of a step's name ("fence", "switch router", "repoint"). Only the first
matching point pauses, and only steps run forward (not undos). The pause file's second line
names the target of the statement ("target <server name>", or "target router <kind>") for
the points that pause at a statement.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ENV_POINT = "DBMIGRATE_FAULT_PAUSE"
ENV_FILE = "DBMIGRATE_FAULT_PAUSE_FILE"
ENV_MAX_S = "DBMIGRATE_FAULT_PAUSE_S"
WHENS = ("before", "after", "in", "sending")
AT_STATEMENT = ("in", "sending")


@dataclass(frozen=True)
class PausePoint:
    when: str  # before, after, in
    step: str  # start of the step's name, lower case
    text: str = ""  # for "in": part of a statement or router command, lower case

    def __str__(self) -> str:
        return f"{self.when}:{self.step}" + (f":{self.text}" if self.when in AT_STATEMENT else "")


def parse_point(spec: str) -> PausePoint:
    """`before:fence`, `after:switch router`, `in:fence:read_only=on`, `sending:open:read_only=off`
    -> PausePoint (ValueError if malformed)."""
    when, _, rest = spec.strip().partition(":")
    step, _, text = rest.partition(":") if when in AT_STATEMENT else (rest, "", "")
    if when not in WHENS or not step.strip() or (when in AT_STATEMENT and not text.strip()):
        raise ValueError(f"{ENV_POINT}={spec!r}: expected before:<step>, after:<step>, in:<step>:<text> "
                         f"or sending:<step>:<text>")
    return PausePoint(when, step.strip().lower(), text.strip().lower())


class Pauser:
    """Watches the run's events and the statements sent; pauses once at its point."""

    def __init__(self, point: PausePoint, marker: Path, max_s: float = 30.0):
        self.point, self.marker, self.max_s = point, marker, max_s
        # The forward step running now, per thread: a fleet runs each old server's steps in a
        # thread of its own, and a statement belongs to the step of the thread that sends it.
        self._steps: dict[int, str] = {}
        self.done = False

    @property
    def step(self) -> str | None:
        """The forward step the calling thread runs now (None: between steps)."""
        return self._steps.get(threading.get_ident())

    def _is_our_step(self, name: str) -> bool:
        return name.lower().startswith(self.point.step)

    def on_event(self, event: Any) -> None:
        kind, name, action = type(event).__name__, getattr(event, "name", None), getattr(event, "action", "run")
        if name is None or action != "run" or kind not in ("StepStarted", "StepFinished"):
            return
        me = threading.get_ident()
        if kind == "StepStarted":
            self._steps[me] = name
        elif getattr(event, "parent", "") and self._steps.get(me) == name:
            # A sub-step ended: its thread is back in its parent's step (the parent runs on
            # another thread: a fleet's lane), or in the parent's own thread.
            self._steps[me] = event.parent
        else:
            self._steps.pop(me, None)
        if self._is_our_step(name) and (kind, self.point.when) in (("StepStarted", "before"), ("StepFinished", "after")):
            self.pause()

    def _at_our_statement(self, when: str, text: str) -> bool:
        return self.point.when == when and self.step is not None and self._is_our_step(self.step) \
            and self.point.text in text.lower()

    def on_sent(self, target: str, text: str, *_: Any) -> None:
        if self._at_our_statement("in", text):
            self.pause(target)

    def on_sending(self, target: str, text: str) -> None:
        if self._at_our_statement("sending", text):
            self.pause(target)

    def pause(self, target: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        # Written aside and renamed: whoever sees the marker reads it whole, never empty.
        tmp = self.marker.with_name(self.marker.name + ".tmp")
        tmp.write_text(f"{os.getpid()} {self.point}\n" + (f"target {target}\n" if target else ""))
        tmp.replace(self.marker)
        deadline = time.monotonic() + self.max_s
        # Signals arrive here: SIGINT raises KeyboardInterrupt out of the sleep.
        while self.marker.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        self.marker.unlink(missing_ok=True)


def from_environment() -> Pauser | None:
    """The pauser DBMIGRATE_FAULT_PAUSE asks for, or None (the normal case)."""
    spec = os.environ.get(ENV_POINT)
    if not spec:
        return None
    marker = os.environ.get(ENV_FILE)
    if not marker:
        raise ValueError(f"{ENV_POINT} is set but {ENV_FILE} is not: the harness could not see the pause")
    return Pauser(parse_point(spec), Path(marker), float(os.environ.get(ENV_MAX_S, "30")))


# Router commands are not SQL statements: the routing layer reports them here.
Listener = Callable[[str, str], None]  # (target, text)
_router_listeners: list[Listener] = []
# Statements and router commands about to be sent (the `sending:` points).
_sending_listeners: list[Listener] = []


def router_command_sent(text: str) -> None:
    for fn in list(_router_listeners):
        fn("router", text)


def sending(target: str, text: str) -> None:
    """Called right before a statement (target: the server's name) or a router command
    (target: `router <kind>`) is sent; a `sending:` pause holds it there."""
    for fn in list(_sending_listeners):
        fn(target, text)


def add_sending_listener(fn: Listener) -> None:
    _sending_listeners.append(fn)


def remove_sending_listener(fn: Listener) -> None:
    if fn in _sending_listeners:
        _sending_listeners.remove(fn)


def add_router_listener(fn: Listener) -> None:
    _router_listeners.append(fn)


def remove_router_listener(fn: Listener) -> None:
    if fn in _router_listeners:
        _router_listeners.remove(fn)
