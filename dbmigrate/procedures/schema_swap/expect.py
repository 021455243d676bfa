"""Is a DDL's effect in place on a server? Read back through the inspector."""

from __future__ import annotations

from dbmigrate.db.inspector import Inspector
from dbmigrate.procedures.schema_swap.ddl import Ddl, Expectation


def expectation_holds(insp: Inspector, exp: Expectation) -> tuple[bool, str]:
    schema, table = exp.table.split(".", 1)
    if exp.column is None and exp.index is None and not exp.index_columns:
        present = insp.table_info(schema, table) is not None
        return present != exp.absent, exp.describe()
    if exp.column is not None:
        present = any(c.lower() == exp.column.lower() for c, _ in insp.table_columns(schema, table))
        return present != exp.absent, exp.describe()
    indexes = insp.table_indexes(schema, table)
    if exp.index is not None:
        present = any(ix["name"].lower() == exp.index.lower() for ix in indexes)
    else:
        want = [c.lower() for c in exp.index_columns]
        present = any([c.lower() for c, _ in ix["columns"]] == want for ix in indexes)
    return present != exp.absent, exp.describe()


def ddl_applied(insp: Inspector, ddl: Ddl) -> bool:
    return all(expectation_holds(insp, e)[0] for e in ddl.expectations)
