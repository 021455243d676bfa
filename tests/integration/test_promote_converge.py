"""Promote fences only a candidate that has converged, on real servers: the convergence
is journaled before read_only=ON, and a candidate that does not apply is refused
before any fence, with no server changed."""

from __future__ import annotations

import pytest

from dbmigrate.app.runs import resolve_journal_path, start_run
from dbmigrate.engine.journal import Journal
from dbmigrate.procedures.kit.switchover import Switchover

from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration


def journaled_convergence(run_id: str) -> str | None:
    with Journal(resolve_journal_path()) as j:
        return ((j.get_state(run_id, "cutover", {}) or {}).get("data") or {}).get("converged")


def watch_fences(monkeypatch) -> list[str | None]:
    """What the journal said about convergence at each fence (read from a separate connection)."""
    real_fence, seen = Switchover.fence, []

    def fence(self, before_retry=None):
        with Journal(resolve_journal_path()) as j:
            run_id = j.list_runs(1)[0]["id"]
        seen.append(journaled_convergence(run_id))
        return real_fence(self, before_retry)

    monkeypatch.setattr(Switchover, "fence", fence)
    return seen


def test_promote_journals_the_convergence_before_the_fence(boxes, monkeypatch):
    name = "conv"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    seen = watch_fences(monkeypatch)
    outcome = start_run(kit.playbook(state, name), assume_yes=True)
    assert outcome.status == "done", outcome.summary
    assert len(seen) == 1 and seen[0] and seen[0].startswith(f"{name}-new was ") and "transaction(s) behind" in seen[0]
    with Journal(resolve_journal_path()) as j:
        detail = j.run_detail(outcome.run_id)
    fence = next(s for s in detail["steps"] if s["name"] == f"fence {name}-1")
    assert fence["sentence"].startswith(seen[0]) and "fenced" in fence["sentence"]
    assert detail["state"]["cutover"]["data"]["lag_at_fence_trx"] <= 10
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_candidate_with_stopped_sql_thread_is_refused_before_any_fence(boxes, monkeypatch):
    name = "convstop"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)

    def stop_sql_thread(*_):
        # Passes preflight, then stops applying: the fence must not be set.
        with inv.open(f"{name}-new") as c:
            c.execute("STOP SLAVE SQL_THREAD")
        return True

    seen = watch_fences(monkeypatch)
    before = None
    pb = kit.playbook(state, name, gates=[{"name": "go", "kind": "manual", "before": "cutover"}])

    def approve(*_a, **_k):
        nonlocal before
        stop_sql_thread()
        before = kit.shape(inv, name)
        return True

    outcome = start_run(pb, approver=approve, assume_yes=False)
    assert outcome.status in ("rolled_back", "failed"), outcome.summary
    assert f"{name}-new is not applying replication (SQL thread No)" in outcome.summary
    assert seen == []  # read_only=ON was never sent
    assert kit.shape(inv, name) == before  # no server changed
    assert kit.writers(before) == [f"{name}-1"]
    with inv.open(f"{name}-new") as c:
        c.execute("START SLAVE SQL_THREAD")
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)
