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

from pydantic import BaseModel, ConfigDict, Field

from dbmigrate.config import load_inventory
from dbmigrate.engine.step import Phase, Procedure, RunContext
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit import cutover as kit_cutover
from dbmigrate.procedures.kit import guard
from dbmigrate.procedures.kit.cutover import Cutover
from dbmigrate.procedures.kit.fence import FenceParams
from dbmigrate.procedures.kit.preflight import PreflightLimits, preflight_gate
from dbmigrate.procedures.kit.resources import required, typed
from dbmigrate.procedures.kit.switchover import Record, Switchover, SwitchoverSettings
from dbmigrate.procedures.kit.takeover import takeover_procedure
from dbmigrate.procedures.kit.warmup import WarmSpec
from dbmigrate.procedures.promote import extras
from dbmigrate.procedures.promote.resources import PromoteResources, prepare
from dbmigrate.procedures.registry import register

__all__ = ["PromoteParams", "WarmSpec", "build", "cutover_of", "settings_of"]


class PromoteParams(FenceParams):
    """The fence's fields come from FenceParams (the same in every procedure)."""

    model_config = ConfigDict(extra="forbid")
    candidate: str = Field(description="server name or host:port of the replica to promote")
    via: Literal["dbmigrate", "orchestrator"] = "dbmigrate"
    max_lag_ms: int = Field(1000, gt=0, le=3_600_000)
    lag_wait_s: float = Field(30, ge=0, le=600, description="how long preflight waits for lag to settle")
    max_trx_age_s: float = Field(30, gt=0, le=86400)
    catchup_timeout_s: float = Field(5, gt=0, le=300)
    converge_timeout_s: float = Field(10, gt=0, le=300,
                                      description="how long the fence waits for the candidate to come close")
    converge_max_trx: int = Field(10, ge=0, description="fence only when the candidate is at most this many "
                                                        "transactions behind (per domain)")
    converge_max_trx_rows: int = Field(10_000, ge=0, description="once converged, the fence also waits (up to "
                                       "converge_timeout_s, else refuses) while the old primary runs a DDL or a "
                                       "transaction that modified this many rows, or the candidate applies a DDL; "
                                       "0: do not look")
    converge_max_backlog_bytes: int = Field(1 << 20, ge=0, description="... or the candidate has more than this "
                                            "many bytes of the old primary's binlog still to apply; 0: do not look")
    probe_timeout_s: float = Field(2, gt=0, le=60, description="how long an undo waits for a server to answer "
                                                               "before taking it as down")
    drain_timeout_s: float = Field(2, ge=0, le=60)
    kill_app_sessions: bool = True
    hold_new_connections: bool = Field(False, description="opt-in: through an HAProxy router with a writer port, "
                                       "new connections wait in its queue from just before the fence until the "
                                       "candidate opens, and the old primary's writer sessions end when idle (the "
                                       "router's flip then moves into the open step, not yet covered by the fault "
                                       "matrix)")
    allow_read_only_bypass: list[str] = Field(
        default_factory=list, description="accounts that bypass read_only (SUPER, READ ONLY ADMIN) allowed to hold "
                                          "sessions on the old primary; their sessions are ended before the open")
    replica_timeout_s: float = Field(30, gt=0, le=3600)
    verify_timeout_s: float = Field(10, gt=0, le=600)
    read_share: float = Field(0.0, ge=0, le=1, description="share of reads moved to the candidate first")
    warm: Optional[WarmSpec] = None
    baseline_seconds: float = Field(10, gt=0, le=3600, description="baseline digest length on the old primary (with a guard)")
    guard_sample_s: float = Field(1, gt=0, le=3600, description="how often the guard reads the new primary's "
                                                                  "traffic and judges it (one sample of its sequential test)")
    checksum_databases: list[str] = Field(default_factory=list,
                                          description="pt-table-checksum these databases; the candidate must match")


def settings_of(p: PromoteParams) -> SwitchoverSettings:
    return SwitchoverSettings(**p.fence_settings(), catchup_timeout_s=p.catchup_timeout_s,
                              drain_timeout_s=p.drain_timeout_s, kill_app_sessions=p.kill_app_sessions,
                              hold_new_connections=p.hold_new_connections,
                              replica_timeout_s=p.replica_timeout_s, converge_timeout_s=p.converge_timeout_s,
                              converge_max_trx=p.converge_max_trx, probe_timeout_s=p.probe_timeout_s,
                              converge_max_trx_rows=p.converge_max_trx_rows,
                              converge_max_backlog_bytes=p.converge_max_backlog_bytes)


def plan_names(ctx: RunContext, params: PromoteParams) -> tuple[str, str]:
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


def cutover_of(ctx: RunContext, params: PromoteParams) -> Cutover:
    """The switchover of this run: old primary -> candidate (placeholders for `plan`)."""
    r = typed(ctx, PromoteResources)
    old, new = (r.old, r.new) if r is not None else plan_names(ctx, params)

    def make(c: RunContext, record: Record | None) -> Switchover:
        res = required(c, PromoteResources)
        return Switchover(res.topology, res.old, res.new, settings_of(c.params), res.router,
                          dry_run=c.dry_run or record is not None, log=c.log, record=record or c.record_statement,
                          clock=c.clock)

    return Cutover(old=old, new=new, switchover=make, verify_timeout_s=params.verify_timeout_s)


def build_phases(ctx: RunContext, params: PromoteParams) -> list[Phase]:
    cut = cutover_of(ctx, params)
    policy = guard.policy_of(ctx)
    prepare_steps = extras.prepare_steps(ctx, params)
    if policy is not None:
        prepare_steps += [guard.open_window_step("old", "baseline_window", "baseline"),
                          guard.collect_baseline_step(params.baseline_seconds),
                          guard.open_window_step("new", "guard_window", "guard")]
    if params.warm is not None and params.warm.method != "none":
        prepare_steps.append(extras.warm_step(params.warm))
    limits = PreflightLimits(max_lag_ms=params.max_lag_ms, max_trx_age_s=params.max_trx_age_s,
                             lag_wait_s=params.lag_wait_s,
                             allow_read_only_bypass=tuple(params.allow_read_only_bypass),
                             fence_expiry=params.fence_expiry)
    gate = preflight_gate("preflight", lambda c: required(c, PromoteResources).inventory,
                          lambda c: required(c, PromoteResources).new, limits)
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
def build(ctx: RunContext, params: PromoteParams) -> Procedure:
    """Promote a replica to primary: fence, catch up, open, switch, repoint, reverse."""
    r = typed(ctx, PromoteResources)
    if r is not None and r.old_gone:
        return takeover_procedure("promote", cutover_of(ctx, params))
    return Procedure("promote", build_phases(ctx, params), rollback_on_failure=True)
