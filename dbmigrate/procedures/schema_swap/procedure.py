"""Procedure `schema-swap`: weekly schema changes applied one side at a time, A/B style.

Each replica in turn is a side: out of the reader pool (drain), its client
sessions end (bounded), the DDL runs there with the binlog off (no GTID, nothing
replicates), the change is verified, the side is warmed, and it goes back into
the pool once its lag and errant-GTID check pass. Replication keeps running
throughout: ROW events from the unaltered primary still apply to a table with
extra trailing columns and extra indexes (see schema_ddl for what is refused
and why). Then the primary's side: an altered replica is promoted with the
promote mechanics, the old primary (now a read-only replica out of traffic)
gets the DDL the same way, and the run switches back or keeps the new primary.

Phases, for replicas r1..rn and primary p:

    preflight     gate: ROW binlog everywhere, replication, lag, errant GTIDs, tables, router
    alter r1      take out of readers -> sessions end -> DDL (binlog off) -> verify -> warm
    return r1     gates: r1 ready (replication, lag, errant GTIDs), warm-up -> back into readers
    ...
    switchover    gate: promote preflight -> promote's cutover steps -> probe write
    alter p       (out of traffic already) sessions end -> DDL -> verify -> warm
    finish        gates: p ready, warm-up -> switch back to p (or keep) -> reader pool

Rollback puts every side taken out back into the pool and switches back to the
original primary; it reverses DDL only with `undo_ddl` and otherwise says that
the schema stays (replication tolerates it).
"""

from __future__ import annotations

from typing import Any

from dbmigrate.engine.step import AutoGate, FunctionStep, Gate, Phase, Procedure, Step
from dbmigrate.procedures.kit.resources import typed
from dbmigrate.procedures.registry import register
from dbmigrate.procedures.schema_swap.expect import expectation_holds
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams, SwapWarmSpec, VerifySpec
from dbmigrate.procedures.schema_swap.preflight import preflight
from dbmigrate.procedures.schema_swap.primary import (
    describe_switch_back,
    is_switched_back,
    switch_back_to_primary,
    switchover_phase,
    verify_after_switch_back,
)
from dbmigrate.procedures.schema_swap.readers import (
    describe_route_reads,
    describe_take_out,
    in_readers,
    is_back,
    put_back,
    reader_router,
    readers_routed,
    record_pool,
    restore_reader_pool,
    route_reads,
    take_out,
)
from dbmigrate.procedures.schema_swap.resources import SchemaSwapResources, prepare
from dbmigrate.procedures.schema_swap import capture
from dbmigrate.procedures.schema_swap.replay import hint_warnings, replay_ready
from dbmigrate.procedures.schema_swap.context import SwapBuildContext, SwapContext, current_primary, plan_names
from dbmigrate.procedures.schema_swap.sides import (
    all_applied,
    apply_ddl,
    describe_ddl,
    end_sessions,
    side_ready,
    undo_ddl,
    verify_side,
    warm_ready,
    warm_side,
)

def replay_gate(ctx: SwapContext, side: str) -> tuple[bool, str, dict[str, Any]]:
    r = ctx.resources
    primary = current_primary(ctx, side)
    digest = r.replay if r.replay is not None else capture.readers_digest(ctx, side)
    return replay_ready(ctx, side, digest, r.servers[side], r.servers[primary] if primary != side else None)


def warn_hints(ctx: SwapContext) -> str:
    """At the start: a hint in the application's queries that names an index the DDL drops."""
    r = typed(ctx, SchemaSwapResources)
    digest = r.replay if r is not None else None
    if digest is None:
        return "no replay digest loaded"
    found = hint_warnings(digest, ctx.params)
    for line in found:
        ctx.log(line, "warning")
    return (f"{len(found)} application query class(es) name a dropped index in a hint: " + "; ".join(found)
            if found else f"no index hint among {len(digest.classes)} query class(es) names a dropped index")


__all__ = ["SchemaSwapParams", "SwapWarmSpec", "VerifySpec", "build", "expectation_holds"]


def side_phases(ctx: SwapBuildContext, params: SchemaSwapParams, side: str, *, primary_side: bool = False,
                closing_steps: list[Step] | None = None, closing_name: str | None = None) -> list[Phase]:
    label = f"{side} (old primary)" if primary_side else side
    capturing = not params.replay_digest and params.replay_capture_s > 0
    alter: list[Step] = [
        FunctionStep(f"take {side} out of the reader pool", lambda c: take_out(c, side),
                     check=lambda c: reader_router(c) is not None and not c.dry_run and not in_readers(c, side),
                     undo=lambda c: put_back(c, side), describe=lambda c: describe_take_out(c, side)),
        FunctionStep(f"end client sessions on {side}", lambda c: end_sessions(c, side),
                     describe=lambda c: [(side, f"wait up to {c.params.drain_timeout_s:g}s for client sessions to "
                                                "end, then KILL CONNECTION each one left")]),
        FunctionStep(f"apply DDL on {side} (binlog off)", lambda c: apply_ddl(c, side),
                     check=lambda c: all_applied(c, side), undo=lambda c: undo_ddl(c, side),
                     describe=lambda c: describe_ddl(c, side)),
        FunctionStep(f"verify the change on {side}", lambda c: verify_side(c, side), mutating=False),
    ]
    if capturing and not primary_side:
        # While the side still serves reads: the queries it will be tried with before it returns.
        alter.insert(0, FunctionStep(f"capture the readers' queries on {side} (wire)",
                                     lambda c: capture.capture_readers(c, side),
                                     check=lambda c: capture.captured(c, side), mutating=False))
    back_gates: list[Gate] = [AutoGate(f"{side} ready", lambda c: side_ready(c, side))]
    if params.replay_digest or capturing:
        # A side whose queries fail is already altered: the run pauses for a decision, undoing nothing.
        back_gates.append(AutoGate(f"{side} answers the application's queries", lambda c: replay_gate(c, side),
                                   pause_on_refusal=True))
    if params.warm is not None:
        warm_method = params.warm.method
        if warm_method != "none":
            alter.append(FunctionStep(f"warm {side} ({warm_method})", lambda c: warm_side(c, side),
                                      describe=lambda c: [(side, f"warm by {warm_method}: "
                                                                 f"{', '.join(params.warm_tables())}")]))
        # Every server of the side is already changed here: a cold side is re-warmed
        # (bounded), then the run pauses for a decision instead of undoing the change.
        back_gates.append(AutoGate("warm-up", lambda c: warm_ready(c, side, rewarm=True), pause_on_refusal=True))
    closing: list[Step] = closing_steps if closing_steps is not None else [
        FunctionStep(f"put {side} back in the reader pool", lambda c: put_back(c, side),
                     check=lambda c: not c.dry_run and is_back(c, side),
                     describe=lambda c: [("router", f"readers: add {side} back")])]
    return [Phase(f"alter {label}", alter), Phase(closing_name or f"return {side}", closing, gates=back_gates)]


@register("schema-swap", params=SchemaSwapParams, prepare_resources=prepare,
          description="apply DDL one side at a time (replicas, then the primary through a switchover)")
def build(ctx: SwapBuildContext, params: SchemaSwapParams) -> Procedure:
    """Weekly schema change, A/B: each replica out of traffic, altered without binlog, back; then the primary."""
    primary, sides, candidate = plan_names(ctx, params)
    phases = [Phase("preflight", [FunctionStep("record the reader pool", record_pool, mutating=False)],
                    gates=[AutoGate("schema-swap preflight", preflight)])]
    if params.replay_digest:
        phases[0].steps.insert(0, FunctionStep("check the application's index hints", warn_hints, mutating=False))
    for side in sides:
        phases += side_phases(ctx, params, side)
    resources = ctx.resources
    if params.primary == "switchover" and resources is not None and resources.primary_altered:
        phases[0].steps.append(FunctionStep(
            f"{primary} already has the change: no switchover", mutating=False,
            run=lambda c: f"every statement is already in place on {primary}: the primary's side is skipped"))
    elif params.primary == "switchover":
        phases.append(switchover_phase(ctx, params, primary, candidate))
        if params.switch_back:
            closing: list[Step] = [FunctionStep(f"switch back to {primary}", switch_back_to_primary, check=is_switched_back,
                                    describe=describe_switch_back),
                       FunctionStep(f"verify writes flow to {primary}", verify_after_switch_back,
                                    describe=lambda c: [(primary, "probe write, then wait for it on every replica")])]
        else:
            closing = []
        closing.append(FunctionStep("route reads", route_reads, check=readers_routed, undo=restore_reader_pool,
                                    describe=describe_route_reads))
        phases += side_phases(ctx, params, primary, primary_side=True, closing_steps=closing, closing_name="finish")
    return Procedure("schema-swap", phases, rollback_on_failure=True,
                     description="schema change A/B swap")
