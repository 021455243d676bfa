"""Write-ahead intents: journaled before a change is sent, loaded as statements in doubt by the
next process of the cluster's runs (once it holds the lock), and closed when settled."""

from __future__ import annotations

import time

from dbmigrate.app import runs
from dbmigrate.db.intent import kind_of
from dbmigrate.db.ledger import SafetyLedger
from dbmigrate.engine.events import EventBus, StepStarted
from dbmigrate.engine.journal import Journal

OPEN = "BEGIN NOT ATOMIC ... /* dbmigrate */ SET GLOBAL read_only=OFF; ... END"


def test_each_statement_kind_is_named():
    assert kind_of(OPEN) == "open"
    assert kind_of("SET STATEMENT lock_wait_timeout=5 FOR SET GLOBAL read_only=ON") == "fence"
    assert kind_of("SET STATEMENT sql_log_bin=0 FOR CREATE OR REPLACE EVENT mysql.x ... DO SET @@GLOBAL.read_only=0") \
        == "fence expiry"
    assert kind_of("CHANGE MASTER TO MASTER_HOST='h'") == "replication"
    assert kind_of("KILL CONNECTION 7") == "kill"
    assert kind_of("ALTER TABLE shop.orders ADD INDEX i (a)") == "alter table"


def killed_with_an_open_in_flight(journal: Journal) -> int:
    """What a process killed with its open in flight leaves: an intent without an outcome."""
    return journal.record_intent("run-1", "c1", dict(server="db2", address="127.0.0.1:3302", session_id=41,
                                                     user="dbmigrate", statement=OPEN, kind="open", generation=3,
                                                     at=time.time()))


def test_the_next_process_of_the_cluster_takes_an_unanswered_intent_as_in_doubt_and_closes_it_once_settled():
    with Journal(":memory:") as j:
        intent = killed_with_an_open_in_flight(j)
        j.intent_outcome(j.record_intent("run-1", "c1", dict(server="db1", address="127.0.0.1:3301", session_id=40,
                                                             user="dbmigrate", statement="SET GLOBAL read_only=ON",
                                                             at=time.time())), "done")
        ledger = SafetyLedger()
        with runs._decision(j, "run-2", "c1", EventBus(), dry_run=False, ledger=ledger):
            [doubt] = ledger.in_doubt.pending("127.0.0.1:3302")
            assert (doubt.session_id, doubt.user, doubt.statement) == (41, "dbmigrate", OPEN)
            assert ledger.in_doubt.pending("127.0.0.1:3301") == []  # answered: nothing in doubt
            assert ledger.intents.armed and ledger.generations.armed
            ledger.intents.settled(doubt.address, doubt.session_id, doubt.statement, "ended session 41 on db2")
        assert not ledger.intents.armed and not ledger.generations.armed
        assert j.open_intents("c1") == []
        with runs._decision(j, "run-3", "other-cluster", EventBus(), dry_run=False, ledger=SafetyLedger()):
            pass
        row = j._rows("SELECT outcome FROM intents WHERE id=?", (intent,))[0]  # noqa: SLF001 (a test's look)
        assert row["outcome"] == "settled: ended session 41 on db2"


def test_another_cluster_and_a_dry_run_load_nothing():
    with Journal(":memory:") as j:
        killed_with_an_open_in_flight(j)
        for cluster, dry in (("c2", False), ("c1", True)):
            ledger = SafetyLedger()
            with runs._decision(j, "run-2", cluster, EventBus(), dry_run=dry, ledger=ledger):
                assert ledger.in_doubt.all() == []
                assert ledger.generations.armed is (not dry)
        assert len(j.open_intents("c1")) == 1


def test_the_first_undo_of_a_process_is_a_new_decision():
    bus, ledger = EventBus(), SafetyLedger()
    with Journal(":memory:") as j, runs._decision(j, "run-1", "c1", bus, dry_run=False, ledger=ledger):
        ledger.generations._known["127.0.0.1:3301"] = 4  # noqa: SLF001 (what a bump left)
        bus.emit(StepStarted(run_id="run-1", index=1, phase="cutover", name="open", action="run"))
        assert ledger.generations.current("127.0.0.1:3301") == 4
        bus.emit(StepStarted(run_id="run-1", index=1, phase="cutover", name="open", action="undo"))
        assert ledger.generations.current("127.0.0.1:3301") is None  # bumped again before it is next touched
