"""What happened during a run, as plain data, delivered to whoever listens.

Procedures never print: they emit events. The journal, the console renderer,
the JSON-lines writer and the TUI are all subscribers of the same bus.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable


def utc_now_iso() -> str:
    """Timestamp used everywhere in events and the journal (UTC, second precision + ms)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# kw_only lets every event share run_id/at with defaults while keeping its own
# fields required.
@dataclass(frozen=True, kw_only=True)
class Event:
    run_id: str = ""
    at: str = field(default_factory=utc_now_iso)


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    procedure: str
    cluster: str
    dry_run: bool
    resumed: bool = False
    rollback: bool = False


@dataclass(frozen=True, kw_only=True)
class PhaseStarted(Event):
    phase: str


@dataclass(frozen=True, kw_only=True)
class StepStarted(Event):
    index: int
    phase: str
    name: str
    action: str = "run"  # "run" or "undo"
    mutating: bool = True
    parent: str = ""  # the step that runs this one as a sub-step (a fleet's per-server steps); "" for a step of the run


# Statuses a finished step can have; "interrupted" is set when the operator
# pressed Ctrl-C mid-step (a SIGKILL leaves the journal row at "started").
STEP_STATUSES = ("done", "skipped", "failed", "undone", "not_undone", "dry-run", "interrupted")


@dataclass(frozen=True, kw_only=True)
class StepFinished(Event):
    index: int
    phase: str
    name: str
    status: str
    sentence: str = ""
    duration_ms: float = 0.0
    error: str | None = None
    action: str = "run"
    parent: str = ""  # as StepStarted.parent


@dataclass(frozen=True, kw_only=True)
class GateWaiting(Event):
    phase: str
    gate: str
    kind: str
    prompt: str = ""
    cluster: str = ""  # every confirmation names the cluster it acts on


@dataclass(frozen=True, kw_only=True)
class GateDecided(Event):
    phase: str
    gate: str
    kind: str
    ok: bool
    reason: str
    by: str  # "auto", "operator" or "--yes"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class HookFinished(Event):
    hook: str  # before_phase, after_phase, on_success, on_failure
    phase: str | None
    command: str
    status: str  # ok, failed, timeout
    exit_code: int | None
    duration_ms: float
    stdout_tail: str = ""
    stderr_tail: str = ""


@dataclass(frozen=True, kw_only=True)
class Metric(Event):
    name: str
    value: float
    unit: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Log(Event):
    level: str  # debug, info, progress (a long step, always shown), warning, error
    message: str


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    status: str
    summary: str


def event_to_dict(event: Event) -> dict[str, Any]:
    """One JSON-ready object per event, tagged with its kind: {"event": "StepFinished", ...}."""
    return {"event": type(event).__name__, **dataclasses.asdict(event)}


Subscriber = Callable[[Event], None]


class EventBus:
    """Synchronous, thread-safe fan-out of events to subscribers.

    Delivery is serialized so every subscriber sees events in emission order,
    even when a TUI worker thread emits; critical subscribers get each event
    before the others. Critical subscribers (the journal)
    propagate their errors: a run must not continue unrecorded. A failing
    renderer, however, must never abort a cutover half-way, so its errors are
    reported once on stderr and swallowed.
    """

    def __init__(self) -> None:
        self._subscribers: list[tuple[Subscriber, bool]] = []
        self._lock = threading.RLock()
        self._broken: set[int] = set()
        self._held: list[tuple[Subscriber, Event]] | None = None

    def hold(self) -> None:
        """Until `release`, a display subscriber (one marked `deferrable = True`: a console or
        JSON renderer) gets its events queued, in order: inside a fenced window its
        milliseconds of rendering would be write downtime (measured: 2.3 ms per cutover).
        The journal and every other subscriber still get each event at once."""
        with self._lock:
            if self._held is None:
                self._held = []

    def release(self) -> None:
        """Deliver what `hold` queued, in order; a no-op when nothing is held."""
        with self._lock:
            held, self._held = self._held, None
            for callback, event in held or []:
                self._deliver(callback, False, event)

    def subscribe(self, callback: Subscriber, *, critical: bool = False) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append((callback, critical))

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s[0] is not callback]

        return unsubscribe

    def emit(self, event: Event) -> None:
        with self._lock:
            # Critical subscribers first: whatever a display shows (and whoever acts on
            # it, e.g. a watcher that kills the process) is already in the journal.
            ordered = sorted(self._subscribers, key=lambda s: not s[1])
            for callback, critical in ordered:
                if self._held is not None and not critical and getattr(callback, "deferrable", False):
                    self._held.append((callback, event))
                else:
                    self._deliver(callback, critical, event)

    def _deliver(self, callback: Subscriber, critical: bool, event: Event) -> None:
        try:
            callback(event)
        except Exception as exc:
            if critical:
                raise
            if id(callback) not in self._broken:
                self._broken.add(id(callback))
                print(f"warning: event subscriber {callback!r} failed: {exc}", file=sys.stderr)
