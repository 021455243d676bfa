"""The application's queries tried on an altered side before it takes traffic again.

A schema change can pass every check of its own (the index is gone, as asked) and still break
the application: a query that names the dropped index in `USE INDEX (...)` fails with 1176 on
every execution. With `replay_digest` (a digest of the application's queries: `dbmigrate digest
capture`, or pt-query-digest JSON), each class's sample statement is EXPLAINed on the altered
side and on the server that serves writes meanwhile (not altered yet); an error the side gives
and that server does not is new, and the side does not return (the run pauses: nothing is
undone by itself, the operator decides). EXPLAIN executes nothing, writes included.

At the start of the run, a hint in the digest that names an index the DDL drops is a warning.
"""

from __future__ import annotations

import re
from typing import Any

from dbmigrate.db.inspector import Inspector
from dbmigrate.digest.model import Digest, QueryClass
from dbmigrate.procedures.schema_swap.context import SwapContext
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams

_HINT = re.compile(r"\b(?:USE|FORCE|IGNORE)\s+(?:INDEX|KEY)\s*(?:FOR\s+(?:JOIN|ORDER\s+BY|GROUP\s+BY)\s*)?"
                   r"\(([^)]*)\)", re.IGNORECASE)
_EXPLAINABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH")
MAX_SHOWN = 5


def hinted_indexes(statement: str) -> set[str]:
    """Index names in the statement's index hints (lower case)."""
    names = set()
    for m in _HINT.finditer(statement):
        names |= {n.strip().strip("`").lower() for n in m.group(1).split(",") if n.strip()}
    return names


def _bare(table: str) -> str:
    """`schema`.`table`, schema.table or table: the table's name alone, lower case."""
    return table.replace("`", "").strip().lower().rsplit(".", 1)[-1]


def dropped_indexes(params: SchemaSwapParams) -> dict[str, set[str]]:
    """table -> the indexes the DDL leaves absent (dropped, or renamed away)."""
    out: dict[str, set[str]] = {}
    for ddl in params.statements():
        for e in ddl.expectations:
            if e.index and e.absent:
                out.setdefault(e.table.lower(), set()).add(e.index.lower())
    return out


def hint_warnings(digest: Digest, params: SchemaSwapParams) -> list[str]:
    """One line per class whose sample names, in an index hint, an index the DDL drops."""
    dropped: dict[str, set[str]] = {}
    for table, indexes in dropped_indexes(params).items():
        dropped.setdefault(_bare(table), set()).update(indexes)
    out = []
    for qc in digest.classes:
        # The sample and the fingerprint: either may be all a capture kept (a digest text, a
        # prepared statement's text with `?`).
        hinted = hinted_indexes(qc.example) | hinted_indexes(qc.fingerprint)
        # pt-query-digest names tables `schema`.`table`; the DDL may name them either way.
        tables = {_bare(t) for t in qc.tables} or set(dropped)
        hit = sorted({i for t in tables for i in dropped.get(t, set()) if i in hinted})
        if hit:
            out.append(f"the application's query {qc.label!r} ({qc.count} in the digest) names index "
                       f"{', '.join(hit)} in a hint, and the DDL drops it: it will fail with error 1176")
    return out


def default_schema(qc: QueryClass) -> str | None:
    for t in qc.tables:
        schema, dot, _ = t.partition(".")
        if dot:
            return schema.strip("`")
    return None


# A prepared statement's placeholders (outside quotes): EXPLAIN needs values. NULL parses
# wherever a value does, except where a number must stand (LIMIT, OFFSET).
_PLACEHOLDER = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`"
                          r"|\b(LIMIT|OFFSET)\s+\?(\s*,\s*\?)?|\?", re.IGNORECASE)


def with_values(statement: str) -> str:
    """The statement with each `?` placeholder given a value EXPLAIN accepts."""
    def value(m: re.Match[str]) -> str:
        text = str(m.group(0))
        if text[0] in "'\"`":
            return text
        if m.group(1):
            return f"{m.group(1)} 1" + (", 1" if m.group(2) else "")
        return "NULL"

    return _PLACEHOLDER.sub(value, statement) if "?" in statement else statement


def explainable(statement: str) -> bool:
    words = statement.lstrip("( \t\n").split(None, 1)
    return bool(words) and words[0].upper() in _EXPLAINABLE and ";" not in statement.rstrip().rstrip(";")


def replay(side: Inspector, reference: Inspector | None, digest: Digest, max_classes: int) -> tuple[int, list[str]]:
    """EXPLAIN every class's sample on the side (and the reference): (classes tried, new errors).
    Both inspectors must be on sessions of their own (the default schema changes)."""
    tried, new = 0, []
    for qc in sorted(digest.classes, key=lambda c: -c.count)[:max_classes]:
        if not qc.example or not explainable(qc.example):
            continue
        tried += 1
        schema = qc.db or default_schema(qc)  # the sessions' default database: unqualified tables
        statement = with_values(qc.example)
        err = side.explain_error(statement, schema)
        if err is None:
            continue
        before = reference.explain_error(statement, schema) if reference is not None else None
        if before is None or before[0] != err[0]:
            new.append(f"{qc.label!r} ({qc.count} in the digest): error {err[0]} {err[1]}")
    return tried, new


def replay_ready(ctx: SwapContext, side: str, digest: Digest | None, side_server: Any,
                 reference_server: Any | None) -> tuple[bool, str, dict[str, Any]]:
    """The gate before a side returns: the application's queries answer there as before."""
    if digest is None:
        return True, "no replay digest in the playbook: the application's queries were not tried", {}
    if ctx.dry_run:
        return True, f"dry-run: {len(digest.classes)} query class(es) would be EXPLAINed on {side}", {}
    p: SchemaSwapParams = ctx.params
    mine = side_server.dedicated()
    ref = reference_server.dedicated() if reference_server is not None else None
    try:
        tried, new = replay(Inspector(mine), Inspector(ref) if ref is not None else None, digest,
                            p.replay_max_classes)
    finally:
        mine.close()
        if ref is not None:
            ref.close()
    details = {"side": side, "classes_tried": tried, "new_errors": new}
    if new:
        shown = "; ".join(new[:MAX_SHOWN]) + (f"; and {len(new) - MAX_SHOWN} more" if len(new) > MAX_SHOWN else "")
        return False, (f"{side} is kept out of traffic: {len(new)} of the application's {tried} query class(es) "
                       f"fail there and not before the change: {shown}"), details
    return True, f"{side}: {tried} application query class(es) EXPLAINed without a new error", details
