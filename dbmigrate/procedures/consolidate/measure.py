"""Measuring shards on the old servers: size, working set and query rate per schema.

Servers are measured in parallel by a bounded pool (each spends most of its time in
the query-rate window), with a progress line per server, so a fleet of a hundred
servers takes a few sampling windows, not a hundred. Each figure says how it was
obtained (`estimates`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Callable

from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock as EngineClock
from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.procedures.consolidate.demand import GB, ShardDemand

if TYPE_CHECKING:
    from dbmigrate.config import Inventory

DEFAULT_PARALLEL = 8


def measure_shards(inventory: Inventory, *, sample_s: float = 5.0, max_scan_pool_gb: float = 8.0,
                   working_set_fraction: float | None = None, sleep: Callable[[float], None] = EngineClock().sleep,
                   log: Callable[[str], None] = lambda m: None, parallel: int = DEFAULT_PARALLEL) -> list[ShardDemand]:
    """Measure every shard listed under `shards:` of the inventory's servers, `parallel` servers at a time."""
    fraction = working_set_fraction if working_set_fraction is not None else inventory.planning.working_set_fraction
    listed = [(n, list(s.shards)) for c in inventory.clusters.values() for n, s in c.servers.items() if s.shards]
    if not listed:
        raise UsageError(f"no server in {inventory.path} lists `shards:`",
                         hint="add `shards: [schema, ...]` to each old server that holds logical shards")
    if parallel < 1:
        raise UsageError(f"--parallel {parallel}: give at least 1")

    def one(name: str, shards: list[str]) -> list[ShardDemand]:
        with inventory.open(name) as srv:
            return measure_server(Inspector(srv), name, shards, sample_s=sample_s, max_scan_pool_gb=max_scan_pool_gb,
                                  fraction=fraction, sleep=sleep, log=lambda m: None)

    results: dict[str, list[ShardDemand]] = {}
    failed: dict[str, DbmigrateError] = {}
    t0 = time.monotonic()
    log(f"measuring {sum(len(s) for _, s in listed)} shards on {len(listed)} server(s), "
        f"{min(parallel, len(listed))} at a time, {sample_s:g}s query-rate window each")
    with ThreadPoolExecutor(max_workers=min(parallel, len(listed)), thread_name_prefix="measure") as pool:
        futures = {pool.submit(one, name, shards): name for name, shards in listed}
        for fut in as_completed(futures):
            name = futures[fut]
            try:
                results[name] = fut.result()
            except DbmigrateError as e:
                failed[name] = e
                log(f"[{len(results) + len(failed)}/{len(listed)}] {name}: failed: {e.message}")
                continue
            how = results[name][0].estimates.get("qps", "") if results[name] else ""
            log(f"[{len(results) + len(failed)}/{len(listed)}] {name}: {len(results[name])} shard(s), "
                f"{sum(s.size_bytes for s in results[name]) / GB:.2f} GB, {how} "
                f"({time.monotonic() - t0:.1f}s)")
    if failed:
        first = sorted(failed)[0]
        raise type(failed[first])(f"{len(failed)} of {len(listed)} server(s) could not be measured, "
                                  f"first {first}: {failed[first].message}", hint=failed[first].hint)
    return [s for name, _ in listed for s in results[name]]  # inventory order, whatever finished first


def measure_server(insp: Inspector, source: str, shards: list[str], *, sample_s: float, max_scan_pool_gb: float,
                   fraction: float, sleep: Callable[[float], None], log: Callable[[str], None]) -> list[ShardDemand]:
    sizes = insp.schema_sizes(shards)
    missing = [s for s in shards if s not in sizes]
    if missing:
        raise UsageError(f"{source}: shard schema(s) {', '.join(missing)} do not exist there",
                         hint="fix the server's `shards:` list in the inventory")
    # Working set: resident buffer pool pages per schema, when scanning the pool is cheap.
    pool_gb = int(insp.variable("innodb_buffer_pool_size")) / GB
    pages: dict[str, int] | None = None
    if pool_gb <= max_scan_pool_gb:
        page = int(insp.variable("innodb_page_size"))
        pages = {s: 0 for s in shards}
        for table, n in insp.buffer_pool_pages_by_table(shards).items():
            pages[table.split(".", 1)[0]] += n * page
    # Query rate: one window of global counters, split by rows touched per schema if userstat is on.
    rates, how = split_query_rate(insp, shards, sizes, sample_s, sleep)
    log(f"{source}: {len(shards)} shards measured ({how})")
    out = []
    for s in shards:
        est = {"size": "information_schema.TABLES data+index", "qps": how}
        if pages is not None and pages[s] > 0:
            ws, est["working_set"] = pages[s], "buffer pool pages (INNODB_BUFFER_PAGE)"
        else:
            ws = int(sizes[s] * fraction)
            why = "pool not scanned (too big)" if pages is None else "no resident pages"
            est["working_set"] = f"{fraction:g} of size ({why})"
        out.append(ShardDemand(s, source, sizes[s], ws, round(rates[s], 3), est))
    return out


QUERY_COUNTERS = ("Com_select", "Com_insert", "Com_update", "Com_delete", "Com_replace")


def split_query_rate(insp: Inspector, shards: list[str], sizes: dict[str, int], sample_s: float,
                     sleep: Callable[[float], None]) -> tuple[dict[str, float], str]:
    """(queries per second per shard, how it was split) from one sampling window."""
    userstat = insp.userstat_enabled()
    before = insp.status(*QUERY_COUNTERS)
    rows_before = insp.rows_touched_by_schema(shards) if userstat else {}
    sleep(sample_s)
    after = insp.status(*QUERY_COUNTERS)
    rows_after = insp.rows_touched_by_schema(shards) if userstat else {}
    qps = sum(int(after[c.lower()]) - int(before[c.lower()]) for c in QUERY_COUNTERS) / max(sample_s, 1e-6)
    if userstat:
        delta = {s: rows_after.get(s, 0) - rows_before.get(s, 0) for s in shards}
        if sum(delta.values()) > 0:
            return ({s: qps * delta[s] / sum(delta.values()) for s in shards},
                    f"Com_* over {sample_s:g}s split by TABLE_STATISTICS rows per schema")
    return split_by_size(qps, sizes, shards), f"Com_* over {sample_s:g}s split in proportion to size" + \
        ("" if userstat else " (userstat is off)")


def split_by_size(total: float, sizes: dict[str, int], shards: list[str]) -> dict[str, float]:
    weight = sum(sizes[s] for s in shards)
    return {s: (total * sizes[s] / weight if weight else total / len(shards)) for s in shards}
