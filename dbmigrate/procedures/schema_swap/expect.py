"""Is a DDL's effect in place on a server? Read back through the inspector.

"In place" means the same thing the statement asks for, not the same name: a column of
another type, or an index of that name on other columns, other prefix lengths, another
order, unique where it should not be or of another kind, is a different schema. Such a
server is neither skipped as "already done" nor passed by verify; `conflicts` names it
before any statement runs (the DDL would fail on the duplicate name half-way otherwise).
"""

from __future__ import annotations

from typing import Any

from dbmigrate.db.inspector import Inspector
from dbmigrate.procedures.schema_swap.ddl import ColumnType, Ddl, Expectation, IndexDef, parse_column_type


def expectation_holds(insp: Inspector, exp: Expectation) -> tuple[bool, str]:
    """(holds, what was expected; with what the server has instead when it differs)."""
    schema, table = exp.table.split(".", 1)
    if exp.column is None and exp.index is None and not exp.index_columns:
        present = insp.table_info(schema, table) is not None
        return present != exp.absent, exp.describe()
    if exp.column is not None:
        found = [t for c, t in insp.table_columns(schema, table) if c.lower() == exp.column.lower()]
        if exp.absent or not found:
            return bool(found) != exp.absent, exp.describe()
        differs = column_differs(exp.column_type, found[0])
        return not differs, exp.describe() + (f" (it is {differs})" if differs else "")
    indexes = insp.table_indexes(schema, table)
    if exp.index is not None:
        named = [ix for ix in indexes if ix["name"].lower() == exp.index.lower()]
        if exp.absent or not named:
            return bool(named) != exp.absent, exp.describe()
        differs = index_differs(exp.index_def, named[0])
        return not differs, exp.describe() + (f" (it is {differs})" if differs else "")
    want = [c.lower() for c in exp.index_columns]
    same_columns = [ix for ix in indexes if [c.lower() for c, _ in ix["columns"]] == want]
    present = any(not index_differs(exp.index_def, ix) for ix in same_columns)
    return present != exp.absent, exp.describe()


def conflicts(insp: Inspector, ddl: Ddl) -> list[str]:
    """Expectations of `ddl` whose name exists on the server with another definition."""
    out = []
    for exp in ddl.expectations:
        if exp.absent or (exp.column is None and exp.index is None):
            continue
        ok, what = expectation_holds(insp, exp)
        if not ok and "(it is " in what:
            out.append(what)
    return out


def column_differs(want: ColumnType | None, actual_type: str) -> str:
    """'' when a column of type `actual_type` (COLUMN_TYPE) is what `want` asks for, else what it is."""
    if want is None:
        return ""
    have = parse_column_type(actual_type)
    if have.base != want.base or have.unsigned != want.unsigned or (want.args is not None and have.args != want.args):
        return actual_type
    return ""


def index_differs(want: IndexDef | None, ix: dict[str, Any]) -> str:
    """'' when the server's index `ix` (Inspector.table_indexes) has the definition `want`,
    else the server's definition: key parts in order with prefix lengths and direction,
    uniqueness and kind."""
    if want is None:
        return ""
    parts = ix.get("parts") or [(c, None, False) for c, _ in ix["columns"]]
    have_parts = [(str(c).lower(), sub or None, bool(desc)) for c, sub, desc in parts]
    want_parts = [(p.column.lower(), p.prefix, p.desc) for p in want.parts]
    kind = str(ix.get("type") or "BTREE").upper()
    kind_ok = kind == want.kind or (want.kind == "HASH" and kind == "BTREE")  # InnoDB builds USING HASH as a BTREE
    if have_parts == want_parts and bool(ix.get("unique")) == want.unique and kind_ok:
        return ""
    shown = ", ".join(f"{c}{f'({sub})' if sub else ''}{' DESC' if desc else ''}" for c, sub, desc in have_parts)
    label = "" if kind in ("BTREE", "HASH") else f"{kind} "
    return f"{'UNIQUE ' if ix.get('unique') else ''}{label}({shown})"


def ddl_applied(insp: Inspector, ddl: Ddl) -> bool:
    return all(expectation_holds(insp, e)[0] for e in ddl.expectations)
