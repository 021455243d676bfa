"""The schema swap's own preflight: everything checked at once, before any change."""

from __future__ import annotations

from typing import Any, Callable

from dbmigrate.procedures.kit import preflight_checks
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.db.scratch import ScratchSchema
from dbmigrate.exceptions import DbmigrateError, SafetyError
from dbmigrate.procedures.kit.preflight import evaluate_preflight
from dbmigrate.procedures.schema_swap import capture
from dbmigrate.procedures.schema_swap import ddl as schema_ddl
from dbmigrate.procedures.schema_swap.expect import conflicts, ddl_applied
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams
from dbmigrate.procedures.schema_swap.readers import reader_router, router_of
from dbmigrate.procedures.schema_swap.context import SwapContext, server_of


def missing_names(p: SchemaSwapParams, columns: dict[str, list[str]]) -> list[str]:
    """Tables and columns named by `verify:` and `warm.tables` that neither exist on the primary
    (`columns`: table -> its columns, empty when absent) nor come from the DDL: a typo found
    now, not after the DDL ran on one replica."""
    created = {d.table for d in p.statements() if d.kind == "create-table"}
    added = {(d.table, c) for d in p.statements() for c in d.added_columns}
    bad = []
    for t in dict.fromkeys([*(v.table for v in p.verify), *p.warm_tables()]):
        if not columns.get(t) and t not in created:
            bad.append(f"table {t} does not exist")
    for v in p.verify:
        if v.column and not v.absent and columns.get(v.table) and v.column not in columns[v.table] \
                and (v.table, v.column) not in added:
            bad.append(f"column {v.table}.{v.column} does not exist and the DDL does not add it")
    return bad


def ddl_valid_on(server: Server, statements: list[schema_ddl.Ddl]) -> tuple[bool, str]:
    """Each statement not yet in place on `server`, in order, on empty copies of its tables in a
    scratch schema (binlog off, dropped afterwards): the server's own verdict on types, names and
    algorithms, before any side leaves the pool. Proves it wrote no GTID of its own."""
    insp = Inspector(server)
    pending = [(i, d) for i, d in enumerate(statements, 1) if not ddl_applied(insp, d)]
    if not pending:
        return True, f"every statement is already in place on {server.name}"
    own_before = insp.own_gtids()
    bad: list[str] = []
    with ScratchSchema(server) as scratch:
        copies: dict[str, str] = {}
        for i, d in pending:
            if d.table not in copies:
                schema, name = d.table.split(".", 1)
                if d.kind == "create-table":
                    copies[d.table] = scratch.qualified(schema, name)
                else:
                    why = scratch.try_copy(schema, name)
                    if why:
                        bad.append(f"statement {i}: cannot copy {d.table}'s definition: {why}")
                        continue
                    copies[d.table] = scratch.qualified(schema, name)
            why = scratch.try_statement(schema_ddl.retarget(d.statement, d.table, copies[d.table]))
            if why:
                bad.append(f"statement {i} ({schema_ddl.short(d.statement, 60)}) fails: {why}")
    if insp.own_gtids() != own_before:
        raise SafetyError(f"{server.name} binlogged the DDL check on its scratch schema (its own GTIDs changed)",
                          hint=f"inspect {server.name}'s binlog before any switchover")
    if bad:
        return False, f"on a scratch copy on {server.name}: " + "; ".join(bad)
    return True, (f"{len(pending)} statement(s) valid on scratch copies of their tables on {server.name} "
                  f"(binlog off, dropped)")


def preflight(ctx: SwapContext) -> tuple[bool, str, dict[str, Any]]:
    """Everything checked at once, before any change: the operator sees every reason. That
    includes every check a later phase will make: the DDL on the live schema and, when the
    primary's side goes through a switchover, the switchover's whole preflight."""
    r = ctx.resources
    p = ctx.params
    primary = server_of(ctx, r.primary)
    sides = [server_of(ctx, s) for s in r.sides]

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
        g = preflight_checks.lag_gate(primary, sides, p.max_lag_ms, write=not ctx.dry_run)
        return g.ok, g.reason

    def errant() -> tuple[bool, str]:
        bad = []
        for s in sides:
            g = preflight_checks.errant_rule(s.flavor, *preflight_checks.fresh_states(s, primary), s.name)
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

    def names() -> tuple[bool, str]:
        columns = {t: [c for c, _ in Inspector(primary).table_columns(*t.split(".", 1))]
                   for t in {*(v.table for v in p.verify), *p.warm_tables()}}
        bad = missing_names(p, columns)
        return (not bad), ("; ".join(f"{b} on {primary.name}" for b in bad) if bad else
                           f"{len(p.verify)} verify item(s) and {len(p.warm_tables())} warm-up table(s) name "
                           f"existing tables and columns")

    def router() -> tuple[bool, str]:
        rt, writes = reader_router(ctx), router_of(ctx)
        if rt is None and writes is not None:
            # The relay routes writes only: read here too, so that one that does not answer is found now.
            return True, (f"{writes.describe()}: writes go to {writes.current().writer}; it routes no reads, so "
                          "sides are not taken out of reader traffic (the DDL is online; their sessions end "
                          "before it)")
        if rt is None:
            return True, "no router configured: sides cannot be taken out of traffic (the DDL is online)"
        readers = rt.current().readers
        return True, f"{rt.describe()}: readers {', '.join(readers) or 'none'}"

    def ddl_valid() -> tuple[bool, str]:
        # A name another definition holds on any server would stop the run half-way; the
        # server's own verdict on each statement comes from scratch copies on the first side.
        clashes = [f"{s.name}: {what}" for s in [*sides, primary] for d in p.statements()
                   for what in conflicts(Inspector(s), d)]
        if clashes:
            return False, ("a different definition already holds the same name: " + "; ".join(clashes)
                           + " (drop or rename it, or name the new one differently)")
        return ddl_valid_on(sides[0], p.statements())

    def switchover() -> tuple[bool, str]:
        ok, reason, _ = evaluate_preflight(ctx, r.inventory, r.candidate, p)
        return ok, (f"the switchover to {r.candidate} would pass: {reason}" if ok else
                    f"the switchover to {r.candidate} would be refused: {reason}")

    checks: list[tuple[str, Callable[[], tuple[bool, str]]]] = [
        ("row_binlog", row_binlog), ("replication_running", replication), ("lag", lag),
        ("errant_gtids", errant), ("tables", tables), ("names", names), ("router", router),
        ("ddl_valid", ddl_valid), ("replay_capture", lambda: capture.check_wire(ctx))]
    if p.primary == "switchover" and not r.primary_altered:
        checks.append(("switchover_preflight", switchover))
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
