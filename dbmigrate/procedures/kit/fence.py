"""The one fence of every procedure: the server that stops taking writes, and its settings.

`FenceParams` is the base of each procedure's params (consolidate directly, promote and schema
swap through the switchover's, kit/switchover/settings.py), so that a playbook names the
fence's bounds the same way everywhere and they are declared once. `Fence` is the fence of one
server, as the switchover (promote, schema swap, switch back) and consolidation's per-server
cutover run it:

  calm wait   up to fence_calm_wait_s for a moment with no row-lock wait on the server (a
              fence set then would wait behind it, holding every write back); past it, fence
              anyway. The switchover waits for calm inside its convergence (`CalmWait`), so
              that the fence follows it at once; consolidation lets the fence wait.
  fence       read_only=ON bounded by fence_timeout_s, a watchdog beside it (fence_block_s,
              on_fence_blocked) that keeps a timeline of what it did when
  final       the position read right after the fence (no application commit can follow)
  expiry      (fence_expiry) the fence's own request schedules its end on the server, so that a
              tool that freezes in the window cannot hold the server read-only; `before_open`
              refuses when it expires too soon, drops it and checks the fence still holds
  budget      with fence_attempts > 1 and fenced_catchup_budget_s: the caller's targets must
              apply the final position within the budget, or the server is unfenced (nothing
              changed), writes flow for fence_retry_pause_s, and the next attempt starts over
              (`before_retry`: converge again)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, ContextManager, Generic, Literal, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError, Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock
from dbmigrate.exceptions import RefusedWait, SafetyError
from dbmigrate.procedures.kit.fence_watch import FenceWatch

QUERY_INTERRUPTED = 1317  # the fence statement ended by KILL QUERY
CALM_POLL_S = 0.005
# What the fence's expiry leaves beyond the fence and catch-up bounds (the seal and the open).
EXPIRY_MARGIN_S = 3.0
# The new server is not opened when the fence expires within this long: the event scheduler
# fires on whole seconds (CURRENT_TIMESTAMP is truncated), up to a second early.
EXPIRY_GUARD_S = 2.0

Position = TypeVar("Position")
Notify = Callable[..., None]  # (message, level="info")


class FenceParams(BaseModel):
    """The fence's bounds, the same fields in every procedure's params."""

    model_config = ConfigDict(extra="forbid")
    # Former names of fields, still read from playbooks (former name -> field). Per model: the
    # same former name may mean another setting in another procedure.
    RENAMED: ClassVar[dict[str, str]] = {}

    fence_timeout_s: int = Field(5, ge=1, le=60, description="bound of SET GLOBAL read_only=ON (lock_wait_timeout: "
                                                             "whole seconds)")
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
    fence_expiry_s: Optional[int] = Field(
        None, ge=2, le=600, description="when the fence expires by itself (whole seconds); default "
                                        "fence_timeout_s + catchup_timeout_s + 3")
    # Every procedure that fences changes a router (promote's, a swap's, a shard's relay).
    router_doubt_wait_s: float = Field(10, gt=0, le=600, description="a router change sent without an answer is in "
                                       "doubt: before the route is read or changed again, wait this long for the "
                                       "router to show that it ran; past it, stop and say how to finish")

    @model_validator(mode="before")
    @classmethod
    def _former_names(cls, data: Any) -> Any:
        """A field given under its former name (RENAMED) is read under its name."""
        if not isinstance(data, dict) or not any(old in data for old in cls.RENAMED):
            return data
        data = dict(data)
        for old, new in cls.RENAMED.items():
            if old in data:
                if new in data:
                    raise ValueError(f"{old} is the former name of {new}: give {new} only")
                data[new] = data.pop(old)
        return data

    def described(self) -> str:
        """The fence as a dry-run describes it: its calm wait, its statement and its bounds."""
        expiry = "" if self.fence_expiry == "off" else f", expiry scheduled in the same request ({self.fence_expiry})"
        return (f"wait up to {self.fence_calm_wait_s:g}s for no row-lock wait; SET GLOBAL read_only=ON "
                f"(lock_wait_timeout {self.fence_timeout_s:g}s, watchdog after {self.fence_block_s:g}s: "
                f"{self.on_fence_blocked}{expiry})")

    def expiry_after(self, catchup_timeout_s: float) -> float:
        """Seconds after which a fence expires on the server (0: never scheduled), the event
        scheduler permitting: fence_expiry_s, else the fence and catch-up bounds and a margin."""
        if self.fence_expiry == "off":
            return 0.0
        if self.fence_expiry_s is not None:
            return self.fence_expiry_s
        return self.fence_timeout_s + catchup_timeout_s + EXPIRY_MARGIN_S


@dataclass
class CalmWait:
    """The wait for a moment with no row-lock wait on the server to fence."""

    bound_s: float
    started: float | None = None  # when a row-lock wait was first seen
    waited_s: float = 0.0
    waits_at_fence: int = 0

    @property
    def looks(self) -> bool:
        return self.bound_s > 0

    def now(self, waits: int, at: float, deadline: float = math.inf) -> bool:
        """Fence now? Yes with no row-lock wait; else once bound_s has passed since the first
        one, or at `deadline` (a convergence that is over: the fence is not refused for this)."""
        if not waits:
            self.waited_s = at - self.started if self.started is not None else 0.0
            return True
        if self.started is None:
            self.started = at
        if at - self.started >= self.bound_s or at >= deadline:
            self.waited_s, self.waits_at_fence = at - self.started, waits
            return True
        return False

    def said(self, name: str) -> str:
        """What the wait saw ('' when nothing waited)."""
        if self.waits_at_fence:
            return (f"{self.waits_at_fence} transaction(s) on {name} still waited for a row lock after "
                    f"{self.waited_s * 1000:.0f} ms: fenced anyway")
        if self.started is not None:
            return f"waited {self.waited_s * 1000:.1f} ms for no row-lock wait on {name}"
        return ""


def hold_read_only(applier: Applier) -> None:
    """read_only=ON on a server that takes no application writes: a new instance before its
    cutover, a server already fenced that becomes a replica. No window to bound, no watchdog,
    no expiry: it stays read-only until a cutover opens it. A server that may take writes is
    fenced with `Fence`. The statement carries the decision's generation like every role change."""
    applier.set_read_only(True)


@dataclass
class FencedServer:
    """How the fence reaches the server it fences: reads, writes (a dry-run's writes are only
    recorded), a bound on every statement inside a block, and a session of its own for the
    watchdog (None: no watchdog)."""

    inspector: Callable[[], Inspector]
    applier: Callable[[], Applier]
    bounded: Callable[[float], ContextManager[object]]
    side_session: Callable[[float], "tuple[Inspector, Applier] | None"]

    @classmethod
    def of(cls, server: Server) -> "FencedServer":
        def side_session(timeout_s: float) -> tuple[Inspector, Applier]:
            watcher = server.watcher(int(timeout_s) + 5)
            return Inspector(watcher), Applier(watcher)

        return cls(lambda: Inspector(server), lambda: Applier(server), server.bounded, side_session)


@dataclass
class Fenced(Generic[Position]):
    sentence: str
    position: Position
    started: float  # clock.monotonic() when the attempt that held began: the fenced window's start
    applied_within_budget: bool = False  # the targets already applied the position (no catch-up wait needed)


class _NoWatch:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class Fence(Generic[Position]):
    """The fence of one server (see the module doc).

    `final_position(insp, read)` gives the final position from what the fence's own request
    read (`read`: the GTID binlog position, None when it was not read: a dry-run, or a
    watchdog's KILL QUERY that reached the read after the fence held); `targets` names who must
    apply it, in sentences."""

    name: str
    at: FencedServer
    params: FenceParams
    final_position: Callable[[Inspector, "str | None"], Position]
    catchup_timeout_s: float = 5.0  # the fence's default expiry covers the catch-up too
    targets: str = "the new server"
    log: Notify = lambda message, level="info": None
    clock: Clock = field(default_factory=Clock)
    dry_run: bool = False
    expires_at: float | None = None  # wall clock by which the fence set last expires (None: no expiry)
    _expiry_usable: bool | None = None  # the server's event scheduler runs (read once)

    # -- the expiry (a frozen tool cannot hold the server read-only) ----------------------
    def expiry_s(self) -> float:
        """Seconds after which the fence expires on the server, 0 for none; refuses, before any
        change, a server that cannot run the expiry when fence_expiry is `require`."""
        p = self.params
        if p.fence_expiry == "off":
            return 0.0
        if self.dry_run:
            return p.expiry_after(self.catchup_timeout_s)
        if self._expiry_usable is None:
            self._expiry_usable = self.at.inspector().event_scheduler_on()
        if self._expiry_usable:
            return p.expiry_after(self.catchup_timeout_s)
        if p.fence_expiry == "require":
            raise SafetyError(f"{self.name} runs with event_scheduler=OFF: its fence could not expire by itself, and "
                              f"a tool that froze inside the window would hold it read-only",
                              hint=f"turn the event scheduler on at {self.name} (event_scheduler=ON, also in its "
                                   f"config), or set fence_expiry: if_available in the playbook to fence without "
                                   f"the bound")
        self.log(f"{self.name} runs with event_scheduler=OFF: fencing without an expiry (fence_expiry: if_available)",
                 "warning")
        return 0.0

    def cancel_expiry(self) -> None:
        """Drop the fence's expiry (a no-op where none was scheduled)."""
        if self.params.fence_expiry != "off":
            self.at.applier().cancel_fence_expiry()

    def require_not_expiring(self, expires_at: float | None, opening: str) -> None:
        """Refuse to open `opening` when the fence expires (or expired) before the open can have
        landed: the expiry would make the fenced server writable beside it."""
        if expires_at is None or self.dry_run:
            return
        left = expires_at - self.clock.now()
        if left < EXPIRY_GUARD_S:
            raise SafetyError(f"the fence of {self.name} expires by itself in {max(left, 0.0):.1f}s (or has): not "
                              f"opening {opening} beside it",
                              hint="the run puts it back; if it stopped, dbmigrate rollback RUN; raise "
                                   "fence_expiry_s if the window legitimately lasts longer")

    def require_fenced(self, fenced: bool, opening: str) -> None:
        if not fenced:
            raise SafetyError(f"{self.name} is writable again: refusing to open {opening} (two primaries)",
                              hint=f"find who set read_only=OFF on {self.name}; then roll back: dbmigrate rollback RUN")

    def before_open(self, opening: str) -> None:
        """Before `opening` takes writes: the fence does not expire too soon, its expiry is
        dropped, then the fence is seen still holding (bounded like the fence). Once the expiry
        is dropped nothing but an operator can unfence the server, so "still fenced" stays true
        through the open."""
        if self.dry_run:
            return
        self.require_not_expiring(self.expires_at, opening)
        with self.at.bounded(self.params.fence_timeout_s):
            self.cancel_expiry()
            self.require_fenced(self.at.inspector().read_only(), opening)

    def unfence(self) -> None:
        """read_only=OFF, its expiry dropped first (callers decide whether that is safe)."""
        self.cancel_expiry()
        self.at.applier().set_read_only(False)

    # -- the fence ------------------------------------------------------------------------
    def fence(self, applied_within: Callable[[Position, float], bool] | None = None,
              before_retry: Callable[[], object] | None = None, *, calm: bool = True) -> Fenced[Position]:
        """read_only on the server, tried up to fence_attempts times when one attempt gives up
        blocked, or its targets did not apply the final position within fenced_catchup_budget_s
        (`applied_within(position, budget_s)`; writes flow for fence_retry_pause_s in between).
        `before_retry` runs before each new attempt: the targets may have fallen behind while
        writes flowed. `calm`: wait for calm first (False: the caller's convergence did)."""
        p = self.params
        attempts = max(1, p.fence_attempts)
        for attempt in range(1, attempts + 1):
            try:
                if attempt > 1 and before_retry is not None:
                    before_retry()
                calm_said = self.wait_calm() if calm and not self.dry_run else ""
                if calm_said:  # journaled: an attempt that gives up later leaves no sentence of its own
                    self.log(f"attempt {attempt} of {attempts}: {calm_said}")
                fenced = self._fence_once()
                if calm_said:
                    fenced.sentence = f"{calm_said}; {fenced.sentence}"
                if attempt < attempts and p.fenced_catchup_budget_s and applied_within is not None \
                        and not self.dry_run:
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
        """Up to fence_calm_wait_s for no row-lock wait on the server; says what it saw."""
        calm = CalmWait(self.params.fence_calm_wait_s)
        if not calm.looks:
            return ""
        insp = self.at.inspector()
        while not calm.now(insp.row_lock_waits(), self.clock.monotonic()):
            self.clock.sleep(CALM_POLL_S)
        return calm.said(self.name)

    def _fence_once(self) -> Fenced[Position]:
        """One attempt at read_only on the server.

        SET GLOBAL read_only=ON returns once commits in progress are done, and no application
        commit can follow, so the position read right after it is final. Application sessions
        are ended later, after the routes flip, because nothing they do can change the data."""
        p = self.params
        expiry = self.expiry_s()  # read now: not inside the window
        t0 = self.clock.monotonic()
        # Under the bound the open sessions are used as they are: no ping before each statement.
        with self.at.bounded(p.fence_timeout_s + 1):
            watch = None if self.dry_run else self._watch()
            read = self._set_read_only_watched(watch, expiry)
            fenced_ms = (self.clock.monotonic() - t0) * 1000
            position = self.final_position(self.at.inspector(), read)
        said = f"fenced {self.name} (read_only=ON) in {fenced_ms:.1f} ms"
        if watch is not None and watch.killed:
            said += f" after ending {len(watch.killed)} blocking statement(s) ({watch.describe_blockers()})"
            self.log(f"the fence on {self.name} ended {len(watch.killed)} blocking statement(s) "
                     f"({watch.describe_blockers()}); watchdog: {watch.said_timeline()}", "warning")
        return Fenced(f"{said}; final position {position or '(empty)'}", position, t0)

    def _watch(self) -> FenceWatch | None:
        side = self.at.side_session(self.params.fence_timeout_s)
        if side is None:
            return None
        insp, apply = side
        return FenceWatch(insp, apply, self.at.inspector().connection_id(), self.params.fence_block_s,
                          self.params.on_fence_blocked, self.log)

    def _set_read_only_watched(self, watch: FenceWatch | None, expiry: float) -> str | None:
        """read_only=ON and, in the same round trip, the binlog position (None when it was not
        read: dry-run, or a watchdog's KILL QUERY that reached the read after the fence held)."""
        try:
            with watch or _NoWatch():
                try:
                    self.expires_at = self.clock.now() + expiry if expiry else None
                    # The expiry is scheduled in the fence's own request (one round trip).
                    return self.at.applier().fence_and_read_binlog_pos(self.params.fence_timeout_s, expiry or None)
                finally:
                    if watch is not None:
                        watch.mark("fence returned")
        except QueryError as e:
            if watch is not None and watch.error:
                self.log(f"the fence watchdog on {self.name} failed: {watch.error}", "warning")
            if watch is not None and watch.gave_up:
                self.log(f"the fence watchdog on {self.name}: {watch.said_timeline()}", "debug")
            if watch is None or not watch.gave_up or e.errno != QUERY_INTERRUPTED:
                raise
            if not self.at.inspector().read_only():
                # Not fenced: the expiry scheduled with the fence must not fire on a later fence.
                self.cancel_expiry()
                raise watch.refusal(self.name) from None
            return None

    def _within_budget(self, position: Position, applied_within: Callable[[Position, float], bool]) -> str:
        """Inside the fenced window: the targets apply the final position within the budget, or
        the server is unfenced (nothing was opened: one writable server) and RefusedWait lets the
        next attempt converge again. Targets that do not answer within the budget count as not
        applied: the next attempt's convergence names them."""
        budget = self.params.fenced_catchup_budget_s or 0.0
        t0 = self.clock.monotonic()
        try:
            applied = applied_within(position, budget)
        except QueryError:
            applied = False
        waited_ms = (self.clock.monotonic() - t0) * 1000
        if applied:
            return f"; {self.targets} applied it in {waited_ms:.1f} ms"
        self.unfence()
        raise RefusedWait(f"{self.targets} did not apply {self.name}'s final position {position} within the fenced "
                          f"catch-up budget of {budget * 1000:g} ms (waited {waited_ms:.1f} ms): unfenced "
                          f"{self.name} (read_only=OFF), it takes writes again, nothing changed",
                          hint="the new server stalls while applying: retry when it keeps up (dbmigrate lag watch), "
                               "or raise fenced_catchup_budget_s")
