"""Optional parts of `promote`: read share, warm-up, checksum gate, orchestrator takeover."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dbmigrate.engine.step import AutoGate, FunctionStep, Step
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.kit import cutover as kit_cutover
from dbmigrate.procedures.kit.cutover import Cutover, CutoverState
from dbmigrate.procedures.kit.warmup import WarmSpec, warm, warm_ready
from dbmigrate.procedures.promote.resources import PromoteResources, PromoteState

if TYPE_CHECKING:
    from dbmigrate.procedures.promote.procedure import PromoteBuildContext, PromoteContext, PromoteParams


# -- prepare -----------------------------------------------------------------------

def prepare_steps(ctx: PromoteBuildContext, params: PromoteParams) -> list[Step]:
    """Before the fence: a share of reads to the candidate."""
    steps: list[Step] = []
    if params.read_share > 0:
        steps.append(FunctionStep(f"move {params.read_share:.0%} of reads to the candidate", shift_reads,
                                  undo=restore_reads))
    return steps


def reader_weights(res: PromoteResources, share: float) -> dict[str, int]:
    cand = res.topology.servers[res.new]
    others = [res.topology.servers[n] for n in res.topology.replicas]
    weights = {f"{s.host}:{s.port}": max(1, round(100 * (1 - share))) for s in others}
    weights[f"{cand.host}:{cand.port}"] = max(1, round(100 * share)) if others else 100
    return weights


def shift_reads(ctx: PromoteContext) -> str:
    res = ctx.resources
    if res.router is None:
        return "no router configured: read share skipped"
    weights = reader_weights(res, ctx.params.read_share)
    if ctx.dry_run:
        for addr, w in weights.items():
            ctx.record_statement("router", f"reader weight {addr} -> {w}")
        return f"would set reader weights {weights}"
    with PromoteState.edit(ctx.state) as s:
        s.reader_weights_before = res.router.current().reader_weights
    res.router.set_reader_weights(weights)
    return f"reader weights now {weights}"


def restore_reads(ctx: PromoteContext) -> str:
    router = ctx.resources.router
    before = PromoteState.load(ctx.state).reader_weights_before
    if router is None or not before:
        return "nothing to restore"
    router.set_reader_weights(before)
    return f"reader weights restored to {before}"


# -- warm-up -------------------------------------------------------------------------

def warm_step(spec: WarmSpec) -> FunctionStep:
    def run(c: PromoteContext) -> str:
        res = c.resources
        source, target = res.topology.servers[res.old], res.topology.servers[res.new]
        if c.dry_run:
            return f"would warm {target.name} from {source.name} by {spec.method}"
        return warm(c, source, target, spec.method, tables=spec.tables, seconds=spec.seconds,
                    target_hit_ratio=spec.target_hit_ratio)

    # Reads only (a scan, replayed SELECTs, a buffer pool load): a run refused after it changed nothing.
    return FunctionStep(f"warm the candidate ({spec.method})", run, mutating=False)


def warm_gate(spec: WarmSpec) -> AutoGate:
    """Before the cutover: the candidate's measured hit ratio reaches the target (or its load completed)."""

    def check(c: PromoteContext) -> Any:
        res = c.resources
        return warm_ready(res.topology.servers[res.new], spec.method, target_hit_ratio=spec.target_hit_ratio,
                          tables=spec.tables)

    return AutoGate("warm-up", check)


# -- data consistency ------------------------------------------------------------------

def checksum_gate(databases: list[str]) -> AutoGate:
    """Before the cutover: pt-table-checksum finds no chunk of the candidate that differs."""

    def check(c: PromoteContext) -> Any:
        from dbmigrate.tools.pt_connect import table_checksum

        if c.dry_run:  # pt-table-checksum writes its checksums through the primary
            return True, f"would run pt-table-checksum on {', '.join(databases)}", {}
        res = c.resources
        servers = res.topology.servers
        report = table_checksum(servers[res.old], [servers[res.new]], databases)
        diffs = report.diffs.get(res.new, [])
        if report.errors:
            return False, "pt-table-checksum: " + "; ".join(report.errors[:3]), report.to_dict()
        if diffs:
            return False, (f"{res.new} differs from {res.old} in " +
                           ", ".join(f"{d['table']} ({d['chunks']} chunk(s))" for d in diffs)), report.to_dict()
        return True, f"{res.new} matches {res.old} in {report.tables} table(s) of {', '.join(databases)}", \
            report.to_dict()

    return AutoGate("table checksums", check)


# -- orchestrator --------------------------------------------------------------------

def orchestrator_steps(cut: Cutover) -> list[Step]:
    """Fence and promotion by orchestrator's graceful-master-takeover-auto; the rest stays ours."""
    return [
        FunctionStep("graceful-master-takeover-auto (orchestrator)", orchestrator_takeover,
                     check=lambda c: not c.dry_run and cut.sw(c).writable(cut.new),
                     undo=lambda c: kit_cutover.undo_switchover(cut, c),
                     undo_if_started=True),  # orchestrator may fence and give up: unfence on rollback
        kit_cutover.router_step(cut),
        FunctionStep("check reverse replication", lambda c: check_reverse(cut, c),
                     verify=lambda c: kit_cutover.check_shape(cut, c), mutating=False),
    ]


def orchestrator_takeover(ctx: PromoteContext) -> str:
    from dbmigrate.topology.orchestrator import OrchestratorClient, takeover_sentence

    res = ctx.resources
    spec = res.inventory.cluster(ctx.cluster)
    if not spec.orchestrator_url:
        raise UsageError(f"cluster '{ctx.cluster}' has no orchestrator_url",
                         hint="add it to the inventory or use via: dbmigrate")
    client = OrchestratorClient(spec.orchestrator_url)
    cand = res.topology.servers[res.new]
    cluster_name = spec.orchestrator_cluster or client.cluster_name_of(cand.host, cand.port)
    if ctx.dry_run:
        ctx.record_statement("orchestrator",
                             f"GET /api/graceful-master-takeover-auto/{cluster_name}/{cand.host}/{cand.port}")
        return "would ask orchestrator for a graceful master takeover"
    with CutoverState.edit(ctx.state) as s:
        s.candidate_opened = True
    started = time.monotonic()
    answer = client.graceful_takeover_auto(cluster_name, cand.host, cand.port)
    return takeover_sentence(answer, res.new, cand.host, cand.port, time.monotonic() - started)


def check_reverse(cut: Cutover, ctx: PromoteContext) -> str:
    sw = cut.sw(ctx)
    sw.wait_replica_running(sw.old, timeout=10)
    return f"{sw.old} replicates from {sw.new}"
