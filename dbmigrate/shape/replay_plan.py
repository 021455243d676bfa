"""A captured query class as a statement to replay: its sample with every literal turned into a
server-side prepared statement's parameter, each parameter tied to the column it is compared
with or inserted into, so that generated values fit (an id that exists, a status of the enum, a
date in range). LIMIT and OFFSET stay literal (a redacted `LIMIT 0` becomes `LIMIT 10`).

Pure text: the values come from shape/generate.py at replay time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LITERAL = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|(?<![\w.`])(?:0x[0-9a-f]+|x'[0-9a-f]*')(?![\w.`])"
                      r"|(?<![\w.`?])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.`])"
                      r"|(?<![\w'\"`?])\?(?![\w'\"`?])", re.IGNORECASE)  # a digest text's own placeholder
_IDENT = r"((?:`(?:[^`]|``)+`|[A-Za-z_$][\w$]*)(?:\.(?:`(?:[^`]|``)+`|[A-Za-z_$][\w$]*))*)"
_COMPARED = re.compile(_IDENT + r"\s*(?:<=>|<=|>=|<>|!=|=|<|>|\bNOT\s+LIKE|\bLIKE|\bNOT\s+IN\s*\(|\bIN\s*\()"
                       r"(?:\s*\?\s*,)*\s*$", re.IGNORECASE)
_BETWEEN = re.compile(_IDENT + r"\s+(?:NOT\s+)?BETWEEN\s+(?:\?\s+AND\s*)?$", re.IGNORECASE)
_LIMIT = re.compile(r"\b(LIMIT|OFFSET)\s*(?:\d+\s*,\s*)?$", re.IGNORECASE)
_INSERT = re.compile(r"^\s*(?:INSERT|REPLACE)\s+(?:LOW_PRIORITY\s+|DELAYED\s+|HIGH_PRIORITY\s+|IGNORE\s+)*"
                     r"(?:INTO\s+)?" + _IDENT + r"\s*(?:\(([^)]*)\))?\s*VALUES?\s*", re.IGNORECASE)
_FUNCTION_ARG = re.compile(r"\b(?!IN\b|VALUES?\b)\w+\s*\(\s*$", re.IGNORECASE)
_WRITES = re.compile(r"^\s*(?:INSERT|REPLACE|UPDATE|DELETE)\b", re.IGNORECASE)
DEFAULT_LIMIT = 10


@dataclass(frozen=True)
class Parameter:
    column: str | None  # the column it is compared with or inserted into, when the text says
    table: str | None  # schema.table from the INSERT, else None (any of the class's tables)
    position: int | None  # an INSERT without a column list: the column's place in the table
    inserted: bool  # a new row's value (server-filled keys get NULL), else a lookup value
    literal_kind: str  # "string" or "number": what the sample had, for a column nobody names


@dataclass(frozen=True)
class ReplayStatement:
    sql: str
    parameters: tuple[Parameter, ...]
    writes: bool


def unquote(ident: str) -> str:
    return ".".join(p[1:-1].replace("``", "`") if p.startswith("`") else p
                    for p in re.findall(r"`(?:[^`]|``)+`|[^.]+", ident))


def plan(sample: str) -> ReplayStatement:
    """`sample` (redacted or not) as a statement with `?` parameters."""
    # performance_schema's digest text spaces every token: `ca` . `orders` ( `id` , ...
    text = re.sub(r"`\s+\.\s+`", "`.`", sample.strip().rstrip(";"))
    insert = _INSERT.match(text)
    if insert and insert.group(2) and re.match(r"\(\s*\.\.\.\s*\)", text[insert.end():]):
        # a digest text folds the value list: one row of parameters, one a column
        n = len(insert.group(2).split(","))
        text = text[:insert.end()] + "(" + ", ".join(["?"] * n) + ")" + text[insert.end():].split(")", 1)[1]
        insert = _INSERT.match(text)
    insert_columns = [unquote(c.strip()) for c in insert.group(2).split(",")] if insert and insert.group(2) else []
    insert_table = unquote(insert.group(1)) if insert else None
    value_slots = _value_slots(text, insert.end()) if insert else {}
    out: list[str] = []
    params: list[Parameter] = []
    last = 0
    for m in _LITERAL.finditer(text):
        before = "".join(out) + text[last:m.start()]
        out.append(text[last:m.start()])
        last = m.end()
        if limit := _LIMIT.search(before):
            value = m.group(0)
            out.append(value if value.isdigit() and value != "0" else
                       (str(DEFAULT_LIMIT) if limit.group(1).upper() == "LIMIT" else "0"))
            continue
        if _FUNCTION_ARG.search(before) and m.group(0)[0].isdigit():  # NOW(6), DATETIME(6): syntax, not data
            out.append(m.group(0))
            continue
        kind = "number" if m.group(0)[0] in "-0123456789?" and not m.group(0).lower().startswith("0x") else "string"
        slot = value_slots.get(m.start())
        if slot is not None and slot < len(insert_columns):
            params.append(Parameter(insert_columns[slot].split(".")[-1], insert_table, None, True, kind))
        elif slot is not None and insert and not insert_columns:
            params.append(Parameter(None, insert_table, slot, True, kind))
        else:
            named = _COMPARED.search(before) or _BETWEEN.search(before)
            column = unquote(named.group(1)).split(".")[-1] if named else None
            params.append(Parameter(column, None, None, False, kind))
        out.append("?")
    out.append(text[last:])
    return ReplayStatement("".join(out), tuple(params), bool(_WRITES.match(text)))


def _value_slots(text: str, start: int) -> dict[int, int]:
    """Offsets of the VALUES list's elements -> their position within their row tuple."""
    slots: dict[int, int] = {}
    depth, index, i = 0, 0, start
    in_string: str | None = None
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == in_string:
                in_string = None
        elif ch in "'\"":
            if depth == 1:
                slots.setdefault(i, index)
            in_string = ch
        elif ch == "(":
            depth += 1
            if depth == 1:
                index = 0
        elif ch == ")":
            depth -= 1
            if depth == 0 and not text[i + 1:].lstrip().startswith(","):
                break
        elif ch == "," and depth == 1:
            index += 1
        elif depth == 1 and not ch.isspace() and (i == 0 or text[i - 1] in "(, \t\n"):
            slots.setdefault(i, index)
        i += 1
    return slots
