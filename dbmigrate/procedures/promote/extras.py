"""Resources and optional phases of `promote`: who is primary, gates, warm-up, orchestrator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dbmigrate.config import load_inventory
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.kit.roles import find_primary_of
from dbmigrate.procedures.kit.switchover import Topology


def promote_resources(inventory_path: Path | None, cluster: str, candidate: str,
                      state: Any = None) -> dict[str, Any]:
    """Open the cluster's servers and decide old primary / candidate / other replicas.

    On resume the roles come from the run's journaled state (the topology is
    mid-change and discovery could not tell them apart).
    """
    if inventory_path is None:
        raise UsageError("the playbook names no inventory", hint="add `inventory: path/to/inventory.yaml`")
    inv = load_inventory(inventory_path)
    spec = inv.cluster(cluster)
    servers = {name: inv.open(name) for name in spec.servers}
    cand_cluster, cand_spec = inv.find_server(candidate)
    new = inv.server_name(cand_spec)
    if cand_cluster != cluster:
        raise UsageError(f"candidate {candidate} belongs to cluster '{cand_cluster}', not '{cluster}'")
    old = state.get("old") if state is not None else None
    if not old:
        old = find_primary_of(servers)
        if old == new:
            raise UsageError(f"{new} is already the primary of '{cluster}'", hint="nothing to promote")
        if state is not None:
            state["old"], state["new"] = old, new
    replicas = [n for n in servers if n not in (old, new)]
    router = None
    if spec.router is not None and spec.router.kind != "none":
        from dbmigrate.routing import router_for

        router = router_for(inv, cluster)
    return {
        "inventory": inv,
        "topology": Topology(servers=servers, repl=inv.replication_credentials(cluster), replicas=replicas,
                             repl_addresses={n: inv.replication_address(n) for n in servers}),
        "old": old,
        "new": new,
        "router": router,
        # GET_LOCK lives on the primary at the start of the run, on its own session.
        "lock_session": servers[old].dedicated(),
        "servers": servers,
    }


# -- preflight -------------------------------------------------------------------

def preflight_gates(ctx, params) -> list:
    """The preflight checks as one automatic gate before the cutover phases.

    Each check reads the servers when the gate is evaluated (not at build time);
    the gate's details keep every check's verdict, so the journal shows all of them.
    """
    from dbmigrate.engine.step import AutoGate

    return [AutoGate("preflight", lambda c: evaluate_preflight(c, params))]


def evaluate_preflight(ctx, params) -> tuple[bool, str, dict]:
    from dbmigrate import gates

    import time

    r = ctx.resources
    limits = gates.Limits(max_lag_ms=params.max_lag_ms, max_trx_age_s=params.max_trx_age_s,
                          write_heartbeat=not ctx.dry_run)
    # Lag is the one check worth waiting for (gh-ost's throttle): a spike under load
    # passes; anything else fails at once. Bounded by lag_wait_s.
    deadline = time.monotonic() + (0 if ctx.dry_run else params.lag_wait_s)
    waited = 0.0
    while True:
        results = gates.run_preflight(r["inventory"], ctx.cluster, r["new"], limits)
        failed = [g for g in results if not g.ok]
        if not failed or any(g.name != "lag" for g in failed) or time.monotonic() >= deadline:
            break
        waited += 1.0
        time.sleep(1.0)
    details = {g.name: {"ok": g.ok, "reason": g.reason} for g in results}
    details["lag_waited_s"] = waited
    if failed:
        extra = f" (after waiting {waited:.0f}s for lag)" if waited else ""
        return False, "; ".join(f"{g.name}: {g.reason}" for g in failed) + extra, details
    return True, f"all {len(results)} preflight gates passed" + (f" (lag settled after {waited:.0f}s)" if waited else ""), \
        details


# -- prepare -----------------------------------------------------------------------

def prepare_steps(ctx, params) -> list:
    """Before the fence: a share of reads to the candidate, warm-up, a digest baseline."""
    from dbmigrate.engine.step import FunctionStep

    steps = []
    if params.read_share > 0:
        steps.append(FunctionStep(f"move {params.read_share:.0%} of reads to the candidate", _shift_reads,
                                  undo=_restore_reads))
    return steps


def _reader_weights(ctx, share: float) -> dict[str, int]:
    r = ctx.resources
    topo = r["topology"]
    cand = topo.servers[r["new"]]
    others = [topo.servers[n] for n in topo.replicas]
    weights = {f"{s.host}:{s.port}": max(1, round(100 * (1 - share))) for s in others}
    weights[f"{cand.host}:{cand.port}"] = max(1, round(100 * share)) if others else 100
    return weights


def _shift_reads(ctx) -> str:
    router = ctx.resources.get("router")
    if router is None:
        return "no router configured: read share skipped"
    weights = _reader_weights(ctx, ctx.params.read_share)
    if ctx.dry_run:
        for addr, w in weights.items():
            ctx.record_statement("router", f"reader weight {addr} -> {w}")
        return f"would set reader weights {weights}"
    ctx.state["reader_weights_before"] = router.current().reader_weights
    router.set_reader_weights(weights)
    return f"reader weights now {weights}"


def _restore_reads(ctx) -> str:
    router = ctx.resources.get("router")
    before = ctx.state.get("reader_weights_before")
    if router is None or not before:
        return "nothing to restore"
    router.set_reader_weights(before)
    return f"reader weights restored to {before}"


# -- warm-up -------------------------------------------------------------------------

def warm_step(ctx, spec):
    from dbmigrate.engine.step import FunctionStep

    def run(c) -> str:
        from dbmigrate.warm import methods as warm

        r = c.resources
        source, target = r["topology"].servers[r["old"]], r["topology"].servers[r["new"]]
        if c.dry_run:
            return f"would warm {target.name} from {source.name} by {spec.method}"
        progress = lambda frac, msg: c.metric("warm_progress", frac, message=msg)  # noqa: E731
        if spec.method == "dump-load":
            result = warm.dump_load(source, target, seconds=spec.seconds, on_progress=progress)
        elif spec.method == "replay":
            plan = warm.replay_plan_from_server(source)
            result = warm.replay(target, plan, tables=spec.tables or None, seconds=spec.seconds,
                                 target_hit_ratio=spec.target_hit_ratio, on_progress=progress)
        else:
            if not spec.tables:
                raise UsageError("warm.method scan needs warm.tables (schema.table, ...)")
            result = warm.scan(target, spec.tables, seconds=spec.seconds, target_hit_ratio=spec.target_hit_ratio,
                               on_progress=progress)
        for label, hr in (("before", result.hit_ratio_before), ("after", result.hit_ratio_after)):
            if hr is not None:
                c.metric(f"hit_ratio_{label}", hr.ratio, server=target.name)
        c.metric("resident_pages_before", result.before.pages_data, server=target.name)
        c.metric("resident_pages_after", result.after.pages_data, server=target.name)
        for note in result.notes:
            c.log(note)
        return result.sentence()

    return FunctionStep(f"warm the candidate ({spec.method})", run)


def warm_gate(spec):
    """Before the cutover: the candidate's measured hit ratio reaches the target (or its load completed)."""
    from dbmigrate.engine.step import AutoGate

    def check(c):
        from dbmigrate.warm import methods as warm

        r = c.resources
        target = r["topology"].servers[r["new"]]
        return warm.warm_gate(target, spec.target_hit_ratio, tables=spec.tables or None,
                              accept_completed_load=spec.method == "dump-load")

    return AutoGate("warm-up", check)


# -- data consistency ------------------------------------------------------------------

def checksum_gate(databases: list[str]):
    """Before the cutover: pt-table-checksum finds no chunk of the candidate that differs."""
    from dbmigrate.engine.step import AutoGate

    def check(c):
        from dbmigrate.tools.pt_connect import table_checksum

        if c.dry_run:  # pt-table-checksum writes its checksums through the primary
            return True, f"would run pt-table-checksum on {', '.join(databases)}", {}
        r = c.resources
        servers = r["topology"].servers
        report = table_checksum(servers[r["old"]], [servers[r["new"]]], databases)
        diffs = report.diffs.get(r["new"], [])
        if report.errors:
            return False, "pt-table-checksum: " + "; ".join(report.errors[:3]), report.to_dict()
        if diffs:
            return False, (f"{r['new']} differs from {r['old']} in " +
                           ", ".join(f"{d['table']} ({d['chunks']} chunk(s))" for d in diffs)), report.to_dict()
        return True, f"{r['new']} matches {r['old']} in {report.tables} table(s) of {', '.join(databases)}", \
            report.to_dict()

    return AutoGate("table checksums", check)


# -- orchestrator --------------------------------------------------------------------

def orchestrator_steps(ctx, params) -> list:
    """Fence and promotion by orchestrator's graceful-master-takeover-auto; the rest stays ours."""
    from dbmigrate.engine.step import FunctionStep
    from dbmigrate.procedures.promote.procedure import _router, _switch_back, _sw, _verify_shape

    return [
        FunctionStep("graceful-master-takeover-auto (orchestrator)", _orchestrator_takeover,
                     check=lambda c: not c.dry_run and _sw(c).writable(c.resources["new"]), undo=_switch_back,
                     undo_if_started=True),  # orchestrator may fence and give up: unfence on rollback
        FunctionStep("switch router", _router, check=lambda c: not c.dry_run and _sw(c).router_points_to(c.resources["new"]),
                     undo=_switch_back),
        FunctionStep("check reverse replication", _check_reverse, verify=_verify_shape, mutating=False),
    ]


def _orchestrator_takeover(ctx) -> str:
    from dbmigrate.topology.orchestrator import OrchestratorClient

    r = ctx.resources
    spec = r["inventory"].cluster(ctx.cluster)
    if not spec.orchestrator_url:
        raise UsageError(f"cluster '{ctx.cluster}' has no orchestrator_url", hint="add it to the inventory or use via: dbmigrate")
    client = OrchestratorClient(spec.orchestrator_url)
    cand = r["topology"].servers[r["new"]]
    cluster_name = spec.orchestrator_cluster or client.cluster_name_of(cand.host, cand.port)
    if ctx.dry_run:
        ctx.record_statement("orchestrator", f"GET /api/graceful-master-takeover-auto/{cluster_name}/{cand.host}/{cand.port}")
        return "would ask orchestrator for a graceful master takeover"
    ctx.state["candidate_opened"] = True
    answer = client.graceful_takeover_auto(cluster_name, cand.host, cand.port)
    return f"orchestrator promoted {r['new']}: {getattr(answer, 'message', answer)}"


def _check_reverse(ctx) -> str:
    from dbmigrate.procedures.promote.procedure import _sw

    sw = _sw(ctx)
    sw.wait_replica_running(sw.old, timeout=10)
    return f"{sw.old} replicates from {sw.new}"
