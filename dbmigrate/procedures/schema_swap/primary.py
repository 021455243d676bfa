"""The primary's side of a schema swap: the kit's cutover to an altered replica, and the
switch back once the old primary is altered too."""

from __future__ import annotations

from dbmigrate.engine.step import Phase
from dbmigrate.procedures.kit import cutover as kit_cutover
from dbmigrate.procedures.kit.cutover import Cutover, RouterOf
from dbmigrate.procedures.kit.preflight import preflight_gate
from dbmigrate.procedures.kit.switchover import Record, Switchover, switch_back
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams
from dbmigrate.procedures.schema_swap.context import SwapBuildContext, SwapContext, plan_names


def switchover(ctx: SwapContext, old: str, new: str, record: Record | None = None,
               routed: RouterOf = lambda router, params: router) -> Switchover:
    r = ctx.resources
    return Switchover(r.topology, old, new, ctx.params, routed(r.router, ctx.params),
                      dry_run=ctx.dry_run or record is not None, log=ctx.log, record=record or ctx.record_statement,
                      clock=ctx.clock)


def primary_cutover(primary: str, candidate: str) -> Cutover:
    """The switchover of the primary's side: to an already altered replica."""
    return Cutover(old=primary, new=candidate, switchover=lambda c, record, routed: switchover(c, primary, candidate, record, routed))


def switchover_phase(ctx: SwapBuildContext, params: SchemaSwapParams, primary: str, candidate: str) -> Phase:
    """The kit's cutover, as promote runs it, with an already altered replica as the candidate."""
    cut = primary_cutover(primary, candidate)
    steps = [*kit_cutover.cutover_steps(cut), kit_cutover.verify_step(cut)]
    gate = preflight_gate("promote preflight", lambda c: c.resources.inventory, lambda c: candidate, params)
    return Phase("switchover", steps, gates=[gate])


def switch_back_to_primary(ctx: SwapContext) -> str:
    """The undo of the primary's cutover, as promote's rollback runs it: through the run's
    journaled router (every change journaled before it is sent, one in doubt settled first), and
    with the router's hold when the playbook asks for it (through the relay: sessions held at their
    next statement boundary, the candidate fenced, the old primary opened, then moved back)."""
    r = ctx.resources
    return switch_back(primary_cutover(r.primary, r.candidate).sw(ctx), candidate_opened=True)


def is_switched_back(ctx: SwapContext) -> bool:
    if ctx.dry_run:
        return False
    r = ctx.resources
    sw = switchover(ctx, r.primary, r.candidate)
    return (sw.writable(r.primary) and not sw.writable(r.candidate) and sw.router_points_to(r.primary)
            and all(sw.replicates_from(s, r.primary) for s in r.sides))


def describe_switch_back(ctx: SwapContext) -> list[tuple[str, str]]:
    primary, sides, candidate = plan_names(ctx, ctx.params)
    return [(candidate, "fence (read_only=ON), wait for the final position on " + primary),
            (primary, "stop replication, read_only=OFF, router writer -> " + primary),
            ("", f"repoint {', '.join(sides)} to {primary}")]


def verify_after_switch_back(ctx: SwapContext) -> str:
    r = ctx.resources
    return switchover(ctx, r.candidate, r.primary).verify_writes_flow(ctx.run_id)
