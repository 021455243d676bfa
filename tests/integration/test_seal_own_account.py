"""Writes past read_only by the tool's own account, from another client, on real servers under
the zero-loss writer: the seal ends every session that can write the fenced old primary but the
tool's own, so nothing of such a write commits there after the final position; one that a session
opened later commits anyway is named (errant GTID) and the run pauses, never a silent done."""

from __future__ import annotations

import threading
import time

import pytest

from dbmigrate.app.runs import start_run
from dbmigrate.db.inspector import Inspector
from tests.integration import promote_kit as kit
from tests.integration.test_cutover_faults import FENCE, Timeline

pytestmark = pytest.mark.integration


def _table(inv, name: str) -> None:
    with inv.open(f"{name}-1") as s:
        s.execute("CREATE DATABASE IF NOT EXISTS sealt")
        s.execute("CREATE TABLE IF NOT EXISTS sealt.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")


def _rows(inv, server: str) -> int:
    with inv.open(server) as s:
        return int(s.scalar("SELECT COUNT(*) FROM sealt.t"))


def _errant_on(inv, old: str, new: str) -> list[str]:
    with inv.open(old) as o, inv.open(new) as n:
        old_state = Inspector(o).gtid_state()
        return o.flavor.errant(old_state, Inspector(n).gtid_state())


def test_a_write_by_the_tools_account_from_another_client_never_commits_after_the_final_position(boxes):
    name = "sealacc"
    state, inv = kit.topology(boxes, name)
    _table(inv, name)
    other = inv.open(f"{name}-1")  # another client, logged in as the tool's own account
    other_id = other.session_id
    watcher = inv.open(f"{name}-1")
    def write_past_read_only() -> None:
        try:
            other.execute("INSERT INTO sealt.t (v) SELECT SLEEP(6)")
        except Exception:  # its session ended by the seal
            pass

    def start_it() -> None:
        # Right after the fence: the statement is seen running before the tool goes on.
        threading.Thread(target=write_past_read_only, daemon=True).start()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not watcher.scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID=%s AND INFO LIKE 'INSERT%%'",
                (other_id,)):
            time.sleep(0.002)

    v = kit.start_verifier(inv, name)
    try:
        with Timeline() as t:
            t.on(f"{name}-1", FENCE, start_it)
            outcome = start_run(kit.playbook(state, name), assume_yes=True)
        with inv.open(f"{name}-1") as s:
            alive_after = int(s.scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID=%s",
                                       (other_id,)))
        time.sleep(6.5)  # past the statement's sleep: had it survived, it would have committed by now
        report = kit.finish_verifier(v, inv, name)
    finally:
        other.close()
        watcher.close()
    assert outcome.status == "done", outcome.summary
    assert report.lost_total == 0, report.summary()
    # Nothing of it committed on the old primary after the final position: no errant GTID there.
    # (A KILL interrupts SLEEP() and the INSERT may still commit: then before the position the seal
    # reads after ending it, and the candidate applied it before it opened.)
    assert _errant_on(inv, f"{name}-1", f"{name}-new") == []
    assert _rows(inv, f"{name}-1") == _rows(inv, f"{name}-new")
    assert not alive_after, "the other client's session was not ended by the seal"
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-new"]
    assert shape[f"{name}-1"]["source"] == f"{name}-new" and shape[f"{name}-1"]["running"], shape
    boxes.down(name)


def test_a_write_on_the_old_primary_after_the_cutover_pauses_the_run_and_is_named(boxes):
    name = "sealerr"
    state, inv = kit.topology(boxes, name)
    _table(inv, name)

    def write_on_old() -> None:  # a session opened after the seal: nothing can end it beforehand
        with inv.open(f"{name}-1") as s:
            s.execute("INSERT INTO sealt.t (v) VALUES (1)")

    wrote = []
    with Timeline() as t:
        # The new primary no longer replicates from the old one: what is written there now stays there.
        t.on(f"{name}-new", "RESET SLAVE", lambda: (write_on_old(), wrote.append(1)))
        outcome = start_run(kit.playbook(state, name), assume_yes=True)
    assert wrote, "the write on the old primary was not made"
    assert outcome.status == "paused", (outcome.summary, _rows(inv, f"{name}-1"), _errant_on(inv, f"{name}-1", f"{name}-new"))
    assert f"{name}-1 wrote 1 transaction(s) of its own after its final position" in outcome.summary, outcome.summary
    assert "rollback loses nothing" not in outcome.summary
    assert _errant_on(inv, f"{name}-1", f"{name}-new")
    boxes.down(name)
