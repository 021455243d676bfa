"""The switchover preflight: every check before a fence, as one automatic gate.

Used by promote before its cutover and by schema swap before the primary's side.
"""

from __future__ import annotations

from typing import Any, Callable

from dbmigrate.procedures.kit import preflight_checks
from dbmigrate.engine.step import AutoGate, GateVerdict, RunContext
from dbmigrate.procedures.kit.switchover.settings import SwitchoverParams


def evaluate_preflight(ctx: RunContext[Any, Any], inventory: Any, candidate: str, params: SwitchoverParams) -> GateVerdict:
    """Run every preflight check on the cluster for `candidate`, within the switchover's limits
    (max_lag_ms, lag_wait_s, max_trx_age_s, allow_read_only_bypass, fence_expiry).

    Lag is the one check worth waiting for (gh-ost's throttle): a spike under load
    passes; anything else fails at once. The details keep every check's verdict, so
    the journal shows all of them.
    """
    checks = preflight_checks.Limits(max_lag_ms=params.max_lag_ms, max_trx_age_s=params.max_trx_age_s,
                                     write_heartbeat=not ctx.dry_run,
                                     allow_read_only_bypass=tuple(params.allow_read_only_bypass),
                                     fence_expiry=params.fence_expiry)
    deadline = ctx.clock.monotonic() + (0 if ctx.dry_run else params.lag_wait_s)
    waited = 0.0
    while True:
        results = preflight_checks.run_preflight(inventory, ctx.cluster, candidate, checks)
        failed = [g for g in results if not g.ok]
        if not failed or any(g.name != "lag" for g in failed) or ctx.clock.monotonic() >= deadline:
            break
        waited += 1.0
        ctx.clock.sleep(1.0)
    details: dict[str, Any] = {g.name: {"ok": g.ok, "reason": g.reason} for g in results}
    details["lag_waited_s"] = waited
    if failed:
        extra = f" (after waiting {waited:.0f}s for lag)" if waited else ""
        return False, "; ".join(f"{g.name}: {g.reason}" for g in failed) + extra, details
    settled = f" (lag settled after {waited:.0f}s)" if waited else ""
    return True, f"all {len(results)} preflight gates passed{settled}", details


def preflight_gate(name: str, inventory: Callable[[RunContext[Any, Any]], Any], candidate: Callable[[RunContext[Any, Any]], str],
                   params: SwitchoverParams) -> AutoGate:
    """The gate reads the servers when it is evaluated, not when the procedure is built."""
    return AutoGate(name, lambda c: evaluate_preflight(c, inventory(c), candidate(c), params))
