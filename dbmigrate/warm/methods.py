"""Warm a server's InnoDB buffer pool before it takes traffic, and measure it.

Three methods, each a plain function that returns a WarmResult (before/after
resident pages and hit ratio, what was done, what was skipped and why):

- dump_load: the serving server dumps its page list, we keep the pages of the
  tables whose tablespace ids are the same on the target, the target loads
  them; tables whose ids differ are warmed by replay instead, and the result
  says so. For physical copies and replicas of the same data.
- replay: the top SELECT classes of a digest (pt-query-digest) are run once each
  against the target, and the tables they read are scanned index by index. For
  logical copies, where page ids differ.
- scan: every B-tree of the named tables is read once.

warm_gate() answers "is it warm enough to take traffic?" with (ok, reason,
details), from the hit ratio of a window of sampled reads, or from a completed
buffer pool load.

Progress goes to on_progress(fraction, message); nothing here prints.
"""

from __future__ import annotations

import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock, wait_until
from dbmigrate.exceptions import DbmigrateError, UsageError, WaitTimeout
from dbmigrate.warm import dumpfile
from dbmigrate.warm.copier import Copier, LocalCopier
from dbmigrate.warm.digest import DigestClass, ReplayPlan, load_digest, plan_replay
from dbmigrate.warm.measure import HitRatio, PoolSnapshot, fmt_ratio, snapshot
from dbmigrate.warm.reads import (ReadStats, ReadTask, ReadWorkers, SampledReads, run_probe, sampled_reads,
                                  scan_tasks, split_table, strip_leading_comments)

Progress = Callable[[float, str], None]
METHODS = ("dump-load", "replay", "scan")
# A hit ratio this much lower after a warm-up than before it is a warm-up that made things worse.
LOWERED_BY = 0.01

_LOADED = re.compile(r"Loaded (\d+)/(\d+) pages")


def _quiet(fraction: float, message: str) -> None:
    pass


@dataclass
class WarmResult:
    method: str
    target: str
    source: str | None
    seconds: float
    tables: list[str]
    before: PoolSnapshot
    after: PoolSnapshot
    hit_ratio_before: HitRatio | None
    hit_ratio_after: HitRatio | None
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def pages_gained(self) -> int:
        return self.after.pages_data - self.before.pages_data

    @property
    def lowered(self) -> bool:
        """Did the warm-up leave the target colder than it found it (a page list that displaced
        pages its own reads needed)? Compared on the same sampled reads before and after."""
        hb = self.hit_ratio_before.ratio if self.hit_ratio_before else None
        ha = self.hit_ratio_after.ratio if self.hit_ratio_after else None
        return hb is not None and ha is not None and ha < hb - LOWERED_BY

    def sentence(self) -> str:
        hb = self.hit_ratio_before.ratio if self.hit_ratio_before else None
        ha = self.hit_ratio_after.ratio if self.hit_ratio_after else None
        said = (f"{self.method} warmed {self.target} in {self.seconds:.1f}s: resident pages "
                f"{self.before.pages_data} -> {self.after.pages_data} of {self.after.pages_total}, "
                f"hit ratio {fmt_ratio(hb)} -> {fmt_ratio(ha)}")
        if self.lowered:
            said += (f" - LOWER than before: {self.target} was warmer before this {self.method} (its own pages "
                     f"were displaced); warm it by replay or scan instead")
        return said

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "target": self.target, "source": self.source, "seconds": self.seconds,
                "summary": self.sentence(), "tables": self.tables, "pages_gained": self.pages_gained,
                "before": self.before.to_dict(), "after": self.after.to_dict(),
                "hit_ratio_before": self.hit_ratio_before.to_dict() if self.hit_ratio_before else None,
                "hit_ratio_after": self.hit_ratio_after.to_dict() if self.hit_ratio_after else None,
                "details": self.details, "notes": self.notes}


# -- shared steps --------------------------------------------------------------
def check_tables_on(server: Server, tables: list[str]) -> tuple[list[str], list[str]]:
    """(present InnoDB tables, missing or non-InnoDB ones) on `server`."""
    insp = Inspector(server)
    present, missing = [], []
    for t in tables:
        info = insp.table_info(*split_table(t))
        if info is None or str(info["engine"] or "").lower() != "innodb":
            missing.append(t)
        else:
            present.append(t)
    return present, missing


class _Measure:
    """Before/after snapshots and probes around one warm-up."""

    def __init__(self, target: Server, tables: list[str], per_table: bool, probe_queries: int,
                 rng: random.Random | None = None, clock: Clock | None = None):
        self.target = target
        self.clock = clock
        self.insp = Inspector(target)
        self.per_table = per_table
        self.schemas = sorted({t.split(".", 1)[0] for t in tables}) or None
        self.reads: SampledReads = sampled_reads(self.insp, tables) if tables else SampledReads()
        self.probe_queries = probe_queries
        self.rng = rng or random.Random()

    def probe(self) -> HitRatio | None:
        if not self.reads.ranges or self.probe_queries <= 0:
            return None
        return run_probe(self.target, self.reads, queries=self.probe_queries, rng=self.rng, clock=self.clock)

    def snap(self) -> PoolSnapshot:
        return snapshot(self.insp, self.per_table, self.schemas)


def _page_size(insp: Inspector) -> int:
    return int(insp.variable("innodb_page_size") or 16384)


def warm_tables(target: Server, tables: list[str], examples: list[DigestClass], *, deadline: float,
                threads: int, measure: _Measure | None, target_hit_ratio: float | None,
                progress: Progress, span: tuple[float, float] = (0.0, 1.0),
                clock: Clock | None = None) -> dict[str, Any]:
    """Replay `examples` once and scan every B-tree of `tables`, hottest table first.

    Stops at the deadline, or when the sampled hit ratio reaches the target. A
    table larger than the free part of the pool is not scanned: it would push
    out pages that are already warm."""
    clock = clock or Clock()
    insp = Inspector(target)
    page = _page_size(insp)
    lo, hi = span
    by_table: dict[str, list[ReadTask]] = {t: [] for t in tables}
    unplaced = 0
    for c in examples:
        home = next((t for t in c.user_tables if t in by_table), None)
        if home is None:
            unplaced += 1
            continue
        by_table[home].append(ReadTask(strip_leading_comments(c.example), f"replay {c.fingerprint[:60]}", c.db))
    plan: list[tuple[str, list[ReadTask], int]] = []
    for t in tables:
        schema, name = split_table(t)
        info = insp.table_info(schema, name) or {}
        plan.append((t, by_table[t], int(info.get("bytes") or 0)))
    total = sum(len(r) + 1 for _, r, _ in plan) or 1
    done = 0
    stats = ReadStats()
    replayed = ReadStats()
    scanned: list[str] = []
    skipped: dict[str, str] = {}
    stop_reason = ""
    hit_checks: list[dict[str, Any]] = []

    def tick(task: ReadTask) -> None:
        nonlocal done
        done += 1
        progress(lo + (hi - lo) * min(1.0, done / total), task.label)

    with ReadWorkers(target, threads, clock=clock) as workers:
        for i, (table, replays, size) in enumerate(plan):
            if clock.monotonic() >= deadline:
                stop_reason = f"time limit reached after {i} of {len(plan)} tables"
                skipped.update({t: "time limit" for t, _, _ in plan[i:]})
                break
            if replays:
                replayed.add(workers.run(replays, deadline, tick))
            free = insp.buffer_pool_counters()["pages_free"] * page
            if size > free:
                skipped[table] = f"{size >> 20} MiB does not fit in the {free >> 20} MiB of free pool"
                progress(lo + (hi - lo) * min(1.0, done / total), f"not scanning {table}: {skipped[table]}")
                done += 1
                continue
            s = workers.run(scan_tasks(table, insp.table_indexes(*split_table(table))), deadline)
            stats.add(s)
            done += 1
            if s.timed_out or s.skipped:
                skipped[table] = "time limit (partly scanned)"
            else:
                scanned.append(table)
            progress(lo + (hi - lo) * min(1.0, done / total), f"scanned {table}")
            if target_hit_ratio is not None and measure is not None and measure.reads.ranges:
                hr = measure.probe()
                if hr is not None and hr.ratio is not None:
                    hit_checks.append({"after": table, "ratio": round(hr.ratio, 5)})
                    if hr.ratio >= target_hit_ratio:
                        stop_reason = f"hit ratio {fmt_ratio(hr.ratio)} reached the target {fmt_ratio(target_hit_ratio)}"
                        skipped.update({t: "target hit ratio reached" for t, _, _ in plan[i + 1:]})
                        break
    return {"scanned": scanned, "skipped": skipped, "scan": stats.to_dict(), "replay": replayed.to_dict(),
            "examples_without_table_on_target": unplaced, "hit_ratio_checks": hit_checks,
            "stopped": stop_reason or "done"}


# -- digest ---------------------------------------------------------------------
def replay_plan_from_file(path: str | Path) -> ReplayPlan:
    return plan_replay(load_digest(Path(path)), str(path))


def replay_plan_from_server(source: Server, copier: Copier | None = None, workdir: Path | None = None) -> ReplayPlan:
    """Digest the serving server's slow log (fetched through the copier)."""
    insp = Inspector(source)
    v = insp.variables("slow_query_log", "slow_query_log_file", "long_query_time", "datadir")
    path = str(v["slow_query_log_file"] or "")
    if path and not path.startswith("/"):
        path = str(v["datadir"]).rstrip("/") + "/" + path
    hint = (f"on {source.name}: SET GLOBAL long_query_time=0; SET GLOBAL slow_query_log=ON; let it serve reads for a "
            f"few minutes, then SET GLOBAL slow_query_log=OFF; or give --slow-log FILE. The global setting reaches "
            f"only sessions opened after it that do not set their own long_query_time: an application's pool "
            f"that does (or connected before) is not logged until it reconnects")
    if not path:
        raise UsageError(f"{source.name} has no slow_query_log_file", hint=hint)
    with tempfile.TemporaryDirectory(prefix="dbmigrate-warm-") as tmp:
        try:
            local = (copier or LocalCopier()).fetch(source, path, Path(workdir or tmp))
        except DbmigrateError as e:
            raise UsageError(f"cannot read the slow log of {source.name}: {e.message}", hint=hint) from None
        if local.stat().st_size == 0:
            raise UsageError(f"the slow log of {source.name} ({path}) is empty", hint=hint)
        return plan_replay(load_digest(local), f"slow log of {source.name} ({path})")


# -- method: scan ---------------------------------------------------------------
def scan(target: Server, tables: list[str], *, seconds: float = 600, target_hit_ratio: float | None = None,
         threads: int = 2, per_table: bool = False, probe_queries: int = 300,
         on_progress: Progress | None = None, clock: Clock | None = None) -> WarmResult:
    progress = on_progress or _quiet
    clock = clock or Clock()
    if not tables:
        raise UsageError("scan needs tables", hint="give --tables schema.table,... (or a digest with --slow-log)")
    t0 = clock.monotonic()
    present, missing = check_tables_on(target, tables)
    if missing:
        raise UsageError(f"{target.name} has no InnoDB table {', '.join(missing)}",
                         hint="check the names (schema.table) and that the target holds this schema")
    m = _Measure(target, present, per_table, probe_queries, clock=clock)
    progress(0.0, f"measuring {target.name} before warm-up")
    before, hb = m.snap(), m.probe()
    details = warm_tables(target, present, [], deadline=t0 + seconds, threads=threads, measure=m,
                          target_hit_ratio=target_hit_ratio, progress=progress, span=(0.02, 0.95), clock=clock)
    progress(0.97, "measuring after warm-up")
    after, ha = m.snap(), m.probe()
    progress(1.0, "done")
    return WarmResult("scan", target.name, None, round(clock.monotonic() - t0, 2), present, before, after, hb, ha,
                      details, m.reads.notes)


# -- method: replay -------------------------------------------------------------
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def expand_numbered_tables(target: Server, tables: list[str]) -> tuple[list[str], list[str]]:
    """pt-query-digest folds digits in table names (sbtest3 -> sbtest?), so one class stands
    for all its numbered siblings while its example names only one. Add the siblings
    that exist on the target. Returns (tables, notes)."""
    insp = Inspector(target)
    out: list[str] = list(tables)
    notes = []
    for t in tables:
        schema, name = split_table(t)
        m = _NUMBERED.match(name)
        if not m or not m.group(1):
            continue
        siblings = insp.tables_matching(schema, "^" + re.escape(m.group(1)) + "[0-9]+$")
        added = [s for s in siblings if s not in out]
        if added:
            out.extend(added)
            notes.append(f"the digest folds numbered tables together: {t} also stands for {', '.join(added)}")
    return out, notes


def replay(target: Server, plan: ReplayPlan, *, tables: list[str] | None = None, seconds: float = 600,
           target_hit_ratio: float | None = None, threads: int = 2, per_table: bool = False,
           probe_queries: int = 300, on_progress: Progress | None = None, clock: Clock | None = None) -> WarmResult:
    """Replay the digest's SELECT examples once each and scan the tables they read."""
    progress = on_progress or _quiet
    clock = clock or Clock()
    t0 = clock.monotonic()
    notes: list[str] = []
    wanted = tables
    if not wanted:
        wanted, notes = expand_numbered_tables(target, plan.hot_tables())
    present, missing = check_tables_on(target, wanted)
    if not present:
        raise UsageError(f"{target.name} has none of the tables the digest reads as InnoDB tables: "
                         f"{', '.join(missing)}", hint="is this the right target, and is its schema loaded?")
    notes += [f"not on {target.name}, not warmed: {t}" for t in missing]
    m = _Measure(target, present, per_table, probe_queries, clock=clock)
    notes += m.reads.notes
    progress(0.0, f"measuring {target.name} before warm-up")
    before, hb = m.snap(), m.probe()
    details = warm_tables(target, present, plan.classes, deadline=t0 + seconds, threads=threads, measure=m,
                          target_hit_ratio=target_hit_ratio, progress=progress, span=(0.02, 0.95), clock=clock)
    details.update(digest=plan.origin, classes=len(plan.classes),
                   refused=[{"class": f, "reason": r} for f, r in plan.refused[:50]], refused_count=len(plan.refused))
    progress(0.97, "measuring after warm-up")
    after, ha = m.snap(), m.probe()
    progress(1.0, "done")
    return WarmResult("replay", target.name, None, round(clock.monotonic() - t0, 2), present, before, after, hb, ha,
                      details, notes)


# -- method: dump-load ----------------------------------------------------------
def _await_status(read: Callable[[], str], done: Callable[[str], bool], failed: Callable[[str], bool],
                  timeout: float, what: str, on_status: Callable[[str], None] | None = None,
                  clock: Clock | None = None) -> str:
    last = ""

    def finished() -> bool:
        nonlocal last
        status = read()
        if status != last and on_status:
            on_status(status)
        last = status
        if done(status):
            return True
        if failed(status):
            raise DbmigrateError(f"{what} failed: {status}")
        return False

    try:
        wait_until(finished, timeout=timeout, interval=0.05, clock=clock, what=what)
    except WaitTimeout:
        raise WaitTimeout(f"{what} did not complete within {timeout:g}s (status: {last or 'empty'})",
                          hint="a bigger pool needs more time: raise --seconds") from None
    return last


def _after_a_tick(status: str, clock: Clock | None = None) -> None:
    """InnoDB stamps 'completed at' to the second: make sure the next stamp differs from this one."""
    if "completed at" in status:
        (clock or Clock()).sleep(1.05)


def dump_source_pool(source: Server, timeout: float = 300, clock: Clock | None = None) -> str:
    """Write the source's complete page list to its ib_buffer_pool; returns the file's path."""
    insp = Inspector(source)
    applier = Applier(source)
    before = insp.buffer_pool_dump_status()
    _after_a_tick(before, clock)
    old_pct = insp.variable("innodb_buffer_pool_dump_pct")
    applier.set_global("innodb_buffer_pool_dump_pct", 100)
    try:
        applier.buffer_pool_dump_now()
        _await_status(insp.buffer_pool_dump_status,
                      done=lambda s: "dump completed" in s and s != before,
                      failed=lambda s: s.startswith(("Cannot", "Error")) or "aborted" in s,
                      timeout=timeout, what=f"buffer pool dump on {source.name}", clock=clock)
    finally:
        applier.set_global("innodb_buffer_pool_dump_pct", int(old_pct))
    return insp.datadir_file("innodb_buffer_pool_filename")


def _pool_file(server: Server, datadir: str | None) -> str:
    insp = Inspector(server)
    if not datadir:
        return insp.datadir_file("innodb_buffer_pool_filename")
    name = str(insp.variable("innodb_buffer_pool_filename"))
    return name if name.startswith("/") else datadir.rstrip("/") + "/" + name


def dump_load(source: Server, target: Server, *, plan: ReplayPlan | None = None, copier: Copier | None = None,
              source_datadir: str | None = None, target_datadir: str | None = None, seconds: float = 600,
              threads: int = 2, per_table: bool = False, probe_queries: int = 300,
              on_progress: Progress | None = None, clock: Clock | None = None) -> WarmResult:
    """Load the source's resident pages into the target, for the tables whose space ids match.

    `*_datadir` override @@datadir (the inventory's datadir, for hosts where the
    path seen by this tool differs). Tables whose ids differ are warmed by
    replay (their digest examples, if `plan` is given, and a scan)."""
    progress = on_progress or _quiet
    copier = copier or LocalCopier()
    clock = clock or Clock()
    t0 = clock.monotonic()
    deadline = t0 + seconds
    if source.flavor.name != target.flavor.name:
        raise UsageError(f"{source.name} is {source.flavor.name} and {target.name} is {target.flavor.name}: "
                         f"a page list does not carry across", hint="use --method replay")
    progress(0.01, f"dumping the buffer pool of {source.name}")
    src_path = dump_source_pool(source, timeout=max(5.0, deadline - clock.monotonic()), clock=clock)
    if source_datadir:
        src_path = _pool_file(source, source_datadir)
    dst_path = _pool_file(target, target_datadir)
    with tempfile.TemporaryDirectory(prefix="dbmigrate-warm-") as tmp:
        work = Path(tmp)
        entries = dumpfile.parse_dump(copier.fetch(source, src_path, work).read_text())
        cmp = dumpfile.compare_spaces(entries, Inspector(source).innodb_tablespaces(),
                                      Inspector(target).innodb_tablespaces())
        user_missing = [t for t in cmp.missing_on_target if t.split(".", 1)[0] not in dumpfile.SYSTEM_SCHEMAS]
        if not cmp.user_matched and not cmp.user_differing:
            if user_missing:
                raise UsageError(f"none of the {len(user_missing)} tables resident in {source.name}'s buffer pool "
                                 f"exist on {target.name} ({', '.join(sorted(user_missing)[:5])}"
                                 f"{', ...' if len(user_missing) > 5 else ''})",
                                 hint="is the target a copy of the source? a new, empty server cannot be warmed")
            raise UsageError(f"{source.name}'s buffer pool holds no pages of user tables ({len(entries)} pages dumped)",
                             hint="is the source serving traffic? warm from a server that is, or use --method scan")
        kept = dumpfile.keep_matched(entries, cmp)
        tables = cmp.user_matched + cmp.user_differing
        notes: list[str] = []
        if cmp.user_differing:
            notes.append(f"space ids differ on {target.name} for {', '.join(cmp.user_differing)}: "
                         f"warmed by replay instead of the page list")
        if user_missing:
            notes.append(f"not on {target.name}: {', '.join(sorted(user_missing))}")
        m = _Measure(target, tables, per_table, probe_queries, clock=clock)
        notes += m.reads.notes
        progress(0.05, f"{len(entries)} pages dumped; {len(kept)} in {len(cmp.matched)} tables with the same "
                       f"space id on {target.name}")
        before, hb = m.snap(), m.probe()
        load_status = ""
        if kept:
            local = work / "ib_buffer_pool.filtered"
            local.write_text(dumpfile.render_dump(kept))
            insp = Inspector(target)
            prior = insp.buffer_pool_load_status()
            _after_a_tick(prior, clock)
            copier.push(local, target, dst_path)
            Applier(target).buffer_pool_load_now()
            span_hi = 0.85 if cmp.user_differing else 0.95

            def on_status(s: str) -> None:
                found = _LOADED.search(s)
                frac = int(found.group(1)) / max(1, int(found.group(2))) if found else 0.0
                progress(0.1 + (span_hi - 0.1) * frac, f"{target.name}: {s}")

            try:
                load_status = _await_status(
                    insp.buffer_pool_load_status, done=lambda s: "load completed" in s and s != prior,
                    failed=lambda s: s.startswith(("Cannot", "Error")) or "aborted" in s,
                    timeout=max(5.0, deadline - clock.monotonic()), what=f"buffer pool load on {target.name}",
                    on_status=on_status, clock=clock)
            except WaitTimeout:
                load_status = insp.buffer_pool_load_status()
                notes.append(f"load still running when the time limit was reached ({load_status}); it continues "
                             f"in the background")
        details: dict[str, Any] = {"pages_dumped": len(entries), "pages_loaded": len(kept),
                                   "space_ids": cmp.to_dict(), "space_ids_match": not cmp.user_differing,
                                   "source_file": src_path, "target_file": dst_path, "load_status": load_status}
        if cmp.user_differing:
            progress(0.86, f"space ids differ for {len(cmp.user_differing)} tables: falling back to replay for them")
            details["fallback"] = {
                "method": "replay", "tables": cmp.user_differing, "reason": "space ids differ",
                **warm_tables(target, cmp.user_differing, plan.classes if plan else [], deadline=deadline,
                              threads=threads, measure=None, target_hit_ratio=None, progress=progress,
                              span=(0.86, 0.95), clock=clock)}
        progress(0.97, "measuring after warm-up")
        after, ha = m.snap(), m.probe()
    progress(1.0, "done")
    return WarmResult("dump-load", target.name, source.name, round(clock.monotonic() - t0, 2), tables, before, after,
                      hb, ha, details, notes)


# -- the gate -------------------------------------------------------------------
def warm_gate(target: Server, target_hit_ratio: float = 0.99, *, tables: list[str] | None = None,
              reads: SampledReads | None = None, probe_queries: int | None = None,
              probe_seconds: float | None = None, accept_completed_load: bool = False,
              min_page_requests: int = 100, clock: Clock | None = None) -> tuple[bool, str, dict[str, Any]]:
    """Is `target` warm enough to take traffic?

    Passes when the hit ratio over a window of sampled reads (random primary-key
    lookups on `tables`, `probe_queries` of them or for `probe_seconds`) reaches
    `target_hit_ratio`; with accept_completed_load, also when a buffer pool load
    has completed (after a dump-load that covered every table)."""
    insp = Inspector(target)
    details: dict[str, Any] = {"target": target.name, "target_hit_ratio": target_hit_ratio}
    if accept_completed_load:
        status = insp.buffer_pool_load_status()
        details["load_status"] = status
        if "load completed" in status:
            return True, f"{target.name}: buffer pool load completed ({status})", details
    if reads is None:
        if not tables:
            return False, f"{target.name}: nothing to probe (no tables given, no completed load)", details
        reads = sampled_reads(insp, tables)
    details["probe_tables"] = reads.tables
    if not reads.ranges:
        return False, f"{target.name}: none of the tables can be sampled ({'; '.join(reads.notes)})", details
    if probe_queries is None and probe_seconds is None:
        probe_queries = 500
    hr = run_probe(target, reads, queries=probe_queries, seconds=probe_seconds, clock=clock)
    details["probe"] = hr.to_dict()
    if hr.read_requests < min_page_requests or hr.ratio is None:
        return False, (f"{target.name}: the probe made only {hr.read_requests} page requests, too few to judge "
                       f"(need {min_page_requests}); probe longer"), details
    if hr.ratio >= target_hit_ratio:
        return True, (f"{target.name}: hit ratio {fmt_ratio(hr.ratio)} over {hr.queries} sampled reads "
                      f"reaches {fmt_ratio(target_hit_ratio)}"), details
    return False, (f"{target.name} is still cold: hit ratio {fmt_ratio(hr.ratio)} over {hr.queries} sampled reads, "
                   f"below {fmt_ratio(target_hit_ratio)} ({hr.reads} of {hr.read_requests} page requests went to "
                   f"disk); warm it first (dbmigrate warm)"), details
