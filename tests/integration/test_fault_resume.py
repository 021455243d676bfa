"""A run killed while it repoints the other replicas, then resumed or rolled back, on real
servers under live writes: the replica whose repoint was cut short ends replicating and
caught up, and no acknowledged write is lost."""

from __future__ import annotations

import sqlite3

import pytest

from dbmigrate.app.runs import resolve_journal_path, resume_run, rollback_run, start_run
from dbmigrate.db import connection
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration


def _killed_mid_repoint(state, inv, name: str) -> None:
    """Run a promote and kill the tool right after it changed a replica's source, before
    START SLAVE: the replica points at the new primary with its replication stopped. (Inside a
    run the change goes inside its generation guard: the request holds it, it does not start with it.)"""
    killed = []

    def kill_after_change(server, sql, ms):
        if server == f"{name}-2" and "CHANGE MASTER" in sql and not killed:
            killed.append(True)
            raise KeyboardInterrupt

    connection.add_statement_listener(kill_after_change)
    try:
        with pytest.raises(KeyboardInterrupt):
            start_run(kit.playbook(state, name), assume_yes=True)
    finally:
        connection.remove_statement_listener(kill_after_change)
    left = kit.shape(inv, name)[f"{name}-2"]
    assert left == {"read_only": True, "source": f"{name}-new", "running": False}


def _latest_run_id() -> str:
    db = sqlite3.connect(str(resolve_journal_path()))
    try:
        return db.execute("SELECT id FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()[0]
    finally:
        db.close()


def test_resume_restarts_a_replica_whose_repoint_was_cut_short(boxes):
    name = "frres"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    _killed_mid_repoint(state, inv, name)
    outcome = resume_run(_latest_run_id(), assume_yes=True)
    assert outcome.status == "done", outcome.summary
    final = kit.shape(inv, name)
    assert kit.writers(final) == [f"{name}-new"]
    for r in (f"{name}-1", f"{name}-2", f"{name}-3"):
        assert final[r]["source"] == f"{name}-new" and final[r]["running"], (r, final[r])
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_rollback_converges_with_a_replica_whose_repoint_was_cut_short(boxes):
    name = "frrb"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    _killed_mid_repoint(state, inv, name)
    back = rollback_run(_latest_run_id(), assume_yes=True)
    assert back.status == "rolled_back", back.summary
    final = kit.shape(inv, name)
    assert kit.writers(final) == [f"{name}-1"]
    for r in (f"{name}-2", f"{name}-3", f"{name}-new"):
        assert final[r]["source"] == f"{name}-1" and final[r]["running"], (r, final[r])
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)
