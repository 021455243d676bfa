"""Procedure `promote`: make a (new-hardware) replica the primary under live writes.

Phases:
  preflight  gates read the real state (replication, lag, errant GTIDs, grants, ...)
  prepare    optional read share to the candidate, warm-up, baseline digest (hooks too)
  cutover    fence -> catch up -> open candidate -> router -> reset -> repoint -> reverse
  verify     a probe write reaches every follower, including the old primary

Every undo converges on the same safe shape through `switch_back`, so rollback
at any point (or `dbmigrate rollback RUN` after success) is the switchover back
through the reverse replication: nothing acknowledged is lost.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from dbmigrate.config import load_inventory
from dbmigrate.engine.step import Phase, Procedure, RunContext
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit import cutover as kit_cutover
from dbmigrate.procedures.kit import guard
from dbmigrate.procedures.kit.cutover import Cutover, RouterOf
from dbmigrate.procedures.kit.preflight import preflight_gate
from dbmigrate.procedures.kit.switchover import Record, Switchover, SwitchoverParams
from dbmigrate.procedures.kit.takeover import takeover_procedure
from dbmigrate.procedures.kit.warmup import WarmSpec
from dbmigrate.procedures.promote import extras
from dbmigrate.procedures.promote.resources import PromoteResources, prepare
from dbmigrate.procedures.registry import register

__all__ = ["PromoteParams", "WarmSpec", "build", "cutover_of"]


class PromoteParams(SwitchoverParams):
    """The switchover's bounds come from SwitchoverParams (the same in every procedure that
    switches over). `drain_timeout_s` is read as `fence_drain_timeout_s`, its former name."""

    RENAMED = {"drain_timeout_s": "fence_drain_timeout_s"}
    candidate: str = Field(description="server name or host:port of the replica to promote")
    via: Literal["dbmigrate", "orchestrator"] = "dbmigrate"
    read_share: float = Field(0.0, ge=0, le=1, description="share of reads moved to the candidate first")
    warm: Optional[WarmSpec] = None
    baseline_seconds: float = Field(10, gt=0, le=3600, description="baseline digest length on the old primary (with a guard)")
    guard_sample_s: float = Field(1, gt=0, le=3600, description="how often the guard reads the new primary's "
                                                                  "traffic and judges it (one sample of its sequential test)")
    checksum_databases: list[str] = Field(default_factory=list,
                                          description="pt-table-checksum these databases; the candidate must match")


# What a promotion's steps see; `build` sees the resources as optional (`plan` has none).
PromoteContext = RunContext[PromoteParams, PromoteResources]
PromoteBuildContext = RunContext[PromoteParams, "PromoteResources | None"]


def plan_names(ctx: PromoteBuildContext, params: PromoteParams) -> tuple[str, str]:
    """(old primary, candidate) for a plan, which connects to nothing: the candidate the playbook
    names and the primary the inventory declares (placeholders only where neither says)."""
    old = "<old primary>"
    path = ctx.playbook.inventory_path if ctx.playbook is not None else None
    if path is not None:
        try:
            old = load_inventory(path).cluster(ctx.cluster).primary_hint() or old
        except DbmigrateError:
            pass
    return old, params.candidate or "<candidate>"


def cutover_of(ctx: PromoteBuildContext, params: PromoteParams) -> Cutover:
    """The switchover of this run: old primary -> candidate (placeholders for `plan`)."""
    r = ctx.resources
    old, new = (r.old, r.new) if r is not None else plan_names(ctx, params)

    def make(c: PromoteContext, record: Record | None, routed: RouterOf) -> Switchover:
        res = c.resources
        return Switchover(res.topology, res.old, res.new, c.params, routed(res.router, c.params),
                          dry_run=c.dry_run or record is not None, log=c.log, record=record or c.record_statement,
                          clock=c.clock)

    return Cutover(old=old, new=new, switchover=make)


def build_phases(ctx: PromoteBuildContext, params: PromoteParams) -> list[Phase]:
    cut = cutover_of(ctx, params)
    policy = guard.policy_of(ctx)
    prepare_steps = extras.prepare_steps(ctx, params)
    if policy is not None:
        prepare_steps += [guard.open_window_step("old", "baseline_window", "baseline"),
                          guard.collect_baseline_step(params.baseline_seconds),
                          guard.open_window_step("new", "guard_window", "guard")]
    if params.warm is not None and params.warm.method != "none":
        prepare_steps.append(extras.warm_step(params.warm))
    gate = preflight_gate("preflight", lambda c: c.resources.inventory, lambda c: c.resources.new, params)
    phases = [
        Phase("preflight", [], gates=[gate]),
        Phase("prepare", prepare_steps),
    ]
    if params.via == "orchestrator":
        phases.append(Phase("cutover", extras.orchestrator_steps(cut)))
    else:
        phases.append(Phase("cutover", kit_cutover.cutover_steps(cut)))
    if params.warm is not None:
        phases[-1].gates.append(extras.warm_gate(params.warm))
    if params.checksum_databases:
        phases[-1].gates.append(extras.checksum_gate(params.checksum_databases))
    phases.append(Phase("verify", [kit_cutover.verify_step(cut)]))
    if policy is not None:
        phases.append(Phase("guard", [guard.guard_step(policy, params.guard_sample_s)]))
    return phases


@register("promote", params=PromoteParams, prepare_resources=prepare, takeover=True,
          description="promote a replica to primary with reverse replication and a router switch")
def build(ctx: PromoteBuildContext, params: PromoteParams) -> Procedure:
    """Promote a replica to primary: fence, catch up, open, switch, repoint, reverse."""
    r = ctx.resources
    if r is not None and r.old_gone:
        return takeover_procedure("promote", cutover_of(ctx, params))
    return Procedure("promote", build_phases(ctx, params), rollback_on_failure=True)
