"""The edges of a consolidation cutover for shards whose route is a relay (the cluster's
`shard_routers`, router kind `relay`, docs/internals/relay.md).

A DSN route cannot hold anything: the applications' statements of the fenced window meet the
fence (1290) and their sessions on the old server are ended (2013, gone). A relay holds each
session at its next statement boundary and moves it, with its state, to another backend. So,
for the relays of one old server's shards (routing/relay_hold.py, as promote's edges):

  just before the fence  `hold` (journaled first in the run state, `held`), then a wait, up to
                         fence_drain_timeout_s, until none of their sessions is busy or in a
                         transaction: nothing is then on its way to the old server
  routes                 `move INSTANCE` while held: the sessions log in there with their state,
                         their commands still wait (both sides are read-only)
  open                   once the instances take writes: `release`; held commands run there
  sessions               none of the sessions that came through a relay is ended: it moved

The undo is the same the other way: hold, fence the instance, the old server applies what it
took, `move OLD`, the old server opens, `release`. A hold a process that died left is released by
the undo (rollback, and a resumed run that begins the cutover again) and by the steps of a
resumed run from the open on; else the relay releases it by itself after its -max-hold-s.
Every relay command goes through the run's journaled router (context.relay_route).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from dbmigrate.procedures.consolidate.context import (
    ConsolidateContext, ConsolidateRefused, edit_state, plan_of, relay_route, route_of, shards_of, state_of, targets_of,
)
from dbmigrate.routing import relay_hold
from dbmigrate.routing.base import RouterError, same_address


@dataclass
class Relayed:
    """One relay of an old server's shards: its route, and the instance all its shards go to."""

    route: Any
    control: str
    to: str
    shards: list[str] = field(default_factory=list)


RouteOf = Callable[[ConsolidateContext, str], Any]


def relays_of(ctx: ConsolidateContext, source: str, instance: str | None = None,
              route_of: RouteOf = route_of) -> list[Relayed]:
    """The relays that route `source`'s shards (to `instance` only, when given), one per control
    socket. A relay has one backend: shards sharing one must go to the same instance."""
    plan = plan_of(ctx)
    found: dict[str, Relayed] = {}
    for t in targets_of(plan, source):
        for shard in shards_of(plan, t.name, source):
            route = route_of(ctx, shard)
            base = relay_hold.relay_of(route)
            if base is None:
                continue
            r = found.setdefault(base.control.path, Relayed(route, base.control.path, t.name))
            if r.to != t.name:
                raise ConsolidateRefused(f"the relay at {r.control} routes {', '.join(r.shards)} (to {r.to}) and "
                                         f"{shard} (to {t.name}): one relay has one backend",
                                         hint="give each shard that goes to another instance a relay of its own "
                                              "(shard_routers in the inventory)")
            r.shards.append(shard)
    return [r for r in found.values() if instance is None or r.to == instance]


def every_shard_relayed(ctx: ConsolidateContext, source: str, shards: list[str] | None = None,
                        route_of: RouteOf = route_of) -> bool:
    """Every shard of `source` (or every one of `shards`) writes through a relay: the sessions
    on the server came through relays, which move them; none is to be ended."""
    plan = plan_of(ctx)
    if shards is None:
        shards = [s for t in targets_of(plan, source) for s in shards_of(plan, t.name, source)]
    return bool(shards) and all(relay_hold.relay_of(route_of(ctx, s)) is not None for s in shards)


def hold(ctx: ConsolidateContext, source: str, relays: list[Relayed], on: str) -> str:
    """Each relay holds its sessions at their next statement boundary (journaled before it is
    sent), then a wait, all of them within fence_drain_timeout_s, until none is busy or in a
    transaction. `on`: the address of the writer they are held on. Empty without relays."""
    if not relays or ctx.dry_run:
        return ""
    for r in relays:
        def journal(held: Any, r: Relayed = r) -> None:
            with edit_state(ctx) as st:
                st.held[r.control] = {**held.to_dict(), "source": source, "shards": list(r.shards)}

        relay_hold.hold_new_connections(r.route, on, journal)
    deadline = ctx.clock.monotonic() + ctx.params.fence_drain_timeout_s
    said = [f"{', '.join(r.shards)}: "
            f"{relay_hold.quiesce(r.route, max(0.0, deadline - ctx.clock.monotonic()), ctx.clock)}" for r in relays]
    return "; ".join(said)


def switch(ctx: ConsolidateContext, route: Any, new: str, old: str) -> None:
    """The route to `new`. A held relay (by this process, or journaled as held by one that died)
    moves its sessions there and keeps them held (`move NEW`, no release: both sides are still
    read-only, their commands wait for the open); any other route switches as it always did (a
    relay not held: `move NEW; release`)."""
    base = relay_hold.relay_of(route)
    # This process's own hold is known without a read (inside the window); a dead one's is journaled.
    held = base is not None and (relay_hold.current_hold(route) is not None
                                 or base.control.path in state_of(ctx).held)
    if not held:
        route.switch_writer(new, old=old)
        return
    writer = route.current().writer
    if writer is not None and same_address(writer, new):
        return
    if writer is None or not same_address(writer, old):
        raise RouterError(f"the relay sends writes to {writer}, not to {old}: refusing to move it",
                          hint="someone else moved the relay; read 'status' on its control socket before retrying")
    route.send_change([f"move {new}"], [f"move {old}"], what=f"to move the relay's held sessions to {new}")


def release(ctx: ConsolidateContext, source: str) -> str:
    """Every relay hold journaled for `source` (this process's, or one a process that died left)
    released toward the relay's current backend; called once that backend takes writes. Empty
    when none is held."""
    if ctx.dry_run:
        return ""
    said = []
    for control, saved in sorted(state_of(ctx).held.items()):
        if saved.get("source") != source:
            continue
        route = relay_route(ctx, ", ".join(saved.get("shards") or []) or source, control)
        gone = relay_hold.release_leftover(route, saved)
        with edit_state(ctx) as st:
            st.held.pop(control, None)
        shards = ", ".join(saved.get("shards") or []) or control
        said.append(gone if "gone" in gone else f"{shards}: the relay's held sessions released")
    return "; ".join(said)
