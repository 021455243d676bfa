"""Every branch of the switchover decisions on a fake topology: the sentence each
returns (or the refusal and its hint) and the state the servers end in.

Names: db1 is the old primary, db2 the candidate, db3 another replica.
"""

from __future__ import annotations

import re

import pytest

from dbmigrate.db.flavor import MySQL
from dbmigrate.db.inspector import Session
from dbmigrate.exceptions import ConnectionFailed, DbmigrateError, SafetyError, WaitTimeout
from dbmigrate.routing.base import RouterError
from dbmigrate.procedures.kit.roles import find_primary
from dbmigrate.procedures.kit.switchover.settings import FIRST_CATCHUP_WAIT_S
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams, switch_back
from tests.unit.fake_topology import FakeInspector, FakeRouter, FakeTopology, cluster

FENCE = "SET STATEMENT lock_wait_timeout=5 FOR SET GLOBAL read_only=ON"
OPEN = "SET GLOBAL read_only=OFF"
CLOSE = "SET GLOBAL read_only=ON"
CHANGE_TO = {n: f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={p}, MASTER_USER='repl', "
                f"MASTER_PASSWORD='secret', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1"
             for n, p in (("db1", 3301), ("db2", 3302))}
MAKE_REPLICA_OF = {n: [CLOSE, "STOP SLAVE", "SET GLOBAL gtid_slave_pos=@@GLOBAL.gtid_binlog_pos", CHANGE_TO[n],
                       "START SLAVE"] for n in CHANGE_TO}


def said(sentence: str) -> str:
    """The sentence with measured durations masked."""
    return re.sub(r"\d+(\.\d+)? ms", "N ms", sentence)


def switchover(topo: FakeTopology, router: FakeRouter | None = None, *, dry_run: bool = False, record=None,
               **settings) -> Switchover:
    # The statements pinned here are the switchover's own; the fence's expiry (scheduled with
    # the fence, dropped before the open) has its tests in test_fence_expiry.py.
    settings.setdefault("fence_expiry", "off")
    return Switchover(topo, "db1", "db2", SwitchoverParams(**settings), router, dry_run=dry_run, record=record,
                      clock=topo.clock)


def app_session(id_: int, user: str = "app") -> Session:
    return Session(id_, user, "10.0.0.9:5000", "shop", "Query", 0, None)


# -- shapes along the way of a switchover db1 -> db2 --------------------------------

def fenced() -> tuple[FakeTopology, FakeRouter]:
    """db1 fenced, db2 (and db3) still replicating from it and caught up."""
    topo = cluster()
    topo.servers["db1"].read_only = True
    return topo, FakeRouter(topo, "db1")


def opened(writes: int = 2) -> tuple[FakeTopology, FakeRouter]:
    """db2 opened (replication stopped, its configuration kept) and took writes; the router still on db1."""
    topo, router = fenced()
    db2 = topo.servers["db2"]
    db2.io_running = db2.sql_running = db2.read_only = False
    topo.write("db2", writes)
    return topo, router


def promoted(writes: int = 2) -> tuple[FakeTopology, FakeRouter]:
    """A finished switchover: db2 the writable primary with writes of its own, db1 and db3 replicating from it."""
    topo, router = fenced()
    topo.link("db2", None)
    topo.servers["db2"].read_only = False
    topo.link("db1", "db2")
    topo.link("db3", "db2")
    topo.write("db2", writes)
    router.writer = "127.0.0.1:3302"
    return topo, router


def assert_back_on_db1(topo: FakeTopology, router: FakeRouter) -> None:
    """db1 the only writable server, with every write; db2 and db3 replicating from it; writes routed to it."""
    db1, db2, db3 = (topo.servers[n] for n in ("db1", "db2", "db3"))
    assert topo.writable() == ["db1"] and db1.source is None
    assert (db2.source, db2.io_running, db2.sql_running) == ("db1", True, True)
    assert (db3.source, db3.io_running, db3.sql_running) == ("db1", True, True)
    assert router.writer == "127.0.0.1:3301"
    assert topo.missing_on("db1") == [] and topo.missing_on("db2") == [] and topo.missing_on("db3") == []


# -- switch_back -----------------------------------------------------------------------

def test_switch_back_refuses_when_both_are_writable_and_changes_nothing():
    topo, router = opened()
    topo.servers["db1"].read_only = False
    with pytest.raises(SafetyError) as refused:
        switch_back(switchover(topo, router))
    assert refused.value.message == "both db1 and db2 are writable"
    assert refused.value.hint == "set read_only=ON by hand on the one that should not take writes"
    assert topo.sent == [] and topo.writable() == ["db1", "db2"]


def test_switch_back_from_a_writable_new_primary_fences_it_catches_up_and_reopens_the_old():
    topo, router = promoted()
    db2 = topo.servers["db2"]
    db2.sessions = [app_session(7), app_session(8, "dbmigrate"), app_session(9, "repl")]
    db2.open_trx = {7}

    sentence = switch_back(switchover(topo, router))

    assert said(sentence) == (
        "fenced db2 (read_only=ON) in N ms; final position 0-2-12; db1 applied 0-2-12 in N ms; "
        "db1 stopped replicating and is writable (read_only=OFF) in N ms; "
        "router sends writes to db1 (switched in N ms); db2: 1 open app transaction(s) at the start, 1 app session(s) ended; "
        "db1 forgot its old source (RESET SLAVE ALL, N ms); db2 replicates from db1 again; repointed db3 to db1")
    assert_back_on_db1(topo, router)
    assert [s.user for s in db2.sessions] == ["dbmigrate", "repl"]  # only the application's session ended
    # The new primary is fenced before the old one opens, and writes move only once the old one is open.
    assert topo.sent.index(("db2", FENCE)) < topo.sent.index(("db1", OPEN)) < topo.sent.index(("router", "writer=db1"))
    assert router.switches == [("db1", "db2")]
    assert topo.statements("db1") == ["START SLAVE", "STOP SLAVE", OPEN, "STOP SLAVE", "RESET SLAVE ALL"]


def test_switch_back_after_the_candidate_opened_makes_the_old_a_replica_first_and_resumes_the_new():
    topo, router = opened()

    sentence = switch_back(switchover(topo, router))

    assert said(sentence) == (
        "db1 replicates from db2; fenced db2 (read_only=ON) in N ms; final position 0-2-12; "
        "db1 applied 0-2-12 in N ms; db1 stopped replicating and is writable (read_only=OFF) in N ms; "
        "db2: 0 open app transaction(s) at the start, 0 app session(s) ended; "
        "db1 forgot its old source (RESET SLAVE ALL, N ms); db2 resumed replicating from db1")
    assert_back_on_db1(topo, router)
    assert topo.statements("db1")[:5] == MAKE_REPLICA_OF["db2"]
    assert topo.statements("db2") == [FENCE, "START SLAVE"]  # its stopped link to db1 is resumed, not rebuilt


def test_switch_back_of_a_candidate_opened_with_its_replication_running_stops_it_before_the_old_follows():
    # The cutover opens the candidate before STOP SLAVE (that waits for the reset step, after the flip).
    topo, router = fenced()
    db2 = topo.servers["db2"]
    db2.read_only = False
    topo.write("db2", 2)
    assert db2.sql_running and db2.source == "db1"

    switch_back(switchover(topo, router))

    assert_back_on_db1(topo, router)
    # db2 stops replicating from db1 before db1 is made a replica of db2: never the two from each other.
    assert topo.sent.index(("db2", "STOP SLAVE")) < topo.sent.index(("db1", CHANGE_TO["db2"]))


def test_the_cutover_opens_the_candidate_without_stopping_its_replication():
    topo, router = fenced()
    sentence = switchover(topo, router).open_candidate(stop_replica=False)
    db2 = topo.servers["db2"]
    assert said(sentence) == "db2 is writable (read_only=OFF) in N ms; its replication stops after the router flip"
    assert topo.statements("db2") == [OPEN] and db2.sql_running and not db2.read_only


def test_switch_back_catchup_timeout_unfences_the_new_primary_since_the_old_is_read_only_and_reraises():
    topo, router = promoted()
    topo.servers["db1"].lag_until = float("inf")  # applies nothing: a long event on its SQL thread
    topo.write("db2")
    started = topo.clock.monotonic()

    with pytest.raises(WaitTimeout) as timed_out:
        switch_back(switchover(topo, router))

    assert timed_out.value.message == ("db1 did not apply db2's final position 0-2-13 within 5s "
                                       "(still behind: {'0': 1})")
    # The server-side wait ends a round trip's margin before the bound, so that its reply arrives within it.
    assert 4.5 <= topo.clock.monotonic() - started <= 5
    assert topo.writable() == ["db2"] and router.writer == "127.0.0.1:3302"  # back where it was
    assert topo.statements("db2") == [FENCE, OPEN]
    assert OPEN not in topo.statements("db1")


def test_switch_back_catchup_timeout_keeps_the_new_primary_fenced_if_the_old_was_opened_meanwhile():
    topo, router = promoted()
    topo.servers["db1"].lag_until = float("inf")
    topo.write("db2")
    topo.clock.at(1, lambda: setattr(topo.servers["db1"], "read_only", False))  # opened by hand during the wait

    with pytest.raises(SafetyError) as refused:
        switch_back(switchover(topo, router))

    assert refused.value.message == "refusing to unfence db2: db1 is writable (two primaries)"
    assert isinstance(refused.value.__context__, WaitTimeout)
    assert topo.writable() == ["db1"] and topo.statements("db2") == [FENCE]


def test_switch_back_stops_before_fencing_when_the_old_cannot_replicate_from_the_new():
    topo, router = promoted()
    topo.servers["db1"].fails_with = "Could not execute Write_rows_v1 event: Duplicate entry '7' for key 'PRIMARY'"
    started = topo.clock.monotonic()

    with pytest.raises(DbmigrateError) as failed:
        switch_back(switchover(topo, router))

    assert failed.value.message == ("replication on db1 stopped with an error (SQL thread stopped: Could not "
                                    "execute Write_rows_v1 event: Duplicate entry '7' for key 'PRIMARY')")
    # A stopped SQL thread does not restart by itself: named once seen stopped twice, not after half the bound.
    assert 0.3 <= topo.clock.monotonic() - started < 1
    assert topo.writable() == ["db2"] and topo.statements("db2") == []  # never fenced


def test_switch_back_brings_writes_of_a_read_only_new_primary_to_the_old_before_opening_it():
    topo, router = promoted()
    topo.servers["db1"].io_running = False  # reverse replication stopped before db2's last writes
    topo.write("db2", 3)
    topo.servers["db2"].read_only = True  # then db2 restarted read-only: its position is final

    sentence = switch_back(switchover(topo, router))

    assert said(sentence) == (
        "db1 applied 0-2-15 in N ms; db1 stopped replicating and is writable (read_only=OFF) in N ms; "
        "router sends writes to db1 (switched in N ms); db1 forgot its old source (RESET SLAVE ALL, N ms); "
        "db2 replicates from db1 again; repointed db3 to db1")
    assert_back_on_db1(topo, router)
    assert topo.statements("db1")[0] == "START SLAVE"


def test_switch_back_never_opens_the_old_while_a_read_only_new_primary_holds_writes_it_cannot_get():
    topo, router = promoted()
    topo.servers["db1"].io_running = False
    topo.write("db2", 3)
    topo.servers["db2"].read_only = True
    topo.servers["db1"].lag_until = float("inf")

    with pytest.raises(WaitTimeout) as timed_out:
        switch_back(switchover(topo, router))

    assert timed_out.value.message.startswith("db1 did not apply db2's final position 0-2-15 within 5s")
    assert topo.writable() == []  # nobody unfenced: opening db1 would leave db2's writes behind
    assert OPEN not in topo.statements("db1")


def test_switch_back_makes_the_old_a_replica_of_a_read_only_new_primary_that_took_writes():
    topo, router = opened()
    topo.servers["db2"].read_only = True  # restarted read-only before the router moved

    sentence = switch_back(switchover(topo, router))

    assert said(sentence) == (
        "db1 replicates from db2; db1 applied 0-2-12 in N ms; "
        "db1 stopped replicating and is writable (read_only=OFF) in N ms; "
        "db1 forgot its old source (RESET SLAVE ALL, N ms); db2 resumed replicating from db1")
    assert topo.statements("db1")[:5] == MAKE_REPLICA_OF["db2"]
    assert_back_on_db1(topo, router)


def test_switch_back_unfences_the_old_when_nobody_is_writable_and_it_has_everything():
    topo, router = fenced()

    sentence = switch_back(switchover(topo, router), candidate_opened=False)

    assert sentence == "unfenced db1 (read_only=OFF): it takes writes again"
    assert_back_on_db1(topo, router)
    assert topo.sent == [("db1", OPEN)]


def test_switch_back_refuses_to_unfence_while_a_candidate_that_was_opened_is_unreachable():
    topo, router = fenced()
    topo.servers["db2"].up = False

    with pytest.raises(SafetyError) as refused:
        switch_back(switchover(topo, router), candidate_opened=True)

    assert refused.value.message == "cannot unfence db1: db2 is unreachable and may be writable (what it was last sent may still land): db1 stays fenced"
    assert refused.value.hint.startswith("check db2 by hand: set read_only=ON there")
    assert topo.sent == [] and topo.writable() == []


def test_switch_back_unfences_when_the_unreachable_candidate_was_never_opened():
    topo, router = fenced()
    topo.servers["db2"].up = False

    sentence = switch_back(switchover(topo, router), candidate_opened=False)

    assert sentence == "unfenced db1 (read_only=OFF): it takes writes again"
    assert topo.sent == [("db1", OPEN)] and topo.writable() == ["db1"]


def test_switch_back_leaves_a_router_that_already_points_back_alone():
    topo, router = opened()

    switch_back(switchover(topo, router))

    assert router.switches == [] and ("router", "writer=db1") not in topo.sent
    assert router.writer == "127.0.0.1:3301"


def test_switch_back_leaves_replicas_already_under_the_old_primary_alone():
    topo, router = promoted()
    topo.link("db3", "db1")  # not repointed yet when the switchover stopped
    topo.servers["db3"].read_only = True

    sentence = switch_back(switchover(topo, router))

    assert "repointed db3" not in sentence
    assert topo.statements("db3") == []
    assert_back_on_db1(topo, router)


def test_switch_back_lets_replicas_under_the_new_primary_apply_its_final_position_before_moving_them():
    topo, router = promoted()
    topo.servers["db3"].lag_until = topo.clock.monotonic() + 3
    topo.write("db2")  # db3 gets it only 3 s from now
    started = topo.clock.monotonic()

    sentence = switch_back(switchover(topo, router))

    assert sentence.endswith("db2 replicates from db1 again; repointed db3 to db1")
    assert topo.clock.monotonic() - started == 3  # waited for db2's final position, then moved
    assert topo.statements("db3") == ["STOP SLAVE", CHANGE_TO["db1"], "START SLAVE"]
    assert_back_on_db1(topo, router)


def test_switch_back_does_not_move_a_replica_that_cannot_reach_the_new_primary_final_position():
    topo, router = promoted()
    topo.servers["db3"].lag_until = float("inf")
    topo.write("db2")

    with pytest.raises(WaitTimeout) as timed_out:
        switch_back(switchover(topo, router))

    assert timed_out.value.message == "replica db3 did not reach 0-2-13 within 30s"
    assert timed_out.value.hint == "check replication on db3; it still points at its old source"
    assert topo.servers["db3"].source == "db2" and topo.statements("db3") == []
    assert topo.writable() == ["db1"] and router.writer == "127.0.0.1:3301"  # the primary is back regardless
    # db2 follows db1 already, so the stuck replica gets every write through it once it recovers.
    assert (topo.servers["db2"].source, topo.servers["db2"].sql_running) == ("db1", True)
    topo.write("db1")
    topo.servers["db3"].lag_until = 0.0
    assert topo.missing_on("db3") == []


def test_switch_back_points_replication_at_replication_addresses_and_the_router_at_the_tool_ones():
    topo, router = promoted()
    topo.repl_addresses = {n: (f"{n}.internal", 3306) for n in topo.servers}  # containers: how servers see each other

    switch_back(switchover(topo, router))

    assert_back_on_db1(topo, router)  # router on 127.0.0.1:3301
    to_db1 = CHANGE_TO["db1"].replace("'127.0.0.1', MASTER_PORT=3301", "'db1.internal', MASTER_PORT=3306")
    assert to_db1 in topo.statements("db2") and to_db1 in topo.statements("db3")


def test_switch_back_is_idempotent():
    topo, router = promoted()
    sw = switchover(topo, router)
    switch_back(sw)
    topo.sent.clear()

    assert switch_back(sw) == "db1 is already the primary"
    assert topo.sent == []
    assert_back_on_db1(topo, router)


def test_switch_back_in_dry_run_sends_nothing_and_plans_the_fence_before_the_open():
    topo, router = promoted()
    before = {n: (s.read_only, s.source, list(s.log)) for n, s in topo.servers.items()}
    planned: list[tuple[str, str]] = []

    sentence = switch_back(switchover(topo, router, dry_run=True, record=lambda who, sql: planned.append((who, sql))))

    assert said(sentence) == (
        "fenced db2 (read_only=ON) in N ms; final position 0-2-12; would wait up to 5s for db1 to apply 0-2-12; "
        "db1 stopped replicating and is writable (read_only=OFF) in N ms; would switch the writer from db2 to db1; "
        "db2: 0 open app transaction(s) at the start, 0 app session(s) ended; "
        "db1 forgot its old source (RESET SLAVE ALL, N ms); db2 replicates from db1 again; repointed db3 to db1")
    assert topo.sent == [] and router.switches == []
    assert {n: (s.read_only, s.source, list(s.log)) for n, s in topo.servers.items()} == before
    assert planned.index(("db2", FENCE)) < planned.index(("db1", OPEN)) < \
        planned.index(("router", "send writes to db1 (127.0.0.1:3301) instead of db2"))
    shown = [sql.replace("'secret'", "'***'") for sql in MAKE_REPLICA_OF["db1"]]  # a plan never shows the password
    assert [sql for who, sql in planned if who == "db2"] == [FENCE, *shown]
    assert not any("secret" in sql for _, sql in planned)


# -- unfence_old -----------------------------------------------------------------------

def test_unfence_old_when_it_is_already_writable_says_so():
    topo = cluster()
    assert switchover(topo).unfence_old(candidate_known_closed=False) == "db1 is already writable"
    assert topo.sent == []


def test_unfence_old_refuses_while_the_candidate_is_writable():
    topo, _ = opened()
    with pytest.raises(SafetyError) as refused:
        switchover(topo).unfence_old(candidate_known_closed=True)
    assert refused.value.message == "refusing to unfence db1: db2 is writable (two primaries)"
    assert refused.value.hint == "roll the switchover back instead: dbmigrate rollback RUN"
    assert topo.sent == [] and topo.writable() == ["db2"]


def test_unfence_old_refuses_while_the_candidate_is_unreachable_and_not_known_closed():
    topo, _ = fenced()
    topo.servers["db2"].up = False
    with pytest.raises(SafetyError) as refused:
        switchover(topo).unfence_old(candidate_known_closed=False)
    assert refused.value.message == "cannot unfence db1: db2 is unreachable and may be writable (what it was last sent may still land): db1 stays fenced"
    assert refused.value.hint == ("check db2 by hand: set read_only=ON there and bring its writes to db1 "
                                  "(replicate until caught up) before db1 takes writes again")
    assert topo.sent == [] and topo.writable() == []


def test_unfence_old_when_the_unreachable_candidate_is_known_closed():
    topo, _ = fenced()
    topo.servers["db2"].up = False
    assert switchover(topo).unfence_old(candidate_known_closed=True) == \
        "unfenced db1 (read_only=OFF): it takes writes again"
    assert topo.sent == [("db1", OPEN)] and topo.writable() == ["db1"]


def test_unfence_old_when_the_candidate_is_read_only():
    topo, _ = fenced()
    assert switchover(topo).unfence_old(candidate_known_closed=False) == \
        "unfenced db1 (read_only=OFF): it takes writes again"
    assert topo.sent == [("db1", OPEN)] and topo.writable() == ["db1"]


# -- fence, wait_catchup, open_candidate -----------------------------------------------------

def test_fence_sets_read_only_with_a_bounded_lock_wait_and_reads_the_final_position():
    topo = cluster()
    sentence, position = switchover(topo).fence()
    assert said(sentence) == "fenced db1 (read_only=ON) in N ms; final position 0-1-10"
    assert position == "0-1-10"
    assert topo.sent == [("db1", FENCE)] and topo.writable() == []


def test_fence_refuses_a_mysql_server_without_gtids():
    topo = cluster()
    topo.servers["db1"].flavor, topo.servers["db1"].gtid_mode = MySQL(), "OFF_PERMISSIVE"
    with pytest.raises(SafetyError) as refused:
        switchover(topo).fence()
    assert refused.value.message == "db1 runs with gtid_mode=OFF_PERMISSIVE"
    assert refused.value.hint == "switchovers need gtid_mode=ON and enforce_gtid_consistency=ON"
    assert topo.sent == [] and topo.writable() == ["db1"]


def test_end_sessions_waits_for_open_app_transactions_then_ends_only_app_sessions():
    topo, _ = fenced()
    db1 = topo.servers["db1"]
    db1.sessions = [app_session(7), app_session(8), app_session(9, "dbmigrate"), app_session(10, "repl")]
    db1.open_trx = {7, 9}
    topo.clock.at(0.5, lambda: db1.open_trx.discard(7))  # its commit returns: read_only lets it finish
    started = topo.clock.monotonic()

    sentence = switchover(topo).end_sessions()

    assert sentence == "db1: 1 open app transaction(s) at the start, 2 app session(s) ended"
    assert 0.5 <= topo.clock.monotonic() - started < 0.6  # not the whole 2 s bound
    assert topo.sent == [("db1", "KILL CONNECTION 7"), ("db1", "KILL CONNECTION 8")]
    assert [x.user for x in db1.sessions] == ["dbmigrate", "repl"]


def test_wait_catchup_refuses_a_candidate_whose_sql_thread_stopped_with_its_error():
    topo = cluster()
    db2 = topo.servers["db2"]
    db2.sql_running, db2.last_sql_error = False, "Duplicate entry '7' for key 'PRIMARY'"
    final = topo.write("db1")  # db2 stopped before this one
    topo.servers["db1"].read_only = True
    started = topo.clock.monotonic()
    with pytest.raises(DbmigrateError) as refused:
        switchover(topo).wait_catchup(final)
    # found out after the short first wait, not at the end of the catch-up bound
    assert topo.clock.monotonic() - started <= FIRST_CATCHUP_WAIT_S + 0.01
    assert refused.value.message == ("db2 is not applying replication "
                                     "(SQL thread No: Duplicate entry '7' for key 'PRIMARY')")
    assert refused.value.hint == "fix replication on the candidate and run again"


def test_wait_catchup_times_out_naming_what_is_missing():
    topo, _ = fenced()
    topo.servers["db2"].lag_until = float("inf")
    topo.servers["db1"].read_only = False
    position = topo.write("db1", 2)
    topo.servers["db1"].read_only = True
    started = topo.clock.monotonic()
    with pytest.raises(WaitTimeout) as timed_out:
        switchover(topo, catchup_timeout_s=3).wait_catchup(position)
    assert timed_out.value.message == "db2 did not apply db1's final position 0-1-12 within 3s (still behind: {'0': 2})"
    assert timed_out.value.hint.startswith("the old primary will be unfenced")
    assert 2.5 <= topo.clock.monotonic() - started <= 3


def test_wait_catchup_on_a_frozen_candidate_ends_at_its_own_bound_not_the_read_timeout():
    topo, _ = fenced()
    topo.servers["db2"].frozen = True
    started = topo.clock.monotonic()
    with pytest.raises(WaitTimeout) as timed_out:
        switchover(topo, catchup_timeout_s=5).wait_catchup(topo.servers["db1"].position())
    assert topo.clock.monotonic() - started == 5  # not the 60 s read timeout of the first status read
    assert timed_out.value.message.startswith("db2 did not apply db1's final position 0-1-10 within 5s: "
                                              "it did not answer (db2 (127.0.0.1:3302) did not answer")
    assert timed_out.value.message.endswith("waited 5.0s)")


def test_a_frozen_candidate_never_opened_is_left_alone_and_the_old_primary_unfenced_within_the_probe_bound():
    topo, router = fenced()
    topo.servers["db2"].frozen = True
    started = topo.clock.monotonic()
    sentence = switch_back(switchover(topo, router, probe_timeout_s=2), candidate_opened=False,
                           router_switched=False)
    assert sentence == "unfenced db1 (read_only=OFF): it takes writes again"
    assert topo.clock.monotonic() - started == 2  # one bounded probe of db2, then never asked again
    assert topo.writable() == ["db1"] and router.writer == "127.0.0.1:3301" and router.switches == []
    assert topo.statements("db2") == []
    topo.servers["db2"].frozen = False  # SIGCONT: still a read-only replica of db1, with every write
    assert topo.servers["db2"].read_only and topo.missing_on("db2") == []


def test_a_frozen_candidate_that_may_have_been_opened_keeps_the_old_primary_fenced():
    topo, router = fenced()
    topo.servers["db2"].frozen = True
    with pytest.raises(SafetyError) as refused:
        switch_back(switchover(topo, router), candidate_opened=True, router_switched=False)
    assert refused.value.message == "cannot unfence db1: db2 is unreachable and may be writable (what it was last sent may still land): db1 stays fenced"
    assert topo.writable() == []


def test_a_dead_router_never_switched_by_the_run_is_skipped_and_the_candidate_replicates_again():
    topo, router = opened(writes=0)  # db2 opened, the router died before the flip

    def dead(*_a, **_k):
        raise RouterError("HAProxy admin socket /x refused the connection (HAProxy not running?)")

    router.current = dead  # type: ignore[method-assign]
    router.switch_writer = dead  # type: ignore[method-assign]
    sentence = switch_back(switchover(topo, router), candidate_opened=True, router_switched=False)
    assert "router not changed (it did not answer: HAProxy admin socket /x refused the connection" in sentence
    assert "db2 resumed replicating from db1" in sentence
    assert_back_on_db1(topo, router)


def test_a_dead_router_the_run_did_switch_fails_the_undo():
    topo, router = promoted()

    def dead(*_a, **_k):
        raise RouterError("HAProxy admin socket /x refused the connection (HAProxy not running?)")

    router.current = dead  # type: ignore[method-assign]
    with pytest.raises(RouterError):
        switch_back(switchover(topo, router), router_switched=True)


def test_switch_back_to_a_dead_old_primary_names_the_way_forward():
    topo, router = fenced()
    topo.servers["db1"].up = False
    with pytest.raises(SafetyError) as refused:
        switch_back(switchover(topo, router))
    assert refused.value.message.startswith("cannot switch back to db1: cannot reach db1")
    assert "dbmigrate resume RUN --without-old-primary" in refused.value.hint


def test_wait_catchup_says_when_the_candidate_applied_the_position():
    topo, _ = fenced()
    topo.servers["db2"].lag_until = topo.clock.monotonic() + 2
    topo.servers["db1"].read_only = False
    position = topo.write("db1")
    topo.servers["db1"].read_only = True
    started = topo.clock.monotonic()
    assert said(switchover(topo).wait_catchup(position)) == "db2 applied 0-1-11 in N ms"
    assert topo.clock.monotonic() - started == 2 and topo.missing_on("db2") == []


def test_open_candidate_stops_replication_before_it_lifts_read_only():
    topo, _ = fenced()
    sentence = switchover(topo).open_candidate()
    assert said(sentence) == "db2 stopped replicating and is writable (read_only=OFF) in N ms"
    assert topo.sent == [("db2", "STOP SLAVE"), ("db2", OPEN)]
    db2 = topo.servers["db2"]
    assert topo.writable() == ["db2"] and (db2.source, db2.sql_running) == ("db1", False)


def test_open_candidate_in_dry_run_sends_nothing_and_records_the_plan():
    topo, _ = fenced()
    planned: list[tuple[str, str]] = []
    switchover(topo, dry_run=True, record=lambda server, sql: planned.append((server, sql))).open_candidate()
    assert planned == [("db2", "STOP SLAVE"), ("db2", OPEN)]
    assert topo.sent == [] and topo.writable() == [] and topo.servers["db2"].sql_running


# -- find_primary ----------------------------------------------------------------------

def test_find_primary_is_the_one_writable_server_without_a_source():
    topo = cluster()
    assert find_primary(topo.servers, topo.inspector) == "db1"


def test_find_primary_passes_over_a_writable_server_that_still_replicates():
    topo = cluster()
    topo.servers["db2"].read_only = False  # a replica opened by mistake is not a second primary
    assert find_primary(topo.servers, topo.inspector) == "db1"


def test_find_primary_refuses_when_nobody_is_writable():
    topo, _ = fenced()
    with pytest.raises(DbmigrateError) as refused:
        find_primary(topo.servers, topo.inspector)
    assert refused.value.message == "no writable primary found in the cluster"
    assert refused.value.hint == "dbmigrate topology show --inventory FILE --cluster NAME"


def test_find_primary_names_the_unreachable_servers_when_it_finds_none():
    topo = cluster()
    topo.servers["db1"].up = False
    with pytest.raises(DbmigrateError) as refused:
        find_primary(topo.servers, topo.inspector)
    assert refused.value.message == ("no writable primary found in the cluster; "
                                     "unreachable: db1 (cannot reach db1 (127.0.0.1:3301): Connection refused)")


def test_find_primary_ignores_an_unreachable_replica():
    topo = cluster()
    topo.servers["db3"].up = False
    assert find_primary(topo.servers, topo.inspector) == "db1"


def test_find_primary_refuses_two_writable_primaries_naming_both():
    topo = cluster()
    topo.link("db3", None)
    topo.servers["db3"].read_only = False
    with pytest.raises(DbmigrateError) as refused:
        find_primary(topo.servers, topo.inspector)
    assert refused.value.message == "more than one writable primary: db1, db3"
    assert refused.value.hint == "set read_only=ON on the one that must not take writes before any switchover"


def test_a_writable_standalone_server_is_named_as_no_replica_of_the_cluster():
    topo = cluster()
    topo.link("db3", None)
    topo.servers["db3"].read_only = False
    with pytest.raises(DbmigrateError) as refused:
        find_primary(topo.servers, topo.inspector, topo.address)
    assert refused.value.message == ("db3 is writable but not a replica of this cluster: it replicates from nobody "
                                     "and no server replicates from it (the primary is db1, which its replicas "
                                     "follow)")
    assert refused.value.hint == "make db3 a read-only replica of db1, or remove it from the cluster in the inventory"


def test_a_refused_login_is_said_as_such_with_the_credentials_to_check():
    from dbmigrate.exceptions import AuthFailed

    topo = cluster()

    def inspector(name):
        if name == "db1":
            raise AuthFailed("db1 (127.0.0.1:3301) refused user 'dbm_admin': access denied",
                             hint="check the password in creds.cnf[client-admin]")
        return topo.inspector(name)

    topo.servers["db2"].read_only = topo.servers["db3"].read_only = True
    with pytest.raises(DbmigrateError) as refused:
        find_primary(topo.servers, inspector)
    assert refused.value.message == ("no writable primary found: the tool could not log in: db1 (127.0.0.1:3301) "
                                     "refused user 'dbm_admin': access denied")
    assert refused.value.hint == "check the password in creds.cnf[client-admin]"


# -- the fake itself: it must refuse what the servers refuse ------------------------------

def test_fake_refuses_a_second_writable_server_and_a_source_change_on_a_running_replica():
    topo = cluster()
    with pytest.raises(AssertionError, match="two primaries"):
        topo.applier("db2").set_read_only(False)
    with pytest.raises(DbmigrateError, match="running slave"):
        topo.applier("db3").change_source("127.0.0.1", 3302, topo.repl)
    topo.servers["db3"].up = False
    with pytest.raises(ConnectionFailed):
        topo.inspector("db3").read_only()
    assert topo.sent == []


# -- repoint postconditions: pointed at the new primary AND replicating ------------------

def stopped_mid_repoint(topo: FakeTopology, source: str) -> None:
    """db3 as a repoint cut short leaves it: `source` configured, replication stopped."""
    topo.link("db3", source)
    db3 = topo.servers["db3"]
    db3.io_running = db3.sql_running = False


def test_replicas_repointed_is_false_for_a_replica_configured_on_the_new_primary_but_stopped():
    topo, router = promoted()
    stopped_mid_repoint(topo, "db2")

    assert not switchover(topo, router).replicas_repointed()


def test_reverse_running_is_false_while_the_old_primary_points_at_the_new_but_is_stopped():
    topo, router = promoted()
    db1 = topo.servers["db1"]
    db1.io_running = db1.sql_running = False

    assert not switchover(topo, router).reverse_running()


def test_repoint_restarts_a_replica_left_stopped_on_the_new_primary_and_it_catches_up():
    topo, router = promoted()
    stopped_mid_repoint(topo, "db2")
    topo.write("db2")
    sw = switchover(topo, router)

    sentence = sw.repoint_replicas(sw.insp("db1").gtid_binlog_pos())

    assert "repointed db3 to db2" in sentence
    assert sw.replicas_repointed()
    db3 = topo.servers["db3"]
    assert (db3.source, db3.io_running, db3.sql_running) == ("db2", True, True)
    assert topo.missing_on("db3") == []


def test_repoint_restarts_a_replica_stopped_before_its_source_changed_instead_of_waiting_in_vain():
    topo, router = promoted(writes=0)
    stopped_mid_repoint(topo, "db1")
    sw = switchover(topo, router)
    started = topo.clock.monotonic()

    sw.repoint_replicas(sw.insp("db1").gtid_binlog_pos())

    assert topo.clock.monotonic() - started < 1
    assert sw.replicas_repointed() and topo.missing_on("db3") == []


def test_switch_back_moves_a_replica_left_stopped_on_the_new_primary_without_waiting_the_bound():
    topo, router = promoted()
    stopped_mid_repoint(topo, "db2")
    topo.write("db2")  # db3 must apply it before it moves, and it applies nothing while stopped
    started = topo.clock.monotonic()

    switch_back(switchover(topo, router))

    assert topo.clock.monotonic() - started < 1
    assert_back_on_db1(topo, router)


# -- before the open: still fenced, no session that bypasses read_only ------------------

def test_seal_old_ends_every_session_of_a_bypassing_account_but_not_the_tool_or_replication():
    topo, router = fenced()
    db1 = topo.servers["db1"]
    db1.bypass_users = {"ops", "dbmigrate", "repl"}
    db1.sessions = [app_session(7, "ops"), app_session(8, "app"), app_session(9, "repl")]

    said_, _ = switchover(topo, router).seal_old()

    assert said_ == "ended 1 session(s) of accounts that bypass read_only on db1; "
    assert topo.statements("db1") == ["KILL CONNECTION 7"]


def test_seal_old_ends_another_clients_session_of_the_tools_own_account_but_not_the_tools_own():
    """An operator (or a script) logged in as the tool's account writes past read_only like any
    account that bypasses it: only the tool's own session ids are spared."""
    topo, router = fenced()
    db1 = topo.servers["db1"]
    db1.bypass_users = {"dbmigrate", "repl"}
    db1.sessions = [app_session(1, "dbmigrate"), app_session(12, "dbmigrate"), app_session(9, "repl")]

    said_, _ = switchover(topo, router).seal_old()

    assert said_ == "ended 1 session(s) of accounts that bypass read_only on db1; "
    assert topo.statements("db1") == ["KILL CONNECTION 12"]  # not 1: the tool's own session


def test_seal_old_with_only_the_tools_own_sessions_ends_nothing_and_keeps_the_first_position():
    topo, router = fenced()
    db1 = topo.servers["db1"]
    db1.bypass_users = {"dbmigrate"}
    db1.sessions = [app_session(1, "dbmigrate")]

    assert switchover(topo, router).seal_old() == ("", db1.position())
    assert topo.statements("db1") == []


def test_seal_old_refuses_to_go_on_when_the_old_primary_is_writable_again():
    topo, router = fenced()
    topo.servers["db1"].read_only = False

    with pytest.raises(SafetyError) as refused:
        switchover(topo, router).seal_old()

    assert refused.value.message == "db1 is writable again: refusing to open db2 (two primaries)"
    assert topo.statements("db1") == []


def test_the_probe_write_goes_only_to_a_writable_new_primary_that_replicates_from_nobody():
    # db2 still a read-only replica (the run never made it primary, or another run moved the primary):
    # the tool's login bypasses read_only, so a probe there would be an errant transaction.
    topo, router = fenced()
    with pytest.raises(SafetyError, match="db2 is not the primary any more \\(it is read-only\\)"):
        switchover(topo, router).verify_writes_flow("r1")
    db2 = topo.servers["db2"]
    db2.read_only = False  # writable by hand, but still replicating
    with pytest.raises(SafetyError, match="db2 is not the primary any more \\(it replicates\\)"):
        switchover(topo, router).verify_writes_flow("r1")
    assert [sql for server, sql in topo.sent if server == "db2"] == []


def test_prepare_window_builds_the_routers_request_before_the_fence_and_returns_the_bypassing_accounts():
    topo = cluster()
    router = FakeRouter(topo, "db1")
    prepared = []
    router.prepare_switch = lambda new, old=None: prepared.append((new.name, old.name if old is not None else None))
    topo.servers["db1"].bypass_users = {"ops", "dbmigrate", "repl"}

    bypass = switchover(topo, router).prepare_window()

    assert prepared == [("db2", "db1")]  # inside the window the switch is then one request
    # Replication is not ended; the tool's account is (another client may log in as it): the
    # seal spares the tool's own session ids, not its account.
    assert bypass == {"ops", "dbmigrate"}


# No account bypasses read_only; or one does (ops) but has no session: one read, no session list.
@pytest.mark.parametrize("bypass", [set(), {"ops"}], ids=["no-bypassing-account", "bypassing-account-idle"])
def test_seal_old_reads_no_session_list_when_no_bypassing_account_has_a_session(monkeypatch, bypass):
    topo, router = fenced()
    db1 = topo.servers["db1"]
    db1.sessions = [app_session(8, "app")]
    sw = switchover(topo, router)
    listed = []
    monkeypatch.setattr(FakeInspector, "sessions", lambda self, *a, **k: listed.append(1) or [])

    assert sw.seal_old(bypass) == ("", db1.position())  # still fenced, and the final position
    assert listed == [] and topo.statements("db1") == []


def test_wait_catchup_renews_a_replication_connection_that_receives_nothing_and_then_catches_up():
    # A partition healed, but the candidate's connection to the old primary stays silent (the
    # source's kernel backs off its retransmissions): a new connection streams at once.
    topo, _ = fenced()
    topo.servers["db2"].io_stalled = True
    topo.servers["db1"].read_only = False
    position = topo.write("db1", 3)
    topo.servers["db1"].read_only = True
    started = topo.clock.monotonic()
    sentence = switchover(topo, catchup_timeout_s=3).wait_catchup(position)
    assert said(sentence) == f"db2 applied {position} in N ms"
    assert topo.statements("db2") == ["STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD"]
    assert topo.clock.monotonic() - started <= FIRST_CATCHUP_WAIT_S + 1.0 + 0.01  # one stall check, not the bound
    assert topo.missing_on("db2") == []


def test_wait_catchup_leaves_the_connection_of_a_replica_that_received_everything_and_only_applies_slowly():
    topo, _ = fenced()
    topo.servers["db2"].lag_until = float("inf")  # received it all; its SQL thread is busy
    topo.servers["db1"].read_only = False
    position = topo.write("db1", 2)
    topo.servers["db1"].read_only = True
    with pytest.raises(WaitTimeout):
        switchover(topo, catchup_timeout_s=3).wait_catchup(position)
    assert topo.statements("db2") == []


def test_wait_catchup_renews_a_stalled_connection_once_then_waits_out_its_bound():
    topo, _ = fenced()
    db2 = topo.servers["db2"]
    db2.io_stalled, db2.lag_until = True, float("inf")  # renewing does not help: the bound decides
    topo.servers["db1"].read_only = False
    position = topo.write("db1", 2)
    topo.servers["db1"].read_only = True
    started = topo.clock.monotonic()
    with pytest.raises(WaitTimeout):
        switchover(topo, catchup_timeout_s=3).wait_catchup(position)
    assert topo.statements("db2") == ["STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD"]
    assert 2.5 <= topo.clock.monotonic() - started <= 3


# -- after the cutover: the old primary wrote nothing of its own -------------------------

def test_the_reverse_check_says_rollback_loses_nothing_only_when_the_old_primary_wrote_nothing():
    topo, router = promoted()
    assert switchover(topo, router).require_old_wrote_nothing("r1") == \
        "db1 wrote nothing of its own after its final position: rollback loses nothing"


def test_an_errant_write_on_the_old_primary_pauses_the_run_and_names_it():
    from dbmigrate.engine.runner import RunPaused
    from dbmigrate.db.gtid import MariaGtid

    topo, router = promoted()
    db1 = topo.servers["db1"]
    # A session that bypassed read_only committed on db1 after its final position.
    seq = max(g.seq for g in db1.log) + 1
    db1.log.append(MariaGtid(0, db1.server_id, seq))
    with pytest.raises(RunPaused) as paused:
        switchover(topo, router).require_old_wrote_nothing("r1")
    msg = paused.value.message
    assert f"db1 wrote 1 transaction(s) of its own after its final position that db2 never had " \
           f"(errant GTID(s) 0-1-{seq})" in msg
    assert "rollback loses nothing" not in msg and "dbmigrate resume r1" in paused.value.hint


def test_a_stopped_replication_back_pauses_the_run_and_names_the_error():
    from dbmigrate.engine.runner import RunPaused

    topo, router = promoted()
    db1 = topo.servers["db1"]
    db1.sql_running, db1.last_sql_error = False, "Duplicate entry '7' for key 'PRIMARY'"
    with pytest.raises(RunPaused, match="its replication from db2 stopped with an error"):
        switchover(topo, router).require_old_wrote_nothing("r1")


def test_switch_back_sends_the_router_back_when_the_old_primary_does_not_answer_and_the_candidate_never_opened():
    topo, router = fenced()
    router.writer = "127.0.0.1:3302"  # the flip went through; the candidate was never opened
    topo.servers["db1"].up = False
    with pytest.raises(SafetyError) as stopped:
        switch_back(switchover(topo, router), candidate_opened=False, router_switched=True)
    assert "the router sends writes to db1 again (db2 never took writes)" in stopped.value.message
    assert router.writer == "127.0.0.1:3301" and topo.writable() == []


def test_switch_back_leaves_the_router_on_a_writable_candidate_when_the_old_primary_does_not_answer():
    topo, router = opened()
    router.writer = "127.0.0.1:3302"
    topo.servers["db1"].up = False
    with pytest.raises(SafetyError) as stopped:
        switch_back(switchover(topo, router), candidate_opened=True, router_switched=True)
    assert "router sends writes" not in stopped.value.message
    assert router.writer == "127.0.0.1:3302"
