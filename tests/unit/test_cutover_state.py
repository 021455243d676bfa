"""The cutover steps journal what resume and rollback decide from (fence position,
candidate opened, switch time), on a fake switchover: no server needed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dbmigrate.db.flavor import MARIADB

from dbmigrate.engine.events import EventBus
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.step import RunContext
from dbmigrate.clock import FakeClock
from dbmigrate.procedures.kit import cutover as kit
from dbmigrate.procedures.kit.cutover import CutoverState


class FakeInspector:
    flavor = MARIADB

    def __init__(self, sw: "FakeSwitchover", name: str):
        self.sw, self.name = sw, name

    def gtid_binlog_pos(self) -> str:
        return self.sw.positions[self.name]

    def variable(self, name: str) -> str:
        return {"binlog_format": "ROW"}[name]


class FakeSwitchover:
    """What the cutover steps call, with a log of the calls and what the journal said at each."""

    old, new = "p1", "r1"
    applied_at_fence = None  # no fenced catch-up budget: the catch-up step waits
    fence_expires_at = None  # no expiry scheduled
    s = SimpleNamespace(probe_timeout_s=2.0)
    sealed_sessions: list = []
    # The old primary's binlog past the fence, as the post-fence audit reads it: nothing described.
    topo = SimpleNamespace(binlog=lambda name, timeout_s: SimpleNamespace(after=lambda pos, includes: []))

    def require_fence_holds(self, expires_at) -> None:
        pass

    # No router that holds new connections (routing/haproxy_hold.py) in these scenarios.
    def holds_new_connections(self) -> bool:
        return False

    def is_holding(self) -> bool:
        return False

    def current_hold(self):
        return None

    def release_hold(self, to_new=None) -> str:
        return ""

    def release_leftover_hold(self, saved) -> str:
        self.calls.append(f"put back {saved['server']} maxconn {saved['maxconn_before']}" if saved else "nothing held")
        return "maxconn back" if saved else ""

    def confirm_router(self) -> str:
        self.calls.append("confirm router")
        return "router -> r1 only"

    def __init__(self, ctx_of: "list[RunContext]"):
        self.ctx_of = ctx_of
        self.calls: list[str] = []
        self.positions = {"p1": "0-1-10", "r1": "0-1-10"}
        self.fenced = False
        self.seen_opened_before_open: bool | None = None

    def insp(self, name: str) -> FakeInspector:
        return FakeInspector(self, name)

    def fence(self, before_retry=None):
        self.calls.append("fence")
        self.fenced = True
        return "fenced p1", self.positions["p1"]

    def is_fenced(self) -> bool:
        return self.fenced

    def seal_old(self, bypass: set[str] | None = None) -> tuple[str, str]:
        return "", self.positions["p1"]  # the position read once the old primary is sealed

    def wait_catchup(self, pos: str) -> str:
        self.calls.append(f"catchup {pos}")
        return f"r1 applied {pos}"

    def open_candidate(self, stop_replica: bool = True, sealed: bool = False) -> str:
        self.seen_opened_before_open = CutoverState.load(self.ctx_of[0].state).candidate_opened
        self.calls.append("open")
        return "r1 writable"

    def switch_router(self, persist: bool = True) -> str:
        self.calls.append("router")
        return "router -> r1"


@pytest.fixture
def world(tmp_path):
    with Journal(tmp_path / "j.sqlite") as j:
        j.create_run("run1", procedure="promote", cluster="c", params={}, playbook="", playbook_sha="", dry_run=False)
        holder: list[RunContext] = []
        sw = FakeSwitchover(holder)
        ctx = RunContext(run_id="run1", procedure="promote", cluster="c", journal=j, bus=EventBus(), clock=FakeClock(42.0))
        holder.append(ctx)
        yield ctx, sw, kit.Cutover(old="p1", new="r1", switchover=lambda c, record, routed: sw)


def test_fence_journals_the_final_position(world):
    ctx, sw, cut = world
    assert not kit.is_fenced(cut, ctx)  # not fenced by this run, whatever the server says
    assert kit.fence(cut, ctx) == "fenced p1"
    assert CutoverState.load(ctx.state).fence_pos == "0-1-10"
    assert kit.is_fenced(cut, ctx) and ctx.hook_env["DBMIGRATE_FENCE_POSITION"] == "0-1-10"


def test_open_journals_candidate_opened_before_it_opens(world):
    ctx, sw, cut = world
    kit.fence(cut, ctx)
    kit.open_candidate(cut, ctx)
    assert sw.seen_opened_before_open is True  # a crash during the statement must assume it is writable
    assert sw.calls == ["fence", "open"]


def test_open_waits_again_when_the_old_primary_moved_after_the_fence(world):
    ctx, sw, cut = world
    kit.fence(cut, ctx)
    sw.positions["p1"] = "0-1-11"  # an account that bypasses read_only committed
    said = kit.open_candidate(cut, ctx)
    assert sw.calls == ["fence", "catchup 0-1-11", "open"] and "moved after the fence" in said
    assert CutoverState.load(ctx.state).fence_pos == "0-1-11"


def test_router_switch_time_comes_from_the_run_clock(world):
    ctx, sw, cut = world
    kit.switch_router(cut, ctx)
    assert CutoverState.load(ctx.state).switched_at == 42.0


def test_a_resume_past_the_open_puts_back_a_hold_a_dead_process_left_after_saving_the_route(world):
    ctx, sw, cut = world
    with CutoverState.edit(ctx.state) as st:  # journaled by the process that held, then died
        st.held = {"backend": "writer", "server": "p1", "address": "127.0.0.1:3301", "maxconn_before": 0}
    said = kit.save_route(cut, ctx)
    assert sw.calls == ["confirm router", "put back p1 maxconn 0"] and "maxconn back" in said
    assert CutoverState.load(ctx.state).held is None
    kit.save_route(cut, ctx)  # nothing left to put back: only the route read back
    assert sw.calls[-1] == "confirm router"
