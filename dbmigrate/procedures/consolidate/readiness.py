"""The consolidation's gates: old servers ready before anything changes, every connection
caught up before the cutover."""

from __future__ import annotations

from typing import Any

from dbmigrate.db.inspector import Inspector
from dbmigrate.db.readers.replication import ReplicationReader

from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate.fleet import failed_at
from dbmigrate.procedures.consolidate.plan import connection_name
from dbmigrate.procedures.consolidate.context import ConsolidateContext, ConsolidateParams, address_of, is_cut, plan_of, route_of, server_of


def evaluate_preflight(ctx: ConsolidateContext, params: ConsolidateParams) -> tuple[bool, str, dict[str, Any]]:
    plan = plan_of(ctx)
    problems: list[str] = []
    details: dict[str, Any] = {"strategy": plan.strategy, "domains": {}}
    if plan.strategy != params.strategy:
        problems.append(f"the plan was made for strategy {plan.strategy}, the playbook asks for {params.strategy}")
    for src in sorted({s.source for s in plan.shards}):
        try:
            insp = Inspector(server_of(ctx, src))
            v = insp.variables("log_bin", "binlog_format", "gtid_domain_id", "event_scheduler")
            if str(v["log_bin"]) not in ("1", "ON"):
                problems.append(f"{src}: log_bin is off (a source needs its binary log)")
            if params.fence_expiry == "require" and str(v["event_scheduler"]).upper() not in ("1", "ON"):
                # Checked now, not at its cutover after hours of seeding.
                problems.append(f"{src}: event_scheduler is OFF, so its fence could not expire by itself (turn it on, "
                                f"or set fence_expiry: if_available)")
            if str(v["binlog_format"]).upper() != "ROW":
                problems.append(f"{src}: binlog_format={v['binlog_format']} (ROW is needed: filters act on row events)")
            details["domains"][src] = sorted({int(g.split("-")[0]) for g in insp.gtid_binlog_pos().split(",") if g}
                                             | {int(v["gtid_domain_id"] or 0)})
            mine = [s.name for s in plan.shards if s.source == src]
            missing = [s for s in mine if s not in insp.schemas()]
            if missing:
                problems.append(f"{src}: shard(s) {', '.join(missing)} do not exist")
            for shard in mine:
                writer = route_of(ctx, shard).current().writer
                if writer not in (None, address_of(ctx, src)) and not is_cut(ctx, src):
                    problems.append(f"route of {shard} names {writer}, not its old server {src} ({address_of(ctx, src)})")
        except DbmigrateError as e:
            problems.append(f"{src}: {e.message}")
    seen: dict[int, list[str]] = {}
    for src, domains in details["domains"].items():
        for d in domains:
            seen.setdefault(d, []).append(src)
    shared = {d: s for d, s in seen.items() if len(s) > 1}
    details["shared_domains"] = {str(d): s for d, s in shared.items()}
    if problems:
        return False, "; ".join(problems), details
    note = (f"; GTID domain(s) {', '.join(map(str, sorted(shared)))} shared by several old servers: "
            "replication by file/position, merged instances run gtid_strict_mode=0") if shared else ""
    return True, f"{len(details['domains'])} old server(s) ready, {len(plan.shards)} shard(s) present{note}", details


def evaluate_caught_up(ctx: ConsolidateContext, params: ConsolidateParams) -> tuple[bool, str, dict[str, Any]]:
    """Every seeded connection runs and is within max_lag_s of its old server, waiting
    up to gate_timeout_s (a connection just started is still 'Connecting' for a moment)."""
    deadline = ctx.clock.monotonic() + params.gate_timeout_s
    while True:
        ok, reason, details = caught_up_once(ctx, params)
        if ok or ctx.clock.monotonic() >= deadline:
            return ok, reason if ok else f"{reason} (after {params.gate_timeout_s:g}s)", details
        ctx.clock.sleep(0.2)


def source_caught_up(ctx: ConsolidateContext, params: ConsolidateParams, source: str) -> tuple[bool, str, dict[str, Any]]:
    """The catch-up gate for one old server, right before its own cutover in a fleet."""
    deadline = ctx.clock.monotonic() + params.gate_timeout_s
    while True:
        ok, reason, details = caught_up_once(ctx, params, only={source})
        if ok or ctx.clock.monotonic() >= deadline:
            return ok, reason if ok else f"{reason} (after {params.gate_timeout_s:g}s)", details
        ctx.clock.sleep(0.2)


def caught_up_once(ctx: ConsolidateContext, params: ConsolidateParams,
                   only: set[str] | None = None) -> tuple[bool, str, dict[str, Any]]:
    plan = plan_of(ctx)
    details: dict[str, Any] = {}
    problems = []
    if ctx.dry_run:
        return True, "dry-run: not evaluated (the instances are not seeded)", details
    for inst in plan.instances:
        for src in inst.sources:
            if only is not None and src not in only:
                continue
            if is_cut(ctx, src):
                continue  # already cut over: the forward connection is gone on purpose
            if only is None and failed_at(ctx, src, "seed"):
                continue  # its seed failed: the fleet leaves it out (and reports it)
            conn = connection_name(src)
            try:
                st = ReplicationReader(server_of(ctx, inst.name)).named_replica_status(conn)
            except DbmigrateError as e:
                problems.append(f"{inst.name}: {e.message}")
                continue
            if st is None:
                problems.append(f"{inst.name} has no connection '{conn}' from {src}")
                continue
            io, sql, lag = st.io_running, st.sql_running, st.seconds_behind
            details[f"{inst.name}<-{src}"] = {"io": io, "sql": sql, "seconds_behind": lag, "error": st.last_error}
            if io != "Yes" or sql != "Yes":
                problems.append(f"{inst.name} <- {src} is not running (io {io}, sql {sql}) {st.last_error}".strip())
            elif lag is None or float(lag) > params.max_lag_s:
                problems.append(f"{inst.name} <- {src} is {lag}s behind (limit {params.max_lag_s:g}s)")
    if problems:
        return False, "; ".join(problems), details
    return True, f"{len(details)} connection(s) running, each within {params.max_lag_s:g}s", details
