"""Warming a server before it takes traffic, and the gate that says it is warm: one
dispatcher by method for every procedure (promote's candidate, a schema swap's side)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dbmigrate.db.connection import Server
from dbmigrate.engine.step import GateVerdict, RunContext


class WarmSpec(BaseModel):
    """Warm a server before it takes traffic; the warm-up gate stands before it does."""

    model_config = ConfigDict(extra="forbid")
    method: Literal["dump-load", "replay", "scan", "none"] = Field(
        "dump-load", description="none: only the gate (the server must already be warm)")
    target_hit_ratio: float = Field(0.95, gt=0, le=1)
    seconds: float = Field(120, gt=0, le=86400, description="time limit of the warm-up")
    tables: list[str] = Field(default_factory=list, description="schema.table to scan and to probe in the gate")


def warm(ctx: RunContext[Any, Any], source: Server, target: Server, method: str, *, tables: list[str], seconds: float,
         target_hit_ratio: float) -> str:
    """Warm `target` by `method` (dump-load from `source`, replay of `source`'s reads, or a
    scan of `tables`); metrics and notes go to the run; returns the sentence."""
    from dbmigrate.warm.dispatch import warm_by

    progress = lambda frac, msg: ctx.metric("warm_progress", frac, server=target.name, message=msg)  # noqa: E731
    result = warm_by(method, target, source=source, tables=tables, seconds=seconds,
                     target_hit_ratio=target_hit_ratio, on_progress=progress)
    for label, hr in (("before", result.hit_ratio_before), ("after", result.hit_ratio_after)):
        if hr is not None and hr.ratio is not None:
            ctx.metric(f"hit_ratio_{label}", hr.ratio, server=target.name)
    ctx.metric("resident_pages_before", result.before.pages_data, server=target.name)
    ctx.metric("resident_pages_after", result.after.pages_data, server=target.name)
    for note in result.notes:
        ctx.log(note)
    return result.sentence()


def warm_ready(target: Server, method: str, *, target_hit_ratio: float, tables: list[str]) -> GateVerdict | Any:
    """The warm-up gate: `target`'s measured hit ratio reaches the target (or its dump load completed)."""
    from dbmigrate.warm import methods

    return methods.warm_gate(target, target_hit_ratio, tables=tables or None,
                             accept_completed_load=method == "dump-load")
