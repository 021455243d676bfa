"""The schema swap's own preflight: everything checked at once, before any change."""

from __future__ import annotations

from typing import Any, Callable

from dbmigrate import gates
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.schema_swap import ddl as schema_ddl
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams
from dbmigrate.procedures.schema_swap.readers import router_of
from dbmigrate.procedures.schema_swap.run import params_of, resources_of, server_of


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


def preflight(ctx: RunContext) -> tuple[bool, str, dict[str, Any]]:
    """Everything checked at once, before any change: the operator sees every reason."""
    r = resources_of(ctx)
    p = params_of(ctx)
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

    def names() -> tuple[bool, str]:
        columns = {t: [c for c, _ in Inspector(primary).table_columns(*t.split(".", 1))]
                   for t in {*(v.table for v in p.verify), *p.warm_tables()}}
        bad = missing_names(p, columns)
        return (not bad), ("; ".join(f"{b} on {primary.name}" for b in bad) if bad else
                           f"{len(p.verify)} verify item(s) and {len(p.warm_tables())} warm-up table(s) name "
                           f"existing tables and columns")

    def router() -> tuple[bool, str]:
        rt = router_of(ctx)
        if rt is None:
            return True, "no router configured: sides cannot be taken out of traffic (the DDL is online)"
        readers = rt.current().readers
        return True, f"{rt.describe()}: readers {', '.join(readers) or 'none'}"

    checks: list[tuple[str, Callable[[], tuple[bool, str]]]] = [
        ("row_binlog", row_binlog), ("replication_running", replication), ("lag", lag),
        ("errant_gtids", errant), ("tables", tables), ("names", names), ("router", router)]
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
