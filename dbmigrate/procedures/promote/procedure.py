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

from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from dbmigrate.engine.step import AutoGate, FunctionStep, Phase, Procedure, RunContext
from dbmigrate.procedures.registry import register
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverSettings, switch_back


class WarmSpec(BaseModel):
    """Warm the candidate before it takes traffic; the warm-up gate stands before the cutover."""

    model_config = ConfigDict(extra="forbid")
    method: Literal["dump-load", "replay", "scan", "none"] = Field(
        "dump-load", description="none: only the gate (the candidate must already be warm)")
    target_hit_ratio: float = Field(0.95, gt=0, le=1)
    seconds: float = Field(120, gt=0, description="time limit of the warm-up")
    tables: list[str] = Field(default_factory=list, description="schema.table to scan and to probe in the gate")


class PromoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    candidate: str = Field(description="server name or host:port of the replica to promote")
    via: Literal["dbmigrate", "orchestrator"] = "dbmigrate"
    max_lag_ms: int = Field(1000, gt=0)
    lag_wait_s: float = Field(30, ge=0, le=600, description="how long preflight waits for lag to settle")
    max_trx_age_s: float = Field(30, gt=0)
    catchup_timeout_s: float = Field(5, gt=0, le=300)
    fence_timeout_s: float = Field(5, gt=0, le=60, description="bound of SET GLOBAL read_only=ON (lock_wait_timeout)")
    drain_timeout_s: float = Field(2, ge=0, le=60)
    kill_app_sessions: bool = True
    replica_timeout_s: float = Field(30, gt=0)
    verify_timeout_s: float = Field(10, gt=0)
    read_share: float = Field(0.0, ge=0, le=1, description="share of reads moved to the candidate first")
    warm: Optional[WarmSpec] = None
    baseline_seconds: float = Field(10, gt=0, description="baseline digest length on the old primary (with a guard)")
    guard_sample_s: float = Field(5, gt=0, description="length of each guard window after the cutover")
    checksum_databases: list[str] = Field(default_factory=list,
                                          description="pt-table-checksum these databases; the candidate must match")


def _sw(ctx: RunContext, record=None) -> Switchover:
    r = ctx.resources
    p: PromoteParams = ctx.params
    settings = SwitchoverSettings(catchup_timeout_s=p.catchup_timeout_s, drain_timeout_s=p.drain_timeout_s,
                                  fence_timeout_s=p.fence_timeout_s,
                                  kill_app_sessions=p.kill_app_sessions, replica_timeout_s=p.replica_timeout_s)
    dry_run = ctx.dry_run or record is not None
    return Switchover(r["topology"], r["old"], r["new"], settings, r.get("router"), dry_run=dry_run,
                      log=ctx.log, record=record or ctx.record_statement)


def _planned(action: Callable[[RunContext, Switchover], Any]) -> Callable[[RunContext], list[tuple[str, str]]]:
    """describe() for a dry-run: the (server, statement) pairs `action` would send.

    The action runs against a dry-run Switchover, so its appliers and router only
    collect what they would send; the runner journals the list.
    """
    def describe(ctx: RunContext) -> list[tuple[str, str]]:
        lines: list[tuple[str, str]] = []
        action(ctx, _sw(ctx, record=lambda server, text: lines.append((server, text))))
        return lines

    return describe


# -- steps ---------------------------------------------------------------------

def _fence(ctx: RunContext) -> str:
    sw = _sw(ctx)
    ctx.state["candidate_opened"] = ctx.state.get("candidate_opened", False)
    sentence, pos = sw.fence()
    ctx.state["fence_pos"] = pos
    ctx.set_hook_env("FENCE_POSITION", pos)
    return sentence


def _fence_check(ctx: RunContext) -> bool:
    return "fence_pos" in ctx.state and _sw(ctx).is_fenced()


def _unfence(ctx: RunContext) -> str:
    return switch_back(_sw(ctx), candidate_opened=bool(ctx.state.get("candidate_opened", False)))


def _catchup(ctx: RunContext) -> str:
    return _sw(ctx).wait_catchup(ctx.state.get("fence_pos", ""))


def _catchup_check(ctx: RunContext) -> bool:
    return not ctx.dry_run and "fence_pos" in ctx.state and _sw(ctx).caught_up(ctx.state["fence_pos"])


def _open(ctx: RunContext) -> str:
    sw = _sw(ctx)
    # Accounts that bypass read_only (SUPER / READ ONLY ADMIN) may still have committed on
    # the old primary after the fence: the candidate must have those too before it opens.
    fence_pos = ctx.state.get("fence_pos", "")
    now = sw.insp(sw.old).gtid_binlog_pos() if not ctx.dry_run else fence_pos
    said = ""
    if now != fence_pos:
        said = sw.wait_catchup(now) + " (the old primary moved after the fence); "
        ctx.state["fence_pos"] = now
    # Journaled before the statement: after a crash we must assume it may be writable.
    ctx.state["candidate_opened"] = True
    return said + sw.open_candidate()


def _switch_back(ctx: RunContext) -> str:
    return switch_back(_sw(ctx), candidate_opened=bool(ctx.state.get("candidate_opened", False)))


def _router(ctx: RunContext) -> str:
    sentence = _sw(ctx).switch_router()
    if not ctx.dry_run:
        import time

        ctx.state["switched_at"] = time.time()  # the new primary takes traffic from here
    return sentence


def _reset(ctx: RunContext) -> str:
    return _sw(ctx).reset_new_replication()


def _repoint(ctx: RunContext) -> str:
    return _sw(ctx).repoint_replicas(ctx.state.get("fence_pos", ""))


def _reverse(ctx: RunContext) -> str:
    sw = _sw(ctx)
    sentence = sw.start_reverse()
    sw.wait_replica_running(sw.old)
    return sentence


def _verify(ctx: RunContext) -> str:
    return _probe(ctx, _sw(ctx))


def _probe(ctx: RunContext, sw: Switchover) -> str:
    return sw.verify_writes_flow(ctx.run_id, ctx.params.verify_timeout_s)


def _verify_shape(ctx: RunContext) -> None:
    sw = _sw(ctx)
    problems = []
    if sw.insp(sw.new).read_only():
        problems.append(f"{sw.new} is read-only")
    if not sw.insp(sw.old).read_only():
        problems.append(f"{sw.old} is writable")
    if not sw.reverse_running():
        problems.append(f"{sw.old} does not replicate from {sw.new}")
    if problems:
        from dbmigrate.exceptions import SafetyError

        raise SafetyError("after promotion: " + "; ".join(problems))


def _describe(*lines: str):
    return lambda ctx: list(lines)


def cutover_steps(ctx: RunContext) -> list[FunctionStep]:
    r = ctx.resources
    old, new = r.get("old", "<old primary>"), r.get("new", "<candidate>")
    return [
        # Undone even when it did not finish: read_only may be in place though the step failed.
        FunctionStep(f"fence {old}", _fence, check=_fence_check, undo=_unfence, undo_if_started=True,
                     describe=_planned(lambda c, sw: sw.fence())),
        FunctionStep(f"wait for {new} to catch up", _catchup, check=_catchup_check, mutating=False),
        FunctionStep(f"open {new} for writes", _open, check=lambda c: _sw(c).is_open(), undo=_switch_back,
                     describe=_planned(lambda c, sw: sw.open_candidate())),
        FunctionStep("switch router", _router, check=lambda c: _sw(c).router_points_to(new) and not c.dry_run,
                     undo=_switch_back, describe=_planned(lambda c, sw: sw.switch_router())),
        FunctionStep(f"end application sessions on {old}", lambda c: _sw(c).end_sessions(),
                     describe=lambda c: [(old, "KILL CONNECTION <id> for each remaining application session")]),
        FunctionStep(f"reset replication on {new}", _reset,
                     check=lambda c: not _sw(c).has_replication_config(new), undo=_switch_back,
                     describe=_planned(lambda c, sw: sw.reset_new_replication())),
        FunctionStep("repoint replicas", _repoint, check=lambda c: _sw(c).replicas_repointed(), undo=_switch_back,
                     describe=_planned(lambda c, sw: sw.repoint_replicas(c.state.get("fence_pos", "")))),
        FunctionStep(f"reverse replication {old} <- {new}", _reverse, check=lambda c: _sw(c).reverse_running(),
                     verify=_verify_shape, undo=_switch_back, describe=_planned(lambda c, sw: sw.start_reverse())),
    ]


def build_phases(ctx: RunContext, params: PromoteParams) -> list[Phase]:
    from dbmigrate.procedures.promote import extras

    from dbmigrate.procedures.kit import guard

    policy = guard.policy_of(ctx)
    prepare = extras.prepare_steps(ctx, params)
    if policy is not None:
        prepare += [guard.open_window_step("old", "baseline_window", "baseline"),
                    guard.collect_baseline_step(params.baseline_seconds),
                    guard.open_window_step("new", "guard_window", "guard")]
    if params.warm is not None and params.warm.method != "none":
        prepare.append(extras.warm_step(ctx, params.warm))
    phases = [
        Phase("preflight", [], gates=extras.preflight_gates(ctx, params)),
        Phase("prepare", prepare),
    ]
    if params.via == "orchestrator":
        phases.append(Phase("cutover", extras.orchestrator_steps(ctx, params)))
    else:
        phases.append(Phase("cutover", cutover_steps(ctx)))
    if params.warm is not None:
        phases[-1].gates.append(extras.warm_gate(params.warm))
    if params.checksum_databases:
        phases[-1].gates.append(extras.checksum_gate(params.checksum_databases))
    phases.append(Phase("verify", [FunctionStep("verify writes flow", _verify, mutating=True,
                                                describe=_planned(_probe))]))
    if policy is not None:
        phases.append(Phase("guard", [guard.guard_step(policy, params.guard_sample_s)]))
    return phases


def prepare(playbook, state) -> dict[str, Any]:
    from dbmigrate.procedures.promote.extras import promote_resources

    return promote_resources(playbook.inventory_path, playbook.cluster, playbook.params.candidate, state)


@register("promote", params=PromoteParams, prepare_resources=prepare,
          description="promote a replica to primary with reverse replication and a router switch")
def build(ctx: RunContext, params: PromoteParams) -> Procedure:
    """Promote a replica to primary: fence, catch up, open, switch, repoint, reverse."""
    return Procedure("promote", build_phases(ctx, params), rollback_on_failure=True)
