"""A router change sent without an answer is in doubt: a later decision (the undo, a rollback
by a later process) neither reads nor changes the route until the router shows that the change
ran, so that a change answered late can never undo a later decision.

Names: db1 is the old primary, db2 the candidate; the router is a frozen HAProxy that runs
what is in its buffer when it thaws.
"""

from __future__ import annotations

from typing import Any

import pytest

from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams, switch_back
from dbmigrate.procedures.kit.switchover.router import JournaledRouter, RouterInDoubt
from dbmigrate.routing.base import RouterNoAnswer
from tests.unit.fake_topology import FakeRouter, FakeTopology, ScheduledClock, cluster


class MemoryJournal:
    """The run state's router changes, kept across 'processes' (Switchover instances)."""

    def __init__(self) -> None:
        self.change: dict[str, Any] | None = None
        self.seq = 0

    def pending(self) -> dict[str, Any] | None:
        return self.change

    def last_seq(self) -> int:
        return self.seq

    def sent(self, change: dict[str, Any]) -> None:
        self.change, self.seq = dict(change), max(self.seq, int(change["seq"]))

    def answered(self, seq: int) -> None:
        if self.change is not None and int(self.change["seq"]) <= seq:
            self.change = None


def setup(wait_s: float = 10.0) -> tuple[FakeTopology, FakeRouter, MemoryJournal, Switchover]:
    topo = cluster()
    topo.clock = ScheduledClock()
    raw, journal = FakeRouter(topo, "db1"), MemoryJournal()
    return topo, raw, journal, make(topo, raw, journal, wait_s)


def make(topo: FakeTopology, raw: FakeRouter, journal: MemoryJournal, wait_s: float = 10.0) -> Switchover:
    router = JournaledRouter(raw, journal, topo.clock, wait_s)
    return Switchover(topo, "db1", "db2", SwitchoverParams(fence_expiry="off", probe_timeout_s=1), router,
                      clock=topo.clock)


def flip_in_doubt(topo: FakeTopology, raw: FakeRouter, sw: Switchover) -> None:
    """db1 fenced, db2 caught up, and the flip to db2 sent to a frozen router."""
    topo.servers["db1"].read_only = True
    raw.freeze()
    with pytest.raises(RouterNoAnswer):
        sw.switch_router(persist=False)


def test_the_flip_is_journaled_before_it_is_sent_and_stays_in_doubt_without_an_answer():
    topo, raw, journal, sw = setup()
    flip_in_doubt(topo, raw, sw)
    assert journal.change is not None and journal.change["to"] == "db2" and journal.change["from"] == "db1"
    assert journal.change["request"] == "writer=db2" and raw.writer == "127.0.0.1:3301"  # not run yet


def test_an_answered_flip_leaves_nothing_in_doubt():
    topo, raw, journal, sw = setup()
    topo.servers["db1"].read_only = True
    sw.switch_router(persist=False)
    assert journal.change is None and journal.seq > 0 and raw.marker == journal.seq


def test_the_undo_waits_for_the_late_flip_then_reads_the_route_and_sends_writes_back():
    topo, raw, journal, sw = setup(wait_s=10)
    flip_in_doubt(topo, raw, sw)
    topo.clock.at(5, raw.thaw)  # the router wakes 5 s later and runs the buffered flip
    sentence = switch_back(sw, candidate_opened=False, router_switched=True)
    # The late flip ran first; the undo decided after it, from the route it left.
    assert raw.switches == [("db2", None), ("db1", "db2")]
    assert raw.writer == "127.0.0.1:3301" and topo.writable() == ["db1"]
    assert "router sends writes to db1" in sentence and journal.change is None


def test_a_router_that_does_not_answer_stops_the_undo_in_doubt_and_says_how_to_finish():
    topo, raw, journal, sw = setup(wait_s=4)
    flip_in_doubt(topo, raw, sw)
    with pytest.raises(RouterInDoubt) as stopped:
        switch_back(sw, candidate_opened=False, router_switched=True)
    msg = stopped.value.message
    assert "in doubt" in msg and "send writes back to db1 by hand: send writer=db1" in msg
    assert "not changed" not in msg
    assert raw.switches == [] and raw.buffered  # nothing sent after the change in doubt
    assert topo.writable() == ["db1"]  # the candidate never opened: the old primary takes writes
    assert journal.change is not None  # still in doubt for the next process
    # The router wakes and runs the old flip: the route is on the read-only candidate...
    raw.thaw()
    assert raw.writer == "127.0.0.1:3302"
    # ... and a later process (rollback) settles the doubt, reads the route and sends writes back.
    again = switch_back(make(topo, raw, journal), candidate_opened=False, router_switched=True)
    assert raw.writer == "127.0.0.1:3301" and journal.change is None and "router sends writes to db1" in again


def test_a_late_flip_cannot_undo_the_later_decision():
    """Without the wait, the undo would read the route (still on db1), decide 'nothing to switch',
    and the buffered flip would then land on the read-only candidate for good."""
    topo, raw, journal, sw = setup(wait_s=10)
    flip_in_doubt(topo, raw, sw)
    # The router answers reads before it runs the buffered change (admin connections are not
    # served in order): reads answer at 2 s, the flip runs at 3 s.
    def answers_reads_only() -> None:
        raw.frozen = False
    def runs_the_flip() -> None:
        raw.thaw()
    topo.clock.at(2, answers_reads_only)
    topo.clock.at(3, runs_the_flip)
    switch_back(sw, candidate_opened=False, router_switched=True)
    assert raw.writer == "127.0.0.1:3301"  # the route the later decision chose stays
    assert raw.switches[-1] == ("db1", "db2")


def test_resume_after_a_flip_in_doubt_waits_for_it_before_switching():
    topo, raw, journal, sw = setup(wait_s=10)
    flip_in_doubt(topo, raw, sw)
    topo.clock.at(1, raw.thaw)
    later = make(topo, raw, journal)
    later.switch_router(persist=False)  # the forward step again: a no-op once the late flip ran
    assert raw.switches == [("db2", None)] and journal.change is None


def test_a_change_in_doubt_goes_with_a_killed_router_and_the_undo_says_not_changed():
    topo, raw, journal, sw = setup(wait_s=10)
    flip_in_doubt(topo, raw, sw)
    raw.kill()  # its process gone: the buffered flip with it
    started = topo.clock.monotonic()
    assert sw.router.change_gone() and journal.change is None
    sentence = switch_back(sw, candidate_opened=False, router_switched=False)
    assert "router not changed" in sentence and topo.clock.monotonic() - started < 1
    assert topo.writable() == ["db1"] and raw.switches == []


def test_a_relay_change_its_sender_died_before_sending_is_fenced_off_at_once(tmp_path):
    """The tool killed between journaling the relay's move and sending it: the next process does
    not wait for a change no one will send; it fences it off (the relay refuses it from then on),
    journals the fence like any change, and decides from the route the relay reports."""
    from dbmigrate.routing.relay import RelayRouter
    from tests.unit.fake_relay import FakeRelay

    relay = FakeRelay(tmp_path / "relay.sock", "127.0.0.1:3301")
    try:
        clock = ScheduledClock()
        journal, said = MemoryJournal(), []
        router = JournaledRouter(RelayRouter("c1", relay.path), journal, clock, wait_s=10.0,
                                 log=lambda m, level="info": said.append(m))
        seq = relay.started_ms + 1000  # numbered while this relay runs: it may still receive it
        journal.sent({"seq": seq, "request": f"move 127.0.0.1:3302; release; seq {seq}", "back": "",
                      "by_hand": "{request}", "to": "db2", "from": "db1"})
        t0 = clock.monotonic()
        assert router.current().writer == "127.0.0.1:3301"
        assert clock.monotonic() == t0  # no wait
        assert journal.pending() is None and journal.last_seq() == seq + 1
        assert "fenced off" in said[-1] and "had not run" in said[-1]
        late = RelayRouter("c1", relay.path).control.request(["move 127.0.0.1:3302", "release", f"seq {seq}"])
        assert late["ok"] is False and relay.backend == "127.0.0.1:3301"
    finally:
        relay.close()
