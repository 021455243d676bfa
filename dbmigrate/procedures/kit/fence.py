"""The fence every procedure sets on the server that stops taking writes, and its settings.

`FenceParams` is embedded by each procedure's params (promote, schema swap, consolidate), so
that a playbook names the fence's bounds the same way everywhere. `ServerFence` is the fence
of one server as a procedure without a GTID-ordered candidate uses it (consolidation: each
instance applies the old server's final binlog position on a named connection):

  calm wait   up to fence_calm_wait_s for a moment with no row-lock wait on the server (a
              fence set then would wait behind it, holding every write back); past it, fence anyway
  fence       read_only=ON bounded by fence_timeout_s, a watchdog beside it (fence_block_s,
              on_fence_blocked) that keeps a timeline of what it did when
  final       the position read right after the fence (no application commit can follow)
  expiry      (fence_expiry) the fence's own request schedules its end on the server, so that a
              tool that freezes in the window cannot hold the server read-only; `before_open`
              drops it and checks the fence still holds before the new server opens
  budget      with fence_attempts > 1 and fenced_catchup_budget_s: the caller's targets must
              apply the final position within the budget, or the server is unfenced (nothing
              changed), writes flow for fence_retry_pause_s, and the next attempt starts over

The promote switchover (kit/switchover.py) runs the same parts around its GTID positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Literal, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError, Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.wait import Clock
from dbmigrate.exceptions import RefusedWait, SafetyError
from dbmigrate.procedures.kit.fence_watch import FenceWatch

QUERY_INTERRUPTED = 1317  # the fence statement ended by KILL QUERY
CALM_POLL_S = 0.005
EXPIRY_MARGIN_S = 3.0  # beyond the fence's bound, when the procedure gives no default expiry
EXPIRY_GUARD_S = 1.5  # the new server is not opened when the fence expires sooner (events fire on whole seconds)

Position = TypeVar("Position")
Notify = Callable[..., None]  # (message, level="info")


class FenceParams(BaseModel):
    """The fence's bounds, the same fields in every procedure's params."""

    model_config = ConfigDict(extra="forbid")
    fence_timeout_s: float = Field(5, gt=0, le=60, description="bound of SET GLOBAL read_only=ON (lock_wait_timeout)")
    fence_calm_wait_s: float = Field(0.5, ge=0, le=60, description="before the fence, wait up to this long for a "
                                     "moment with no row-lock wait on the server (a fence would wait behind it); "
                                     "past it, fence anyway; 0: do not look")
    fence_block_s: float = Field(0.5, gt=0, le=10, description="how long the fence may hold writes back while it "
                                                              "waits for running statements")
    on_fence_blocked: Literal["unfence", "kill_blockers"] = Field(
        "unfence", description="past fence_block_s: give up the fence (nothing changed) or end the blocking "
                               "statements (KILL QUERY) and give up only if still blocked")
    fence_attempts: int = Field(1, ge=1, le=10, description="fences tried in all when one gives up (blocked, or "
                                                            "over the fenced catch-up budget); writes flow between "
                                                            "two attempts")
    fence_retry_pause_s: float = Field(1, gt=0, le=60, description="writes flow this long before the next attempt")
    fenced_catchup_budget_s: Optional[float] = Field(
        None, gt=0, le=10, description="with fence_attempts > 1: unfence and try again when the new server does not "
                                       "apply the final position this soon after the fence (the last attempt "
                                       "waits up to catchup_timeout_s)")

    fence_expiry: Literal["require", "if_available", "off"] = Field(
        "require", description="the fence expires on the server by itself (a scheduled event, dropped before the "
                               "new server opens), so a frozen tool cannot hold a server read-only: require refuses "
                               "a server whose event_scheduler is OFF; if_available fences there without it")
    fence_expiry_s: Optional[float] = Field(
        None, gt=1, le=600, description="when the fence expires by itself; default fence_timeout_s + "
                                        "catchup_timeout_s + 3")

    def fence_settings(self) -> dict[str, Any]:
        """The fence's fields by name (SwitchoverSettings takes the same names)."""
        return {name: getattr(self, name) for name in FenceParams.model_fields}


@dataclass
class Fenced(Generic[Position]):
    sentence: str
    position: Position
    started: float  # clock.monotonic() when the attempt that held began: the fenced window's start
    applied_within_budget: bool = False  # the targets already applied the position (no catch-up wait needed)


@dataclass
class ServerFence(Generic[Position]):
    """The fence of one server (see the module doc). `read_final` reads the final position on
    the fenced server's session; `applied_within(position, budget_s)` says whether every
    target applied it in time; `before_retry` runs before each new attempt (converge again)."""

    name: str
    server: Server
    params: FenceParams
    read_final: Callable[[Inspector], Position]
    log: Notify = lambda message, level="info": None
    clock: Clock | None = None
    # The fence's expiry when fence_expiry_s does not say: the procedure's fence and catch-up bounds.
    default_expiry_s: float = 0.0
    expires_at: float | None = None  # wall clock by which the fence set last expires (None: no expiry)

    def __post_init__(self) -> None:
        self.clock = self.clock or Clock()

    def expiry_s(self) -> float:
        """Seconds after which the fence expires on the server, 0 for none; refuses, before any
        change, a server that cannot run the expiry when fence_expiry is `require`."""
        p = self.params
        if p.fence_expiry == "off":
            return 0.0
        if Inspector(self.server).event_scheduler_on():
            return p.fence_expiry_s or self.default_expiry_s or p.fence_timeout_s + EXPIRY_MARGIN_S
        if p.fence_expiry == "require":
            raise SafetyError(f"{self.name} runs with event_scheduler=OFF: its fence could not expire by itself, and "
                              f"a tool that froze inside the window would hold it read-only",
                              hint=f"turn the event scheduler on at {self.name} (event_scheduler=ON, also in its "
                                   f"config), or set fence_expiry: if_available in the playbook")
        self.log(f"{self.name} runs with event_scheduler=OFF: fencing without an expiry (fence_expiry: if_available)",
                 "warning")
        return 0.0

    def before_open(self) -> None:
        """Before the new server opens: drop the fence's expiry, then make sure the fence still
        holds (an expiry that fired would leave two writable servers)."""
        if self.params.fence_expiry != "off":
            Applier(self.server).cancel_fence_expiry()
        if self.expires_at is not None and self.expires_at - self.clock.now() < EXPIRY_GUARD_S \
                or not Inspector(self.server).read_only():
            raise SafetyError(f"the fence of {self.name} expired (or was lifted) before the new server opened",
                              hint="the run puts it back; raise fence_expiry_s if the window legitimately lasts longer")

    def fence(self, applied_within: Callable[[Position, float], bool] | None = None,
              before_retry: Callable[[], object] | None = None) -> Fenced[Position]:
        p = self.params
        attempts = max(1, p.fence_attempts)
        for attempt in range(1, attempts + 1):
            try:
                if attempt > 1 and before_retry is not None:
                    before_retry()
                calm = self.wait_calm()
                if calm:  # journaled: an attempt that gives up later leaves no sentence of its own
                    self.log(f"attempt {attempt} of {attempts}: {calm.rstrip('; ')}")
                fenced = self._fence_once()
                fenced.sentence = calm + fenced.sentence
                if attempt < attempts and p.fenced_catchup_budget_s and applied_within is not None:
                    fenced.sentence += self._within_budget(fenced.position, applied_within)
                    fenced.applied_within_budget = True
            except RefusedWait as e:
                if attempt == attempts:
                    if attempts > 1:
                        e.message = f"{e.message} (attempt {attempt} of {attempts})"
                    raise
                self.log(f"{e.message}; trying again in {p.fence_retry_pause_s:g}s "
                         f"(attempt {attempt + 1} of {attempts})", "warning")
                self.clock.sleep(p.fence_retry_pause_s)
                continue
            if attempt > 1:
                fenced.sentence += f" (attempt {attempt} of {attempts})"
            return fenced
        raise AssertionError("unreachable")  # the loop returns or raises

    def wait_calm(self) -> str:
        """Up to fence_calm_wait_s for no row-lock wait on the server; the sentence says what it saw."""
        bound = self.params.fence_calm_wait_s
        if bound <= 0:
            return ""
        insp = Inspector(self.server)
        t0 = self.clock.monotonic()
        waits = insp.row_lock_waits()
        if not waits:
            return ""
        while waits and self.clock.monotonic() - t0 < bound:
            self.clock.sleep(CALM_POLL_S)
            waits = insp.row_lock_waits()
        waited_ms = (self.clock.monotonic() - t0) * 1000
        if waits:
            return (f"{waits} transaction(s) on {self.name} still waited for a row lock after {waited_ms:.0f} ms: "
                    f"fenced anyway; ")
        return f"waited {waited_ms:.1f} ms for no row-lock wait on {self.name}; "

    def _fence_once(self) -> Fenced[Position]:
        p, server = self.params, self.server
        watcher = server.watcher(int(p.fence_timeout_s) + 5)  # opened before the fence: the watchdog's session
        watch = FenceWatch(Inspector(watcher), Applier(watcher), Inspector(server).connection_id(), p.fence_block_s,
                           p.on_fence_blocked, self.log)
        expiry = self.expiry_s()  # read now: not inside the window
        t0 = self.clock.monotonic()
        try:
            with server.bounded(p.fence_timeout_s + 1):
                with watch:
                    try:
                        self.expires_at = self.clock.now() + expiry if expiry else None
                        # The expiry is scheduled in the fence's own request (one round trip).
                        Applier(server).fence_and_read_binlog_pos(p.fence_timeout_s, expiry or None)
                    finally:
                        watch.mark("fence returned")
                position = self.read_final(Inspector(server))
        except QueryError as e:
            if watch.error:
                self.log(f"the fence watchdog on {self.name} failed: {watch.error}", "warning")
            if watch.gave_up:
                self.log(f"the fence watchdog on {self.name}: {watch.said_timeline()}", "debug")
            if not watch.gave_up or e.errno != QUERY_INTERRUPTED or Inspector(server).read_only():
                raise
            raise watch.refusal(self.name) from None
        said = f"fenced {self.name} (read_only=ON) in {(self.clock.monotonic() - t0) * 1000:.1f} ms"
        if watch.killed:
            said += f" after ending {len(watch.killed)} blocking statement(s) ({watch.describe_blockers()})"
            self.log(f"the fence on {self.name} ended {len(watch.killed)} blocking statement(s) "
                     f"({watch.describe_blockers()}); watchdog: {watch.said_timeline()}", "warning")
        return Fenced(f"{said}; final position {position}", position, t0)

    def _within_budget(self, position: Position, applied_within: Callable[[Position, float], bool]) -> str:
        budget = self.params.fenced_catchup_budget_s or 0.0
        t0 = self.clock.monotonic()
        try:
            applied = applied_within(position, budget)
        except QueryError:
            applied = False
        waited_ms = (self.clock.monotonic() - t0) * 1000
        if applied:
            return f"; applied everywhere in {waited_ms:.1f} ms"
        self.unfence()
        raise RefusedWait(f"the final position {position} of {self.name} was not applied within the fenced "
                          f"catch-up budget of {budget * 1000:g} ms (waited {waited_ms:.1f} ms): unfenced "
                          f"{self.name} (read_only=OFF), it takes writes again, nothing changed",
                          hint="the new server stalls while applying: retry when it keeps up, "
                               "or raise fenced_catchup_budget_s")

    def unfence(self) -> None:
        if self.params.fence_expiry != "off":
            Applier(self.server).cancel_fence_expiry()
        Applier(self.server).set_read_only(False)
