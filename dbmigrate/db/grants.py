"""Reading GRANT lines (SHOW GRANTS) for the schemas a procedure moves: which lines concern
them, at which level, and which tables they name. Pure text: no server here."""

from __future__ import annotations

import re
from dataclasses import dataclass

# GRANT <privileges> ON [PROCEDURE|FUNCTION|PACKAGE [BODY]] <db>.<object> TO <grantee> ...
_GRANT = re.compile(r"^\s*GRANT\s+(?P<privs>.+?)\s+ON\s+(?:(?P<kind>PROCEDURE|FUNCTION|PACKAGE BODY|PACKAGE)\s+)?"
                    r"(?P<db>\*|`(?:[^`]|``)+`)\.(?P<obj>\*|`(?:[^`]|``)+`)\s+TO\s", re.IGNORECASE | re.DOTALL)
_WRITE = {"INSERT", "UPDATE", "DELETE", "ALL", "ALL PRIVILEGES"}


def like_matches(pattern: str, name: str) -> bool:
    """Does a grant's schema LIKE pattern (`shard\\_%`) cover the schema `name`?"""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
            continue
        out += ".*" if c == "%" else "." if c == "_" else re.escape(c)
        i += 1
    return re.fullmatch(out, name) is not None


def _unquote(ident: str) -> str:
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident


@dataclass(frozen=True)
class GrantLine:
    text: str
    level: str  # global, schema, table, column, routine
    schema: str | None  # the schema or its LIKE pattern; None for global
    obj: str | None  # table or routine name

    @property
    def writes(self) -> bool:
        privs = re.sub(r"\([^)]*\)", "", self.text.split(" ON ", 1)[0][len("GRANT "):]).upper()
        return any(p.strip() in _WRITE for p in privs.split(","))


def _split_top(text: str) -> list[str]:
    """Split a privilege list at the commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*parts, cur.strip()] if cur.strip() else parts


def canonical(line: str) -> str:
    """A GRANT line with its privileges, and each privilege's columns, in a fixed order: two
    servers may list them differently for the same grant."""
    m = _GRANT.match(line)
    if not m:
        return line.strip()
    privs = []
    for p in _split_top(m.group("privs")):
        name, paren, cols = p.partition("(")
        if paren:
            cols = ", ".join(sorted(c.strip() for c in cols.rstrip(")").split(",")))
            p = f"{name.strip()} ({cols})"
        privs.append(" ".join(p.split()).upper() if not paren else p)
    return f"GRANT {', '.join(sorted(privs))} ON {line[m.start('privs') + len(m.group('privs')):].strip()[3:].strip()}"


def parse(line: str) -> GrantLine | None:
    m = _GRANT.match(line)
    if not m:
        return None  # a role granted to the account, or PROXY
    db, obj = m.group("db"), m.group("obj")
    if db == "*":
        return GrantLine(line, "global", None, None)
    if m.group("kind"):
        return GrantLine(line, "routine", _unquote(db), _unquote(obj))
    if obj == "*":
        return GrantLine(line, "schema", _unquote(db), None)
    level = "column" if "(" in m.group("privs") else "table"
    return GrantLine(line, level, _unquote(db), _unquote(obj))


def lines_for(grants: list[str], schemas: list[str], include_global: bool = False) -> list[GrantLine]:
    """The GRANT lines that give something on one of `schemas` (global ones when asked and
    more than USAGE)."""
    out = []
    for text in grants:
        g = parse(text)
        if g is None:
            continue
        if g.level == "global":
            if include_global and not re.match(r"^\s*GRANT\s+USAGE\s+ON\s", text, re.IGNORECASE):
                out.append(g)
        elif g.level == "schema":
            if any(like_matches(g.schema or "", s) for s in schemas):
                out.append(g)
        elif g.schema in schemas:
            out.append(g)
    return out
