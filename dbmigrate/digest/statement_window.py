"""A query window read from performance_schema's statement digests instead of the slow log: it
sees every session, also one that set its own long_query_time (an application's pool may), which
a slow-log window cannot. Nothing on the server changes: the summary's counters are read at the
start and the end of the window, and each digest's difference is a class.

What it gives: per class the count, total and average time, and (when a statement history
consumer is on) a sample statement and the account that sent it; no percentiles (the summary
has none in MariaDB 10.11)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dbmigrate.db.connection import Server
from dbmigrate.db.statement_digest import StatementDigests
from dbmigrate.digest.model import Digest, QueryClass
from dbmigrate.clock import Clock

PICO = 1e-12
PERCENTILES = "none: performance_schema's digest summary has counts and totals only"
_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE)\s+(`(?:[^`]|``)+`|\w+)(?:\s*\.\s*(`(?:[^`]|``)+`|\w+))?",
                    re.IGNORECASE)
# The window's own reads, and anything the tool sends (its statements carry this tag).
_OWN = re.compile(r"performance_schema|/\* dbmigrate", re.IGNORECASE)


@dataclass
class StatementWindow:
    digest_file: Path
    digest: Digest
    source: str = "performance_schema"

    @property
    def unseen_prepared(self) -> int:
        return int((self.digest.source or {}).get("prepared_executions_not_in_digests") or 0)

    def sentence(self) -> str:
        d = self.digest
        return (f"captured {d.query_count} statements in {len(d.classes)} classes over {d.duration_s or 0:.1f}s "
                f"from performance_schema's statement digests (every session, whatever its long_query_time); "
                f"digest in {self.digest_file}" + (f"; {unseen_warning(self.unseen_prepared)}"
                                                   if self.unseen_prepared else ""))


def unseen_warning(executions: int) -> str:
    return (f"NOT SEEN: {executions} execution(s) of server-side prepared statements, which this server's "
            f"performance_schema counts without a digest (MariaDB): their classes are missing from this window; "
            f"a slow-log window sees them (sampled with log_slow_rate_limit on a busy primary)")


def tables_of(digest_text: str, schema: str) -> tuple[str, ...]:
    """`schema`.`table` of each table a digest text reads or writes (pt-query-digest's form)."""
    def quoted(name: str) -> str:
        return name if name.startswith("`") else f"`{name}`"

    out = []
    for first, second in _TABLE.findall(digest_text):
        db, table = (first, second) if second else (schema, first)
        out.append(f"{quoted(db)}.{quoted(table)}" if db else quoted(table))
    return tuple(dict.fromkeys(out))


def digest_between(before: dict[tuple[str, str], dict[str, Any]], after: dict[tuple[str, str], dict[str, Any]],
                   samples: dict[str, tuple[str, str]], duration_s: float, source: dict[str, Any]) -> Digest:
    """The classes of a window: each digest's counters at its end minus at its start."""
    classes = []
    for key, row in after.items():
        was = before.get(key) or {}
        count = int(row["n"] or 0) - int(was.get("n") or 0)
        if count <= 0:
            continue
        text = str(row["digest_text"] or "")
        user, sample = samples.get(str(row["digest"]), ("", ""))
        if _OWN.search(text) or _OWN.search(sample):
            continue
        total = (int(row["sum_ps"] or 0) - int(was.get("sum_ps") or 0)) * PICO
        examined = int(row["rows_examined"] or 0) - int(was.get("rows_examined") or 0)
        classes.append(QueryClass(
            checksum=str(row["digest"]).upper(), fingerprint=text, distillate="", count=count, total_time=total,
            avg=total / count, p95=total / count, p99=None, max=int(row["max_ps"] or 0) * PICO,
            rows_examined_avg=examined / count, example=sample or text, tables=tables_of(text, key[0]),
            user=user))
    classes.sort(key=lambda c: c.total_time, reverse=True)
    count = sum(c.count for c in classes)
    total = sum(c.total_time for c in classes)
    return Digest(classes=classes, query_count=count, total_time=total, avg=total / count if count else 0.0,
                  p95=None, p99=None, duration_s=duration_s, percentiles=PERCENTILES, source=source)


def capture_statement_window(server: Server, seconds: float, out: Path, *, clock: Clock | None = None,
                             progress: Callable[[str], None] | None = None) -> StatementWindow:
    clock, say = clock or Clock(), progress or (lambda m: None)
    reader = StatementDigests(server)
    executes_before = reader.undigested_executions()
    before = reader.snapshot()
    t0 = clock.monotonic()
    say(f"window open on {server.name}: performance_schema's statement digests read now and in {seconds:g}s "
        f"(no setting changed; sessions with their own long_query_time are seen)")
    clock.sleep(seconds)
    after = reader.snapshot()
    unseen = max(0, reader.undigested_executions() - executes_before)
    duration = clock.monotonic() - t0
    samples = reader.samples()
    say(f"window closed after {duration:.1f}s; {len(samples)} sample statement(s) from the statement history")
    digest = digest_between(before, after, samples, duration,
                            {"kind": "performance_schema", "server": server.name, "address": server.address,
                             "seconds": round(duration, 3), "samples": "statement history" if samples else
                             "digest text (no statement history consumer on)",
                             "prepared_executions_not_in_digests": unseen})
    if unseen:
        say(unseen_warning(unseen))
    digest.save(out)
    return StatementWindow(out, digest)
