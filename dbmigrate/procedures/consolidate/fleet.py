"""Many old servers in one run: seeds and cutovers side by side, each server on its own.

Old servers that feed the same instance form a lane and go one after the other
(their work touches that instance); lanes run in parallel, at most
`fleet.concurrency` at a time. Every server's outcome is journaled in the run
state (`servers`) as it happens. A failure stops nothing else unless the
playbook says so (`fleet.on_failure`):

  continue  the other servers go on; the step then fails naming the ones that did
            not make it, and `dbmigrate resume RUN` runs only those again (the steps'
            checks read the servers, so the done ones are skipped);
  stop      no server starts after the first failure; those running finish;
  rollback  as stop, then the run undoes every completed step (the procedure
            rolls back on failure).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dbmigrate.engine.runner import explain
from dbmigrate.engine.step import FunctionStep, Step
from dbmigrate.exceptions import DbmigrateError, Refused
from dbmigrate.procedures.consolidate.plan import ConsolidationPlan
from dbmigrate.procedures.consolidate.context import ConsolidateContext, ConsolidateError, ConsolidateRefused, edit_state, state_of


def lanes_of(plan: ConsolidationPlan) -> list[list[str]]:
    """Old servers grouped so that two servers feeding one instance share a lane (union-find)."""
    sources = sorted({s.source for s in plan.shards})
    parent = {s: s for s in sources}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for inst in plan.instances:
        for other in inst.sources[1:]:
            parent[root(other)] = root(inst.sources[0])
    lanes: dict[str, list[str]] = {}
    for s in sources:
        lanes.setdefault(root(s), []).append(s)
    return sorted(lanes.values())


@dataclass
class FleetResult:
    done: dict[str, str] = field(default_factory=dict)  # server -> sentence
    failed: dict[str, str] = field(default_factory=dict)  # server -> error
    refused: set[str] = field(default_factory=set)  # failed servers whose work declined and changed nothing
    skipped: dict[str, str] = field(default_factory=dict)  # server -> why it did not run
    already: list[str] = field(default_factory=list)


def run_lanes(lanes: list[list[str]], work: Callable[[str], str], *, concurrency: int, on_failure: str,
              already_done: Callable[[str], bool] = lambda s: False, blocked: Callable[[str], str | None] = lambda s: None,
              record: Callable[[str, str, str, float], None] = lambda s, status, text, secs: None,
              stopped: Callable[[], str | None] = lambda: None) -> FleetResult:
    """Run `work(server)` for every server, lanes in parallel (at most `concurrency`), servers in a
    lane in order. `record(server, status, text, seconds)` is called as each one ends. Once
    `stopped()` gives a reason (the operator asked the run to stop), no further server starts."""
    result = FleetResult()
    halt = threading.Event()
    lock = threading.Lock()

    def lane(servers: list[str]) -> None:
        for s in servers:
            if already_done(s):
                with lock:
                    result.already.append(s)
                continue
            why = blocked(s) or ("not started: another server failed and fleet.on_failure is "
                                 f"{on_failure}" if halt.is_set() else None) or stopped()
            if why:
                with lock:
                    result.skipped[s] = why
                record(s, "skipped", why, 0.0)
                continue
            t = time.monotonic()
            try:
                sentence = work(s)
            except Exception as exc:  # one server's failure is that server's, not the fleet's
                text = exc.message if isinstance(exc, DbmigrateError) else explain(exc)
                with lock:
                    result.failed[s] = text
                    if isinstance(exc, Refused):
                        result.refused.add(s)
                if on_failure != "continue":
                    halt.set()
                record(s, "failed", text, time.monotonic() - t)
                continue
            with lock:
                result.done[s] = sentence
            record(s, "done", sentence, time.monotonic() - t)

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(lanes))), thread_name_prefix="fleet") as pool:
        for f in [pool.submit(lane, ln) for ln in lanes]:
            f.result()
    return result


def server_event(ctx: ConsolidateContext, server: str, stage: str, status: str, text: str, secs: float) -> None:
    """One old server's stage began or ended (started, done, failed, skipped): a metric of the
    seconds it took, labelled, so a live board follows every server without parsing sentences."""
    ctx.metric("fleet_server_s", round(secs, 2), "s", server=server, stage=stage, status=status, text=text)


def fleet_step(name: str, stage: str, plan: ConsolidationPlan, work: Callable[[ConsolidateContext, str], str], *,
               done: Callable[[ConsolidateContext, str], bool], blocked: Callable[[ConsolidateContext, str], str | None],
               undo: Callable[[ConsolidateContext], str], describe: Callable[[ConsolidateContext], list[Any]],
               defer_failures: bool = False, undo_if_started: bool = False,
               stop_between_servers: bool = False, substeps: Sequence[Step] = ()) -> FunctionStep:
    """One engine step that runs `work` for every old server of the plan as a fleet.

    With `defer_failures` (seeding), under on_failure=continue the step passes with its
    failures journaled, so the servers that made it go on to their cutover; the next
    fleet step reports the others as blocked and fails the run for them. With
    `undo_if_started` (cutovers), rollback undoes the step even when the tool stopped in it.
    With `stop_between_servers` (cutovers), a stop asked by the operator (SIGTERM, Ctrl-C)
    lets the servers in progress finish and starts no other; the step then fails naming them."""
    sources = sorted({s.source for s in plan.shards})

    def run(ctx: ConsolidateContext) -> str:
        if ctx.dry_run:
            return f"would {stage} {len(sources)} old server(s)"
        fleet = ctx.params.fleet

        def record(server: str, status: str, text: str, secs: float) -> None:
            with edit_state(ctx) as st:
                st.servers[server] = {"stage": stage, "status": status, "text": text, "s": round(secs, 2),
                                      "at": ctx.clock.now()}
            ctx.log(f"{stage} {server}: {status}: {text}", "info" if status == "done" else "warning")
            server_event(ctx, server, stage, status, text, secs)

        def started(server: str) -> str:
            server_event(ctx, server, stage, "started", "", 0.0)
            return work(ctx, server)

        def stopped() -> str | None:
            asked = stop_between_servers and ctx.cancel is not None and ctx.cancel.is_set()
            return "not started: the operator asked the run to stop" if asked else None

        r = run_lanes(lanes_of(plan), started, concurrency=fleet.concurrency,
                      on_failure=fleet.on_failure, already_done=lambda s: done(ctx, s),
                      blocked=lambda s: blocked(ctx, s), record=record, stopped=stopped)
        summary = (f"{stage}: {len(r.done)} old server(s) done"
                   + (f", {len(r.already)} already done" if r.already else "")
                   + f" ({fleet.concurrency} at a time)")
        deferred = defer_failures and fleet.on_failure == "continue" and not r.skipped and (r.done or r.already)
        if (r.failed or r.skipped) and not deferred:
            parts = [f"{s} failed: {e}" for s, e in sorted(r.failed.items())]
            parts += [f"{s} {why}" for s, why in sorted(r.skipped.items())]
            # Every server that did not make it declined and changed nothing, and none was done:
            # the step refused (the run says so) rather than failed.
            error = ConsolidateRefused if not r.done and not r.skipped and set(r.failed) == r.refused \
                else ConsolidateError
            raise error(f"{summary}; not done: " + "; ".join(parts),
                        hint="the others are done and stay so; fix the cause, then `dbmigrate resume RUN` "
                             "runs only these again (or `dbmigrate rollback RUN` undoes the run)")
        failed = "".join(f"; {s} FAILED: {e}" for s, e in sorted(r.failed.items()))
        return summary + ": " + "; ".join(f"{s}: {t}" for s, t in sorted(r.done.items())) + failed

    def check(ctx: ConsolidateContext) -> bool:
        return not ctx.dry_run and all(done(ctx, s) for s in sources)

    return FunctionStep(name, run, check=check, undo=undo, describe=describe, undo_if_started=undo_if_started,
                        substeps=substeps)


def failed_at(ctx: ConsolidateContext, server: str, stage: str) -> str | None:
    rec = state_of(ctx).servers.get(server)
    return rec["text"] if rec and rec.get("stage") == stage and rec.get("status") == "failed" else None
