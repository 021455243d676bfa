"""The copy verified before the fence, so that the fenced window does not grow with the shard.

Before the fence, while the instance replicates, every table of the moved shards is cut into
key ranges of about `check_chunk_mb` and each range compared old vs instance: the old server's
checksum first, then its binlog position, then the instance waits (bounded) until it applied
that position and computes its own. Equal: that range was an exact copy at that moment, and
replication carries every later change. A range written to meanwhile may differ for that
reason alone: it is tried again, and a range that does not settle (a hot tail) is left for
the fence. Inside the fence, after the catch-up, only those ranges are compared again, exactly
(nothing can change them any more), plus the list of tables: a bounded check, refused before
the fence when more than `fenced_check_max_chunks` ranges are left for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from dbmigrate.db.inspector import Inspector
from dbmigrate.db.readers.schema import SchemaReader
from dbmigrate.exceptions import SafetyError

SETTLE_TRIES = 3
ROWS_WITHOUT_STATISTICS = 10_000  # rows per range when the table has no average row length yet


@dataclass(frozen=True)
class Chunk:
    shard: str
    table: str
    columns: tuple[str, ...]
    key: str | None  # None: the table has no single integer key and is one range
    lo: int | None
    hi: int | None  # exclusive; None: open ended (the last range takes rows added later)

    def describe(self) -> str:
        if self.key is None:
            return f"{self.shard}.{self.table} (whole table)"
        return f"{self.shard}.{self.table} {self.key} in [{self.lo if self.lo is not None else '-inf'}, " \
               f"{self.hi if self.hi is not None else '+inf'})"


@dataclass
class CopyCheck:
    """What the check before the fence found: ranges equal, and ranges left for the fence."""

    chunks: int = 0
    rows: int = 0
    equal: dict[str, dict[str, int]] = field(default_factory=dict)  # shard -> table -> ranges equal
    unsettled: list[Chunk] = field(default_factory=list)
    tables: dict[str, list[str]] = field(default_factory=dict)  # shard -> its base tables


def plan_chunks(old: SchemaReader, shard: str, chunk_bytes: int) -> tuple[list[str], list[Chunk]]:
    tables = old.base_tables(shard)
    chunks: list[Chunk] = []
    for table in tables:
        cols, key, avg = old.checksum_layout(shard, table)
        if key is None:
            chunks.append(Chunk(shard, table, tuple(cols), None, None, None))
            continue
        per_chunk = max(1, chunk_bytes // avg) if avg else ROWS_WITHOUT_STATISTICS
        start = old.next_chunk_start(shard, table, key, None, per_chunk)
        if start is None:  # empty table: one open range catches rows added later
            chunks.append(Chunk(shard, table, tuple(cols), key, None, None))
            continue
        lo: int | None = None
        while True:
            nxt = old.next_chunk_start(shard, table, key, start, per_chunk)
            chunks.append(Chunk(shard, table, tuple(cols), key, lo, nxt))
            if nxt is None:
                break
            lo, start = nxt, nxt
    return tables, chunks


def checksum(insp: SchemaReader, c: Chunk) -> str:
    return insp.chunk_checksum(c.shard, c.table, list(c.columns), c.key, c.lo, c.hi)


def check_before_fence(old: Inspector, new: Inspector, conn: str, shards: list[str], *, chunk_bytes: int,
                       wait_s: float, between: Callable[[], object] = lambda: None) -> CopyCheck:
    """Compare every range of `shards` while `new` replicates them from `old` on connection `conn`;
    `between()` runs before each range (a fleet holds its checks while another server is fenced)."""
    result = CopyCheck()
    for shard in shards:
        tables, chunks = plan_chunks(old, shard, chunk_bytes)
        result.tables[shard] = tables
        missing = sorted(set(tables) - set(new.base_tables(shard)))
        if missing:
            raise SafetyError(f"{new.server.name} lacks {', '.join(f'{shard}.{t}' for t in missing)}",
                              hint="nothing was fenced; re-seed the instance")
        for c in chunks:
            between()
            result.chunks += 1
            for _ in range(SETTLE_TRIES):
                a = checksum(old, c)
                log_file, log_pos = old.binlog_coordinates()
                if not new.wait_for_position(conn, log_file, log_pos, wait_s):
                    continue
                if checksum(new, c) == a:
                    result.rows += int(a.split(":", 1)[0])
                    result.equal.setdefault(shard, {}).setdefault(c.table, 0)
                    result.equal[shard][c.table] += 1
                    break
            else:
                result.unsettled.append(c)
    return result


def check_in_fence(old: SchemaReader, new: SchemaReader, source: str, instance: str, found: CopyCheck,
                   shards: list[str]) -> tuple[int, dict[str, dict[str, str]]]:
    """Inside the fence, the instance caught up: the ranges that did not settle are compared
    exactly, and each shard's tables must be the same list. Returns (ranges, differences)."""
    diffs: dict[str, dict[str, str]] = {}
    for shard in shards:
        here = old.base_tables(shard)
        if here != found.tables.get(shard) or new.base_tables(shard) != here:
            raise SafetyError(f"the tables of {shard} changed or differ between {source} and {instance} "
                              f"since the check before the fence", hint=f"{source} was unfenced; compare by hand")
    n = 0
    for c in found.unsettled:
        if c.shard not in shards:
            continue
        n += 1
        a, b = checksum(old, c), checksum(new, c)
        if a != b:
            diffs.setdefault(c.shard, {})[c.describe()] = f"{a} vs {b}"
    return n, diffs
