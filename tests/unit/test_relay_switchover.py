"""The switchover's edges through a relay router with hold_new_connections: the kit's own steps
(kit/cutover.py) on a fake topology, the relay a stand-in of its control socket
(tests/unit/fake_relay.py) whose commands land in the topology's record of what was sent.

Order asserted: hold -> (wait until no session is busy or in a transaction) -> fence -> catch up
-> open -> move NEW -> release; no session of the old writer is ended (the relay holds them and
moves them at the flip); every relay command journaled through the run's router; the rollback
the same way back, and a hold a dead process left released by the undo.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from dbmigrate.clock import FakeClock
from dbmigrate.db.inspector import Session
from dbmigrate.engine.events import EventBus
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.step import RunContext
from dbmigrate.procedures.kit import cutover as kit
from dbmigrate.procedures.kit.cutover import CutoverState
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams
from dbmigrate.routing import relay_hold
from dbmigrate.routing.relay import RelayRouter
from tests.unit.fake_relay import edges, relayed_cluster
from tests.unit.fake_topology import FakeTopology

DB1, DB2 = "127.0.0.1:3301", "127.0.0.1:3302"


class World:
    def __init__(self, tmp_path: Path, journal: Journal):
        self.topo: FakeTopology
        self.topo, self.relay = relayed_cluster(tmp_path)  # the relay's sessions on db1: held and moved, never ended
        self.raw = RelayRouter("c1", self.relay.path)
        self.params = SwitchoverParams(fence_expiry="off", hold_new_connections=True, fence_drain_timeout_s=2)
        journal.create_run("run1", procedure="promote", cluster="c1", params={}, playbook="", playbook_sha="",
                           dry_run=False)
        self.ctx: RunContext[Any, Any] = RunContext(run_id="run1", procedure="promote", cluster="c1", journal=journal,
                                                    bus=EventBus(), clock=FakeClock(1000.0))
        self.cut = kit.Cutover(old="db1", new="db2", switchover=self.make)

    def make(self, ctx: RunContext[Any, Any], record: Any, routed: Any) -> Switchover:
        return Switchover(self.topo, "db1", "db2", self.params, routed(self.raw, self.params), clock=self.topo.clock)

    def promote_to_the_open(self) -> None:
        kit.converge_then_fence(self.cut, self.ctx)
        kit.catch_up(self.cut, self.ctx)
        kit.switch_router(self.cut, self.ctx)
        kit.open_candidate(self.cut, self.ctx)

    def events(self) -> list[str]:
        """What was sent, reduced to the switchover's edges."""
        return edges(self.topo.sent)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with Journal(tmp_path / "j.sqlite") as j:
        w = World(tmp_path, j)
        yield w
        w.relay.close()


def test_promote_through_the_relay_holds_waits_fences_opens_then_moves_and_releases(world: World) -> None:
    world.relay.busy_polls = 3  # one session still busy for the first three reads after the hold
    world.promote_to_the_open()
    assert world.events() == ["hold", "fence db1", "open db2", f"move {DB2}", "release", "release"]
    assert world.relay.backend == DB2 and not world.relay.holding
    # The wait read the relay's status until nothing was busy (through `status`, after the hold).
    lines = world.relay.lines
    at = next(i for i, line in enumerate(lines) if line.startswith("hold"))
    assert lines[at + 1:at + 5] == ["status"] * 4  # three reads busy, the fourth quiet
    # No session of the old writer ended: the relay keeps them and moves them at the flip.
    assert len(world.topo.servers["db1"].sessions) == 3
    st = CutoverState.load(world.ctx.state)
    assert st.held is None and st.switched_at is not None and st.router_change is None
    assert st.router_seq > 0
    # Every change carried its marker: journaled, numbered and answered.
    assert all(line.endswith(f"seq {int(line.rsplit(' ', 1)[1])}") for line in world.relay.lines
               if line != "status")
    said = kit.save_route(world.cut, world.ctx)
    assert "only" in said and world.relay.backend == DB2


def test_the_hold_is_journaled_before_it_is_sent(world: World) -> None:
    seen: list[Any] = []
    world.relay.on_command = lambda cmd: seen.append((cmd, CutoverState.load(world.ctx.state).held,
                                                      CutoverState.load(world.ctx.state).router_change))
    kit.converge_then_fence(world.cut, world.ctx)
    hold = next(s for s in seen if s[0] == "hold")
    assert hold[1] == {"kind": "relay", "control": world.relay.path, "address": DB1}
    assert hold[2] is not None and hold[2]["request"].startswith("hold; seq ") and hold[2]["back"] == "release"


def test_a_fence_given_up_releases_the_hold_toward_the_old_writer(world: World) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise kit.DbmigrateError("the fence gave up")

    sw = world.cut.sw(world.ctx)
    world.cut = kit.Cutover(old="db1", new="db2", switchover=lambda c, r, routed: sw)
    sw.fencing.fence = refuse  # type: ignore[method-assign]
    sw.fencing.name_fence_blocker = lambda e: e  # type: ignore[method-assign]
    with pytest.raises(kit.DbmigrateError):
        kit.converge_then_fence(world.cut, world.ctx)
    assert world.events() == ["hold", "release"]
    assert world.relay.backend == DB1 and not world.relay.holding


def test_the_rollback_through_the_relay_holds_fences_the_new_primary_reopens_the_old_then_moves_back(world: World) -> None:
    world.promote_to_the_open()
    kit.save_route(world.cut, world.ctx)
    world.topo.sent.clear()
    world.topo.servers["db2"].sessions = [Session(200, "app", "127.0.0.1:41000", "shop", "Sleep", 0, None)]
    kit.undo_switchover(world.cut, world.ctx)
    events = world.events()
    events = events[events.index("hold"):]  # before it: db1 made a replica of db2 (read_only there first)
    # The hold, db2 fenced, db1 opened, then the move back and the release; no session of db2
    # ended before the move (the end of sessions after it finds none of the relay's left there).
    assert events[:5] == ["hold", "fence db2", "open db1", f"move {DB1}", "release"]
    assert world.relay.backend == DB1 and not world.relay.holding
    assert "kill on db2" not in events[:events.index(f"move {DB1}")]
    assert world.topo.writable() == ["db1"]


def test_a_hold_a_dead_process_left_is_released_by_the_undo_through_the_journal(world: World) -> None:
    sw = world.cut.sw(world.ctx)
    kit.hold_and_end_idle(sw, world.ctx)
    assert world.relay.holding and CutoverState.load(world.ctx.state).held is not None
    relay_hold._HOLDS.clear()  # the process that held is gone
    world.topo.sent.clear()
    said = kit.undo_fence(world.cut, world.ctx)
    assert not world.relay.holding and "released" in said
    assert world.events()[0] == "release" and CutoverState.load(world.ctx.state).held is None
    assert world.relay.backend == DB1 and world.topo.writable() == ["db1"]


def test_a_relay_killed_while_holding_releases_nothing_and_the_undo_goes_on(world: World) -> None:
    """kill -9 of the relay after the hold: its hold went with it; the undo of the fence step
    does not stop on the release it can no longer send (RouterGone), and the old primary stays
    the writer."""
    sw = world.cut.sw(world.ctx)
    kit.hold_and_end_idle(sw, world.ctx)
    world.relay.close()  # nothing listens on the control socket any more
    said = kit.undo_fence(world.cut, world.ctx)
    st = CutoverState.load(world.ctx.state)
    assert "its hold went with it" in said and st.held is None and st.router_change is None
    assert world.topo.writable() == ["db1"]


def test_an_undo_before_any_hold_does_not_ask_the_router_for_one(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed before a hold was journaled: the undo of the fence step changes nothing and does not
    ask the router for a leftover hold (HAProxy's check reads the router: a dead or frozen one must
    not fail an undo that has nothing to do)."""
    asked: list[Any] = []
    monkeypatch.setattr(Switchover, "release_leftover_hold", lambda self, saved: asked.append(saved) or "")
    world.relay.lines.clear()
    said = kit.undo_fence(world.cut, world.ctx)
    assert "was not fenced" in said and asked == []
    assert world.relay.lines == []  # not even a status read
    assert world.topo.writable() == ["db1"]
