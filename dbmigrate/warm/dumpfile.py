"""The ib_buffer_pool file and the tablespace ids it names.

Each line is `space_id,page_no`. InnoDB on the target loads those pages from
whatever tablespace has that id there, so an id is only worth loading when it
names the same table on both servers. A physical clone keeps the ids; a logical
copy (dump/restore, a replica that was built by replaying DDL in another order)
usually does not, and a matching id may even be another table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_ENCODED = re.compile(r"@([0-9a-fA-F]{4})")
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


def decode_innodb_name(name: str) -> str:
    """'app/order@002dlines#P#p0' -> 'app.order-lines' (InnoDB filename encoding; partitions fold into the table)."""
    schema, _, table = name.partition("/")
    table = re.split(r"#[pP]#", table, maxsplit=1)[0]
    return f"{_decode_name_part(schema)}.{_decode_name_part(table)}"


def _decode_name_part(s: str) -> str:
    return _ENCODED.sub(lambda m: chr(int(m.group(1), 16)), s)


def parse_dump(text: str) -> list[tuple[int, int]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        space, _, page = line.partition(",")
        try:
            out.append((int(space), int(page)))
        except ValueError:
            continue  # not a page entry; InnoDB skips such lines as well
    return out


def render_dump(entries: list[tuple[int, int]]) -> str:
    return "".join(f"{s},{p}\n" for s, p in entries)


@dataclass
class SpaceComparison:
    """How the tables named by a dump map onto the target."""

    matched: dict[str, int] = field(default_factory=dict)        # table -> same space id on both
    differing: dict[str, tuple[int, int]] = field(default_factory=dict)  # table -> (source id, target id)
    missing_on_target: list[str] = field(default_factory=list)
    unknown_spaces: list[int] = field(default_factory=list)       # ids in the dump that name no table on the source

    @property
    def user_matched(self) -> list[str]:
        return sorted(t for t in self.matched if t.split(".", 1)[0] not in SYSTEM_SCHEMAS)

    @property
    def user_differing(self) -> list[str]:
        return sorted(t for t in self.differing if t.split(".", 1)[0] not in SYSTEM_SCHEMAS)

    def to_dict(self) -> dict[str, Any]:
        return {"matched": sorted(self.matched), "differing": {t: list(v) for t, v in sorted(self.differing.items())},
                "missing_on_target": sorted(self.missing_on_target), "unknown_spaces": sorted(self.unknown_spaces)}


def compare_spaces(dump: list[tuple[int, int]], source_spaces: dict[str, int],
                   target_spaces: dict[str, int]) -> SpaceComparison:
    """Compare, for each table that has pages in the dump, its space id on source and target.

    `*_spaces` map InnoDB table names ('schema/table', encoded) to space ids."""
    # Names without a schema ('SYS_FOREIGN') are InnoDB's own dictionary, in the system tablespace.
    by_space: dict[int, str] = {}
    for name, space in source_spaces.items():
        if "/" in name:
            by_space.setdefault(space, decode_innodb_name(name))
    target: dict[str, int] = {}
    for name, space in target_spaces.items():
        if "/" in name:
            target.setdefault(decode_innodb_name(name), space)
    cmp = SpaceComparison()
    unknown: set[int] = set()
    for space in sorted({s for s, _ in dump}):
        table = by_space.get(space)
        if table is None:
            unknown.add(space)
        elif table not in target:
            cmp.missing_on_target.append(table)
        elif target[table] == space:
            cmp.matched[table] = space
        else:
            cmp.differing[table] = (space, target[table])
    cmp.unknown_spaces = sorted(unknown)
    return cmp


def keep_matched(dump: list[tuple[int, int]], cmp: SpaceComparison) -> list[tuple[int, int]]:
    """Only the entries whose space is the same table on both servers (order kept: InnoDB's LRU order)."""
    ok = set(cmp.matched.values())
    return [(s, p) for s, p in dump if s in ok]
