"""A consolidation cutover whose shard routes through a relay (the cluster's shard_routers), on the
fake consolidation topology of test_consolidate_cutover_order.py with the relay a stand-in of its
control socket (tests/unit/fake_relay.py), reached through the run's journaled router.

Asserted: the relay holds its sessions before the old server's fence, moves them at the routes
step (still held: both sides read-only) and releases them only once the instance takes writes;
no session of the old server is ended (the relay moved them); the rollback the same way back;
a hold a process that died left is released by rollback and by resume, whichever step it died
after; a fence given up releases toward the old server; nothing lost, never two writable."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate import cutover as co
from dbmigrate.procedures.consolidate.context import relay_route
from dbmigrate.procedures.consolidate.model import connection_name
from dbmigrate.procedures.consolidate.resources import ConsolidateState
from dbmigrate.routing import relay_hold
from tests.unit.fake_relay import FakeRelay
from tests.unit.test_consolidate_cutover_order import ADDR, INST, OLD, REV, SHARD, World, make_world, \
    steps_then_killed

STEPS = [s.name for s in co.server_steps(OLD)]


class Relayed:
    def __init__(self, w: World, relay: FakeRelay):
        self.w, self.relay = w, relay

    def held(self) -> dict:
        return ConsolidateState.load(self.w.ctx.state).held

    def settled(self) -> None:
        """No hold left anywhere: not in the relay, not in this process, not in the journal."""
        assert not self.relay.holding, self.w.events
        assert relay_hold._HOLDS.get(self.relay.path) is None
        assert self.held() == {}, self.held()

    def new_process(self) -> None:
        """What a later process knows of the relay: only what the run state journaled."""
        relay_hold._HOLDS.pop(self.relay.path, None)


@pytest.fixture
def relayed(monkeypatch, tmp_path: Path) -> Iterator[Relayed]:
    w = make_world(monkeypatch)
    relay = FakeRelay(tmp_path / "relay.sock", ADDR[OLD])

    def on_command(cmd: str) -> None:
        args = cmd.split()
        if args[0] in ("seq", "status"):
            return
        if args[0] == "move":
            w.route = args[1]  # the applications write where the relay sends them
            w.events.append(f"relay move {'instance' if args[1] == ADDR[INST] else 'old server'}")
        elif args[0] == "release":
            # Held commands run now, on the relay's backend: it must take writes (no 1290).
            target = INST if relay.backend == ADDR[INST] else OLD
            if relay.holding:
                assert not w.read_only[target], f"released onto read-only {target}: {w.events}"
            w.events.append(f"relay release{'' if relay.holding else ' (nothing held)'}")
        else:
            w.events.append(f"relay {args[0]}")

    relay.on_command = on_command
    monkeypatch.setattr(co, "route_of", lambda ctx, shard: relay_route(ctx, shard, relay.path))
    real_set = w.set_read_only

    def set_read_only(name: str, on: bool) -> None:
        if on and relay.backend == ADDR[name] and w.in_cutover is not None and not w.read_only[name]:
            # A fence of the server the relay sends writes to: its sessions are held first.
            assert relay.holding, f"{name} fenced while the relay's sessions were not held: {w.events}"
        real_set(name, on)

    w.set_read_only = set_read_only  # type: ignore[method-assign]
    with w.journal:
        yield Relayed(w, relay)
    relay_hold._HOLDS.pop(relay.path, None)
    relay.close()


def index(ev: list[str], text: str, after: int = -1) -> int:
    found = [i for i, e in enumerate(ev) if e == text and i > after]
    assert found, f"{text!r} not seen after #{after}: {ev}"
    return found[0]


def test_the_relay_holds_before_the_fence_moves_at_the_routes_and_releases_after_the_open_ending_no_session(relayed):
    r, w = relayed, relayed.w
    w.in_cutover = True
    said = co.cutover(w.ctx, OLD)
    w.in_cutover = False
    ev = w.events
    hold = index(ev, "relay hold")
    fence = index(ev, f"{OLD} read_only=ON", hold)
    moved = index(ev, "relay move instance", fence)
    opened = index(ev, f"{INST} read_only=OFF", moved)
    released = index(ev, "relay release", opened)
    assert hold < fence < moved < opened < released
    # The hold journaled before it was sent; cleared once released.
    assert ev.index("journal: cutover begun") < hold
    # No session of the old server ended: the relay moved them (its sessions there are the relay's).
    assert not any("KILL" in e for e in ev), ev
    assert w.sessions[OLD], "the old server's session was ended"
    assert "relays moved the app sessions" in said and "none ended" in said, said
    r.settled()
    assert w.route == ADDR[INST] and not w.read_only[INST] and w.read_only[OLD]
    # Every relay change went through the run's journal and was answered.
    st = ConsolidateState.load(w.ctx.state)
    assert st.relay_changes == {} and st.relay_seq > 0
    assert all(line.rstrip().split(";")[-1].strip().startswith("seq ") for line in r.relay.lines
               if not line.startswith("status")), r.relay.lines

    w.app_writes(3)
    w.events.clear()
    back = co.undo_cutover(w.ctx, OLD)
    ev = w.events
    hold = index(ev, "relay hold")
    fence = index(ev, f"{INST} read_only=ON", hold)
    waited = next(i for i, e in enumerate(ev) if e.startswith(f"{OLD} waited for {REV}"))
    moved = index(ev, "relay move old server", waited)
    opened = index(ev, f"{OLD} read_only=OFF", moved)
    released = index(ev, "relay release", opened)
    assert hold < fence < waited < moved < opened < released
    assert not any("KILL" in e for e in ev), ev
    assert "held sessions released" in back, back
    r.settled()
    assert w.lost() == [] and w.route == ADDR[OLD] and not w.read_only[OLD] and w.read_only[INST]


def test_a_cutover_that_gives_up_in_its_window_releases_the_relay_to_the_old_server_once_it_is_unfenced(relayed,
                                                                                                      monkeypatch):
    r, w = relayed, relayed.w
    fake = co.Inspector

    class Stalled(fake):  # type: ignore[misc, valid-type]
        def wait_for_position(self, conn, log_file, log_pos, timeout_s) -> bool:
            if self.name == INST:
                self.w.events.append(f"{INST} did not apply {log_file}:{log_pos}")
                return False
            return super().wait_for_position(conn, log_file, log_pos, timeout_s)

    monkeypatch.setattr(co, "Inspector", Stalled)
    w.in_cutover = True
    with pytest.raises(DbmigrateError, match="did not apply"):
        co.cutover(w.ctx, OLD)
    w.in_cutover = False
    ev = w.events
    fence = index(ev, f"{OLD} read_only=ON", index(ev, "relay hold"))
    released = index(ev, "relay release", index(ev, f"{OLD} read_only=OFF", fence))
    assert "relay move instance" not in ev and released
    r.settled()
    assert w.route == ADDR[OLD] and not w.read_only[OLD] and w.read_only[INST]


def _killed_after(r: Relayed, k: int) -> None:
    """The tool killed -9 right after the k-th step: nothing of its process runs after that, and
    a later process knows of the relay's hold only what the run state journaled."""
    w = r.w
    steps_then_killed(w, k)
    r.new_process()
    if w.route == ADDR[INST] and not w.read_only[INST]:
        w.app_writes(3)


@pytest.mark.parametrize("k", range(1, len(STEPS) + 1), ids=lambda k: STEPS[k - 1].rpartition(": ")[2])
def test_killed_after_any_step_resume_releases_the_relays_hold_and_ends_cut_over(relayed, k):
    r, w = relayed, relayed.w
    _killed_after(r, k)
    if STEPS[k - 1].endswith(": fence") or STEPS[k - 1].endswith(": routes"):
        assert r.relay.holding and r.held(), (r.held(), w.events)  # the dead process left its hold
    co.cutover(w.ctx, OLD)
    assert co.cutover_finished(w.ctx, OLD)
    r.settled()
    assert w.route == ADDR[INST] and not w.read_only[INST] and w.read_only[OLD]
    assert w.conns[OLD].get(REV, {}).get("running") and connection_name(OLD) not in w.conns[INST]
    w.app_writes(2)
    co.undo_cutover(w.ctx, OLD)
    r.settled()
    assert w.lost() == [] and w.route == ADDR[OLD] and not w.read_only[OLD] and w.read_only[INST]


@pytest.mark.parametrize("k", range(1, len(STEPS) + 1), ids=lambda k: STEPS[k - 1].rpartition(": ")[2])
def test_killed_after_any_step_rollback_releases_the_relays_hold_and_loses_nothing(relayed, k):
    r, w = relayed, relayed.w
    _killed_after(r, k)
    run = co.ServerCutover(OLD)
    [step.undo(w.ctx) for step in reversed(run.steps()[:k]) if step.undo is not None]
    r.settled()
    assert w.lost() == [] and w.route == ADDR[OLD] and not w.read_only[OLD] and w.read_only[INST]
    assert not any("KILL" in e for e in w.events), w.events


def test_a_relay_shared_by_shards_going_to_two_instances_is_refused_before_anything_changes(relayed, monkeypatch):
    """One relay has one backend: it cannot route two shards that go to different instances."""
    from dbmigrate.procedures.consolidate import relay_edges
    from dbmigrate.procedures.consolidate.context import ConsolidateRefused
    from dbmigrate.procedures.consolidate.plan import ConsolidationPlan, Demand, PlannedInstance, ShardDemand

    r, w = relayed, relayed.w
    plan = ConsolidationPlan("instance-per-group", {}, [ShardDemand(SHARD, OLD, 1, 1, 0.0),
                                                        ShardDemand("shard_2", OLD, 1, 1, 0.0)],
                             [PlannedInstance(INST, "h1", "127.0.0.1", 3401, "/d", [SHARD], [OLD], Demand(), 0.0,
                                              shard_sources={SHARD: OLD}),
                              PlannedInstance("inst2", "h1", "127.0.0.1", 3402, "/d", ["shard_2"], [OLD], Demand(),
                                              0.0, shard_sources={"shard_2": OLD})], [])
    monkeypatch.setattr(relay_edges, "plan_of", lambda ctx: plan)
    with pytest.raises(ConsolidateRefused, match="one relay has one backend"):
        relay_edges.relays_of(w.ctx, OLD, route_of=co.route_of)
    assert r.relay.lines == [line for line in r.relay.lines if line.startswith("status")]
