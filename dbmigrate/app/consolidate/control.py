"""Consolidation use cases beyond run/resume/rollback: one old server rolled back while the
others stay moved, and the seeding throttle of a live run changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from dbmigrate.app.runs import act_on_run, resolve_journal_path
from dbmigrate.engine.events import Log, Subscriber
from dbmigrate.engine.journal import Journal
from dbmigrate.exceptions import UsageError


def rollback_server(run_ref: str, server: str, *, subscribers: Iterable[Subscriber] = (),
                    journal_path: Path | None = None) -> str:
    """Route one old server's shards back to it once it has applied what its instances took."""
    from dbmigrate.procedures.consolidate.cutover import rollback_one

    return act_on_run(run_ref, lambda ctx: rollback_one(ctx, server), subscribers=subscribers,
                      journal_path=journal_path)


def set_throttle(run_ref: str, *, mb_s: float | None = None, pause: bool | None = None,
                 journal_path: Path | None = None, by: str = "consolidate throttle") -> dict[str, Any]:
    """Change the pace of a live run's copies (read by them within a second); the change is a
    line of the run's journal, saying who made it (`by`)."""
    from dbmigrate.procedures.consolidate.resources import LIVE_THROTTLE_KEY

    if mb_s is None and pause is None:
        raise UsageError("say what to change: --mb-s N (0 removes the cap), --pause or --resume")
    if mb_s is not None and mb_s < 0:
        raise UsageError(f"--mb-s must be 0 or more, not {mb_s:g}")
    with Journal(resolve_journal_path(journal_path)) as journal:
        run_id = journal.resolve_run_id(run_ref)
        run = journal.get_run(run_id)
        assert run is not None
        if run.procedure != "consolidate":
            raise UsageError(f"run {run_id} is a {run.procedure} run; only consolidation runs copy data")
        live = dict(journal.get_state(run_id, LIVE_THROTTLE_KEY) or {})
        if mb_s is not None:
            live["mb_s"] = mb_s
        if pause is not None:
            live["paused"] = pause
        journal.set_state(run_id, LIVE_THROTTLE_KEY, live)
        cap = live.get("mb_s")
        pace = "no cap" if not cap else f"capped at {cap:g} MB/s"
        journal.record(Log(run_id=run_id, level="info", message=f"throttle set by {by}: copies "
                           + ("paused" if live.get("paused") else f"running, {pace}")
                           + (f" ({pace} when resumed)" if live.get("paused") else "")))
        return {"run_id": run_id, "throttle_mb_s": live.get("mb_s"), "paused": bool(live.get("paused"))}
