"""Switching back: the undo of every cutover step is a switchover pointed the other way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dbmigrate.exceptions import DbmigrateError, SafetyError
from dbmigrate.routing.base import RouterError

if TYPE_CHECKING:  # the package's Switchover composes the steps; this module is one of its users
    from dbmigrate.procedures.kit.switchover import Switchover


def switch_back(sw: Switchover, candidate_opened: bool = True, router_switched: bool = True) -> str:
    """Converge to: `sw.old` writable primary, `sw.new` and the replicas replicating from it.

    Idempotent: each part checks first. Used by every undo of the promote
    procedure, so a rollback at any point ends in the same safe shape.
    `router_switched=False` says this run never completed a router switch: a router that
    does not answer was then not changed, and the undo goes on without it.
    A candidate that does not answer (frozen, dead) is asked once, within probe_timeout_s,
    then left alone: when it was never opened, the old primary is unfenced without it.
    """
    back = type(sw)(sw.topo, old=sw.new, new=sw.old, params=sw.s, router=sw.router,
                      dry_run=sw.dry_run, log=sw.log, record=sw.record, clock=sw.clock)
    said: list[str] = []
    new_writable = sw.writable_or_none(sw.new)
    try:
        old_writable = sw.writable(sw.old)
    except DbmigrateError as e:
        routed = _route_back_without_old(back, sw, new_writable, candidate_opened)
        raise SafetyError(f"cannot switch back to {sw.old}: {e.message}{routed}",
                          hint=f"{sw.old} must answer to take writes again; if it is gone for good and {sw.new} has "
                               f"its final position: dbmigrate resume RUN --without-old-primary") from None
    if new_writable and old_writable:
        raise SafetyError(f"both {sw.old} and {sw.new} are writable",
                          hint="set read_only=ON by hand on the one that should not take writes")
    if new_writable:
        # The new primary may have taken writes: bring them to the old one first. A candidate
        # opened before its replication was stopped stops it now: the two must not replicate
        # from each other while the old one catches up.
        if _replicates_at_all(sw, sw.new):
            back.apply(sw.new).stop_replica()
        said += _follow(back, sw)
        # As on the way there: new connections held, sw.new's writer sessions ended when idle.
        held = back.hold_and_end_idle()
        if held:
            said.append(held)
        try:
            sentence, pos = back.fence()
            said.append(sentence)
            try:
                said.append(back.wait_catchup(pos))
            except DbmigrateError:
                said.append(back.unfence_old(candidate_known_closed=True))
                raise
        except BaseException:
            back.release_hold()  # sw.new stays the writer: held connections go on to it
            raise
        said.append(back.open_candidate())
    elif not old_writable and new_writable is False and _has_writes_old_lacks(sw):
        # The new primary took writes and is read-only now (restarted, or fenced by hand):
        # its position is final; bring those writes to the old primary before it opens.
        said += _follow(back, sw)
        said.append(back.wait_catchup(back.insp(sw.new).gtid_binlog_pos()))
        said.append(back.open_candidate())
    elif not old_writable:
        # Nobody writable and nothing the old primary lacks: the candidate never took writes.
        said.append(sw.unfence_old(candidate_known_closed=not candidate_opened, candidate_writable=new_writable))
    said += _route_back(back, sw, router_switched)
    if new_writable:
        said.append(back.end_sessions(sw.new))
    if back.has_replication_config(sw.old):
        said.append(back.reset_new_replication())
    # Replicas still under sw.new must first apply everything sw.new wrote (it is
    # read-only now, so its position is final); sw.old's own position would be
    # unreachable for them, since it moves on with new writes.
    final_new = _binlog_pos_or_empty(back, sw.new) if new_writable is not None else ""
    # sw.new follows sw.old before the replicas move: one that cannot be moved (stuck,
    # lagging) stays under sw.new and still gets every write through it.
    if new_writable is not None and not back.replicates_from(sw.new, sw.old):
        back.make_replica(sw.new, sw.old)
        said.append(f"{sw.new} replicates from {sw.old} again")
    elif new_writable is not None:
        back.drop_fence_expiry(sw.new)  # as make_replica does: it stays a replica
        st = back.insp(sw.new).replica_status()
        if st and not st.running:
            back.apply(sw.new).start_replica()
            said.append(f"{sw.new} resumed replicating from {sw.old}")
    for r in sw.topo.replicas:
        if not back.replicating_from(r, sw.old):
            back.repoint(r, sw.old, final_new if back.replicates_from(r, sw.new) else "")
            said.append(f"repointed {r} to {sw.old}")
    return "; ".join(said) or f"{sw.old} is already the primary"


def _route_back(back: Switchover, sw: Switchover, router_switched: bool) -> list[str]:
    """Writes back to `sw.old` at the router; a router that does not answer is skipped only
    when this run never switched it (it still sends writes to `sw.old`)."""
    try:
        if back.is_holding():
            return [back.release_hold(to_new=sw.old)]  # the flip, then the held connections go on
        if back.router_points_to(sw.old):
            return []
        return [back.switch_router()]
    except RouterError as e:
        if router_switched:
            raise
        sw.log(f"the router did not answer ({e.message}); this run never switched it, so it still sends "
               f"writes to {sw.old}", "warning")
        return [f"router not changed (it did not answer: {e.message}); it still sends writes to {sw.old}"]


def _route_back_without_old(back: Switchover, sw: Switchover, new_writable: bool | None,
                            candidate_opened: bool) -> str:
    """`sw.old` does not answer: when `sw.new` cannot take writes (read-only, or never opened
    and silent), writes go back to `sw.old` at the router anyway, so that they flow again as
    soon as it answers (its fence expires by itself) instead of waiting for an operator."""
    if new_writable or (new_writable is None and candidate_opened) or sw.router is None or sw.dry_run:
        return ""
    try:
        if back.router_points_to(sw.old):
            return ""
        back.switch_router()
    except DbmigrateError as e:
        return f"; the router could not be sent back to it either ({e.message})"
    return f"; the router sends writes to {sw.old} again ({sw.new} never took writes)"


def _follow(back: Switchover, sw: Switchover) -> list[str]:
    """Make `sw.old` replicate from `sw.new` (or resume it), so that it gets what `sw.new` wrote."""
    said = []
    if not back.replicates_from(sw.old, sw.new):
        back.make_replica(sw.old, sw.new)
        said.append(f"{sw.old} replicates from {sw.new}")
    else:
        back.apply(sw.old).start_replica()
    back.wait_replica_running(sw.old)
    return said


def _replicates_at_all(sw: Switchover, name: str) -> bool:
    st = sw.insp(name).replica_status()
    return st is not None and (st.io_running == "Yes" or st.sql_running == "Yes")


def _has_writes_old_lacks(sw: Switchover) -> bool:
    """Did `sw.new` write anything `sw.old` has not applied? (Decides whether unfencing would lose it.)"""
    return not sw.insp(sw.old).has_applied(sw.insp(sw.new).gtid_binlog_pos())


def _binlog_pos_or_empty(sw: Switchover, name: str) -> str:
    try:
        return sw.insp(name).gtid_binlog_pos()
    except DbmigrateError:
        return ""
