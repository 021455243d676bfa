"""The cutover as engine steps: fence, catch up, router, open, end sessions, reset,
repoint, reverse, verify. Promote and schema swap call these factories directly.

A procedure describes its switchover with a `Cutover` (who goes, who comes, how to
build the `Switchover`); the steps keep their journaled facts in `CutoverState`.
Every undo converges on the same safe shape through `switch_back`, and the fence is
undone even when its step did not finish (read_only may be in place though the step
failed or the tool was killed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from dbmigrate.engine.state import TypedState
from dbmigrate.engine.step import FunctionStep, RunContext, Step
from dbmigrate.exceptions import DbmigrateError, SafetyError
from dbmigrate.procedures.kit.audit import writes_after_fence
from dbmigrate.procedures.kit.switchover import Record, Switchover, SwitchoverParams, WriterRouter, switch_back
from dbmigrate.procedures.kit.switchover.router import JournaledRouter


class CutoverState(TypedState):
    """What the cutover steps journal; resume and rollback decide from it."""

    KEY = "cutover"
    FLAT_KEYS = {"fence_pos": "fence_pos", "candidate_opened": "candidate_opened", "switched_at": "switched_at"}

    fence_pos: Optional[str] = None  # the old primary's final position; None: not fenced by this run
    fence_expires_at: Optional[float] = None  # wall clock when the fence's expiry fires on the old primary
    fence_asked_at: Optional[float] = None  # wall clock when the fence was asked for (the audit's "since")
    candidate_opened: bool = False  # journaled before read_only=OFF: after a crash it may be writable
    switched_at: Optional[float] = None  # wall clock when the router sent writes to the new primary
    bypass_users: Optional[list[str]] = None  # accounts that bypass read_only, read before the fence
    converged: Optional[str] = None  # how far behind the candidate was when the fence was set
    lag_at_fence_trx: Optional[int] = None
    applied_pos: Optional[str] = None  # the final position the candidate applied within the fence step
    held: Optional[dict[str, Any]] = None  # the router's hold of new connections in place (routing/haproxy_hold.py)
    # The router change sent and not answered yet (journaled before it is sent): in doubt.
    router_change: Optional[dict[str, Any]] = None
    router_seq: int = 0  # the number of the last router change this run sent


class RouteJournal:
    """The cutover's journal of router changes, in the run state (kit/switchover/router.py)."""

    def __init__(self, ctx: RunContext[Any, Any]):
        self.ctx = ctx

    def pending(self) -> dict[str, Any] | None:
        return CutoverState.load(self.ctx.state).router_change

    def last_seq(self) -> int:
        return CutoverState.load(self.ctx.state).router_seq

    def sent(self, change: dict[str, Any]) -> None:
        with CutoverState.edit(self.ctx.state) as s:
            s.router_change = {**change, "sent_at": self.ctx.clock.now()}
            s.router_seq = max(s.router_seq, int(change["seq"]))

    def answered(self, seq: int) -> None:
        with CutoverState.edit(self.ctx.state) as s:
            if s.router_change is not None and int(s.router_change["seq"]) <= seq:
                s.router_change = None


# What a maker hands its router through before building the switchover (Cutover.sw: journaled).
RouterOf = Callable[[Optional[WriterRouter], SwitchoverParams], Optional[WriterRouter]]
MakeSwitchover = Callable[[RunContext[Any, Any], Optional[Record], RouterOf], Switchover]


@dataclass(frozen=True)
class Cutover:
    """One planned switchover inside a procedure.

    `switchover(ctx, record, routed)` builds the mechanics from the run's resources, its router
    passed through `routed` (which journals every change before it is sent); with a `record` it
    must be a dry-run that hands each statement it would send to `record`.
    """

    old: str
    new: str
    switchover: MakeSwitchover

    def sw(self, ctx: RunContext[Any, Any], record: Record | None = None) -> Switchover:
        def routed(router: WriterRouter | None, params: SwitchoverParams) -> WriterRouter | None:
            # Every router change of the cutover (and of its undo) journaled before it is sent.
            if router is None or ctx.dry_run or isinstance(router, JournaledRouter):
                return router
            return JournaledRouter(router, RouteJournal(ctx), ctx.clock, params.router_doubt_wait_s, ctx.log)

        return self.switchover(ctx, record, routed)

    def planned(self, action: Callable[[RunContext[Any, Any], Switchover], Any]) -> Callable[[RunContext[Any, Any]], list[tuple[str, str]]]:
        """describe() for a dry-run: the (server, statement) pairs `action` would send."""

        def describe(ctx: RunContext[Any, Any]) -> list[tuple[str, str]]:
            lines: list[tuple[str, str]] = []
            action(ctx, self.sw(ctx, lambda server, text: lines.append((server, text))))
            return lines

        return describe


def state(ctx: RunContext[Any, Any]) -> CutoverState:
    return CutoverState.load(ctx.state)


# -- what each step does -----------------------------------------------------------

def converge(cut: Cutover, ctx: RunContext[Any, Any], sw: Switchover | None = None) -> str:
    """Wait until the candidate is close to the old primary; journaled before any fence."""
    sentence, behind = (sw or cut.sw(ctx)).converge()
    if not ctx.dry_run:
        with CutoverState.edit(ctx.state) as s:
            s.converged, s.lag_at_fence_trx = sentence, behind
        ctx.log(sentence)
    return sentence


def fence(cut: Cutover, ctx: RunContext[Any, Any], sw: Switchover | None = None,
          before_retry: Callable[[], object] | None = None) -> str:
    """read_only on the old primary (see Switchover.fence for `before_retry`)."""
    sw = sw or cut.sw(ctx)
    asked_at = ctx.clock.now()
    try:
        sentence, pos = sw.fence(before_retry)
    except DbmigrateError as e:
        raise sw.name_fence_blocker(e) from e.__cause__
    with CutoverState.edit(ctx.state) as s:
        s.fence_pos, s.applied_pos, s.fence_expires_at = pos, sw.applied_at_fence, sw.fence_expires_at
        s.fence_asked_at = asked_at
    ctx.set_hook_env("FENCE_POSITION", pos)
    return sentence


def converge_then_fence(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    """The fence is set only once the candidate has converged, at once after it: sessions,
    grants and the router's request are prepared before the convergence wait, not between."""
    sw = cut.sw(ctx)  # one instance: the fence relies on what prepare_window checked
    bypass = sw.prepare_window()
    if not ctx.dry_run:
        with CutoverState.edit(ctx.state) as s:
            s.bypass_users = sorted(bypass)
        # Nothing of the tool's own pauses the window from here until the candidate opens.
        ctx.hold_for_fenced_window()
    converged = converge(cut, ctx, sw)
    # At the edge of the window: new connections held by the router, the old primary's writer
    # sessions ended each when idle, so that no application statement meets the fence.
    held = hold_and_end_idle(sw, ctx)

    def again() -> None:
        # A retried attempt follows writes that flowed meanwhile (not held): the candidate
        # converges again first, then the edge is made again.
        sw.release_hold()
        converge(cut, ctx, sw)
        hold_and_end_idle(sw, ctx)

    try:
        fenced = fence(cut, ctx, sw, before_retry=again)
    except BaseException:
        sw.release_hold()  # the old primary stays the writer: held connections go on to it
        raise
    return f"{converged}; {held + '; ' if held else ''}{fenced}"


def hold_and_end_idle(sw: Switchover, ctx: RunContext[Any, Any]) -> str:
    """The router's hold of new connections and the idle ending of the old primary's writer
    sessions (a no-op for routers that cannot hold); the hold is journaled, so that a later
    process can put the router back if this one dies holding."""
    if not sw.holds_new_connections():
        return ""
    if sw.current_hold() is None and state(ctx).held:
        # Left by a process that died holding (resumed): put back first, so that the hold
        # made now keeps the old writer's own maxconn, not the hold's 1.
        sw.release_leftover_hold(state(ctx).held)

    def journal(hold: Any) -> None:
        with CutoverState.edit(ctx.state) as s:
            s.held = hold.to_dict()

    return sw.hold_and_end_idle(journal=journal)


def undo_fence(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    """A fence step that stopped before read_only=ON (the candidate never converged)
    changed nothing: leave every server as it is."""
    sw = cut.sw(ctx)
    try:
        untouched = state(ctx).fence_pos is None and not ctx.dry_run and not sw.is_fenced() \
            and not sw.writable(sw.new)
    except DbmigrateError:
        untouched = False  # cannot tell: converge on the safe shape
    if untouched:
        # A hold a process that died before the fence left (the old primary stays the writer). A hold
        # is journaled before it is sent: with none journaled the router is not even read (a dead or
        # frozen router must not fail an undo that changes nothing).
        released = release_leftover(sw, ctx) if state(ctx).held else ""
        return f"nothing to undo: {cut.old} was not fenced" + (f"; {released}" if released else "")
    return undo_switchover(cut, ctx)


def release_leftover(sw: Switchover, ctx: RunContext[Any, Any]) -> str:
    """A hold of new connections this process (or one that died) left: the router put back,
    through the journaled router (a change still in doubt is settled before it is sent)."""
    released = sw.release_leftover_hold(state(ctx).held) if not ctx.dry_run else ""
    if released:
        with CutoverState.edit(ctx.state) as s:
            s.held = None
    return released


def is_fenced(cut: Cutover, ctx: RunContext[Any, Any]) -> bool:
    return state(ctx).fence_pos is not None and cut.sw(ctx).is_fenced()


def undo_switchover(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    """The undo of every cutover step: back to the old primary, whatever was done."""
    st = state(ctx)
    sw = cut.sw(ctx)
    # A router change in doubt may have switched it: the router must then answer before the undo
    # ends, unless the change went with the router's process (nothing listens there any more).
    in_doubt = st.router_change is not None and not (isinstance(sw.router, JournaledRouter)
                                                      and sw.router.change_gone())
    # A hold of new connections this process (or one that died) left: the router back first.
    released = release_leftover(sw, ctx)
    said = switch_back(sw, candidate_opened=st.candidate_opened,
                       router_switched=st.switched_at is not None or in_doubt)
    return f"{released}; {said}" if released else said


def catch_up(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    st = state(ctx)
    if st.fence_pos is not None and st.applied_pos == st.fence_pos and not ctx.dry_run:
        # Seen applied within the fence step's budget: applied positions stay applied (the
        # candidate's gtid_slave_pos is transactional), so no round trip inside the window.
        return f"{cut.new} had applied {st.fence_pos or '(empty)'} within the fence step"
    return cut.sw(ctx).wait_catchup(st.fence_pos or "")


def open_candidate(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    sw = cut.sw(ctx)
    # Accounts that bypass read_only (SUPER / READ ONLY ADMIN) may still have committed on
    # the old primary after the fence: the candidate must have those too before it opens.
    st = state(ctx)  # loaded once: this runs inside the fenced window
    fence_pos, known = st.fence_pos or "", st.bypass_users
    if not ctx.dry_run:
        sw.require_fence_holds(st.fence_expires_at)
    # still fenced, bypassing sessions ended: the position it reads is final
    said, now = sw.seal_old(set(known) if known is not None else None) if not ctx.dry_run else ("", fence_pos)
    if now != fence_pos:
        # Written past the final position (an account that bypasses read_only): reported from the
        # old primary's binlog, journaled, and the candidate opens only with all of it (kit/audit.py).
        # Read after the seal read its sessions: an upper bound of the time since the fence.
        since = ctx.clock.now() - st.fence_asked_at if st.fence_asked_at is not None else None
        said += writes_after_fence(sw, ctx, fence_pos, now, set(known or ()), since)
    st.fence_pos = now
    # Journaled before the statement: after a crash we must assume it may be writable.
    st.candidate_opened = True
    st.save(ctx.state)
    try:
        said += sw.open_candidate(stop_replica=False, sealed=True)
        if sw.is_holding():
            # The router's flip was left to this moment: the held connections go to the
            # candidate now that it takes writes.
            released = False
            try:
                said += "; " + sw.release_hold(to_new=sw.new)
                released = True
            finally:
                # Also when the maxconn put back failed after the flip: the router may send
                # writes to the candidate, and the undo must not take it as never switched.
                with CutoverState.edit(ctx.state) as s:
                    s.switched_at = ctx.clock.now()
                    if released:
                        s.held = None
        return said
    finally:
        ctx.release_fenced_window()


def switch_router(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    # Inside the fenced window: the router's copy for restarts (a disk sync) is the
    # save step's, after the candidate opens.
    sw = cut.sw(ctx)
    if sw.is_holding():
        # Flipping now would hand the held connections to a candidate still read-only.
        return f"new connections wait in the router's queue; writes go to {cut.new} as it opens"
    sentence = sw.switch_router(persist=False)
    if not ctx.dry_run:
        with CutoverState.edit(ctx.state) as s:
            s.switched_at = ctx.clock.now()  # the new primary takes traffic from here
    return sentence


def router_switched(cut: Cutover, ctx: RunContext[Any, Any]) -> bool:
    # Asked inside the fenced window: before this run journaled a switch, the router
    # is not asked (switching again is a no-op); after one, it is.
    return not ctx.dry_run and state(ctx).switched_at is not None and cut.sw(ctx).router_points_to(cut.new)


def is_opened(cut: Cutover, ctx: RunContext[Any, Any]) -> bool:
    # Asked inside the fenced window: a candidate this run never opened is opened
    # (opening twice is harmless); one it may have opened is asked. Its replication
    # stops later (the reset step), so writable is what open means here.
    if not state(ctx).candidate_opened:
        return False
    sw = cut.sw(ctx)
    return sw.writable(sw.new)


def reverse(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    sw = cut.sw(ctx)
    sentence = sw.start_reverse()
    try:
        sw.wait_replica_running(sw.old)
    except DbmigrateError:
        sw.require_old_wrote_nothing(ctx.run_id)  # names what the old primary wrote, when it did
        raise
    return f"{sentence}; {sw.require_old_wrote_nothing(ctx.run_id)}"


def check_shape(cut: Cutover, ctx: RunContext[Any, Any]) -> None:
    """After the cutover: the new primary writable, the old one read-only and replicating from it."""
    sw = cut.sw(ctx)
    problems = []
    if sw.insp(sw.new).read_only():
        problems.append(f"{sw.new} is read-only")
    if not sw.insp(sw.old).read_only():
        problems.append(f"{sw.old} is writable")
    if not sw.reverse_running():
        problems.append(f"{sw.old} does not replicate from {sw.new}")
    if problems:
        raise SafetyError("after promotion: " + "; ".join(problems))


def probe(cut: Cutover, ctx: RunContext[Any, Any], sw: Switchover | None = None) -> str:
    sw = sw or cut.sw(ctx)
    try:
        said = sw.verify_writes_flow(ctx.run_id)
    except DbmigrateError:
        sw.require_old_wrote_nothing(ctx.run_id)  # an errant write on the old primary is the cause to name
        raise
    # Written after the reverse step's check (a session that connected later) counts too.
    return f"{said}; {sw.require_old_wrote_nothing(ctx.run_id)}"


# -- the steps ---------------------------------------------------------------------

def fence_step(cut: Cutover) -> FunctionStep:
    # Undone even when it did not finish: read_only may be in place though the step failed.
    return FunctionStep(f"fence {cut.old}", lambda c: converge_then_fence(cut, c), check=lambda c: is_fenced(cut, c),
                        undo=lambda c: undo_fence(cut, c), undo_if_started=True,
                        describe=cut.planned(lambda c, sw: sw.fence()))


def catch_up_step(cut: Cutover) -> FunctionStep:
    # No check: asking the candidate first would spend the fenced window twice when it does
    # not answer; the wait returns at once when the position is already applied.
    return FunctionStep(f"wait for {cut.new} to catch up", lambda c: catch_up(cut, c), mutating=False)


def open_step(cut: Cutover) -> FunctionStep:
    return FunctionStep(f"open {cut.new} for writes", lambda c: open_candidate(cut, c),
                        check=lambda c: is_opened(cut, c), undo=lambda c: undo_switchover(cut, c),
                        describe=cut.planned(lambda c, sw: sw.open_candidate(stop_replica=False)))


def router_step(cut: Cutover) -> FunctionStep:
    return FunctionStep("switch router", lambda c: switch_router(cut, c), check=lambda c: router_switched(cut, c),
                        undo=lambda c: undo_switchover(cut, c), describe=cut.planned(lambda c, sw: sw.switch_router()))


def save_route(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    """The flip read back and saved; then, after a resume past the open, a hold a process that
    died left on the old writer (its maxconn) is put back, outside the fenced window."""
    sw = cut.sw(ctx)
    said = sw.confirm_router()
    held = state(ctx).held if not ctx.dry_run else None
    if held and not sw.is_holding():
        said += "; " + sw.release_leftover_hold(held)
        with CutoverState.edit(ctx.state) as s:
            s.held = None
    return said


def save_route_step(cut: Cutover) -> FunctionStep:
    # Reads the flip back (the router step only sent it) and saves it for restarts of the
    # router. Idempotent, no check: on resume it switches again if the router lost the route.
    return FunctionStep("save router state", lambda c: save_route(cut, c),
                        describe=lambda c: [("router", f"read back that writes go to {cut.new} only; save the "
                                                       f"route where a restart of the router reads it")])


def end_sessions_step(cut: Cutover) -> FunctionStep:
    return FunctionStep(f"end application sessions on {cut.old}", lambda c: cut.sw(c).end_sessions(),
                        describe=lambda c: [(cut.old, "KILL CONNECTION <id> for each remaining application session")])


def reset_step(cut: Cutover) -> FunctionStep:
    return FunctionStep(f"reset replication on {cut.new}", lambda c: cut.sw(c).reset_new_replication(),
                        check=lambda c: not cut.sw(c).has_replication_config(cut.new),
                        undo=lambda c: undo_switchover(cut, c),
                        describe=cut.planned(lambda c, sw: sw.reset_new_replication()))


def repoint_step(cut: Cutover) -> FunctionStep:
    return FunctionStep("repoint replicas", lambda c: cut.sw(c).repoint_replicas(state(c).fence_pos or ""),
                        check=lambda c: cut.sw(c).replicas_repointed(), undo=lambda c: undo_switchover(cut, c),
                        describe=cut.planned(lambda c, sw: sw.repoint_replicas(state(c).fence_pos or "")))


def reverse_step(cut: Cutover) -> FunctionStep:
    return FunctionStep(f"reverse replication {cut.old} <- {cut.new}", lambda c: reverse(cut, c),
                        check=lambda c: cut.sw(c).reverse_running(), verify=lambda c: check_shape(cut, c),
                        undo=lambda c: undo_switchover(cut, c), describe=cut.planned(lambda c, sw: sw.start_reverse()))


def verify_step(cut: Cutover) -> FunctionStep:
    return FunctionStep("verify writes flow", lambda c: probe(cut, c), mutating=True,
                        describe=cut.planned(lambda c, sw: probe(cut, c, sw)))


def cutover_steps(cut: Cutover) -> list[Step]:
    """fence -> catch up -> router -> open candidate -> save route -> end sessions -> reset -> repoint -> reverse.

    The router sends the application to the candidate once it holds every acknowledged
    write, while it is still read-only: the application's new connections (refused until
    the candidate opens, as they were on the fenced old primary) are then already made
    when it opens, instead of starting after it. Writes are refused on both servers until
    then, so none can be lost and no read through the router misses one."""
    return [fence_step(cut), catch_up_step(cut), router_step(cut), open_step(cut), save_route_step(cut),
            end_sessions_step(cut), reset_step(cut), repoint_step(cut), reverse_step(cut)]
