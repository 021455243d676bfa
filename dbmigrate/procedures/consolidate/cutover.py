"""The cutover of one old server: fence, catch up, checksum, reverse connection, open, route, and its undo."""

from __future__ import annotations

from typing import Any

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import FunctionStep, RunContext
from dbmigrate.exceptions import RefusedWait, SafetyError
from dbmigrate.procedures.consolidate.plan import connection_name
from dbmigrate.procedures.consolidate.resources import CutRecord
from dbmigrate.procedures.consolidate.run import (
    ConsolidateError,
    ConsolidateRefused,
    address_of,
    applier_of,
    edit_state,
    is_cut,
    params_of,
    plan_of,
    resources_of,
    route_of,
    server_of,
    shards_of,
    state_of,
    targets_of,
    wild_patterns,
)
from dbmigrate.procedures.kit.drain import drain, protected_users
from dbmigrate.procedures.kit.fence_watch import FenceWatch
from dbmigrate.procedures.kit.switchover import QUERY_INTERRUPTED


def end_app_sessions(ctx: RunContext, name: str) -> int:
    """Let in-flight transactions finish (they fail on commit otherwise), then end client sessions."""
    if ctx.dry_run:
        return 0
    insp = Inspector(server_of(ctx, name))
    done = drain(insp, applier_of(ctx, name), protected_users(insp, resources_of(ctx).repl.user),
                 timeout_s=params_of(ctx).drain_timeout_s, until="transactions", clock=ctx.clock)
    return done.ended


def cutover(ctx: RunContext, source: str) -> str:
    """Fence one old server and move all its shards to their instances (see the module doc)."""
    plan, p = plan_of(ctx), params_of(ctx)
    targets = targets_of(plan, source)
    old_addr = address_of(ctx, source)
    if ctx.dry_run:
        return f"would fence {source} and route its shards to {', '.join(t.name for t in targets)}"
    src = Inspector(server_of(ctx, source))
    started = ctx.clock.monotonic()
    with edit_state(ctx) as st:  # before anything changes: a crash from here on is found by rollback and resume
        st.fencing[source] = ctx.clock.now()
    fence(ctx, source)
    try:
        killed = end_app_sessions(ctx, source)
        log_file, log_pos = src.binlog_coordinates()
        checked = 0
        for t in targets:
            t_insp = Inspector(server_of(ctx, t.name))
            if not t_insp.wait_for_position(connection_name(source), log_file, log_pos, p.catchup_timeout_s):
                raise CatchUpTimeout(f"{t.name} did not apply {source}'s final position {log_file}:{log_pos} "
                                       f"within {p.catchup_timeout_s:g}s",
                                       hint=f"check the connection: SHOW SLAVE '{connection_name(source)}' STATUS "
                                            f"on {t.name}; {source} was unfenced")
            if p.checksum:
                checked += compare_checksums(ctx, source, t.name, shards_of(plan, t.name, source))
        caught_ms = (ctx.clock.monotonic() - started) * 1000
        reverse: dict[str, list] = {}
        for t in targets:
            t_file, t_pos = Inspector(server_of(ctx, t.name)).binlog_coordinates()
            host, _, port = address_of(ctx, t.name).rpartition(":")
            a = applier_of(ctx, source)
            a.add_source(connection_name(t.name), host, int(port), resources_of(ctx).repl, t_file, t_pos,
                         wild_patterns(shards_of(plan, t.name, source)))
            a.start_source(connection_name(t.name))
            reverse[t.name] = [t_file, t_pos]
        with edit_state(ctx) as st:
            st.reverse[source] = reverse
        moved = []
        for t in targets:
            applier_of(ctx, t.name).set_read_only(False)
            for shard in shards_of(plan, t.name, source):
                route_of(ctx, shard).switch_writer(address_of(ctx, t.name), old=old_addr)
                moved.append(f"{shard}->{t.name}")
        fenced_ms = (ctx.clock.monotonic() - started) * 1000
        with edit_state(ctx) as st:
            st.cut[source] = CutRecord(targets=[t.name for t in targets], at=ctx.clock.now())
            st.fencing.pop(source, None)
        ctx.metric("fenced_window_ms", fenced_ms, "ms", source=source)
    except BaseException as exc:
        undone = False
        try:
            ctx.log(f"cutover of {source} failed: {undo_cutover(ctx, source)}", "warning")
            undone = True
        except Exception as undo_exc:  # keep the original error; say what is left to do
            ctx.log(f"putting {source} back failed too: {undo_exc}; run: dbmigrate rollback {ctx.run_id}", "error")
        if undone and isinstance(exc, CatchUpTimeout):  # undone in place: the server is as it was
            raise ConsolidateRefused(f"{exc.message}: {source} was unfenced, nothing changed", hint=exc.hint) from None
        raise
    for t in targets:  # not needed to open writes, so after the route switch
        applier_of(ctx, t.name).remove_source(connection_name(source))
    return (f"fenced {source} ({killed} app session(s) ended), caught up in {caught_ms:.0f} ms, "
            f"{checked} table(s) checksummed equal, routes {', '.join(moved)} after {fenced_ms:.0f} ms; "
            f"{source} replicates them back for rollback")


class CatchUpTimeout(ConsolidateError):
    """An instance did not apply the fenced server's final position in time."""


def fence(ctx: RunContext, source: str) -> None:
    """read_only=ON on the old server, bounded: the global read lock waits at most fence_timeout_s,
    and a watchdog acts after fence_block_s when running statements hold the fence (and every
    write queued behind it): it gives up (nothing changed) or ends them, per on_fence_blocked."""
    p, server = params_of(ctx), server_of(ctx, source)
    watcher = server.watcher(int(p.fence_timeout_s) + 5)  # opened before the fence: the watchdog's session
    watch = FenceWatch(Inspector(watcher), Applier(watcher), Inspector(server).connection_id(), p.fence_block_s,
                       p.on_fence_blocked, ctx.log)
    try:
        with server.bounded(p.fence_timeout_s + 1), watch:
            applier_of(ctx, source).set_read_only(True, lock_wait_timeout=p.fence_timeout_s)
    except QueryError as e:
        if not watch.gave_up or e.errno != QUERY_INTERRUPTED or Inspector(server).read_only():
            raise
        raise watch.refusal(source) from None
    if watch.killed:
        ctx.log(f"the fence on {source} ended {len(watch.killed)} blocking statement(s) "
                f"({watch.describe_blockers()})", "warning")


def compare_checksums(ctx: RunContext, source: str, instance: str, shards: list[str]) -> int:
    old, new = Inspector(server_of(ctx, source)), Inspector(server_of(ctx, instance))
    results = dict(state_of(ctx).checksums)
    n = 0
    for shard in shards:
        a, b = old.table_checksums(shard), new.table_checksums(shard)
        results[shard] = {"old": a, "new": b}
        diff = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
        if diff:
            save_checksums(ctx, results)
            raise SafetyError(f"CHECKSUM TABLE differs between {source} and {instance} for "
                              f"{', '.join(f'{shard}.{t}' for t in diff)}",
                              hint=f"{source} was unfenced; compare the tables, then re-seed the instance")
        n += len(a)
    save_checksums(ctx, results)
    return n


def save_checksums(ctx: RunContext, results: dict[str, Any]) -> None:
    with edit_state(ctx) as st:
        st.checksums = results


def undo_cutover(ctx: RunContext, source: str) -> str:
    """Route the source's shards back after it applied every write its instances took.

    Also puts back a cutover that stopped part way (the tool killed in it): fenced only, a
    reverse connection set up but not journaled, an instance opened before any route moved."""
    plan, p = plan_of(ctx), params_of(ctx)
    targets = targets_of(plan, source)
    old_addr = address_of(ctx, source)
    reverse = state_of(ctx).reverse.get(source) or {}
    src = Inspector(server_of(ctx, source))
    back = []
    for t in targets:
        shards = shards_of(plan, t.name, source)
        routed_here = [s for s in shards if route_of(ctx, s).current().writer == address_of(ctx, t.name)]
        conn = connection_name(t.name)
        if t.name in reverse and src.connection_status(conn) is not None:
            if routed_here:
                # Fences every shard on the instance for a moment; rollback undoes newest first,
                # so the others move back right after or are reopened below.
                applier_of(ctx, t.name).set_read_only(True)
                end_app_sessions(ctx, t.name)
            t_file, t_pos = Inspector(server_of(ctx, t.name)).binlog_coordinates()
            if not src.wait_for_position(conn, t_file, t_pos, p.catchup_timeout_s):
                raise ConsolidateError(f"{source} did not apply {t.name}'s writes up to {t_file}:{t_pos} "
                                       f"within {p.catchup_timeout_s:g}s; the routes still point at {t.name}",
                                       hint=f"check SHOW SLAVE '{conn}' STATUS on {source}, then: dbmigrate rollback RUN")
            for s in routed_here:
                route_of(ctx, s).switch_writer(old_addr, old=address_of(ctx, t.name))
                back.append(s)
            applier_of(ctx, source).remove_source(conn)
        elif routed_here:
            raise SafetyError(f"{', '.join(routed_here)} route to {t.name} but {source} has no reverse connection: "
                              "routing back would lose the writes made there", hint="copy them back by hand first")
        elif src.connection_status(conn) is not None:
            # Set up by a cutover that stopped before journaling it: no route had moved, so the
            # instance took no writes and there is nothing to wait for.
            applier_of(ctx, source).remove_source(conn)
        still_here = [s for s in t.shards if route_of(ctx, s).current().writer == address_of(ctx, t.name)]
        # Before the old server takes writes again: an instance no shard routes to is read-only
        # (a cutover may have stopped after opening it, before moving a route).
        applier_of(ctx, t.name).set_read_only(not still_here)
    applier_of(ctx, source).set_read_only(False)
    verify_undone(ctx, source)
    with edit_state(ctx) as st:
        st.reverse.pop(source, None)
        st.cut.pop(source, None)
        st.fencing.pop(source, None)
    routed = f"routes {', '.join(back)} back to {source}" if back else "no route had moved"
    return f"{routed}; {source} is writable again"


def verify_undone(ctx: RunContext, source: str) -> None:
    """Postcondition of an undone cutover, read on the servers and routes (not the journal's
    word): the old server is writable and every one of its shards routes to it."""
    if ctx.dry_run:
        return
    plan = plan_of(ctx)
    wrong = [f"{shard} routes to {writer}" for t in targets_of(plan, source) for shard in shards_of(plan, t.name, source)
             if (writer := route_of(ctx, shard).current().writer) != address_of(ctx, source)]
    if Inspector(server_of(ctx, source)).read_only():
        wrong.append(f"{source} is read-only")
    if wrong:
        raise SafetyError(f"after putting {source} back: " + "; ".join(wrong),
                          hint="fix the routes by hand (the old server holds every write), then: dbmigrate rollback RUN")


def verify_cutover(ctx: RunContext, source: str) -> None:
    """Postcondition of one old server's cutover: its shards route to writable instances; it is fenced."""
    if ctx.dry_run:
        return
    plan = plan_of(ctx)
    wrong = []
    for t in targets_of(plan, source):
        for shard in shards_of(plan, t.name, source):
            writer = route_of(ctx, shard).current().writer
            if writer != address_of(ctx, t.name):
                wrong.append(f"{shard} routes to {writer}")
        if Inspector(server_of(ctx, t.name)).read_only():
            wrong.append(f"{t.name} is read-only")
    if not Inspector(server_of(ctx, source)).read_only():
        wrong.append(f"{source} is writable")
    if wrong:
        raise SafetyError(f"after the cutover of {source}: " + "; ".join(wrong))


def describe_cutover(ctx: RunContext, source: str) -> list[tuple[str, str]]:
    targets = [t.name for t in targets_of(plan_of(ctx), source)]
    return [(source, "SET GLOBAL read_only=ON; KILL CONNECTION <app sessions>; SHOW MASTER STATUS"),
            *[(t, f"SELECT MASTER_POS_WAIT(<final file>, <final pos>, {params_of(ctx).catchup_timeout_s:g}, "
                  f"'{connection_name(source)}'); CHECKSUM TABLE <every table of its shards>") for t in targets],
            *[(source, f"CHANGE MASTER '{connection_name(t)}' TO <{t} binlog position> (reverse, for rollback); "
                       f"START SLAVE '{connection_name(t)}'") for t in targets],
            *[(t, "read_only=OFF: takes the shards' writes") for t in targets],
            ("routes", f"DSN file: each shard of {source} -> its instance"),
            *[(t, f"stop and remove replication connection '{connection_name(source)}'") for t in targets]]


def cutover_step(source: str, targets: list[str]) -> FunctionStep:
    """One old server's cutover as a step of its own (the fleet runs the same parts)."""
    return FunctionStep(f"cut over {source} -> {', '.join(targets)}", lambda c: cutover(c, source),
                        check=lambda c: not c.dry_run and is_cut(c, source),
                        verify=lambda c: verify_cutover(c, source), undo=lambda c: undo_cutover(c, source),
                        describe=lambda c: describe_cutover(c, source))


def rollback_one(ctx: RunContext, source: str) -> str:
    """Put one old server back (its shards' routes, writable) while the others stay moved.
    The run's cutover step then counts it as not done: `dbmigrate resume RUN` would move it again."""
    if source not in {s.source for s in plan_of(ctx).shards}:
        from dbmigrate.exceptions import UsageError

        raise UsageError(f"{source} is not an old server of this run's plan",
                         hint="old servers: " + ", ".join(sorted({s.source for s in plan_of(ctx).shards})))
    if not is_cut(ctx, source) and source not in state_of(ctx).fencing:
        raise ConsolidateError(f"{source} is not cut over in run {ctx.run_id}: nothing to roll back")
    sentence = undo_cutover(ctx, source)
    with edit_state(ctx) as st:
        st.servers[source] = {"stage": "rollback", "status": "done", "text": sentence, "s": 0, "at": ctx.clock.now()}
    ctx.metric("fleet_server_s", 0, "s", server=source, stage="rollback", status="done", text=sentence)
    return f"{source} rolled back: {sentence}"
