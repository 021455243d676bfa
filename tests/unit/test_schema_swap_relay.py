"""A schema swap whose router is the relay (router kind `relay`), on the fake topology with a
stand-in of the relay's control socket (tests/unit/fake_relay.py).

The relay routes writes only: the swap's reader steps take no side out of reads and send the
relay nothing (its set_readers would refuse), and say why. The primary's side goes through the
relay's hold both ways, as promote and its rollback do: hold -> fence -> open -> move -> release
for the cutover (the kit's own steps), and the same back for the switch back, every change
journaled through the run's router (each line with its seq marker)."""

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
from dbmigrate.procedures.kit.resources import ClusterResources
from dbmigrate.procedures.kit.switchover.fence import OldPrimaryFence
from dbmigrate.procedures.schema_swap import readers
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams
from dbmigrate.procedures.schema_swap.primary import primary_cutover, switch_back_to_primary
from dbmigrate.procedures.schema_swap.resources import SchemaSwapResources, SchemaSwapState
from dbmigrate.routing.base import RouterError
from dbmigrate.routing.relay import RelayRouter
from tests.unit.fake_relay import edges, relayed_cluster
from tests.unit.fake_topology import FakeTopology

DB1, DB2 = "127.0.0.1:3301", "127.0.0.1:3302"


class Swap:
    def __init__(self, tmp_path: Path, journal: Journal):
        self.topo: FakeTopology
        self.topo, self.relay = relayed_cluster(tmp_path)  # the relay's sessions on db1: held and moved, never ended
        self.router = RelayRouter("c1", self.relay.path)
        params = SchemaSwapParams(ddl=["ALTER TABLE app.t ADD INDEX ix_a (a)"], fence_expiry="off",
                                  hold_new_connections=True, fence_drain_timeout_s=2, candidate="db2")
        journal.create_run("run1", procedure="schema-swap", cluster="c1", params={}, playbook="", playbook_sha="",
                           dry_run=False)
        res = SchemaSwapResources(
            cluster=ClusterResources(inventory=None, cluster="c1", servers=self.topo.servers,  # type: ignore[arg-type]
                                     primary="db1", router=self.router),
            sides=["db2", "db3"], candidate="db2", primary_altered=False, topology=self.topo)
        self.ctx: RunContext[Any, Any] = RunContext(run_id="run1", procedure="schema-swap", cluster="c1",
                                                    journal=journal, bus=EventBus(), clock=self.topo.clock,
                                                    resources=res, params=params)
        self.cut = primary_cutover("db1", "db2")

    def events(self) -> list[str]:
        return edges(self.topo.sent)

    def changes(self) -> list[str]:
        return [line for line in self.relay.lines if line != "status"]


@pytest.fixture
def swap(tmp_path: Path) -> Iterator[Swap]:
    with Journal(tmp_path / "j.sqlite") as j:
        s = Swap(tmp_path, j)
        yield s
        s.relay.close()


def test_the_relay_routes_no_reads_so_no_side_is_taken_out_and_nothing_is_sent(swap: Swap) -> None:
    ctx = swap.ctx
    assert readers.router_of(ctx) is swap.router and readers.reader_router(ctx) is None
    with pytest.raises(RouterError, match="writes only"):
        swap.router.set_readers([DB2])  # what the swap must never ask of it
    said = readers.record_pool(ctx)
    assert "routes writes only" in said and SchemaSwapState.load(ctx.state).readers_at_start is None
    said = readers.take_out(ctx, "db2")
    assert "routes writes only" in said and "db2 keeps its reader traffic" in said, said
    assert SchemaSwapState.load(ctx.state).readers_before == {}  # nothing to put back
    assert "nothing to put back" in readers.put_back(ctx, "db2")
    assert not readers.is_back(ctx, "db2")  # the step runs (and says so), it is not taken as done
    assert "readers unchanged" in readers.route_reads(ctx)
    assert "nothing to restore" in readers.restore_reader_pool(ctx)
    assert readers.describe_take_out(ctx, "db2") == [("router", f"the router ({swap.router.describe()}) routes "
                                                                "writes only, not reads: db2 keeps its reader traffic")]
    assert swap.changes() == []  # the relay was only read
    with pytest.raises(Exception, match="routes writes only"):
        readers.readers_now(ctx)


def test_the_swap_switches_its_primary_through_the_relay_hold_and_back(swap: Swap) -> None:
    ctx, cut = swap.ctx, swap.cut
    swap.relay.busy_polls = 2  # a session still busy for the first two reads after the hold
    kit.converge_then_fence(cut, ctx)
    kit.catch_up(cut, ctx)
    kit.switch_router(cut, ctx)
    kit.open_candidate(cut, ctx)
    kit.save_route(cut, ctx)
    assert swap.events() == ["hold", "fence db1", "open db2", f"move {DB2}", "release", "release"]
    assert swap.relay.backend == DB2 and not swap.relay.holding
    assert len(swap.topo.servers["db1"].sessions) == 3  # none of the relay's sessions ended
    forward_seq = CutoverState.load(ctx.state).router_seq
    assert forward_seq > 0

    # The old primary is altered meanwhile; then the switch back, the same way back.
    swap.topo.sent.clear()
    swap.relay.lines.clear()
    swap.topo.servers["db2"].sessions = [Session(200, "app", "127.0.0.1:41000", "shop", "Sleep", 0, None)]
    said = switch_back_to_primary(ctx)
    events = swap.events()
    events = events[events.index("hold"):]  # before it: db1 made a replica of db2 (read_only there first)
    assert events[:5] == ["hold", "fence db2", "open db1", f"move {DB1}", "release"], events
    assert "kill on db2" not in events[:events.index(f"move {DB1}")]  # held and moved, not ended
    assert swap.relay.backend == DB1 and not swap.relay.holding
    assert swap.topo.writable() == ["db1"]
    assert "the relay holds its sessions" in said and "released to" in said, said
    # Through the run's journaled router: every change line carries its marker, numbered after
    # the cutover's, and none is left in doubt.
    lines = swap.changes()
    assert lines and all(" seq " in f" {line}" for line in lines), lines
    st = CutoverState.load(ctx.state)
    assert st.router_change is None and st.router_seq > forward_seq


def test_a_fence_given_up_in_the_switch_back_releases_the_hold_to_the_writer_that_stays(swap: Swap) -> None:
    """The switch back holds, then cannot fence the candidate: the relay's hold is released toward
    it (it stays the writer), nothing is left held and only one server takes writes."""
    ctx, cut = swap.ctx, swap.cut
    kit.converge_then_fence(cut, ctx)
    kit.catch_up(cut, ctx)
    kit.open_candidate(cut, ctx)
    swap.topo.sent.clear()

    def refuse(*_: Any, **__: Any) -> Any:
        raise kit.DbmigrateError("the fence gave up")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(OldPrimaryFence, "fence", refuse)  # the switch back builds its own Switchover
        mp.setattr(OldPrimaryFence, "name_fence_blocker", lambda self, e: e)
        with pytest.raises(kit.DbmigrateError, match="fence gave up"):
            switch_back_to_primary(ctx)
    events = swap.events()
    assert events[events.index("hold"):] == ["hold", "release"], events
    assert swap.relay.backend == DB2 and not swap.relay.holding
    assert swap.topo.writable() == ["db2"]
