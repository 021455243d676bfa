"""Procedure `consolidate`: move logical shards (schemas) from old servers onto the
instances of a capacity plan (`dbmigrate consolidate plan --out PLAN.json`).

Phases:
  preflight  sources reachable with ROW binlogs, shards present, routes point at the sources
  provision  every planned instance must answer (a sandbox rehearsal creates it), `fleet.concurrency`
             of them at a time
  seed       a fleet step: per old server, each of its instances is seeded, physically
             (mariadb-backup streamed host to host, paced by the throttle) when the instance
             takes one old server of the same version, else logically (mariadb-dump), then
             a named replication connection from the copy's position, filtered to its shards
             (multi-source when an instance takes shards from several servers)
  cutover    gate: every connection running and caught up; then a fleet step: per old
             server, its connections caught up again -> fence it (read_only, app sessions
             ended) -> each instance applies its final position (bounded) -> the ranges that
             kept changing compared -> each instance's binlog position journaled -> the DSN
             file routes each shard to its instance -> open the instance -> (after the window)
             the old server replicates those shards back from the journaled position -> drop
             the forward connection
  Fleet steps run `fleet.concurrency` old servers at a time; one server's failure leaves
  the others alone unless `fleet.on_failure` says otherwise (see fleet.py).
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

from typing import Any

from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import AutoGate, FunctionStep, Phase, Procedure, Step
from dbmigrate.exceptions import SafetyError, UsageError
from dbmigrate.procedures.consolidate.cutover import (cutover, cutover_finished, server_steps, undo_cutover,
                                                     verify_cutover)
from dbmigrate.procedures.consolidate.fleet import failed_at, fleet_step
from dbmigrate.procedures.consolidate.readiness import evaluate_caught_up, evaluate_preflight, source_caught_up
from dbmigrate.procedures.consolidate.instances import provision_instances
from dbmigrate.procedures.consolidate.model import ConsolidationPlan
from dbmigrate.procedures.consolidate.provision import sandbox_extra
from dbmigrate.procedures.consolidate.windows import WINDOWS
from dbmigrate.procedures.consolidate.resources import load_plan, plan_path, prepare
from dbmigrate.procedures.consolidate.context import (
    ConsolidateBuildContext,
    ConsolidateContext,
    ConsolidateError,
    ConsolidateRefused,
    ConsolidateParams,
    PlanOnly,
    address_of,
    is_cut,
    plan_of,
    resources_of,
    route_of,
    server_of,
    state_of,
    targets_of,
)
from dbmigrate.procedures.consolidate.seed import dump_coordinates, grants_for_shards, seed_step
from dbmigrate.tools.dump import dump_command, import_command
from dbmigrate.procedures.kit.drain import protected_users
from dbmigrate.procedures.registry import register


def publish_routes(ctx: ConsolidateContext) -> str:
    """Each shard's DSN entry names its old server (added where missing, never overwritten)."""
    plan = plan_of(ctx)
    added = []
    for s in plan.shards:
        r = route_of(ctx, s.name)
        if r.current().writer is None:
            if not ctx.dry_run:
                r.switch_writer(address_of(ctx, s.source))
            added.append(s.name)
    routes = resources_of(ctx).routes or "the shards' relays"
    return f"routes of {', '.join(added)} added to {routes}" if added else \
        f"all {len(plan.shards)} shard routes present in {routes}"


def verify_routes(ctx: ConsolidateContext) -> str:
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
    stuck = stuck_sessions(ctx)
    if stuck:
        ctx.log("application sessions are still open on fenced old servers, where they cannot write: "
                + "; ".join(stuck) + ": those applications do not follow the DSN file", "warning")
    return (f"{len(plan.shards)} shard(s) route to {len(plan.instances)} instance(s), all writable: "
            + "; ".join(f"{i.name}: {', '.join(i.shards)}" for i in plan.instances)
            + (f"; NOT every application follows: {'; '.join(stuck)}" if stuck else
               "; no application session left on an old server"))


def stuck_sessions(ctx: ConsolidateContext) -> list[str]:
    """Client sessions on the fenced old servers (the tool's and replication's aside): an
    application that keeps them writes nowhere, whatever the routes say."""
    out = []
    for src in sorted(state_of(ctx).cut):
        insp = Inspector(server_of(ctx, src))
        protected = protected_users(insp, resources_of(ctx).repl.user)
        users = sorted({s.user for s in insp.sessions() if s.user not in protected})
        if users:
            out.append(f"{src}: {', '.join(users)}")
    return out


def _done(step: Step, ctx: ConsolidateContext) -> bool:
    return step.check is not None and bool(step.check(ctx))


def _undone(step: Step, ctx: ConsolidateContext) -> str:
    return (step.undo(ctx) if step.undo is not None else None) or ""


def _described(step: Step, ctx: ConsolidateContext) -> list[Any]:
    return list(step.describe(ctx)) if step.describe is not None else []


def seed_fleet(plan: ConsolidationPlan) -> Step:
    sources = sorted({s.source for s in plan.shards})
    seeds = {src: [seed_step(inst, src) for inst in targets_of(plan, src)] for src in sources}

    def work(ctx: ConsolidateContext, src: str) -> str:
        return "; ".join(step.run(ctx) for step in seeds[src] if not _done(step, ctx)) or "already seeded"

    def undo(ctx: ConsolidateContext) -> str:
        return "; ".join(_undone(step, ctx) for src in reversed(sources) for step in reversed(seeds[src]))

    return fleet_step(f"seed {len(plan.instances)} instance(s) from {len(sources)} old server(s)", "seed", plan,
                      work, done=lambda c, src: all(_done(step, c) for step in seeds[src]),
                      blocked=lambda c, src: None, undo=undo, defer_failures=True,
                      describe=lambda c: [line for src in sources for step in seeds[src] for line in _described(step, c)])


def cutover_fleet(plan: ConsolidationPlan, params: ConsolidateParams) -> Step:
    sources = sorted({s.source for s in plan.shards})

    def work(ctx: ConsolidateContext, src: str) -> str:
        WINDOWS.wait_quiet()  # another server's fenced window first
        st = state_of(ctx)
        if src in st.reverse or src in st.cut:
            # Begun by an earlier process of the run and journaled past its window (the tool was
            # stopped): its steps go on from the first one not in place.
            sentence = cutover(ctx, src)
            WINDOWS.wait_quiet()
            verify_cutover(ctx, src)
            return sentence
        ok, reason, details = source_caught_up(ctx, ctx.params, src)
        for conn, d in details.items():  # how far behind each of its connections was, for a live board
            if isinstance(d, dict) and d.get("seconds_behind") is not None:
                ctx.metric("catchup_lag_ms", float(d["seconds_behind"]) * 1000, "ms", source=src,
                           connection=conn)
        if not ok:
            raise ConsolidateRefused(f"not fenced: {reason}", hint="nothing changed on it; resume once it keeps up")
        sentence = cutover(ctx, src)
        WINDOWS.wait_quiet()
        verify_cutover(ctx, src)
        return sentence

    def blocked(ctx: ConsolidateContext, src: str) -> str | None:
        failed = failed_at(ctx, src, "seed")
        return f"not cut over: its seed failed ({failed})" if failed else None

    def undo(ctx: ConsolidateContext) -> str:
        st = state_of(ctx)
        # Newest first: a cutover the tool stopped in (begun, neither done nor undone), then the done ones.
        begun = sorted((s for s in st.fencing if s not in st.cut), key=lambda s: st.fencing[s], reverse=True)
        order = begun + sorted(st.cut, key=lambda s: st.cut[s].at, reverse=True)
        return "; ".join(f"{s}: {undo_cutover(ctx, s)}" for s in order) or "no old server was cut over"

    # Each old server's cutover is a list of steps of its own (cutover.py), run by the fleet's lane
    # for that server and journaled under this step; rollback undoes them, newest first, then
    # this step's undo (what a run journaled before its servers had steps of their own).
    # Undone even when the tool stopped inside it (killed): a fenced old server must not stay read-only.
    steps = {src: server_steps(src) for src in sources}
    return fleet_step(f"cut over {len(sources)} old server(s)", "cutover", plan, work,
                      done=lambda c, src: cutover_finished(c, src), blocked=blocked, undo=undo, undo_if_started=True,
                      stop_between_servers=True, substeps=[s for src in sources for s in steps[src]],
                      describe=lambda c: [line for src in sources for s in steps[src] if s.describe is not None
                                          for line in s.describe(c)])


def build_phases(ctx: ConsolidateBuildContext, params: ConsolidateParams) -> list[Phase]:
    plan = ctx.resources.plan if ctx.resources is not None else None
    if plan is None:  # `dbmigrate plan` builds without resources: read the plan file only
        if ctx.playbook is None:
            raise UsageError("consolidate needs its plan file")
        plan = load_plan(plan_path(ctx.playbook, params))
        ctx.resources = PlanOnly(plan)
    return [
        Phase("preflight", [FunctionStep("publish shard routes", publish_routes)],
              gates=[AutoGate("preflight", lambda c: evaluate_preflight(c, params))]),
        Phase("provision", [provision_instances(plan.instances)]),
        Phase("seed", [seed_fleet(plan)]),
        Phase("cutover", [cutover_fleet(plan, params)],
              gates=[AutoGate("caught-up", lambda c: evaluate_caught_up(c, params))]),
        Phase("verify", [FunctionStep("verify shard routes", verify_routes, mutating=False)]),
    ]


@register("consolidate", params=ConsolidateParams, prepare_resources=prepare,
          gates={"caught-up": evaluate_caught_up},
          description="move logical shards from old servers onto planned multi-instance hosts")
def build(ctx: ConsolidateBuildContext, params: ConsolidateParams) -> Procedure:
    """Consolidate shards: provision, seed + filtered replication, per-server fence and route switch."""
    # A failed cutover puts its own old server back; earlier ones stay done (each old
    # server is either fully moved or untouched), so a failure does not undo the seeds.
    return Procedure("consolidate", build_phases(ctx, params),
                     rollback_on_failure=params.fleet.on_failure == "rollback")


__all__ = ["ConsolidateError", "ConsolidateParams", "build", "dump_command", "dump_coordinates",
           "grants_for_shards", "import_command", "sandbox_extra"]
