"""DDL for schema swaps: what is allowed, what it must leave behind. Pure, no server.

A swap alters one server at a time while the others, and above all the
unaltered primary, keep replicating to it in ROW format. ROW events carry
column values by position, so a replica may have *more* trailing columns and
*more* indexes than its source, and nothing else: dropping, reordering,
renaming or retyping columns makes the events from the unaltered primary land
in the wrong columns or stop replication. `classify` accepts the kinds that
keep that property and refuses the rest with the reason, before any server is
touched:

    ALTER TABLE s.t ADD [COLUMN] c ... (trailing: no FIRST/AFTER)
    ALTER TABLE s.t ADD INDEX|KEY|FULLTEXT|SPATIAL ..., DROP INDEX|KEY name, ALGORITHM=, LOCK=
    CREATE [FULLTEXT|SPATIAL] INDEX name ON s.t (...)
    DROP INDEX name ON s.t
    CREATE TABLE s.t (...) | CREATE TABLE s.t LIKE s.u

`expectations` derives what each statement must leave on a server (the column
exists with its type, the index exists with its whole definition, or is gone),
which is both the idempotency check ("already applied?") and the automatic
verification. A name alone proves nothing: `fx_c (k)` is not `ADD INDEX fx_c (c)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, TypeGuard

from dbmigrate.exceptions import UsageError

SUPPORTED = ("ALTER TABLE s.t ADD COLUMN (trailing) / ADD INDEX|KEY|FULLTEXT|SPATIAL / DROP INDEX / "
             "ALGORITHM= / LOCK=; CREATE [FULLTEXT|SPATIAL] INDEX ... ON s.t; DROP INDEX ... ON s.t; "
             "CREATE TABLE s.t")
_DML = {"INSERT", "UPDATE", "DELETE", "REPLACE", "SELECT", "LOAD", "CALL", "DO", "HANDLER", "WITH", "VALUES",
        "TABLE", "MERGE", "UPSERT"}


class DdlRefused(UsageError):
    """A statement that a schema swap must not apply; nothing was changed."""


@dataclass(frozen=True)
class Token:
    kind: str  # word, ident (backquoted), string, punct
    text: str

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""

    @property
    def name(self) -> str:
        """An identifier's name (bare or backquoted)."""
        return self.text


@dataclass(frozen=True)
class IndexPart:
    """One key part of an index: its column, prefix length (characters) and direction."""

    column: str
    prefix: int | None = None
    desc: bool = False

    def describe(self) -> str:
        return f"{self.column}{f'({self.prefix})' if self.prefix else ''}{' DESC' if self.desc else ''}"


@dataclass(frozen=True)
class IndexDef:
    """An index's whole definition as the statement asks for it.

    kind: BTREE, FULLTEXT, SPATIAL, or HASH (USING HASH: InnoDB keeps it as a BTREE, so a
    BTREE on the server satisfies it)."""

    parts: tuple[IndexPart, ...]
    unique: bool = False
    kind: str = "BTREE"

    def describe(self) -> str:
        kind = "" if self.kind in ("BTREE", "HASH") else f"{self.kind} "
        return f"{'UNIQUE ' if self.unique else ''}{kind}({', '.join(p.describe() for p in self.parts)})"


@dataclass(frozen=True)
class ColumnType:
    """A column's type as the statement asks for it: base type (aliases resolved), its
    arguments where they matter (lengths, precision, enum values) and signedness."""

    base: str
    args: str | None = None
    unsigned: bool = False

    def describe(self) -> str:
        return f"{self.base}{f'({self.args})' if self.args else ''}{' unsigned' if self.unsigned else ''}"


@dataclass(frozen=True)
class Expectation:
    """What a server must show after the change: a table, a column (with its type), or an
    index (by name or by its key parts, with its whole definition), present or absent."""

    table: str  # schema.table
    column: str | None = None
    index: str | None = None
    index_columns: tuple[str, ...] = ()
    absent: bool = False
    column_type: ColumnType | None = None  # None: any type (an explicit verify item)
    index_def: IndexDef | None = None  # None: any definition (an explicit verify item, a drop)

    def describe(self) -> str:
        if self.column:
            what = f"column {self.column}" + (f" {self.column_type.describe()}" if self.column_type else "")
        elif self.index:
            what = f"index {self.index}" + (f" {self.index_def.describe()}" if self.index_def else "")
        elif self.index_columns:
            what = f"an index {self.index_def.describe()}" if self.index_def else \
                f"an index on ({', '.join(self.index_columns)})"
        else:
            return f"table {self.table} {'is absent' if self.absent else 'exists'}"
        return f"{self.table} {'has no' if self.absent else 'has'} {what}"


@dataclass(frozen=True)
class Ddl:
    """One accepted statement: its table, its kind and what it leaves behind."""

    statement: str
    table: str
    kind: str  # alter-table, create-index, drop-index, create-table
    expectations: tuple[Expectation, ...] = field(default=())
    added_columns: tuple[str, ...] = ()


# -- lexer -------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z0-9_$@]+")


def tokenize(sql: str) -> list[Token]:
    """Words, `identifiers`, 'strings' and punctuation; comments dropped. Refuses
    version comments (/*! ... */): they hide statements from review."""
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("/*", i):
            if sql.startswith("/*!", i) or sql.startswith("/*M!", i):
                raise DdlRefused(f"executable comment (/*! ... */) in: {_short(sql)}",
                                 hint="write the statement without version comments")
            end = sql.find("*/", i + 2)
            if end < 0:
                raise DdlRefused(f"unterminated comment in: {_short(sql)}")
            i = end + 2
        elif sql.startswith("--", i) and (i + 2 >= n or sql[i + 2].isspace()) or c == "#":
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif c == "`":
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise DdlRefused(f"unterminated `identifier` in: {_short(sql)}")
                if sql[j] == "`":
                    if j + 1 < n and sql[j + 1] == "`":
                        buf.append("`")
                        j += 2
                        continue
                    break
                buf.append(sql[j])
                j += 1
            out.append(Token("ident", "".join(buf)))
            i = j + 1
        elif c in "'\"":
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise DdlRefused(f"unterminated string in: {_short(sql)}")
                if sql[j] == "\\" and j + 1 < n:
                    buf.append(sql[j:j + 2])
                    j += 2
                    continue
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        buf.append(c)
                        j += 2
                        continue
                    break
                buf.append(sql[j])
                j += 1
            out.append(Token("string", "".join(buf)))
            i = j + 1
        else:
            m = _WORD.match(sql, i)
            if m:
                out.append(Token("word", m.group(0)))
                i = m.end()
            else:
                out.append(Token("punct", c))
                i += 1
    return out


def short(sql: str, limit: int = 120) -> str:
    """One line of at most `limit` characters, for messages."""
    return _short(sql, limit)


def _short(sql: str, limit: int = 120) -> str:
    one = " ".join(sql.split())
    return one if len(one) <= limit else one[:limit - 3] + "..."


def split_top_level(tokens: list[Token], sep: str = ",") -> list[list[Token]]:
    """Split at `sep` outside parentheses."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        if t.kind == "punct" and t.text == "(":
            depth += 1
        elif t.kind == "punct" and t.text == ")":
            depth -= 1
        if depth == 0 and t.kind == "punct" and t.text == sep:
            parts.append([])
            continue
        parts[-1].append(t)
    return parts


def _is_ident(t: Token | None) -> TypeGuard[Token]:
    return t is not None and t.kind in ("word", "ident")


def _words(tokens: Iterable[Token]) -> set[str]:
    """Bare keywords at parenthesis depth 0 (quoted names and strings are not keywords)."""
    out, depth = set(), 0
    for t in tokens:
        if t.kind == "punct" and t.text == "(":
            depth += 1
        elif t.kind == "punct" and t.text == ")":
            depth -= 1
        elif depth == 0 and t.kind == "word":
            out.add(t.upper)
    return out


class _Cursor:
    def __init__(self, tokens: list[Token], statement: str):
        self.t = tokens
        self.i = 0
        self.statement = statement

    def peek(self, k: int = 0) -> Token | None:
        return self.t[self.i + k] if self.i + k < len(self.t) else None

    def peek_upper(self, k: int = 0) -> str:
        """The next token's upper-case text, "" at the end."""
        t = self.peek(k)
        return t.upper if t is not None else ""

    def take(self) -> Token | None:
        tok = self.peek()
        self.i += 1
        return tok

    def accept(self, *words: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.upper in words:
            self.i += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        for k, w in enumerate(words):
            tok = self.peek(k)
            if tok is None or tok.upper != w:
                return False
        self.i += len(words)
        return True

    def rest(self) -> list[Token]:
        return self.t[self.i:]

    def qualified_name(self) -> str:
        first = self.take()
        if not _is_ident(first):
            raise self.refuse("expected a table name")
        dot = self.peek()
        if dot is None or dot.kind != "punct" or dot.text != ".":
            raise DdlRefused(f"table `{first.name}` is not schema-qualified in: {_short(self.statement)}",
                             hint=f"name the schema: e.g. app.{first.name}; each server resolves it the same way")
        self.take()
        second = self.take()
        if not _is_ident(second):
            raise self.refuse("expected schema.table")
        return f"{first.name}.{second.name}"

    def refuse(self, why: str, hint: str | None = None) -> DdlRefused:
        return DdlRefused(f"{why}: {_short(self.statement)}", hint=hint or f"supported: {SUPPORTED}")


# -- classification -------------------------------------------------------------------

def classify(statement: str) -> Ddl:
    """Parse one statement and accept it, or raise DdlRefused saying why."""
    text = statement.strip()
    tokens = tokenize(text)
    while tokens and tokens[-1].kind == "punct" and tokens[-1].text == ";":
        tokens.pop()
    if not tokens:
        raise DdlRefused("empty DDL statement", hint="give one statement per list item")
    if any(t.kind == "punct" and t.text == ";" for t in tokens):
        raise DdlRefused(f"more than one statement in one item: {_short(text)}",
                         hint="give one statement per list item")
    cur = _Cursor(tokens, text)
    head = tokens[0].upper
    if head in _DML:
        raise DdlRefused(f"not DDL ({head} changes or reads rows): {_short(text)}",
                         hint="a schema swap applies DDL with the binlog off; rows written that way would exist "
                              "on one server only")
    if cur.accept_seq("ALTER", "TABLE"):
        return _alter_table(cur, text)
    if cur.accept("CREATE"):
        if cur.accept("TABLE"):
            return _create_table(cur, text)
        if cur.accept("UNIQUE"):
            raise _unique_refused(text)
        kind = cur.peek_upper()
        declared = kind if cur.accept("FULLTEXT", "SPATIAL") else None
        if cur.accept("INDEX"):
            return _create_index(cur, text, declared)
        second = tokens[1].text.upper() if len(tokens) > 1 else ""
        raise cur.refuse(f"CREATE {second} is not supported by a schema swap")
    if cur.accept_seq("DROP", "INDEX"):
        return _drop_index(cur, text)
    if head in ("DROP", "TRUNCATE", "RENAME"):
        raise _table_gone_refused(tokens, text)
    if head == "ALTER":
        raise cur.refuse(f"ALTER {tokens[1].text.upper() if len(tokens) > 1 else ''} is not supported by a schema swap")
    raise cur.refuse(f"{head or tokens[0].text} is not a supported DDL statement")


def _table_gone_refused(tokens: list[Token], text: str) -> DdlRefused:
    return DdlRefused(f"{tokens[0].upper} {tokens[1].text.upper() if len(tokens) > 1 else ''}: the unaltered primary "
                      f"keeps writing the table's rows, so replication to this server would stop: {_short(text)}",
                      hint="drop or rename tables with an ordinary (replicated) migration once no code uses them")


def _unique_refused(text: str) -> DdlRefused:
    return DdlRefused(f"a UNIQUE index on an altered replica would stop replication as soon as the unaltered "
                      f"primary accepts a duplicate: {_short(text)}",
                      hint="add it as a plain index first, deduplicate, then add the UNIQUE index on the primary "
                           "with an online schema change tool")


def _create_table(cur: _Cursor, text: str) -> Ddl:
    cur.accept_seq("IF", "NOT", "EXISTS")
    table = cur.qualified_name()
    if "SELECT" in _words(cur.rest()):
        raise cur.refuse("CREATE TABLE ... SELECT copies rows with the binlog off (rows on one server only)")
    return Ddl(text, table, "create-table", (Expectation(table),))


def _index_columns(tokens: list[Token]) -> tuple[str, ...]:
    """Column names of the first parenthesised list: `(a, b(10) DESC)` -> ('a', 'b')."""
    return tuple(p.column for p in _index_parts(tokens))


def _index_parts(tokens: list[Token]) -> tuple[IndexPart, ...]:
    """Key parts of the first parenthesised list: `(a, b(10) DESC)` -> a, b prefix 10 descending."""
    start = next((k for k, t in enumerate(tokens) if t.kind == "punct" and t.text == "("), None)
    if start is None:
        return ()
    depth, inner = 0, []
    for t in tokens[start:]:
        if t.kind == "punct" and t.text == "(":
            depth += 1
            if depth == 1:
                continue
        elif t.kind == "punct" and t.text == ")":
            depth -= 1
            if depth == 0:
                break
        inner.append(t)
    parts = []
    for part in split_top_level(inner):
        if part and _is_ident(part[0]):
            prefix = None
            if len(part) >= 4 and part[1].text == "(" and part[2].text.isdigit() and part[3].text == ")":
                prefix = int(part[2].text)
            parts.append(IndexPart(part[0].name, prefix, desc=any(t.upper == "DESC" for t in part[1:])))
    return tuple(parts)


def _index_kind(tokens: list[Token], declared: str | None) -> str:
    """FULLTEXT / SPATIAL as declared, else what USING names (BTREE by default)."""
    if declared:
        return declared
    for k, t in enumerate(tokens[:-1]):
        if t.upper == "USING" and tokens[k + 1].upper in ("BTREE", "HASH", "RTREE"):
            return tokens[k + 1].upper
    return "BTREE"


_TYPE_ALIASES = {"integer": "int", "int4": "int", "int1": "tinyint", "int2": "smallint", "int3": "mediumint",
                 "int8": "bigint", "middleint": "mediumint", "bool": "tinyint", "boolean": "tinyint",
                 "dec": "decimal", "numeric": "decimal", "fixed": "decimal", "real": "double",
                 "float8": "double", "float4": "float", "character": "char", "nchar": "char",
                 "nvarchar": "varchar", "long": "mediumtext"}
# Integer display widths and the like are not part of what a value can hold: not compared.
_ARGS_IGNORED = {"tinyint", "smallint", "mediumint", "int", "bigint", "year"}


def column_type(base: str, args: str | None = None, unsigned: bool = False) -> ColumnType:
    base = _TYPE_ALIASES.get(base.lower(), base.lower())
    if base in _ARGS_IGNORED:
        args = None
    elif args is not None:
        args = "".join(args.split()).replace('"', "'").lower()
    return ColumnType(base, args or None, unsigned)


def parse_column_type(text: str) -> ColumnType:
    """A server's COLUMN_TYPE (`varchar(32)`, `int(10) unsigned`, `decimal(10,2)`)."""
    m = re.match(r"\s*([a-z0-9_ ]+?)\s*(?:\((.*)\))?\s*((?:unsigned|signed|zerofill|\s)*)$", text.lower())
    if not m:
        return ColumnType(text.lower())
    base = m.group(1).strip()
    base = "double" if base == "double precision" else base
    return column_type(base, m.group(2), "unsigned" in (m.group(3) or ""))


def _declared_type(tokens: list[Token]) -> ColumnType | None:
    """The type of an ADD COLUMN clause: the tokens after the column's name."""
    if not tokens or tokens[0].kind != "word":
        return None
    base = tokens[0].text.lower()
    k = 1
    if base == "double" and len(tokens) > 1 and tokens[1].upper == "PRECISION":
        k = 2
    elif base in ("character", "national") and len(tokens) > 1 and tokens[1].upper in ("VARYING", "CHAR",
                                                                                        "VARCHAR"):
        base = "varchar" if tokens[1].upper in ("VARYING", "VARCHAR") else "char"
        k = 2
    args = None
    if k < len(tokens) and tokens[k].text == "(":
        depth, inner, j = 0, [], k
        while j < len(tokens):
            t = tokens[j]
            if t.text == "(" and t.kind == "punct":
                depth += 1
                if depth == 1:
                    j += 1
                    continue
            elif t.text == ")" and t.kind == "punct":
                depth -= 1
                if depth == 0:
                    break
            inner.append(f"'{t.text}'" if t.kind == "string" else t.text)
            j += 1
        args = "".join(inner)
        k = j + 1
    unsigned = any(t.upper == "UNSIGNED" for t in tokens[k:k + 2])
    return column_type(base, args, unsigned)


def _create_index(cur: _Cursor, text: str, declared: str | None = None) -> Ddl:
    cur.accept_seq("IF", "NOT", "EXISTS")
    name = cur.take()
    if not _is_ident(name):
        raise cur.refuse("expected an index name")
    if not cur.accept("ON"):
        raise cur.refuse("expected ON schema.table")
    table = cur.qualified_name()
    parts = _index_parts(cur.rest())
    if not parts:
        raise cur.refuse("expected the index's column list")
    definition = IndexDef(parts, kind=_index_kind(cur.t, declared))
    return Ddl(text, table, "create-index", (Expectation(table, index=name.name, index_def=definition),))


def _drop_index(cur: _Cursor, text: str) -> Ddl:
    cur.accept_seq("IF", "EXISTS")
    name = cur.take()
    if not _is_ident(name):
        raise cur.refuse("expected an index name")
    if name.name.upper() == "PRIMARY":
        raise _primary_refused(text)
    if not cur.accept("ON"):
        raise cur.refuse("expected ON schema.table")
    table = cur.qualified_name()
    return Ddl(text, table, "drop-index", (Expectation(table, index=name.name, absent=True),))


def _primary_refused(text: str) -> DdlRefused:
    return DdlRefused(f"changing the PRIMARY KEY changes how ROW events find their rows (and adds a uniqueness the "
                      f"unaltered primary does not enforce): {_short(text)}",
                      hint="change primary keys with an online schema change tool on the primary")


_COLUMN_REFUSALS = {
    "FIRST": "places the column first",
    "AFTER": "places the column in the middle",
}


def _alter_table(cur: _Cursor, text: str) -> Ddl:
    table = cur.qualified_name()
    specs = split_top_level(cur.rest())
    if not specs or not specs[0]:
        raise cur.refuse("ALTER TABLE without a change")
    expectations: list[Expectation] = []
    added: list[str] = []
    for spec in specs:
        expectations += _alter_spec(spec, table, text, added)
    if not expectations:
        raise cur.refuse("ALTER TABLE with options only (ALGORITHM/LOCK) changes nothing")
    return Ddl(text, table, "alter-table", tuple(expectations), tuple(added))


def _alter_spec(spec: list[Token], table: str, text: str, added: list[str]) -> list[Expectation]:
    c = _Cursor(spec, text)
    head = c.peek()
    if head is None:
        raise c.refuse("empty clause in ALTER TABLE")
    if c.accept("ALGORITHM", "LOCK"):
        return []
    if c.accept("ADD"):
        if c.accept("UNIQUE"):
            raise _unique_refused(text)
        if c.accept("PRIMARY"):
            raise _primary_refused(text)
        if c.peek_upper() in ("CONSTRAINT", "FOREIGN", "CHECK", "PARTITION", "PERIOD",
                                                       "SYSTEM"):
            raise c.refuse(f"ADD {c.peek_upper()} is not supported by a schema swap (constraints and partitions "
                           f"change what the replica accepts from the unaltered primary)")
        kind = c.peek_upper()
        if c.accept("FULLTEXT", "SPATIAL"):
            c.accept("INDEX", "KEY")
            return [_added_index(c, table, kind)]
        if c.accept("INDEX", "KEY"):
            return [_added_index(c, table)]
        c.accept("COLUMN")
        c.accept_seq("IF", "NOT", "EXISTS")
        nxt = c.peek()
        if nxt is not None and nxt.kind == "punct" and nxt.text == "(":
            raise c.refuse("ADD (col, ...) is not supported", hint="write one ADD COLUMN clause per column")
        name = c.take()
        if not _is_ident(name):
            raise c.refuse("expected a column name after ADD COLUMN")
        words = _words(c.rest())
        for word, why in _COLUMN_REFUSALS.items():
            if word in words:
                raise DdlRefused(f"ADD COLUMN {name.name} ... {word} {why}: ROW events from the unaltered primary "
                                 f"carry values by position, so every later column would receive the wrong values: "
                                 f"{_short(text)}", hint="add new columns at the end of the table (no FIRST/AFTER)")
        if "AUTO_INCREMENT" in words:
            raise c.refuse(f"ADD COLUMN {name.name} AUTO_INCREMENT would number rows differently on each server")
        if words & {"GENERATED", "AS"}:
            raise c.refuse(f"ADD COLUMN {name.name} as a generated column is not supported by a schema swap")
        if words & {"UNIQUE"}:
            raise _unique_refused(text)
        if words & {"PRIMARY"}:
            raise _primary_refused(text)
        if words & {"REFERENCES"}:
            raise c.refuse(f"ADD COLUMN {name.name} REFERENCES adds a foreign key; not supported by a schema swap")
        added.append(name.name)
        return [Expectation(table, column=name.name, column_type=_declared_type(c.rest()))]
    if c.accept("DROP"):
        if c.accept("INDEX", "KEY"):
            c.accept_seq("IF", "EXISTS")
            name = c.take()
            if not _is_ident(name):
                raise c.refuse("expected an index name after DROP INDEX")
            if name.name.upper() == "PRIMARY":
                raise _primary_refused(text)
            return [Expectation(table, index=name.name, absent=True)]
        if c.accept("PRIMARY"):
            raise _primary_refused(text)
        if c.peek_upper() in ("FOREIGN", "CONSTRAINT", "CHECK", "PARTITION", "PERIOD",
                                                       "SYSTEM"):
            raise c.refuse(f"DROP {c.peek_upper()} is not supported by a schema swap")
        c.accept("COLUMN")
        col = c.peek()
        raise DdlRefused(f"DROP COLUMN {col.name if col else ''} shifts the columns after it: ROW events from the "
                         f"unaltered primary would write into the wrong columns or stop replication: {_short(text)}",
                         hint="drop columns with an ordinary (replicated) migration once no code reads them")
    if head.upper == "RENAME" and len(c.rest()) > 1 and c.rest()[1].upper in ("INDEX", "KEY"):
        c.take()
        c.take()
        old, to, new = c.take(), c.take(), c.take()
        if not (_is_ident(old) and to is not None and to.upper == "TO" and _is_ident(new)) or c.rest():
            raise c.refuse("expected RENAME INDEX old_name TO new_name")
        # ROW events name no index: the unaltered primary's rows apply the same under either name.
        # What a rename can break is a query that names the old one in a hint (see replay.py).
        return [Expectation(table, index=old.name, absent=True), Expectation(table, index=new.name)]
    word = head.upper
    reasons = {
        "MODIFY": "changes a column's type or position",
        "CHANGE": "renames or retypes a column",
        "ALTER": "changes a column's definition",
        "RENAME": "renames a column or the table, which the unaltered primary keeps writing under its old name",
        "CONVERT": "changes the character set (the type) of every text column",
        "CHARACTER": "changes the table's default character set",
        "DEFAULT": "changes the table's default character set",
        "ORDER": "reorders rows (a table copy with no lasting effect)",
        "ENGINE": "changes the storage engine",
        "PARTITION": "repartitions the table",
        "REMOVE": "removes partitioning",
    }
    if word in reasons:
        raise DdlRefused(f"ALTER TABLE ... {word} {reasons[word]}: with ROW replication from an unaltered primary "
                         f"that is not safe: {_short(text)}",
                         hint=f"a schema swap supports: {SUPPORTED}")
    raise c.refuse(f"ALTER TABLE clause {head.text!r} is not supported by a schema swap")


def _added_index(c: _Cursor, table: str, declared: str | None = None) -> Expectation:
    c.accept_seq("IF", "NOT", "EXISTS")
    nxt = c.peek()
    name = None
    if _is_ident(nxt) and nxt.upper not in ("USING",):
        c.take()
        name = nxt.name
    parts = _index_parts(c.rest())
    if not parts:
        raise c.refuse("expected the index's column list")
    definition = IndexDef(parts, kind=_index_kind(c.rest(), declared))
    if name:
        return Expectation(table, index=name, index_def=definition)
    return Expectation(table, index_columns=tuple(p.column for p in parts), index_def=definition)


# -- undo statements --------------------------------------------------------------------

def check_undo(statement: str) -> str:
    """An undo statement is the inverse of an accepted change (so it may drop what was
    added): it must be one DDL statement on a schema-qualified table. Returns the table."""
    text = statement.strip().rstrip(";").strip()
    tokens = tokenize(text)
    if not tokens:
        raise DdlRefused("empty undo statement")
    if any(t.kind == "punct" and t.text == ";" for t in tokens):
        raise DdlRefused(f"more than one statement in one undo item: {_short(text)}")
    head = tokens[0].upper
    second = tokens[1].upper if len(tokens) > 1 else ""
    # The undo runs with the binlog off on one server at a time, like the DDL: the same
    # statements would break replication there.
    if head in ("DROP", "TRUNCATE", "RENAME") and second != "INDEX":
        raise _table_gone_refused(tokens, text)
    if head == "CREATE" and second == "UNIQUE":
        raise _unique_refused(text)
    if head not in ("ALTER", "DROP", "CREATE"):
        raise DdlRefused(f"undo must be DDL (ALTER, DROP or CREATE), not {head or tokens[0].text}: {_short(text)}")
    for k in range(len(tokens) - 2):
        if _is_ident(tokens[k]) and tokens[k + 1].text == "." and _is_ident(tokens[k + 2]):
            return f"{tokens[k].name}.{tokens[k + 2].name}"
    raise DdlRefused(f"undo statement names no schema-qualified table: {_short(text)}",
                     hint="name the schema: e.g. ALTER TABLE app.orders DROP COLUMN note2")


def tables_of(ddls: Iterable[Ddl]) -> list[str]:
    """Tables the statements change, in first-mention order."""
    seen: list[str] = []
    for d in ddls:
        if d.table not in seen:
            seen.append(d.table)
    return seen


def row_compatible(source: list[tuple[str, str]], target: list[tuple[str, str]]) -> tuple[bool, str]:
    """Can ROW events for a table shaped like `source` apply to `target`? Only when the
    source's columns are a prefix of the target's, with the same names and types."""
    if not target:
        return False, "table missing"
    for i, (col, typ) in enumerate(source):
        if i >= len(target):
            return False, f"column {col} ({typ}) is missing at position {i + 1}"
        tcol, ttyp = target[i]
        if (tcol.lower(), typ) != (col.lower(), ttyp):
            return False, f"position {i + 1} is {tcol} {ttyp} here but {col} {typ} on the source"
    extra = [c for c, _ in target[len(source):]]
    return True, f"same {len(source)} leading column(s)" + (f", extra trailing: {', '.join(extra)}" if extra else "")


def retarget(statement: str, table: str, target: str) -> str:
    """The statement with its first mention of `table` (schema.table, bare or `quoted`)
    replaced by `target` (already quoted): the same change, aimed at a scratch copy."""
    schema, name = table.split(".", 1)

    def either(part: str) -> str:
        quoted = "`" + re.escape(part.replace("`", "``")) + "`"
        return f"(?:{quoted}|(?<![\\w$`]){re.escape(part)}(?![\\w$]))"

    pattern = re.compile(either(schema) + r"\s*\.\s*" + either(name))
    found = pattern.search(statement)
    if found is None:
        raise DdlRefused(f"cannot find {table} in: {_short(statement)}")
    return statement[:found.start()] + target + statement[found.end():]
