"""GTID arithmetic for both flavors. Pure functions, unit-tested.

MariaDB positions are per replication domain: "D-S-N" (domain, server_id,
sequence), comma separated. A binlog *state* keeps one entry per
(domain, server_id); a *position* keeps the last GTID per domain.
MySQL uses GTID sets "uuid:1-5:7,uuid2:1-3".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


@dataclass(frozen=True, order=True)
class MariaGtid:
    domain: int
    server_id: int
    seq: int

    def __str__(self) -> str:
        return f"{self.domain}-{self.server_id}-{self.seq}"


def parse_mariadb(text: str | None) -> list[MariaGtid]:
    out = []
    for part in (text or "").replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        m = _MARIADB_GTID.match(part)
        if not m:
            raise ValueError(f"not a MariaDB GTID: {part!r}")
        out.append(MariaGtid(*(int(g) for g in m.groups())))
    return out


def mariadb_position(text: str | None) -> dict[int, MariaGtid]:
    """Last GTID per domain (of a position or of a state: highest seq wins)."""
    pos: dict[int, MariaGtid] = {}
    for g in parse_mariadb(text):
        if g.domain not in pos or g.seq > pos[g.domain].seq:
            pos[g.domain] = g
    return pos


def mariadb_behind(source_pos: str | None, replica_pos: str | None) -> dict[int, int]:
    """Transactions the replica still has to apply, per domain (never negative)."""
    src, rep = mariadb_position(source_pos), mariadb_position(replica_pos)
    return {d: max(0, g.seq - (rep[d].seq if d in rep else 0)) for d, g in src.items()}


def mariadb_errant(candidate_state: str | None, source_state: str | None) -> list[MariaGtid]:
    """GTIDs the candidate wrote that its source never had.

    Compares binlog *states* (one entry per domain and server_id): an entry of the
    candidate is errant when the source has no entry for that (domain, server_id)
    or a lower sequence in it.
    """
    src = {(g.domain, g.server_id): g.seq for g in parse_mariadb(source_state)}
    errant = []
    for g in parse_mariadb(candidate_state):
        have = src.get((g.domain, g.server_id))
        if have is None or g.seq > have:
            errant.append(g)
    return sorted(errant)


def mariadb_includes(pos: str | None, target: str | None) -> bool:
    """True when `pos` has reached every domain's sequence of `target`."""
    return not any(mariadb_behind(target, pos).values())


# ---- MySQL GTID sets -------------------------------------------------------

GtidSet = dict[str, list[tuple[int, int]]]  # uuid -> sorted, merged closed intervals


def parse_mysql_set(text: str | None) -> GtidSet:
    """Parse "uuid:1-5:7,uuid2:1-3", including MySQL 8.3+ tagged GTIDs "uuid:1-5:tag:1-3"
    (a tag's intervals are kept under "uuid:tag")."""
    out: GtidSet = {}
    for part in (text or "").replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        uuid, *segments = part.split(":")
        key = uuid.lower()
        for seg in segments:
            a, _, b = seg.partition("-")
            if not a.isdigit():
                key = f"{uuid.lower()}:{seg.lower()}"  # a tag: the intervals after it are its own
                continue
            out.setdefault(key, []).append((int(a), int(b or a)))
    return {u: _merge(iv) for u, iv in out.items()}


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def mysql_subtract(a: GtidSet, b: GtidSet) -> GtidSet:
    """a - b."""
    out: GtidSet = {}
    for uuid, ivs in a.items():
        rest = []
        for lo, hi in ivs:
            pieces = [(lo, hi)]
            for blo, bhi in b.get(uuid, []):
                nxt = []
                for plo, phi in pieces:
                    if bhi < plo or blo > phi:
                        nxt.append((plo, phi))
                        continue
                    if plo < blo:
                        nxt.append((plo, blo - 1))
                    if phi > bhi:
                        nxt.append((bhi + 1, phi))
                pieces = nxt
            rest.extend(pieces)
        if rest:
            out[uuid] = rest
    return out


def mysql_count(s: GtidSet) -> int:
    return sum(hi - lo + 1 for ivs in s.values() for lo, hi in ivs)


def mysql_format(s: GtidSet) -> str:
    return ",".join(
        uuid + "".join(f":{lo}" if lo == hi else f":{lo}-{hi}" for lo, hi in ivs) for uuid, ivs in sorted(s.items())
    )
