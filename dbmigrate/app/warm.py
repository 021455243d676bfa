"""Warming a server as a use case: check the request, then warm by the one dispatcher, or
only run the warm gate. Front ends show progress through `on_progress` and render the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from dbmigrate.config import Inventory, load_inventory
from dbmigrate.exceptions import UsageError
from dbmigrate.warm import methods
from dbmigrate.warm.copier import HostCopier
from dbmigrate.warm.digest import ReplayPlan
from dbmigrate.warm.dispatch import warm_by
from dbmigrate.warm.measure import fmt_ratio
from dbmigrate.warm.methods import METHODS, WarmResult

__all__ = ["METHODS", "WarmCheck", "WarmRequest", "WarmResult", "fmt_ratio", "parse_tables", "prepare_warm", "warm_check"]


@dataclass
class WarmRequest:
    inventory: Path
    target: str
    source: Optional[str] = None
    method: str = "dump-load"
    slow_log: Optional[Path] = None
    tables: list[str] = field(default_factory=list)
    seconds: float = 600
    target_hit_ratio: Optional[float] = None
    threads: int = 2
    per_table: bool = False


@dataclass
class WarmCheck:
    ok: bool
    reason: str
    details: dict[str, Any]


def parse_tables(arg: Optional[str]) -> list[str]:
    """schema.table,schema.table as given on a command line."""
    return [t.strip() for t in (arg or "").split(",") if t.strip()]


def _check_request(req: WarmRequest) -> None:
    if req.method not in METHODS:
        raise UsageError(f"unknown method '{req.method}'", hint=f"use one of: {', '.join(METHODS)}")
    if req.target_hit_ratio is not None and not 0 < req.target_hit_ratio <= 1:
        raise UsageError("--target-hit-ratio is a fraction, e.g. 0.99")
    if req.source and req.source == req.target:
        raise UsageError("--from and --target name the same server")


def _replay_plan(inv: Inventory, slow_log: Optional[Path], source_name: Optional[str],
                 required: bool) -> ReplayPlan | None:
    if slow_log:
        return methods.replay_plan_from_file(slow_log)
    if source_name:
        with inv.open(source_name) as source:
            return methods.replay_plan_from_server(source, copier=HostCopier.for_inventory(inv))
    if required:
        raise UsageError("replay needs a digest: give --slow-log FILE or --from SERVER (its slow log is digested)")
    return None


def warm_check(req: WarmRequest, ratio: float = 0.99) -> WarmCheck:
    """Only the warm gate: is the target's hit ratio on `req.tables` at least `ratio`?"""
    _check_request(req)
    inv = load_inventory(req.inventory)
    inv.find_server(req.target)
    if req.source:
        inv.find_server(req.source)
    if not req.tables:
        raise UsageError("--check needs --tables schema.table,... to probe")
    with inv.open(req.target) as tgt:
        ok, reason, details = methods.warm_gate(tgt, ratio, tables=req.tables)
    return WarmCheck(ok, reason, details)


def prepare_warm(req: WarmRequest) -> Callable[[Callable[[float, str], None] | None], WarmResult]:
    """Check everything that can be refused (before any progress is shown), then return the
    warm-up to run: called with a progress callback, it warms the target and returns the result."""
    _check_request(req)
    inv = load_inventory(req.inventory)
    _, tspec = inv.find_server(req.target)
    sspec = inv.find_server(req.source)[1] if req.source else None
    method, wanted = req.method, list(req.tables)
    if method == "dump-load" and not req.source:
        raise UsageError("dump-load needs --from SERVER (the server whose pages are loaded)")
    plan = None
    if method == "replay" or req.slow_log or (method == "scan" and not wanted):
        plan = _replay_plan(inv, req.slow_log, None if method == "dump-load" else req.source,
                            required=method == "replay")
    if method == "scan" and not wanted and plan is None:
        raise UsageError("scan needs --tables schema.table,... (or --slow-log FILE / --from SERVER to scan the "
                         "tables its queries read)")

    def run(on_progress: Callable[[float, str], None] | None = None) -> WarmResult:
        with inv.open(req.target) as tgt:
            if method == "dump-load":
                assert req.source is not None and sspec is not None  # _check_request: dump-load needs --from
                with inv.open(req.source) as src:
                    return warm_by(method, tgt, source=src, plan=plan, seconds=req.seconds, threads=req.threads,
                                   per_table=req.per_table, on_progress=on_progress,
                                   copier=HostCopier.for_inventory(inv), source_datadir=sspec.datadir,
                                   target_datadir=tspec.datadir)
            return warm_by(method, tgt, plan=plan, tables=wanted, seconds=req.seconds,
                           target_hit_ratio=req.target_hit_ratio, threads=req.threads, per_table=req.per_table,
                           on_progress=on_progress)

    return run
