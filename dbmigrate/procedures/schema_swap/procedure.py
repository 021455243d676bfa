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

from typing import Any, Callable

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import AutoGate, FunctionStep, Phase, Procedure, RunContext, Step
from dbmigrate.exceptions import DbmigrateError, SafetyError
from dbmigrate.procedures.kit import cutover as kit_cutover
from dbmigrate.procedures.kit.cutover import Cutover
from dbmigrate.procedures.kit.drain import drain, protected_users
from dbmigrate.procedures.kit.preflight import PreflightLimits, preflight_gate
from dbmigrate.procedures.kit.resources import required, typed
from dbmigrate.procedures.kit.switchover import Record, Switchover, SwitchoverSettings, switch_back
from dbmigrate.procedures.kit.warmup import warm, warm_ready as kit_warm_ready
from dbmigrate.procedures.registry import register
from dbmigrate.procedures.schema_swap import ddl as schema_ddl
from dbmigrate.procedures.schema_swap.expect import ddl_applied, expectation_holds
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams, SwapWarmSpec, VerifySpec
from dbmigrate.procedures.schema_swap.resources import SchemaSwapResources, SchemaSwapState, prepare

__all__ = ["SchemaSwapParams", "SwapWarmSpec", "VerifySpec", "build", "expectation_holds"]

def _plan_names(ctx: RunContext, params: SchemaSwapParams) -> tuple[str, list[str], str]:
    """(primary, sides, candidate) for building the procedure: from the resources in a run,
    from the inventory's declared roles for `plan` (which connects to nothing)."""
    r = typed(ctx, SchemaSwapResources)
    if r is not None:
        return r.primary, list(r.sides), r.candidate
    primary, sides = "<primary>", ["<replica>"]
    playbook = ctx.resources.get("playbook")
    path = getattr(playbook, "inventory_path", None)
    if path is not None:
        try:
            from dbmigrate.config import load_inventory

            spec = load_inventory(path).cluster(ctx.cluster)
            primary = spec.primary_hint() or primary
            sides = [n for n in spec.servers if n != primary] or sides
        except DbmigrateError:
            pass
    candidate = params.candidate if params.candidate in sides else sides[0]
    return primary, sides, candidate


# -- small helpers -----------------------------------------------------------------------

def _res(ctx: RunContext) -> SchemaSwapResources:
    return required(ctx, SchemaSwapResources)


def _server(ctx: RunContext, name: str) -> Server:
    return _res(ctx).servers[name]


def _current_primary(ctx: RunContext, side: str) -> str:
    """Who serves writes while `side` is altered: the original primary for replicas, the
    promoted candidate for the primary's own side."""
    r = _res(ctx)
    return r.candidate if side == r.primary else r.primary


def _addr(ctx: RunContext, name: str) -> str:
    s = _server(ctx, name)
    return f"{s.host}:{s.port}"


def _same(a: str, b: str) -> bool:
    from dbmigrate.routing.base import same_address

    return same_address(a, b)


def _router(ctx: RunContext):
    r = typed(ctx, SchemaSwapResources)
    return r.router if r is not None else None


def _readers(ctx: RunContext) -> list[str]:
    return list(_router(ctx).current().readers)


def _in_readers(ctx: RunContext, side: str) -> bool:
    addr = _addr(ctx, side)
    return any(_same(a, addr) for a in _readers(ctx))


def _params(ctx: RunContext) -> SchemaSwapParams:
    return ctx.params


# -- the reader pool ----------------------------------------------------------------------

def _pool_without(ctx: RunContext, side: str) -> tuple[list[str], list[str]]:
    """(readers without `side`, addresses added so that reads still have somewhere to go)."""
    addr = _addr(ctx, side)
    remaining = [a for a in _readers(ctx) if not _same(a, addr)]
    added: list[str] = []
    if not remaining:
        # The last reader leaves: the writer serves reads meanwhile rather than nobody.
        writer = _addr(ctx, _current_primary(ctx, side))
        remaining, added = [writer], [writer]
    return remaining, added


def take_out(ctx: RunContext, side: str) -> str:
    router = _router(ctx)
    if router is None:
        return (f"no router configured: {side} keeps its traffic (the DDL is online; stop reads to it by other "
                "means, e.g. a before_phase hook)")
    remaining, added = _pool_without(ctx, side)
    # Journaled before the change: a crash right after it must still know how to put the side back.
    with SchemaSwapState.edit(ctx.state) as st:
        st.readers_before[side] = _readers(ctx)
        st.readers_added[side] = added
    ctx.record_statement("router", f"readers: {', '.join(remaining)} ({side} drains)")
    router.set_readers(remaining)
    extra = f"; {', '.join(added)} (the primary) serves reads meanwhile" if added else ""
    return f"{side} takes no new reads (drain); readers now {', '.join(remaining)}{extra}"


def describe_take_out(ctx: RunContext, side: str) -> list[tuple[str, str]]:
    if _router(ctx) is None:
        return [("router", f"no router configured: {side} keeps its traffic")]
    if not _in_readers(ctx, side):
        return [("router", f"{side} is not in the reader pool: nothing to change")]
    remaining, _ = _pool_without(ctx, side)
    return [("router", f"readers -> {', '.join(remaining)} ({side} drains)")]


def put_back(ctx: RunContext, side: str) -> str:
    """Return `side` to the reader pool if it was in it before this run took it out;
    withdraw any reader added only for the meantime."""
    router = _router(ctx)
    st = SchemaSwapState.load(ctx.state)
    before = st.readers_before.get(side)
    if router is None or before is None:
        return f"{side}: nothing to put back (not taken out by this run)"
    addr = _addr(ctx, side)
    added = st.readers_added.get(side) or []
    current = _readers(ctx)
    wanted = [a for a in current if not any(_same(a, x) for x in added)]
    was_reader = any(_same(a, addr) for a in before)
    if was_reader and not any(_same(a, addr) for a in wanted):
        wanted.append(addr)
    if sorted(wanted) == sorted(current):
        if not was_reader:
            return f"{side} was not in the reader pool before; pool unchanged ({', '.join(current)})"
        return f"{side} is already back in the reader pool ({', '.join(current)})"
    ctx.record_statement("router", f"readers: {', '.join(wanted)} ({side} back)")
    router.set_readers(wanted)
    return f"{side} is back in the reader pool: readers {', '.join(wanted)}"


def is_back(ctx: RunContext, side: str) -> bool:
    router = _router(ctx)
    st = SchemaSwapState.load(ctx.state)
    before = st.readers_before.get(side)
    if router is None or before is None:
        return False
    if any(_same(a, _addr(ctx, side)) for a in before):
        added = st.readers_added.get(side) or []
        readers = _readers(ctx)
        return _in_readers(ctx, side) and not any(_same(a, x) for a in readers for x in added)
    return True


# -- sessions -----------------------------------------------------------------------------

def end_sessions(ctx: RunContext, side: str) -> str:
    # An ALTER waits for the metadata lock of every open transaction on its table, and
    # every new query queues behind it: the side must be quiet first.
    p = _params(ctx)
    r = _res(ctx)
    server = _server(ctx, side)
    insp = Inspector(server)
    protected = protected_users(insp, r.inventory.replication_credentials(ctx.cluster).user)
    done = drain(insp, Applier(server), protected, timeout_s=p.drain_timeout_s, until="sessions",
                 end=p.kill_app_sessions, clock=ctx.clock, poll_s=0.05)
    if not done.left:
        return f"{side}: no client session left after {done.waited_s:.1f}s"
    if not p.kill_app_sessions:
        raise DbmigrateError(f"{side}: {len(done.left)} client session(s) still open after {p.drain_timeout_s:g}s "
                             f"(users: {', '.join(sorted({s.user for s in done.left}))})",
                             hint="raise drain_timeout_s, or set kill_app_sessions: true")
    return f"{side}: {done.ended} client session(s) still open after {p.drain_timeout_s:g}s ended (KILL CONNECTION)"


# -- DDL ------------------------------------------------------------------------------------

def all_applied(ctx: RunContext, side: str) -> bool:
    if ctx.dry_run:
        return False  # show the statements, even where they are in place
    insp = Inspector(_server(ctx, side))
    return all(ddl_applied(insp, d) for d in _params(ctx).statements())


def apply_ddl(ctx: RunContext, side: str) -> str:
    """Each statement not yet in place, with the binlog off, on a session of its own;
    then prove that the side wrote no transaction of its own (no errant GTID)."""
    p = _params(ctx)
    server = _server(ctx, side)
    insp = Inspector(server)
    own_before = insp.own_gtids()
    done, skipped = [], 0
    session = server.dedicated()
    session.read_timeout = int(p.ddl_timeout_s) + 5
    try:
        applier = Applier(session)
        for ddl in p.statements():
            if ddl_applied(insp, ddl):
                skipped += 1
                continue
            t0 = ctx.clock.monotonic()
            applier.ddl_without_binlog(ddl.statement)
            ms = (ctx.clock.monotonic() - t0) * 1000
            for sql in server.flavor.ddl_without_binlog_sql(ddl.statement):
                ctx.record_statement(side, sql, ms)
            done.append(f"{ddl.table} ({ms:.0f} ms)" if ms < 1000 else f"{ddl.table} ({ms / 1000:.1f} s)")
    finally:
        session.close()
    own_after = insp.own_gtids()
    if own_after != own_before:
        raise SafetyError(f"{side} binlogged the DDL: its own GTIDs went from {own_before or 'none'} to "
                          f"{own_after} (errant transactions: the next promotion would replicate them)",
                          hint=f"inspect {side}'s binlog; remove the errant GTID (e.g. inject empty transactions "
                               f"on the primary) before any switchover")
    ctx.metric("ddl_statements", len(done), server=side)
    sentence = f"applied {len(done)} statement(s) on {side} with the binlog off: {', '.join(done) or 'none'}"
    if skipped:
        sentence += f"; {skipped} already in place"
    return sentence + f"; no GTID of its own written ({', '.join(own_after) or 'none'} before and after)"


def describe_ddl(ctx: RunContext, side: str) -> list[tuple[str, str]]:
    flavor = _server(ctx, side).flavor
    return [(side, sql) for d in _params(ctx).statements() for sql in flavor.ddl_without_binlog_sql(d.statement)]


def undo_ddl(ctx: RunContext, side: str) -> str:
    p = _params(ctx)
    if not p.undo_ddl:
        return (f"schema left as is on {side}: no undo_ddl given (the change stays; ROW replication from the "
                "unaltered primary tolerates it)")
    session = _server(ctx, side).dedicated()
    session.read_timeout = int(p.ddl_timeout_s) + 5
    try:
        applier = Applier(session)
        for statement in p.undo_ddl:
            applier.ddl_without_binlog(statement)
            ctx.record_statement(side, statement)
    finally:
        session.close()
    return f"undid the change on {side} with the binlog off: {len(p.undo_ddl)} undo statement(s)"


# -- verification --------------------------------------------------------------------------

def verify_side(ctx: RunContext, side: str) -> str:
    p = _params(ctx)
    expectations = [e for d in p.statements() for e in d.expectations] if p.auto_verify else []
    expectations += [v.expectation() for v in p.verify]
    if ctx.dry_run:
        return f"would verify on {side}: " + "; ".join(e.describe() for e in expectations)
    insp = Inspector(_server(ctx, side))
    failed = [what for ok, what in (expectation_holds(insp, e) for e in expectations) if not ok]
    checks = len(expectations)
    if p.auto_verify:
        source = Inspector(_server(ctx, _current_primary(ctx, side)))
        for table in schema_ddl.tables_of(d for d in p.statements() if d.kind != "create-table"):
            schema, name = table.split(".", 1)
            ok, why = schema_ddl.row_compatible(source.table_columns(schema, name), insp.table_columns(schema, name))
            checks += 1
            if not ok:
                failed.append(f"{table} no longer accepts ROW events from {_current_primary(ctx, side)}: {why}")
    if failed:
        raise DbmigrateError(f"verification failed on {side}: " + "; ".join(failed),
                             hint="the side goes back into the reader pool on rollback; check the DDL and the "
                                  "verify list of the playbook")
    return f"{side}: {checks} check(s) passed (" + "; ".join(e.describe() for e in expectations) + ")"


# -- warm-up ---------------------------------------------------------------------------------

def warm_side(ctx: RunContext, side: str) -> str:
    spec = _params(ctx).warm
    return warm(ctx, _server(ctx, _current_primary(ctx, side)), _server(ctx, side), spec.method,
                tables=_params(ctx).warm_tables(), seconds=spec.seconds, target_hit_ratio=spec.target_hit_ratio)


# -- gates -----------------------------------------------------------------------------------

def side_ready(ctx: RunContext, side: str) -> tuple[bool, str, dict[str, Any]]:
    """Before a side takes reads again: replication runs, lag under the limit, no errant GTID."""
    from dbmigrate import gates

    p = _params(ctx)
    if ctx.dry_run and side == _plan_names(ctx, _params(ctx))[0]:
        return True, f"dry-run: {side} becomes a replica only in the switchover; checked then", {}
    primary = _server(ctx, _current_primary(ctx, side))
    server = _server(ctx, side)
    st = Inspector(server).replica_status()
    details: dict[str, Any] = {"side": side, "primary": primary.name}
    if st is None or not st.running:
        why = f"io={st.io_running} sql={st.sql_running} {st.last_error}".strip() if st else "not a replica"
        return False, f"{side}: replication not running ({why})", details
    lag = gates.lag_gate(primary, [server], p.max_lag_ms, write=not ctx.dry_run)
    errant = gates.errant_rule(server.flavor, *gates.fresh_states(server, primary), side)
    details.update(lag=lag.details, errant=errant.details.get("errant"))
    bad = [g.reason for g in (lag, errant) if not g.ok]
    if bad:
        return False, f"{side}: " + "; ".join(bad), details
    return True, f"{side}: replicating, {lag.reason}, {errant.reason}", details


def warm_ready(ctx: RunContext, side: str) -> tuple[bool, str, dict[str, Any]]:
    spec = _params(ctx).warm
    if ctx.dry_run:
        return True, f"dry-run: {side} would be probed for a hit ratio of {spec.target_hit_ratio:g}", {}
    return kit_warm_ready(_server(ctx, side), spec.method, target_hit_ratio=spec.target_hit_ratio,
                          tables=_params(ctx).warm_tables())


def preflight(ctx: RunContext) -> tuple[bool, str, dict[str, Any]]:
    """Everything checked at once, before any change: the operator sees every reason."""
    from dbmigrate import gates

    r = _res(ctx)
    p = _params(ctx)
    primary = _server(ctx, r.primary)
    sides = [_server(ctx, s) for s in r.sides]

    def row_binlog() -> tuple[bool, str]:
        bad = []
        for s in [primary, *sides]:
            fmt = str(Inspector(s).variable("binlog_format")).upper()
            if fmt != "ROW":
                bad.append(f"{s.name} binlog_format={fmt}")
        if bad:
            return False, ("; ".join(bad) + ": extra columns on a replica are only tolerated with ROW replication")
        return True, f"binlog_format=ROW on {len(sides) + 1} server(s)"

    def replication() -> tuple[bool, str]:
        bad = []
        for s in sides:
            st = Inspector(s).replica_status()
            if st is None or not st.running:
                bad.append(f"{s.name}: " + (f"io={st.io_running} sql={st.sql_running} {st.last_error}".strip()
                                            if st else "not a replica"))
        return (not bad), ("; ".join(bad) if bad else f"replication running on {len(sides)} replica(s)")

    def lag() -> tuple[bool, str]:
        g = gates.lag_gate(primary, sides, p.max_lag_ms, write=not ctx.dry_run)
        return g.ok, g.reason

    def errant() -> tuple[bool, str]:
        bad = []
        for s in sides:
            g = gates.errant_rule(s.flavor, *gates.fresh_states(s, primary), s.name)
            if not g.ok:
                bad.append(g.reason)
        return (not bad), ("; ".join(bad) if bad else f"no errant GTIDs on {len(sides)} replica(s)")

    def tables() -> tuple[bool, str]:
        bad = []
        for d in p.statements():
            if d.kind == "create-table":
                continue
            schema, name = d.table.split(".", 1)
            shape = Inspector(primary).table_columns(schema, name)
            if not shape:
                bad.append(f"{d.table} does not exist on {primary.name}")
                continue
            for s in sides:
                ok, why = schema_ddl.row_compatible(shape, Inspector(s).table_columns(schema, name))
                if not ok:
                    bad.append(f"{d.table} on {s.name}: {why}")
        return (not bad), ("; ".join(bad) if bad else
                           f"{len(schema_ddl.tables_of(p.statements()))} table(s) present and ROW-compatible")

    def router() -> tuple[bool, str]:
        rt = _router(ctx)
        if rt is None:
            return True, "no router configured: sides cannot be taken out of traffic (the DDL is online)"
        readers = rt.current().readers
        return True, f"{rt.describe()}: readers {', '.join(readers) or 'none'}"

    checks: list[tuple[str, Callable[[], tuple[bool, str]]]] = [
        ("row_binlog", row_binlog), ("replication_running", replication), ("lag", lag),
        ("errant_gtids", errant), ("tables", tables), ("router", router)]
    details: dict[str, Any] = {}
    failed = []
    for name, fn in checks:
        try:
            ok, reason = fn()
        except DbmigrateError as e:
            ok, reason = False, f"could not check: {e.message}"
        details[name] = {"ok": ok, "reason": reason}
        if not ok:
            failed.append(f"{name}: {reason}")
    if failed:
        return False, "; ".join(failed), details
    return True, f"all {len(checks)} schema-swap preflight checks passed", details


# -- the primary's side -------------------------------------------------------------------------

def settings_of(p: SchemaSwapParams) -> SwitchoverSettings:
    return SwitchoverSettings(catchup_timeout_s=p.catchup_timeout_s, drain_timeout_s=p.fence_drain_timeout_s,
                              kill_app_sessions=p.kill_app_sessions, replica_timeout_s=p.replica_timeout_s)


def _switchover(ctx: RunContext, old: str, new: str, record: Record | None = None) -> Switchover:
    r = _res(ctx)
    return Switchover(r.topology, old, new, settings_of(_params(ctx)), r.router,
                      dry_run=ctx.dry_run or record is not None, log=ctx.log, record=record or ctx.record_statement,
                      clock=ctx.clock)


def primary_cutover(params: SchemaSwapParams, primary: str, candidate: str) -> Cutover:
    """The switchover of the primary's side: to an already altered replica."""
    return Cutover(old=primary, new=candidate, switchover=lambda c, record: _switchover(c, primary, candidate, record),
                   verify_timeout_s=params.verify_timeout_s)


def switchover_phase(ctx: RunContext, params: SchemaSwapParams, primary: str, candidate: str) -> Phase:
    """The kit's cutover, as promote runs it, with an already altered replica as the candidate."""
    cut = primary_cutover(params, primary, candidate)
    steps = [*kit_cutover.cutover_steps(cut), kit_cutover.verify_step(cut)]
    limits = PreflightLimits(max_lag_ms=params.max_lag_ms, max_trx_age_s=params.max_trx_age_s)
    gate = preflight_gate("promote preflight", lambda c: _res(c).inventory, lambda c: candidate, limits)
    return Phase("switchover", steps, gates=[gate])


def switch_back_to_primary(ctx: RunContext) -> str:
    r = _res(ctx)
    return switch_back(_switchover(ctx, r.primary, r.candidate), candidate_opened=True)


def is_switched_back(ctx: RunContext) -> bool:
    if ctx.dry_run:
        return False
    r = _res(ctx)
    sw = _switchover(ctx, r.primary, r.candidate)
    return (sw.writable(r.primary) and not sw.writable(r.candidate) and sw.router_points_to(r.primary)
            and all(sw.replicates_from(s, r.primary) for s in r.sides))


def describe_switch_back(ctx: RunContext) -> list[tuple[str, str]]:
    primary, sides, candidate = _plan_names(ctx, _params(ctx))
    return [(candidate, "fence (read_only=ON), wait for the final position on " + primary),
            (primary, "STOP SLAVE; read_only=OFF; router writer -> " + primary),
            ("", f"repoint {', '.join(sides)} to {primary}")]


def verify_after_switch_back(ctx: RunContext) -> str:
    r = _res(ctx)
    return _switchover(ctx, r.candidate, r.primary).verify_writes_flow(ctx.run_id, _params(ctx).verify_timeout_s)


def final_readers(ctx: RunContext) -> list[str] | None:
    """The reader pool at the end: as it was at the start, with the new primary replaced by
    the old one when the run keeps the new primary."""
    start = SchemaSwapState.load(ctx.state).readers_at_start
    if start is None:
        return None
    r = _res(ctx)
    if _params(ctx).primary == "skip" or _params(ctx).switch_back:
        return list(start)
    new, old = _addr(ctx, r.candidate), _addr(ctx, r.primary)
    out = [a for a in start if not _same(a, new)]
    if not any(_same(a, old) for a in out):
        out.append(old)
    return out


def route_reads(ctx: RunContext) -> str:
    router = _router(ctx)
    wanted = final_readers(ctx)
    if router is None or wanted is None:
        return "no router configured: readers unchanged"
    current = _readers(ctx)
    if sorted(current) == sorted(wanted):
        return f"reader pool already as intended: {', '.join(wanted)}"
    ctx.record_statement("router", f"readers: {', '.join(wanted)}")
    router.set_readers(wanted)
    return f"readers now {', '.join(wanted)}"


def describe_route_reads(ctx: RunContext) -> list[tuple[str, str]]:
    wanted = final_readers(ctx) if typed(ctx, SchemaSwapResources) is not None else None
    if _router(ctx) is None or wanted is None:
        return [("router", "no router configured: readers unchanged")]
    if sorted(_readers(ctx)) == sorted(wanted):
        return [("router", f"reader pool already as intended: {', '.join(wanted)}")]
    return [("router", f"readers -> {', '.join(wanted)}")]


def readers_routed(ctx: RunContext) -> bool:
    router, wanted = _router(ctx), final_readers(ctx)
    return not ctx.dry_run and router is not None and wanted is not None and sorted(_readers(ctx)) == sorted(wanted)


def restore_reader_pool(ctx: RunContext) -> str:
    router, before = _router(ctx), SchemaSwapState.load(ctx.state).readers_at_start
    if router is None or before is None:
        return "nothing to restore"
    router.set_readers(before)
    return f"reader pool restored to {', '.join(before)}"


def record_pool(ctx: RunContext) -> str:
    router = _router(ctx)
    if router is None:
        return "no router configured"
    readers = _readers(ctx)
    with SchemaSwapState.edit(ctx.state) as st:
        st.readers_at_start = readers
    return f"reader pool at the start: {', '.join(readers) or 'none'}"


# -- assembly ---------------------------------------------------------------------------------------

def side_phases(ctx: RunContext, params: SchemaSwapParams, side: str, *, primary_side: bool = False,
                closing_steps: list[Step] | None = None, closing_name: str | None = None) -> list[Phase]:
    label = f"{side} (old primary)" if primary_side else side
    alter = [
        FunctionStep(f"take {side} out of the reader pool", lambda c: take_out(c, side),
                     check=lambda c: _router(c) is not None and not c.dry_run and not _in_readers(c, side),
                     undo=lambda c: put_back(c, side), describe=lambda c: describe_take_out(c, side)),
        FunctionStep(f"end client sessions on {side}", lambda c: end_sessions(c, side),
                     describe=lambda c: [(side, f"wait up to {_params(c).drain_timeout_s:g}s for client sessions to "
                                                "end, then KILL CONNECTION each one left")]),
        FunctionStep(f"apply DDL on {side} (binlog off)", lambda c: apply_ddl(c, side),
                     check=lambda c: all_applied(c, side), undo=lambda c: undo_ddl(c, side),
                     describe=lambda c: describe_ddl(c, side)),
        FunctionStep(f"verify the change on {side}", lambda c: verify_side(c, side), mutating=False),
    ]
    back_gates = [AutoGate(f"{side} ready", lambda c: side_ready(c, side))]
    if params.warm is not None:
        if params.warm.method != "none":
            alter.append(FunctionStep(f"warm {side} ({params.warm.method})", lambda c: warm_side(c, side),
                                      describe=lambda c: [(side, f"warm by {params.warm.method}: "
                                                                 f"{', '.join(params.warm_tables())}")]))
        back_gates.append(AutoGate("warm-up", lambda c: warm_ready(c, side)))
    closing = closing_steps if closing_steps is not None else [
        FunctionStep(f"put {side} back in the reader pool", lambda c: put_back(c, side),
                     check=lambda c: not c.dry_run and is_back(c, side),
                     describe=lambda c: [("router", f"readers: add {side} back")])]
    return [Phase(f"alter {label}", alter), Phase(closing_name or f"return {side}", closing, gates=back_gates)]


@register("schema-swap", params=SchemaSwapParams, prepare_resources=prepare,
          description="apply DDL one side at a time (replicas, then the primary through a switchover)")
def build(ctx: RunContext, params: SchemaSwapParams) -> Procedure:
    """Weekly schema change, A/B: each replica out of traffic, altered without binlog, back; then the primary."""
    primary, sides, candidate = _plan_names(ctx, params)
    phases = [Phase("preflight", [FunctionStep("record the reader pool", record_pool, mutating=False)],
                    gates=[AutoGate("schema-swap preflight", preflight)])]
    for side in sides:
        phases += side_phases(ctx, params, side)
    resources = typed(ctx, SchemaSwapResources)
    if params.primary == "switchover" and resources is not None and resources.primary_altered:
        phases[0].steps.append(FunctionStep(
            f"{primary} already has the change: no switchover", mutating=False,
            run=lambda c: f"every statement is already in place on {primary}: the primary's side is skipped"))
    elif params.primary == "switchover":
        phases.append(switchover_phase(ctx, params, primary, candidate))
        if params.switch_back:
            closing = [FunctionStep(f"switch back to {primary}", switch_back_to_primary, check=is_switched_back,
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
