"""Decisions with a statement in doubt, on the fake topology: a change given up on (a partition
cut the answer off) lands late unless its session is ended first, and no decision reads a
server while a change to it is in doubt. One test per decision and per fate of the session
(alive and ended, already gone, unreachable); then the settling itself, on a scripted session."""

from __future__ import annotations

import pytest

from dbmigrate.db.connection import InDoubtUnsettled, QueryError, Unresponsive
from dbmigrate.db.in_doubt import InDoubt, InDoubtRegistry, settle_on
from dbmigrate.exceptions import DbmigrateError, SafetyError
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams, switch_back
from tests.unit.fake_topology import FakeRouter, FakeTopology
from tests.unit.test_switchover_decisions import cluster

LATE_S = 1.5  # the retransmitted statement reaches the server this long after the heal


def switchover(topo: FakeTopology, router: FakeRouter, **settings) -> Switchover:
    return Switchover(topo, "db1", "db2", SwitchoverParams(**settings), router, clock=topo.clock)


def flipped() -> tuple[FakeTopology, FakeRouter, Switchover]:
    """db1 fenced (with its expiry), db2 caught up and the router already on db2: the open is next."""
    topo = cluster()
    router = FakeRouter(topo, "db1")
    sw = switchover(topo, router)
    sw.fence()
    sw.switch_router(persist=False)
    return topo, router, sw


def open_in_doubt(topo: FakeTopology, sw: Switchover) -> None:
    """The open is sent while db2 is partitioned: no answer within its bound."""
    topo.servers["db2"].partitioned = True
    with pytest.raises(Unresponsive) as gave_up:
        sw.open_candidate(stop_replica=False, sealed=True)
    assert gave_up.value.in_doubt is not None


def never_two_writable_for(topo: FakeTopology, seconds: float) -> list[str]:
    """Let time pass (late statements land, expiries fire; the fake fails at once on two writable)."""
    topo.clock.advance(seconds)
    return topo.writable()


# -- the candidate's open in doubt ----------------------------------------------------------

def test_open_in_doubt_healed_before_the_undo_is_ended_then_the_old_primary_takes_writes_again():
    topo, router, sw = flipped()
    open_in_doubt(topo, sw)
    topo.heal("db2", lands_after_s=LATE_S)

    switch_back(sw, candidate_opened=True, router_switched=True)

    kills = [i for i, (who, sql) in enumerate(topo.sent) if who == "db2" and sql.startswith("KILL CONNECTION")]
    assert kills, "the open's session was not ended before db2 was read"
    assert never_two_writable_for(topo, LATE_S + 20) == ["db1"]  # the late open never lands
    assert router.writer == "127.0.0.1:3301"


def test_ending_the_open_in_doubt_does_not_spend_the_bound_of_the_read_that_decides():
    # Measured: the session was ended (a new connection right after the heal took most of the
    # probe's bound), then the read of db2 found the bound spent, took db2 for unreachable and
    # the undo refused to unfence db1: read-only until the operator's command.
    topo, router, sw = flipped()
    open_in_doubt(topo, sw)
    topo.heal("db2", lands_after_s=LATE_S)
    topo.servers["db2"].settle_cost_s = sw.s.probe_timeout_s

    switch_back(sw, candidate_opened=True, router_switched=True)

    assert never_two_writable_for(topo, LATE_S + 20) == ["db1"]
    assert router.writer == "127.0.0.1:3301"


def test_open_in_doubt_on_an_unreachable_candidate_keeps_the_old_primary_fenced_until_it_answers():
    topo, router, sw = flipped()
    open_in_doubt(topo, sw)

    with pytest.raises(SafetyError) as stopped:
        switch_back(sw, candidate_opened=True, router_switched=True)
    assert "db1 stays fenced" in stopped.value.message
    assert topo.servers["db1"].read_only  # whatever the open does, never two writable

    # The partition heals and the abandoned open lands: db2 alone is writable, as the run left it safe.
    topo.heal("db2", lands_after_s=LATE_S)
    assert never_two_writable_for(topo, LATE_S + 0.1) == ["db2"]
    # The operator's one command (rollback) finds db2 writable and switches back properly.
    switch_back(sw, candidate_opened=True, router_switched=True)
    assert never_two_writable_for(topo, 30) == ["db1"]
    assert topo.missing_on("db1") == []


def test_open_whose_session_is_already_gone_is_settled_without_a_kill_and_decided_from_the_read():
    topo, router, sw = flipped()
    open_in_doubt(topo, sw)
    db2 = topo.servers["db2"]
    db2.partitioned, db2.doubts = False, []  # restarted: its sessions, and the statement, died with it

    switch_back(sw, candidate_opened=True, router_switched=True)
    assert not any(sql.startswith("KILL CONNECTION") for who, sql in topo.sent if who == "db2")
    assert never_two_writable_for(topo, 30) == ["db1"]


# -- the old primary's fence in doubt -------------------------------------------------------

def test_fence_in_doubt_healed_is_ended_and_read_as_not_fenced_and_never_lands():
    topo = cluster()
    sw = switchover(topo, FakeRouter(topo, "db1"))
    sw.prepare_window()
    topo.servers["db1"].partitioned = True
    with pytest.raises(DbmigrateError):
        sw.fence()
    topo.heal("db1", lands_after_s=LATE_S)

    assert sw.is_fenced() is False  # read only after the fence's session was ended
    assert never_two_writable_for(topo, LATE_S + 30) == ["db1"]  # writable throughout: it never landed


def test_fence_in_doubt_on_an_unreachable_old_primary_stops_the_undo_and_its_expiry_bounds_the_outage():
    topo = cluster()
    router = FakeRouter(topo, "db1")
    sw = switchover(topo, router)
    sw.prepare_window()
    topo.servers["db1"].partitioned = True
    with pytest.raises(DbmigrateError):
        sw.fence()

    with pytest.raises(SafetyError) as stopped:
        switch_back(sw, candidate_opened=False, router_switched=False)
    assert "cannot switch back to db1" in stopped.value.message

    # Healed, the abandoned fence lands, and with it its expiry: db1 is writable again within it.
    topo.heal("db1", lands_after_s=LATE_S)
    topo.clock.advance(LATE_S + 0.01)
    assert topo.servers["db1"].read_only  # the late fence landed
    expiry = SwitchoverParams().expiry_s()
    assert never_two_writable_for(topo, expiry) == ["db1"]


def test_no_decision_reads_a_server_while_a_change_to_it_is_in_doubt():
    topo, router, sw = flipped()
    open_in_doubt(topo, sw)
    with pytest.raises(InDoubtUnsettled):
        sw.insp("db2").read_only()
    assert sw.writable_or_none("db2") is None  # "may have done it", never "read-only"


# -- settling, on a scripted session ---------------------------------------------------------

class ScriptedSession:
    """A fresh session on the server: answers the processlist from `alive` (id -> user)."""

    def __init__(self, alive: dict[int, str], dies_after_kill: int = 0, unreachable: bool = False):
        self.alive, self.sent = alive, []
        self.dies_after_kill, self.unreachable = dies_after_kill, unreachable
        self.looks_after_kill = 0

    def query(self, sql, params=None):
        if self.unreachable:
            raise QueryError("db2 (127.0.0.1:3302) did not answer", errno=3024)
        self.sent.append(sql)
        if any(s.startswith("KILL") for s in self.sent):
            self.looks_after_kill += 1
            if self.looks_after_kill > self.dies_after_kill:
                self.alive.pop(params[0], None)
        user = self.alive.get(params[0])
        return [{"u": user}] if user else []

    def execute(self, sql, params=None):
        self.sent.append(sql)
        return 0


DOUBT = InDoubt("db2", "127.0.0.1:3302", 42, "dbmigrate", "SET GLOBAL read_only=OFF", 0.0)


def test_settling_an_alive_session_kills_it_and_waits_until_it_is_gone():
    session = ScriptedSession({42: "dbmigrate"}, dies_after_kill=2)
    said = settle_on(session, DOUBT, sleep=lambda s: None)
    assert said == "ended session 42 on db2"
    assert "KILL CONNECTION 42" in session.sent
    assert session.looks_after_kill == 3  # looked until it was gone


def test_settling_a_session_already_gone_sends_no_kill():
    session = ScriptedSession({})
    assert settle_on(session, DOUBT, sleep=lambda s: None) == "session 42 on db2 was already gone"
    assert not any(s.startswith("KILL") for s in session.sent)


def test_an_id_now_held_by_another_account_means_the_server_restarted_and_ours_is_gone():
    session = ScriptedSession({42: "app"})
    assert settle_on(session, DOUBT, sleep=lambda s: None) == "session 42 on db2 was already gone"
    assert not any(s.startswith("KILL") for s in session.sent)


def test_settling_an_unreachable_server_raises_and_keeps_the_doubt():
    with pytest.raises(QueryError):
        settle_on(ScriptedSession({42: "dbmigrate"}, unreachable=True), DOUBT, sleep=lambda s: None)


def test_a_session_that_does_not_leave_after_the_kill_stays_in_doubt():
    session = ScriptedSession({42: "dbmigrate"}, dies_after_kill=10**6)
    with pytest.raises(DbmigrateError) as still:
        settle_on(session, DOUBT, gone_within_s=0.05, sleep=lambda s: None)
    assert "still in the processlist" in still.value.message


def test_the_registry_keeps_doubts_per_address_and_tells_its_listener_each_change():
    seen: list[list[InDoubt]] = []
    registry = InDoubtRegistry()
    stop = registry.add_listener(seen.append)
    registry.add(DOUBT)
    assert registry.pending("127.0.0.1:3302") == [DOUBT] and registry.pending("127.0.0.1:3301") == []
    registry.settled(DOUBT)
    assert registry.pending("127.0.0.1:3302") == []
    assert seen == [[DOUBT], []]
    assert InDoubt.from_dict(DOUBT.as_dict()) == DOUBT  # journaled and read back by a resume
    stop()
    registry.add(DOUBT)
    assert seen == [[DOUBT], []]  # stopped: no longer told
