"""The reader pool during a schema swap: a side leaves it while altered and comes back;
at the end the pool is as it was (with the new primary replaced when the run keeps it).

A router that routes writes only (the relay, router kind `relay`: its set_readers refuses) is no
reader pool: the applications reach the replicas by their own list, which the tool does not
drive. The swap then treats reads as it does with no router at all: a side is not taken out of
reader traffic (its DDL runs online while it serves reads; its sessions still end before it, as
any side's), and the reader steps say so and change nothing. Not a second route of another kind
beside the relay: the inventory names one router per cluster, and a reader route the tool drives
beside the relay would need a second one.
"""

from __future__ import annotations

from dbmigrate.exceptions import SafetyError
from dbmigrate.procedures.kit.resources import typed
from dbmigrate.procedures.schema_swap.resources import SchemaSwapResources, SchemaSwapState
from dbmigrate.procedures.schema_swap.context import SwapContext, current_primary, server_of
from dbmigrate.routing.base import Router, same_address
from dbmigrate.routing.relay_hold import relay_of


def address_of(ctx: SwapContext, name: str) -> str:
    s = server_of(ctx, name)
    return f"{s.host}:{s.port}"


def same(a: str, b: str) -> bool:
    return same_address(a, b)


def router_of(ctx: SwapContext) -> Router | None:
    r = typed(ctx, SchemaSwapResources)
    return r.router if r is not None else None


def routes_reads(router: Router | None) -> bool:
    """Does `router` route this cluster's reads? The relay routes writes only."""
    return router is not None and relay_of(router) is None


def reader_router(ctx: SwapContext) -> Router | None:
    """The router of the reader pool: None with no router, and with one that routes writes only."""
    router = router_of(ctx)
    return router if routes_reads(router) else None


def no_reader_route(ctx: SwapContext) -> str:
    """Why no side is taken out of reader traffic: no router, or one that routes writes only."""
    router = router_of(ctx)
    if router is None:
        return "no router configured"
    return f"the router ({router.describe()}) routes writes only, not reads"


def readers_now(ctx: SwapContext) -> list[str]:
    router = reader_router(ctx)
    if router is None:
        raise SafetyError(f"the readers cannot be read: {no_reader_route(ctx)}")
    return list(router.current().readers)


def in_readers(ctx: SwapContext, side: str) -> bool:
    addr = address_of(ctx, side)
    return any(same(a, addr) for a in readers_now(ctx))


def pool_without(ctx: SwapContext, side: str) -> tuple[list[str], list[str]]:
    """(readers without `side`, addresses added so that reads still have somewhere to go)."""
    addr = address_of(ctx, side)
    remaining = [a for a in readers_now(ctx) if not same(a, addr)]
    added: list[str] = []
    if not remaining:
        # The last reader leaves: the writer serves reads meanwhile rather than nobody.
        writer = address_of(ctx, current_primary(ctx, side))
        remaining, added = [writer], [writer]
    return remaining, added


def take_out(ctx: SwapContext, side: str) -> str:
    router = reader_router(ctx)
    if router is None:
        return (f"{no_reader_route(ctx)}: {side} keeps its reader traffic (the DDL is online; stop reads to it "
                "by other means, e.g. a before_phase hook)")
    remaining, added = pool_without(ctx, side)
    # Journaled before the change: a crash right after it must still know how to put the side back.
    with SchemaSwapState.edit(ctx.state) as st:
        st.readers_before[side] = readers_now(ctx)
        st.readers_added[side] = added
    ctx.record_statement("router", f"readers: {', '.join(remaining)} ({side} drains)")
    router.set_readers(remaining)
    extra = f"; {', '.join(added)} (the primary) serves reads meanwhile" if added else ""
    return f"{side} takes no new reads (drain); readers now {', '.join(remaining)}{extra}"


def describe_take_out(ctx: SwapContext, side: str) -> list[tuple[str, str]]:
    if reader_router(ctx) is None:
        return [("router", f"{no_reader_route(ctx)}: {side} keeps its reader traffic")]
    if not in_readers(ctx, side):
        return [("router", f"{side} is not in the reader pool: nothing to change")]
    remaining, _ = pool_without(ctx, side)
    return [("router", f"readers -> {', '.join(remaining)} ({side} drains)")]


def put_back(ctx: SwapContext, side: str) -> str:
    """Return `side` to the reader pool if it was in it before this run took it out;
    withdraw any reader added only for the meantime."""
    router = reader_router(ctx)
    st = SchemaSwapState.load(ctx.state)
    before = st.readers_before.get(side)
    if router is None or before is None:
        return f"{side}: nothing to put back (not taken out by this run)"
    addr = address_of(ctx, side)
    added = st.readers_added.get(side) or []
    current = readers_now(ctx)
    wanted = [a for a in current if not any(same(a, x) for x in added)]
    was_reader = any(same(a, addr) for a in before)
    if was_reader and not any(same(a, addr) for a in wanted):
        wanted.append(addr)
    if sorted(wanted) == sorted(current):
        if not was_reader:
            return f"{side} was not in the reader pool before; pool unchanged ({', '.join(current)})"
        return f"{side} is already back in the reader pool ({', '.join(current)})"
    ctx.record_statement("router", f"readers: {', '.join(wanted)} ({side} back)")
    router.set_readers(wanted)
    if not ctx.dry_run and not is_back(ctx, side):  # the router's word, read back, not the request's
        raise SafetyError(f"{side} was put back in the reader pool but the router now has readers "
                          f"{', '.join(readers_now(ctx)) or 'none'}",
                          hint="check the router's reader backend, then: dbmigrate rollback RUN")
    return f"{side} is back in the reader pool: readers {', '.join(wanted)}"


def is_back(ctx: SwapContext, side: str) -> bool:
    router = reader_router(ctx)
    st = SchemaSwapState.load(ctx.state)
    before = st.readers_before.get(side)
    if router is None or before is None:
        return False
    if any(same(a, address_of(ctx, side)) for a in before):
        added = st.readers_added.get(side) or []
        readers = readers_now(ctx)
        return in_readers(ctx, side) and not any(same(a, x) for a in readers for x in added)
    return True


def final_readers(ctx: SwapContext) -> list[str] | None:
    """The reader pool at the end: as it was at the start, with the new primary replaced by
    the old one when the run keeps the new primary."""
    start = SchemaSwapState.load(ctx.state).readers_at_start
    if start is None:
        return None
    r = ctx.resources
    if ctx.params.primary == "skip" or ctx.params.switch_back:
        return list(start)
    new, old = address_of(ctx, r.candidate), address_of(ctx, r.primary)
    out = [a for a in start if not same(a, new)]
    if not any(same(a, old) for a in out):
        out.append(old)
    return out


def route_reads(ctx: SwapContext) -> str:
    router = reader_router(ctx)
    wanted = final_readers(ctx)
    if router is None or wanted is None:
        return f"{no_reader_route(ctx)}: readers unchanged"
    current = readers_now(ctx)
    if sorted(current) == sorted(wanted):
        return f"reader pool already as intended: {', '.join(wanted)}"
    ctx.record_statement("router", f"readers: {', '.join(wanted)}")
    router.set_readers(wanted)
    return f"readers now {', '.join(wanted)}"


def describe_route_reads(ctx: SwapContext) -> list[tuple[str, str]]:
    wanted = final_readers(ctx) if typed(ctx, SchemaSwapResources) is not None else None
    if reader_router(ctx) is None or wanted is None:
        return [("router", f"{no_reader_route(ctx)}: readers unchanged")]
    if sorted(readers_now(ctx)) == sorted(wanted):
        return [("router", f"reader pool already as intended: {', '.join(wanted)}")]
    return [("router", f"readers -> {', '.join(wanted)}")]


def readers_routed(ctx: SwapContext) -> bool:
    router, wanted = reader_router(ctx), final_readers(ctx)
    return not ctx.dry_run and router is not None and wanted is not None and sorted(readers_now(ctx)) == sorted(wanted)


def restore_reader_pool(ctx: SwapContext) -> str:
    router, before = reader_router(ctx), SchemaSwapState.load(ctx.state).readers_at_start
    if router is None or before is None:
        return "nothing to restore"
    router.set_readers(before)
    now = readers_now(ctx)
    if not ctx.dry_run and sorted(now) != sorted(before):
        raise SafetyError(f"the reader pool was to be {', '.join(before)} but the router has {', '.join(now) or 'none'}",
                          hint="check the router's reader backend, then: dbmigrate rollback RUN")
    return f"reader pool restored to {', '.join(before)}"


def record_pool(ctx: SwapContext) -> str:
    router = reader_router(ctx)
    if router is None:
        return f"{no_reader_route(ctx)}: no reader pool to record; each side keeps its reader traffic"
    readers = readers_now(ctx)
    with SchemaSwapState.edit(ctx.state) as st:
        st.readers_at_start = readers
    return f"reader pool at the start: {', '.join(readers) or 'none'}"
