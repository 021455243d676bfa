"""Procedure `consolidate`: move logical shards (schemas) from old servers onto the
instances of a capacity plan (`dbmigrate consolidate plan --out PLAN.json`).

Phases:
  preflight  sources reachable with ROW binlogs, shards present, routes point at the sources
  provision  one step per planned instance: it must answer (a sandbox rehearsal creates it)
  seed       one step per (instance, old server): logical copy of that server's shards
             (mariadb-dump --single-transaction --master-data, credentials in a private file),
             then a named replication connection from the dump's binlog coordinates, filtered
             to those shards (multi-source when an instance takes shards from several servers)
  cutover    gate: every connection running and caught up; then one step per old server:
             fence it (read_only, app sessions ended) -> each instance applies its final
             position (bounded) -> CHECKSUM TABLE equal on both sides -> the old server starts
             replicating those shards back -> open the instance -> the DSN file routes each
             shard to its instance -> drop the forward connection
  verify     every shard routes to its instance, which is writable

Replication uses binlog file/position per connection, not GTID: old servers usually
share GTID domain 0, and two sources in one domain cannot be ordered by GTID on the
instance that merges them. Such an instance runs with gtid_strict_mode=0 (the plan's
config says so); the preflight reports the domains it saw. Giving each old server its
own gtid_domain_id beforehand is the cleaner production setup.

Undo (rollback at any point, or `dbmigrate rollback RUN` after success) routes each
shard back to its old server after that server has applied, through the reverse
connection, every write the instance took: the old servers were only fenced, never
changed, so nothing acknowledged is lost.
"""

from __future__ import annotations

from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import AutoGate, FunctionStep, Phase, Procedure, RunContext
from dbmigrate.exceptions import SafetyError, UsageError
from dbmigrate.procedures.consolidate.cutover import cutover_step
from dbmigrate.procedures.consolidate.gates import evaluate_caught_up, evaluate_preflight
from dbmigrate.procedures.consolidate.instances import provision_step
from dbmigrate.procedures.consolidate.provision import sandbox_extra
from dbmigrate.procedures.consolidate.resources import ConsolidateResources, load_plan, plan_path, prepare
from dbmigrate.procedures.consolidate.run import (
    ConsolidateError,
    ConsolidateParams,
    PLAN_ONLY,
    address_of,
    plan_of,
    resources_of,
    route_of,
    server_of,
    targets_of,
)
from dbmigrate.procedures.consolidate.seed import (
    dump_command,
    dump_coordinates,
    grants_for_shards,
    import_command,
    seed_step,
)
from dbmigrate.procedures.kit.resources import typed
from dbmigrate.procedures.registry import register


def publish_routes(ctx: RunContext) -> str:
    """Each shard's DSN entry names its old server (added where missing, never overwritten)."""
    plan = plan_of(ctx)
    added = []
    for s in plan.shards:
        r = route_of(ctx, s.name)
        if r.current().writer is None:
            if not ctx.dry_run:
                r.switch_writer(address_of(ctx, s.source))
            added.append(s.name)
    routes = resources_of(ctx).routes
    return f"routes of {', '.join(added)} added to {routes}" if added else \
        f"all {len(plan.shards)} shard routes present in {routes}"


def verify_routes(ctx: RunContext) -> str:
    plan = plan_of(ctx)
    if ctx.dry_run:
        return "would check each shard's route and instance"
    wrong = []
    for inst in plan.instances:
        if Inspector(server_of(ctx, inst.name)).read_only():
            wrong.append(f"{inst.name} is read-only")
        for shard in inst.shards:
            writer = route_of(ctx, shard).current().writer
            if writer != address_of(ctx, inst.name):
                wrong.append(f"{shard} routes to {writer}, not {inst.name}")
    if wrong:
        raise SafetyError("after consolidation: " + "; ".join(wrong))
    return (f"{len(plan.shards)} shard(s) route to {len(plan.instances)} instance(s), all writable: "
            + "; ".join(f"{i.name}: {', '.join(i.shards)}" for i in plan.instances))


def build_phases(ctx: RunContext, params: ConsolidateParams) -> list[Phase]:
    resources = typed(ctx, ConsolidateResources)
    plan = resources.plan if resources is not None else ctx.resources.get(PLAN_ONLY)
    if plan is None:  # `dbmigrate plan` builds without resources: read the plan file only
        playbook = ctx.resources.get("playbook")
        plan = load_plan(plan_path(playbook, params)) if playbook is not None else None
        if plan is None:
            raise UsageError("consolidate needs its plan file")
        ctx.resources[PLAN_ONLY] = plan
    sources = sorted({s.source for s in plan.shards})
    seeds = [seed_step(inst, src) for inst in plan.instances for src in inst.sources]
    cutovers = [cutover_step(src, [t.name for t in targets_of(plan, src)]) for src in sources]
    return [
        Phase("preflight", [FunctionStep("publish shard routes", publish_routes)],
              gates=[AutoGate("preflight", lambda c: evaluate_preflight(c, params))]),
        Phase("provision", [provision_step(inst) for inst in plan.instances]),
        Phase("seed", seeds),
        Phase("cutover", cutovers, gates=[AutoGate("caught-up", lambda c: evaluate_caught_up(c, params))]),
        Phase("verify", [FunctionStep("verify shard routes", verify_routes, mutating=False)]),
    ]


@register("consolidate", params=ConsolidateParams, prepare_resources=prepare,
          gates={"caught-up": evaluate_caught_up},
          description="move logical shards from old servers onto planned multi-instance hosts")
def build(ctx: RunContext, params: ConsolidateParams) -> Procedure:
    """Consolidate shards: provision, seed + filtered replication, per-server fence and route switch."""
    # A failed cutover puts its own old server back; earlier ones stay done (each old
    # server is either fully moved or untouched), so a failure does not undo the seeds.
    return Procedure("consolidate", build_phases(ctx, params), rollback_on_failure=False)


__all__ = ["ConsolidateError", "ConsolidateParams", "build", "dump_command", "dump_coordinates",
           "grants_for_shards", "import_command", "sandbox_extra"]
