"""Promote fences only a candidate that has converged, on real servers: the convergence
is journaled before read_only=ON, a candidate that does not apply (or lags) is refused
before any fence, with no server changed, and one that stalls right after the fence is
unfenced within the fenced catch-up budget and tried again."""

from __future__ import annotations

import threading

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


def test_candidate_that_lags_is_refused_before_any_fence_and_the_reason_names_the_lag(boxes, monkeypatch):
    name = "convlag"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    seen = watch_fences(monkeypatch)
    # A backup tool's FLUSH TABLES WITH READ LOCK on the candidate: it keeps receiving and applies
    # nothing, so it falls further behind for as long as the lock is held.
    holder = inv.open(f"{name}-new")
    before = None

    def approve(*_a, **_k):
        nonlocal before
        holder.execute("FLUSH TABLES WITH READ LOCK")
        v.wait_for_acks(len(v.acks) + 100)
        before = kit.shape(inv, name)
        return True

    pb = kit.playbook(state, name, params={"converge_timeout_s": 1, "converge_max_trx": 10},
                      gates=[{"name": "go", "kind": "manual", "before": "cutover"}])
    try:
        outcome = start_run(pb, approver=approve, assume_yes=False)
        assert outcome.status == "refused", outcome.summary
        assert outcome.summary.startswith("refused before any change")
        assert f"{name}-new did not apply {name}-1's writes to within 10 transaction(s) in 1s" in outcome.summary
        assert "not fenced, nothing changed" in outcome.summary
        behind = int(outcome.summary.split("(last ")[1].split(" behind")[0])
        assert behind > 10, outcome.summary  # the lag it names is the one it saw
        assert seen == []  # read_only=ON was never sent
        assert kit.shape(inv, name) == before  # no server changed
        assert kit.writers(before) == [f"{name}-1"]
    finally:
        holder.execute("UNLOCK TABLES")
        holder.close()
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_candidate_stalled_after_the_fence_is_unfenced_within_the_budget_and_the_next_attempt_switches(
        boxes, monkeypatch):
    name = "convstall"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    real_converge, stalled = Switchover.converge, []
    holder = inv.open(f"{name}-new")

    def converge_then_stall(self):
        said = real_converge(self)
        if not stalled:
            # Converged; now the candidate stops applying (a backup's global read lock) for
            # 0.4 s, and the old primary commits once more before the fence.
            holder.execute("FLUSH TABLES WITH READ LOCK")
            with inv.open(f"{name}-1") as p:
                p.execute("CREATE DATABASE IF NOT EXISTS stall_mark")
            threading.Timer(0.4, lambda: holder.execute("UNLOCK TABLES")).start()
            stalled.append(True)
        return said

    monkeypatch.setattr(Switchover, "converge", converge_then_stall)
    pb = kit.playbook(state, name, params={"fence_attempts": 3, "fence_retry_pause_s": 0.2,
                                           "fenced_catchup_budget_s": 0.05})
    try:
        outcome = start_run(pb, assume_yes=True)
    finally:
        holder.close()
    assert stalled and outcome.status == "done", outcome.summary
    with Journal(resolve_journal_path()) as j:
        detail = j.run_detail(outcome.run_id)
    fence = next(s for s in detail["steps"] if s["name"] == f"fence {name}-1" and s["action"] == "run")
    assert "(attempt 2 of 3)" in fence["sentence"] and f"; {name}-new applied it in" in fence["sentence"]
    budget = [lg["message"] for lg in detail["logs"] if "fenced catch-up budget of 50 ms" in lg["message"]]
    assert len(budget) == 1 and f"unfenced {name}-1 (read_only=OFF)" in budget[0], detail["logs"]
    waited = float(budget[0].split("(waited ")[1].split(" ms")[0])
    assert 45 <= waited < 300  # unfenced at the budget, not after the 400 ms stall
    after = kit.shape(inv, name)
    assert kit.writers(after) == [f"{name}-new"]
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)
