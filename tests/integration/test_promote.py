"""Promote under live writes, on real servers: success, rollback, and the failure paths.

Each scenario reads like a runbook: build the topology, start the zero-loss
verifier (writes through HAProxy as the application user), run the playbook,
then assert the shape of the cluster and that no acknowledged write was lost.
"""

from __future__ import annotations


import pytest

from dbmigrate.app.runs import rollback_run, start_run
from dbmigrate.db import connection
from dbmigrate.engine.journal import Journal
from dbmigrate.app.runs import resolve_journal_path
from dbmigrate.routing import HAProxyRouter, RouterError, router_for

from tests.integration import promote_kit as kit
from tests import jsonlines

pytestmark = pytest.mark.integration


def test_promote_then_rollback_loses_nothing(boxes):
    name = "pro"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    outcome = start_run(kit.playbook(state, name), assume_yes=True)
    assert outcome.status == "done", outcome.summary
    after = kit.shape(inv, name)
    assert kit.writers(after) == [f"{name}-new"]
    assert after[f"{name}-1"] == {"read_only": True, "source": f"{name}-new", "running": True}  # reverse replication
    for r in (f"{name}-2", f"{name}-3"):
        assert after[r]["source"] == f"{name}-new" and after[r]["running"]
    assert router_for(inv, name).current().writer.endswith(str(inv.cluster(name).servers[f"{name}-new"].port))
    with Journal(resolve_journal_path()) as j:
        steps = j.run_detail(outcome.run_id)["steps"]
    assert {s["status"] for s in steps} <= {"done", "skipped"} and all(s["sentence"] for s in steps)
    # Roll the whole switchover back through the reverse replication.
    back = rollback_run(outcome.run_id, assume_yes=True)
    assert back.status == "rolled_back", back.summary
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    assert report.acknowledged > 100
    final = kit.shape(inv, name)
    assert kit.writers(final) == [f"{name}-1"]
    for r in (f"{name}-2", f"{name}-3", f"{name}-new"):
        assert final[r]["source"] == f"{name}-1" and final[r]["running"], (r, final[r])
    assert router_for(inv, name).current().writer.endswith(str(inv.cluster(name).servers[f"{name}-1"].port))
    boxes.down(name)


def test_candidate_lagging_past_catchup_bound_aborts_and_unfences(boxes):
    name = "prolag"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)

    def delay_candidate(*_):
        # Passes preflight, then falls behind: the catch-up wait after the fence must time out.
        with inv.open(f"{name}-new") as c:
            c.execute("STOP SLAVE")
            c.execute("CHANGE MASTER TO MASTER_DELAY=30")
            c.execute("START SLAVE")
        v.wait_for_acks(len(v.acks) + 30)
        return True

    pb = kit.playbook(state, name, params={"catchup_timeout_s": 1.5},
                      gates=[{"name": "go", "kind": "manual", "before": "cutover"}])
    outcome = start_run(pb, approver=lambda *a, **k: delay_candidate(), assume_yes=False)
    assert outcome.status in ("rolled_back", "failed"), outcome.summary
    assert "did not apply" in outcome.summary
    after = kit.shape(inv, name)
    assert kit.writers(after) == [f"{name}-1"], after  # never left read-only, never two writers
    with inv.open(f"{name}-new") as c:
        c.execute("STOP SLAVE")
        c.execute("CHANGE MASTER TO MASTER_DELAY=0")
        c.execute("START SLAVE")
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_candidate_killed_right_after_fence_unfences(boxes):
    name = "prokill"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    killed = []

    def kill_after_fence(server, sql, ms):
        if server == f"{name}-1" and "read_only=ON" in sql and not killed:
            boxes.kill_instance(name, f"{name}-new")
            killed.append(True)

    connection.add_statement_listener(kill_after_fence)
    try:
        outcome = start_run(kit.playbook(state, name), assume_yes=True)
    finally:
        connection.remove_statement_listener(kill_after_fence)
    assert killed and outcome.status in ("rolled_back", "failed"), outcome.summary
    with inv.open(f"{name}-1") as p:
        assert p.scalar("SELECT @@read_only") == 0
    v.wait_for_acks(len(v.acks) + 20)
    v.stop()
    servers = [inv.open(n) for n in (f"{name}-1", f"{name}-2", f"{name}-3")]
    report = v.check(servers)
    for s in servers:
        s.close()
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_router_failure_rolls_back_to_old_primary(boxes, monkeypatch):
    name = "prorouter"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    real_switch = HAProxyRouter.switch_writer
    calls = []

    def failing_switch(self, new, old=None, **kw):
        calls.append(getattr(new, "name", str(new)))
        if len(calls) == 1:  # the promote's flip fails; the switch back must still work
            raise RouterError("HAProxy admin socket answered: No such server.")
        return real_switch(self, new, old, **kw)

    monkeypatch.setattr(HAProxyRouter, "switch_writer", failing_switch)
    outcome = start_run(kit.playbook(state, name), assume_yes=True)
    assert outcome.status in ("rolled_back", "failed") and "No such server" in outcome.summary, outcome.summary
    final = kit.shape(inv, name)
    assert kit.writers(final) == [f"{name}-1"], final
    assert final[f"{name}-new"]["source"] == f"{name}-1" and final[f"{name}-new"]["running"]
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_rehearse_promote_json(cli):
    r = cli("rehearse", "promote", "--json", "--load-seconds", "2", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[:3000]
    report = jsonlines.result(r.stdout)
    assert report["lost_writes"] == 0
    assert report["old_primary_replicating"] is True
    assert report["rolled_back"] is False
    assert report["new_primary"].endswith("-new")
    assert report["fenced_ms"] > 0
    assert report["load_before"]["tps"] > 0 and report["load_after"]["tps"] > 0


def test_rollback_after_crash_and_restart_of_the_new_primary_keeps_its_writes(boxes):
    """Killed after the flip, then the new primary restarts read-only: its acknowledged writes
    must reach the old primary before that one takes writes again (never just unfence it)."""
    name = "procrash"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    crashed = []

    def crash_at_reset(server, sql, ms):
        if server == f"{name}-new" and "RESET SLAVE ALL" in sql and not crashed:
            crashed.append(True)
            raise KeyboardInterrupt  # the tool dies here: after the flip, before reverse replication

    connection.add_statement_listener(crash_at_reset)
    try:
        with pytest.raises(KeyboardInterrupt):
            start_run(kit.playbook(state, name), assume_yes=True)
    finally:
        connection.remove_statement_listener(crash_at_reset)
    v.wait_for_acks(len(v.acks) + 50)  # writes land on the new primary
    boxes.stop_instance(name, f"{name}-new")  # it restarts read-only (its config says so)
    boxes.start_instance(name, f"{name}-new")
    back = rollback_run(_latest_run_id(), assume_yes=True)
    assert back.status == "rolled_back", back.summary
    final = kit.shape(inv, name)
    assert kit.writers(final) == [f"{name}-1"]
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def _latest_run_id() -> str:
    import sqlite3

    db = sqlite3.connect(str(resolve_journal_path()))
    try:
        return db.execute("SELECT id FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()[0]
    finally:
        db.close()


def test_a_stuck_replica_does_not_roll_back_a_healthy_cutover(boxes):
    """A read replica that stops applying after preflight is left under the old primary (it still
    gets every write through the chain once it recovers); the write path moves on."""
    name = "prostuck"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)

    def break_replica(*_):
        with inv.open(f"{name}-3") as r:
            r.execute("STOP SLAVE SQL_THREAD")
        v.wait_for_acks(len(v.acks) + 20)
        return True

    pb = kit.playbook(state, name, params={"replica_timeout_s": 1, "verify_timeout_s": 2},
                      gates=[{"name": "go", "kind": "manual", "before": "cutover"}])
    outcome = start_run(pb, approver=lambda *a, **k: break_replica())
    assert outcome.status == "done", outcome.summary
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-new"]
    assert shape[f"{name}-3"]["source"] == f"{name}-1"  # left where it was, named in the run
    assert shape[f"{name}-2"]["source"] == f"{name}-new"
    with Journal(resolve_journal_path()) as j:
        sentences = " ".join(s["sentence"] or "" for s in j.run_detail(outcome.run_id)["steps"])
    assert f"left under {name}-1: {name}-3" in sentences
    with inv.open(f"{name}-3") as r:
        r.execute("START SLAVE SQL_THREAD")
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)
