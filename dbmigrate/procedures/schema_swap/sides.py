"""One side of a schema swap: its sessions end, the DDL runs with the binlog off, the
change is verified, the side is warmed and checked ready before it takes reads again."""

from __future__ import annotations

from typing import Any

from dbmigrate.procedures.kit import preflight_checks
from dbmigrate.db.applier import Applier
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError, NotUndone, SafetyError, UsageError
from dbmigrate.procedures.kit.drain import drain, protected_users
from dbmigrate.procedures.kit.warmup import warm, warm_ready as kit_warm_ready
from dbmigrate.procedures.schema_swap import ddl as schema_ddl
from dbmigrate.procedures.schema_swap.expect import conflicts, ddl_applied, expectation_holds
from dbmigrate.procedures.schema_swap.params import SwapWarmSpec
from dbmigrate.procedures.schema_swap.context import SwapContext, current_primary, plan_names, server_of


def end_sessions(ctx: SwapContext, side: str) -> str:
    # An ALTER waits for the metadata lock of every open transaction on its table, and
    # every new query queues behind it: the side must be quiet first.
    p = ctx.params
    r = ctx.resources
    server = server_of(ctx, side)
    insp = Inspector(server)
    protected = protected_users(insp, r.inventory.replication_credentials(ctx.cluster).user)
    done = drain(insp, Applier(server), protected, timeout_s=p.drain_timeout_s, until="sessions",
                 end=p.kill_app_sessions, clock=ctx.clock, poll_s=0.05)
    if not done.left:
        return f"{side}: no client session left after {done.waited_s:.1f}s"
    if not p.kill_app_sessions:
        pooled = (f"; {done.idle} of them idle: a pool's kept connections never close by themselves"
                  if done.idle else "")
        raise DbmigrateError(f"{side}: {len(done.left)} client session(s) still open after {p.drain_timeout_s:g}s "
                             f"(users: {', '.join(sorted({s.user for s in done.left}))}){pooled}",
                             hint="set kill_app_sessions: true (idle sessions are then ended at once), or raise "
                                  "drain_timeout_s")
    idle = f", {done.idle} of them idle (pooled: ended without waiting)" if done.idle else ""
    return (f"{side}: {done.ended} client session(s) left after {done.waited_s:.1f}s ended (KILL CONNECTION)"
            f"{idle}")


def all_applied(ctx: SwapContext, side: str) -> bool:
    if ctx.dry_run:
        return False  # show the statements, even where they are in place
    insp = Inspector(server_of(ctx, side))
    return all(ddl_applied(insp, d) for d in ctx.params.statements())


def apply_ddl(ctx: SwapContext, side: str) -> str:
    """Each statement not yet in place, with the binlog off, on a session of its own;
    then prove that the side wrote no transaction of its own (no errant GTID)."""
    p = ctx.params
    server = server_of(ctx, side)
    insp = Inspector(server)
    # A name already taken by another definition is neither "already done" nor something the
    # statement can create: say so before the first statement runs.
    clashes = [what for d in p.statements() for what in conflicts(insp, d)]
    if clashes:
        raise DbmigrateError(f"{side} already has a different definition under the same name: "
                             + "; ".join(clashes) + "; nothing changed on it",
                             hint=f"drop or rename that index or column on {side} (binlog off), or name the new one "
                                  f"differently in the playbook, then resume")
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


def describe_ddl(ctx: SwapContext, side: str) -> list[tuple[str, str]]:
    flavor = server_of(ctx, side).flavor
    return [(side, sql) for d in ctx.params.statements() for sql in flavor.ddl_without_binlog_sql(d.statement)]


def undo_ddl(ctx: SwapContext, side: str) -> str:
    p = ctx.params
    if not p.undo_ddl:
        raise NotUndone(f"schema left as is on {side}: no undo_ddl given (the change stays; ROW replication from "
                        "the unaltered primary tolerates it)",
                        hint=f"to remove it: give undo_ddl and run dbmigrate rollback {ctx.run_id}, or apply the "
                             f"inverse statements on {side} with the binlog off")
    session = server_of(ctx, side).dedicated()
    session.read_timeout = int(p.ddl_timeout_s) + 5
    try:
        applier = Applier(session)
        for statement in p.undo_ddl:
            applier.ddl_without_binlog(statement)
            ctx.record_statement(side, statement)
    finally:
        session.close()
    insp = Inspector(server_of(ctx, side))
    left = [d for d in p.statements() if d.expectations and ddl_applied(insp, d)]  # read on the server: the change must be gone
    if left:
        raise SafetyError(f"the undo statements ran on {side} but {len(left)} change(s) are still in place",
                          hint="compare undo_ddl with the statements; fix the schema by hand (binlog off)")
    return f"undid the change on {side} with the binlog off: {len(p.undo_ddl)} undo statement(s)"


def verify_side(ctx: SwapContext, side: str) -> str:
    p = ctx.params
    expectations = [e for d in p.statements() for e in d.expectations] if p.auto_verify else []
    # The DDL's own expectations and the verify list may name the same thing: checked and said once.
    expectations = without_covered(list(dict.fromkeys([*expectations, *(v.expectation() for v in p.verify)])))
    if ctx.dry_run:
        return f"would verify on {side}: " + "; ".join(e.describe() for e in expectations)
    insp = Inspector(server_of(ctx, side))
    failed = [what for ok, what in (expectation_holds(insp, e) for e in expectations) if not ok]
    said = [e.describe() for e in expectations]
    if p.auto_verify:
        source_name = current_primary(ctx, side)
        source = Inspector(server_of(ctx, source_name))
        for table in schema_ddl.tables_of(d for d in p.statements() if d.kind != "create-table"):
            schema, name = table.split(".", 1)
            ok, why = schema_ddl.row_compatible(source.table_columns(schema, name), insp.table_columns(schema, name))
            said.append(f"{table} accepts ROW events from {source_name}")
            if not ok:
                failed.append(f"{table} no longer accepts ROW events from {source_name}: {why}")
    if failed:
        raise DbmigrateError(f"verification failed on {side}: " + "; ".join(failed),
                             hint="the side goes back into the reader pool on rollback; check the DDL and the "
                                  "verify list of the playbook")
    return passed_sentence(side, said)


def without_covered(expectations: list[schema_ddl.Expectation]) -> list[schema_ddl.Expectation]:
    """Drop a check another one already makes: `verify: {column: gift_note}` beside the DDL's own
    `has column gift_note varchar(255)` is the same check, less precise (it was said twice)."""
    def covers(o: schema_ddl.Expectation, e: schema_ddl.Expectation) -> bool:
        return o is not e and (o.table, o.column, o.index, o.absent) == (e.table, e.column, e.index, e.absent) \
            and e.column_type in (None, o.column_type) and e.index_def in (None, o.index_def) \
            and e.index_columns in ((), o.index_columns) and o != e
    return [e for e in expectations if not any(covers(o, e) for o in expectations)]


def passed_sentence(side: str, checks: list[str]) -> str:
    """'db-2: 3 check(s) passed (a; b; c)': the count is the list's, each check said once."""
    unique = list(dict.fromkeys(checks))
    return f"{side}: {len(unique)} check(s) passed (" + "; ".join(unique) + ")"


def warm_spec(ctx: SwapContext) -> SwapWarmSpec:
    """The playbook's warm-up; its steps and gates exist only when it has one."""
    spec = ctx.params.warm
    if spec is None:
        raise UsageError("this schema swap has no warm: section")
    return spec


def warm_side(ctx: SwapContext, side: str, seconds: float | None = None) -> str:
    spec = warm_spec(ctx)
    oversized = pool_overflow(ctx, side)
    if oversized:
        ctx.log(oversized, "warning")
    return warm(ctx, server_of(ctx, current_primary(ctx, side)), server_of(ctx, side), spec.method,
                tables=ctx.params.warm_tables(), seconds=seconds or spec.seconds,
                target_hit_ratio=spec.target_hit_ratio)


def pool_overflow(ctx: SwapContext, side: str) -> str | None:
    """A warning when the tables a scan reads are bigger than the side's buffer pool: the
    scan then evicts its own pages and lowers the hit ratio the warm-up gate measures."""
    spec = ctx.params.warm
    if spec is None or spec.method != "scan":
        return None
    insp = Inspector(server_of(ctx, side))
    sizes = insp.table_sizes(ctx.params.warm_tables())
    pool = int(insp.variable("innodb_buffer_pool_size") or 0)
    total = sum(sizes.values())
    if not pool or total <= pool:
        return None
    return (f"{side}: the tables to scan ({total / 2**20:,.0f} MB: {', '.join(sorted(sizes))}) exceed its buffer pool "
            f"({pool / 2**20:,.0f} MB); a scan evicts its own pages and cannot reach a high hit ratio: name the hot "
            f"tables in warm.tables, use warm.method replay, or lower warm.target_hit_ratio")


def side_ready(ctx: SwapContext, side: str) -> tuple[bool, str, dict[str, Any]]:
    """Before a side takes reads again: replication runs, lag under the limit, no errant GTID."""
    p = ctx.params
    if ctx.dry_run and side == plan_names(ctx, ctx.params)[0]:
        return True, f"dry-run: {side} becomes a replica only in the switchover; checked then", {}
    primary = server_of(ctx, current_primary(ctx, side))
    server = server_of(ctx, side)
    st = Inspector(server).replica_status()
    details: dict[str, Any] = {"side": side, "primary": primary.name}
    if st is None or not st.running:
        why = f"io={st.io_running} sql={st.sql_running} {st.last_error}".strip() if st else "not a replica"
        return False, f"{side}: replication not running ({why})", details
    lag = preflight_checks.lag_gate(primary, [server], p.max_lag_ms, write=not ctx.dry_run)
    errant = preflight_checks.errant_rule(server.flavor, *preflight_checks.fresh_states(server, primary), side)
    details.update(lag=lag.details, errant=errant.details.get("errant"))
    bad = [g.reason for g in (lag, errant) if not g.ok]
    if bad:
        return False, f"{side}: " + "; ".join(bad), details
    return True, f"{side}: replicating, {lag.reason}, {errant.reason}", details


def warm_ready(ctx: SwapContext, side: str, rewarm: bool = False) -> tuple[bool, str, dict[str, Any]]:
    """The warm-up gate. With `rewarm`, a cold side is warmed again and probed again until
    it is warm or warm.seconds have passed (a scan of a big table, the DDL's own table
    rebuild, or reads elsewhere may have evicted pages since the warm-up step)."""
    spec = warm_spec(ctx)
    if ctx.dry_run:
        return True, f"dry-run: {side} would be probed for a hit ratio of {spec.target_hit_ratio:g}", {}

    def probe() -> tuple[bool, str, dict[str, Any]]:
        ok, reason, details = kit_warm_ready(server_of(ctx, side), spec.method, target_hit_ratio=spec.target_hit_ratio,
                                             tables=ctx.params.warm_tables())
        return bool(ok), str(reason), dict(details)

    ok, reason, details = probe()
    if ok or not rewarm or spec.method == "none":
        return ok, reason, details
    started = ctx.clock.monotonic()
    rounds = 0
    while not ok and ctx.clock.monotonic() - started < spec.seconds:
        remaining = spec.seconds - (ctx.clock.monotonic() - started)
        warm_side(ctx, side, seconds=max(1.0, remaining))
        rounds += 1
        ok, reason, details = probe()
    details["rewarm_rounds"] = rounds
    waited = f"{ctx.clock.monotonic() - started:.0f}s"
    if ok:
        return True, f"{reason} (after {rounds} re-warm(s) in {waited})", details
    why = pool_overflow(ctx, side)
    return False, f"{reason}; re-warmed {rounds} time(s) for {waited}" + (f"; {why}" if why else ""), details
