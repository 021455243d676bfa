"""The order of one old server's cutover on a fake consolidation topology, through the kit's real
fence (its calm wait, statement, expiry and watchdog session run against the fakes): fence, catch
up, check, journal the reverse position, routes, open, reverse, sessions. The instance's binlog
position is journaled inside the window, the reverse connection is set up after the open (out of
the window), and a cutover stopped between the open and the reverse connection is put back without
losing what the instance took. At no moment are the old server and its instance both writable."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from dbmigrate.db.credentials import Credentials
from dbmigrate.db.inspector import Session
from dbmigrate.engine.events import EventBus
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.step import RunContext
from dbmigrate.engine.substeps import SubSteps
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate import cutover as co
from dbmigrate.procedures.consolidate.context import ConsolidateParams, PlanOnly, edit_state
from dbmigrate.procedures.consolidate.model import connection_name
from dbmigrate.procedures.consolidate.plan import ConsolidationPlan, Demand, PlannedInstance, ShardDemand
from dbmigrate.procedures.consolidate.resources import ConsolidateState

OLD, INST, SHARD = "old1", "inst1", "shard_1"
ADDR = {OLD: "127.0.0.1:3301", INST: "127.0.0.1:3401"}
REV = connection_name(INST)  # the old server's connection from the instance


class World:
    """The old server, its instance, the shard's route and the instance's binlog; every change
    lands in `events`, in order, and two writable servers fail the test at once."""

    def __init__(self, ctx_box: list):
        self.ctx_box = ctx_box
        self.read_only = {OLD: False, INST: True}
        self.inst_pos = 400  # the instance's binlog position (one file)
        self.writes: list[int] = []  # positions of writes the instance took once open
        self.replayed: set[int] = set()  # those the old server applied through its reverse connection
        self.conns: dict[str, dict] = {OLD: {}, INST: {connection_name(OLD): {"from": 0, "running": True}}}
        self.route = ADDR[OLD]
        self.events: list[str] = []
        self.fail_reverse = 0  # CHANGE MASTER on the old server fails this many times
        self.in_cutover = False
        self.expiry: dict[str, float] = {}  # fence expiries scheduled, by server
        self.sessions: dict[str, list[Session]] = {OLD: [Session(7, "app", "10.0.0.9", SHARD, "Sleep", 3, None)],
                                                   INST: []}
        self.hot_until_fenced = False  # a range of the shard keeps changing until the old server is fenced
        self.journaled: set[str] = set()  # what the run state held so far (see on_state)

    def on_state(self, value) -> None:
        """The run state as the journal saves it: its first cutover facts land in `events`."""
        data = (value or {}).get("data") or {}
        for key, said in (("fencing", "journal: cutover begun"), ("reverse", "journal: reverse position"),
                          ("cut", "journal: cut over")):
            if OLD in (data.get(key) or {}) and key not in self.journaled:
                self.journaled.add(key)
                self.events.append(said)

    def journaled_reverse(self) -> dict:
        return ConsolidateState.load(self.ctx_box[0].state).reverse.get(OLD, {})

    def set_read_only(self, name: str, on: bool) -> None:
        self.read_only[name] = on
        self.events.append(f"{name} read_only={'ON' if on else 'OFF'}")
        assert sum(not v for v in self.read_only.values()) <= 1, f"two writable: {self.read_only}"
        if name == INST and not on and self.read_only[OLD] and self.in_cutover is not None:
            # The fleet's other work waits from the fence to the open.
            assert co.WINDOWS.open_now() == (1 if self.in_cutover else 0)
        if name == INST and not on:
            # The open: the instance's position for the reverse connection must already be journaled.
            assert self.journaled_reverse() == {INST: ["inst-bin.000001", self.inst_pos]}, "position not journaled"

    def app_writes(self, n: int) -> None:
        """The application writes through the route (only where it is writable)."""
        target = OLD if self.route == ADDR[OLD] else INST
        assert not self.read_only[target]
        for _ in range(n):
            if target == INST:
                self.inst_pos += 10
                self.writes.append(self.inst_pos)

    def lost(self) -> list[int]:
        """Writes the instance took that the old server had not applied when it waited for them."""
        return [p for p in self.writes if p not in self.replayed]


class FakeApplier:
    def __init__(self, w: World, name: str):
        self.w, self.name = w, name

    def set_read_only(self, on: bool, lock_wait_timeout: float | None = None) -> None:
        self.w.set_read_only(self.name, on)

    def add_source(self, conn, host, port, repl, log_file, log_pos, wild) -> None:
        if self.w.fail_reverse:
            self.w.fail_reverse -= 1
            raise DbmigrateError(f"{self.name}: CHANGE MASTER '{conn}' failed")
        self.w.conns[self.name][conn] = {"from": log_pos, "running": False}
        self.w.events.append(f"{self.name} CHANGE MASTER {conn} at {log_file}:{log_pos}")

    def start_source(self, conn) -> None:
        self.w.conns[self.name][conn]["running"] = True
        self.w.events.append(f"{self.name} START SLAVE {conn}")

    def remove_source(self, conn) -> None:
        if conn not in self.w.conns[self.name]:  # as the server: STOP SLAVE 'x' on no such connection fails
            raise DbmigrateError(f"{self.name}: There is no master connection '{conn}'")
        self.w.conns[self.name].pop(conn)
        self.w.events.append(f"{self.name} RESET SLAVE {conn} ALL")

    def fence_and_read_binlog_pos(self, lock_wait_timeout: float, expiry_s: float | None = None) -> str:
        if expiry_s:
            self.w.expiry[self.name] = expiry_s
            self.w.events.append(f"{self.name} fence expiry in {expiry_s:g}s")
        self.w.set_read_only(self.name, True)
        return ""

    def cancel_fence_expiry(self) -> None:
        if self.w.expiry.pop(self.name, None) is not None:
            self.w.events.append(f"{self.name} fence expiry dropped")

    def kill_connection(self, connection_id: int) -> None:
        self.w.sessions[self.name] = [x for x in self.w.sessions[self.name] if x.id != connection_id]
        self.w.events.append(f"{self.name} KILL CONNECTION {connection_id}")


class FakeInspector:
    def __init__(self, srv):
        self.w, self.name = srv.w, srv.name

    def binlog_coordinates(self):
        self.w.events.append(f"{self.name} position read")
        return ("inst-bin.000001", self.w.inst_pos) if self.name == INST else ("old-bin.000001", 100)

    def read_only(self) -> bool:
        return self.w.read_only[self.name]

    def row_lock_waits(self) -> int:
        return 0

    @property
    def login_user(self) -> str:
        return "dbmigrate"

    def sessions(self, exclude_system: bool = True) -> list[Session]:
        return list(self.w.sessions[self.name])

    def open_transactions(self) -> list[tuple[int, str]]:
        return []

    # -- the copy check: one table, one key range ----------------------------------
    def base_tables(self, schema: str) -> list[str]:
        return ["items"]

    def checksum_layout(self, schema: str, table: str):
        return ["id", "qty"], "id", 100

    def next_chunk_start(self, schema, table, key, after, rows):
        return 1 if after is None else None

    def chunk_checksum(self, schema, table, columns, key, lo, hi) -> str:
        self.w.events.append(f"{self.name} checksum {schema}.{table}")
        changing = self.name == INST and self.w.hot_until_fenced and not self.w.read_only[OLD]
        return "10:changing" if changing else "10:abc"

    def event_scheduler_on(self) -> bool:
        return True

    def connection_id(self) -> int:
        return 1

    def connection_status(self, conn):
        return self.w.conns[self.name].get(conn)

    def connection_running(self, conn):
        c = self.w.conns[self.name].get(conn)
        return None if c is None else c["running"]

    def wait_for_position(self, conn, log_file, log_pos, timeout_s) -> bool:
        c = self.w.conns[self.name].get(conn)
        ok = c is not None and c["running"]
        if ok:  # a connection replays what its source wrote after the position it started from
            self.w.replayed |= {p for p in self.w.writes if p > c["from"]}
        self.w.events.append(f"{self.name} waited for {conn} {log_file}:{log_pos}: {'applied' if ok else 'timed out'}")
        return ok


class FakeServer:
    def __init__(self, w: World, name: str):
        self.w, self.name = w, name

    flavor = None

    @contextmanager
    def bounded(self, seconds: float):
        yield

    def watcher(self, read_timeout: int) -> "FakeServer":
        return self  # the fence's watchdog reads here; a fake fence never blocks

    def query(self, sql: str, params=None) -> list:
        return []


class FakeRoute:
    def __init__(self, w: World):
        self.w = w

    def current(self):
        return type("R", (), {"writer": self.w.route})()

    def switch_writer(self, addr: str, old: str | None = None) -> None:
        assert old is None or old == self.w.route
        self.w.route = addr
        self.w.events.append(f"route {SHARD} -> {'instance' if addr == ADDR[INST] else 'old server'}")


class RecordingJournal(Journal):
    """The journal, its run state saves seen by the world as they happen."""

    world: World | None = None

    def set_state(self, run_id, key, value) -> None:
        super().set_state(run_id, key, value)
        if key == ConsolidateState.KEY and self.world is not None:
            self.world.on_state(value)


def make_world(monkeypatch, **params):
    box: list = []
    w = World(box)
    plan = ConsolidationPlan("instance-per-group", {}, [ShardDemand(SHARD, OLD, 1, 1, 0.0)],
                             [PlannedInstance(INST, "h1", "127.0.0.1", 3401, "/d", [SHARD], [OLD], Demand(), 0.0,
                                              shard_sources={SHARD: OLD})], [])
    servers = {n: FakeServer(w, n) for n in (OLD, INST)}

    def accounts(ctx, source, targets):
        w.events.append("accounts compared")
        return co.Accounts()

    # How the run reaches its servers and routes (the fakes); the fence, the copy check, the
    # journal and the drain of sessions are the product's own.
    for name, value in {
        "server_of": lambda ctx, n: servers[n], "applier_of": lambda ctx, n: FakeApplier(w, n),
        "Inspector": FakeInspector, "route_of": lambda ctx, s: FakeRoute(w), "address_of": lambda ctx, n: ADDR[n],
        "resources_of": lambda ctx: type("Res", (), {"repl": Credentials("repl", "secret"), "app": None})(),
        "require_accounts": accounts, "try_app_login": lambda *a, **k: "app logs in",
        "wait_accounts_reach": lambda *a, **k: "",
    }.items():
        monkeypatch.setattr(co, name, value)
    j = RecordingJournal(":memory:")
    j.create_run("r1", procedure="consolidate", cluster="c")
    bus = EventBus()
    bus.subscribe(j.record)
    ctx = RunContext(run_id="r1", procedure="consolidate", cluster="c", journal=j, bus=bus,
                     params=ConsolidateParams(plan="p.json", **{"checksum": False, "fence_expiry": "off", **params}),
                     resources=PlanOnly(plan))
    box.append(ctx)
    w.ctx, w.journal = ctx, j
    j.world = w
    return w


@pytest.fixture
def world(monkeypatch):
    w = make_world(monkeypatch)
    with w.journal:
        yield w


def test_one_old_servers_cutover_runs_fence_catch_up_check_journal_routes_open_reverse_sessions_in_order(monkeypatch):
    """The whole cutover of one old server, its fence the kit's own (calm wait, read_only with its
    expiry, the expiry dropped before the open), the copy check's hot range compared inside the
    window, and the order read from what the fakes and the journal saw."""
    w = make_world(monkeypatch, checksum=True, fence_expiry="require")
    w.hot_until_fenced = True
    with w.journal:
        w.in_cutover = True
        said = co.cutover(w.ctx, OLD)
        w.in_cutover = False
        ev = w.events

        def at(text: str, after: int = -1) -> int:
            found = [i for i, e in enumerate(ev) if e == text and i > after]
            assert found, f"{text!r} not seen after #{after}: {ev}"
            return found[0]

        fwd = connection_name(OLD)
        fence = at(f"{OLD} read_only=ON")
        catch_up = at(f"{INST} waited for {fwd} old-bin.000001:100: applied", fence)
        check = at(f"{INST} checksum {SHARD}.items", catch_up)
        position = at(f"{INST} position read", check)
        journal = at("journal: reverse position", position)
        routes = at(f"route {SHARD} -> instance", journal)
        expiry_dropped = at(f"{OLD} fence expiry dropped", routes)
        opened = at(f"{INST} read_only=OFF", expiry_dropped)
        reverse = at(f"{OLD} CHANGE MASTER {REV} at inst-bin.000001:400", opened)
        started = at(f"{OLD} START SLAVE {REV}", reverse)
        sessions = at(f"{OLD} KILL CONNECTION 7", started)
        forward = at(f"{INST} RESET SLAVE {fwd} ALL", sessions)
        assert fence < catch_up < check < position < journal < routes < opened < reverse < sessions < forward
        # Before the fence: the accounts, the copy checked range by range, the cutover journaled as begun;
        # the fence's own request scheduled its expiry.
        before = ev[:fence]
        assert before.index("accounts compared") < before.index(f"{INST} checksum {SHARD}.items") \
            < before.index("journal: cutover begun"), before
        assert ev[fence - 1].startswith(f"{OLD} fence expiry in "), ev
        assert at("journal: cut over", started) < sessions
        assert w.read_only[OLD] and not w.read_only[INST] and w.route == ADDR[INST] and OLD not in w.expiry
        parts = [m["labels"]["part"] for m in w.journal.metric_rows("r1", "fenced_part_ms")]
        assert parts == ["fence", "catch_up", "check", "reverse_position", "journal", "routes", "fence_held", "open"]
        assert "1 range(s) compared in it" in said and "1 app session(s) on old1 ended" in said, said
        assert f"fenced {OLD} (read_only=ON)" in said, said


def test_the_reverse_connection_starts_after_the_open_from_the_position_journaled_inside_the_window(world):
    w = world
    w.in_cutover = True
    said = co.cutover(w.ctx, OLD)
    w.in_cutover = False
    assert co.WINDOWS.open_now() == 0
    assert [e for e in w.events if not e.startswith("journal:")] == [
        "accounts compared",
        f"{OLD} read_only=ON", f"{OLD} position read",  # the kit's fence and its final position
        f"{INST} waited for {connection_name(OLD)} old-bin.000001:100: applied",
        f"{INST} position read",  # inside the window: one read on the instance, then the journal
        f"route {SHARD} -> instance",
        f"{INST} read_only=OFF",  # end of the window (the journal held the position: asserted at the open)
        f"{OLD} CHANGE MASTER {REV} at inst-bin.000001:400",  # after the window
        f"{OLD} START SLAVE {REV}",
        f"{OLD} KILL CONNECTION 7",  # the application's session on the old server, once the route moved
        f"{INST} RESET SLAVE {connection_name(OLD)} ALL",  # the forward connection, last
    ]
    st = ConsolidateState.load(w.ctx.state)
    assert OLD in st.cut and OLD not in st.fencing and st.reverse[OLD] == {INST: ["inst-bin.000001", 400]}
    parts = [m["labels"]["part"] for m in w.journal.metric_rows("r1", "fenced_part_ms")]
    assert parts == ["fence", "catch_up", "check", "reverse_position", "journal", "routes", "fence_held", "open"]
    assert "replicates them back for rollback" in said
    w.app_writes(3)
    co.undo_cutover(w.ctx, OLD)  # rollback: the instance's writes come back before the route does
    assert w.lost() == [] and w.route == ADDR[OLD] and not w.read_only[OLD] and w.read_only[INST]


def test_a_cutover_stopped_between_the_open_and_the_reverse_connection_is_put_back_losing_nothing(world):
    """As the tool killed right after the open leaves it: fenced old server, route and writes on
    the instance, its position journaled, no reverse connection (or one set up and not started)."""
    w = world
    for started in (False, True):
        with edit_state(w.ctx) as st:
            st.fencing[OLD] = 1.0
            st.reverse[OLD] = {INST: ["inst-bin.000001", w.inst_pos]}
        w.set_read_only(OLD, True)
        w.route = ADDR[INST]
        w.set_read_only(INST, False)
        if started:  # CHANGE MASTER landed, START SLAVE did not
            w.conns[OLD][REV] = {"from": w.inst_pos, "running": False}
        w.app_writes(5)
        w.events.clear()
        said = co.undo_cutover(w.ctx, OLD)
        assert w.lost() == [], w.lost()
        ev = w.events
        waited = next(i for i, e in enumerate(ev) if e.startswith(f"{OLD} waited for {REV} ") and e.endswith(": applied"))
        assert ev.index(f"{OLD} START SLAVE {REV}") < waited \
            < ev.index(f"route {SHARD} -> old server") < ev.index(f"{OLD} read_only=OFF")
        assert (f"{OLD} CHANGE MASTER {REV} at inst-bin.000001:{w.writes[0] - 10}" in ev) == (not started)
        assert "routes shard_1 back to old1" in said and w.route == ADDR[OLD]
        st = ConsolidateState.load(w.ctx.state)
        assert st.reverse == {} and st.fencing == {} and REV not in w.conns[OLD]
        w.writes.clear()


def test_a_reverse_connection_that_cannot_be_set_up_after_the_open_fails_the_cutover_loudly(world):
    """Not dropped: the cutover fails with the cause; the undo cannot replay the instance's writes
    without it either, so it leaves the route on the writable instance and the old server fenced."""
    w = world
    w.fail_reverse = 2  # in the cutover, and again in its undo
    logs = []
    w.ctx.bus.subscribe(lambda e: logs.append(getattr(e, "message", "")))
    w.in_cutover = True
    with pytest.raises(DbmigrateError, match=f"CHANGE MASTER '{REV}' failed"):
        co.cutover(w.ctx, OLD)
    w.in_cutover = False
    assert co.WINDOWS.open_now() == 0
    assert w.route == ADDR[INST] and not w.read_only[INST] and w.read_only[OLD]
    assert any("putting old1 back failed too" in m and "dbmigrate rollback r1" in m for m in logs), logs
    st = ConsolidateState.load(w.ctx.state)
    assert OLD in st.fencing and OLD not in st.cut and st.reverse[OLD] == {INST: ["inst-bin.000001", 400]}
    # The operator's rollback, once the cause is gone, puts it back with nothing lost.
    w.app_writes(2)
    co.undo_cutover(w.ctx, OLD)
    assert w.lost() == [] and w.route == ADDR[OLD] and not w.read_only[OLD]


STEPS = [s.name for s in co.server_steps(OLD)]


def test_one_old_servers_cutover_is_the_kits_steps_in_order_each_journaled_under_the_fleet_step(world):
    """fence -> catch up -> check -> journal the reverse position -> routes -> open -> reverse ->
    sessions, between consolidation's own checks before the fence and its login and forward
    connections after: each one a journaled step (its own row), the fence the kit's."""
    w = world
    assert STEPS == [f"cut over {OLD}: {part}" for part in (
        "checks before the fence", "fence", "catch up", "check in the window", "journal the reverse position",
        "routes", "open", "reverse replication", "end sessions", "app login", "forward connections")]
    w.in_cutover = True
    co.cutover(w.ctx, OLD)
    w.in_cutover = False
    rows = w.journal.step_rows("r1")
    assert [(r["name"], r["status"]) for r in rows] == [(n, "done") for n in STEPS]
    assert co.cutover_finished(w.ctx, OLD)
    # The kit's fence: its statement went through the kit (the fake applier's fence), read_only=ON once.
    assert w.events.count(f"{OLD} read_only=ON") == 1


def steps_then_killed(w: World, k: int) -> co.ServerCutover:
    """The cutover's first k steps, then the tool killed -9: nothing of its process runs after
    that (no undo in place); its window is no longer held by it."""
    run = co.ServerCutover(OLD)
    steps = run.steps()
    subs = SubSteps(w.ctx, steps)
    w.in_cutover = True
    for step in steps[:k]:
        subs.execute(step)
    run.leave_window(w.ctx)
    w.in_cutover = None  # a later process: no window of its own to check at its open
    return run


def _killed_after(w: World, k: int) -> co.ServerCutover:
    """The tool killed -9 right after the k-th step of the cutover finished."""
    run = steps_then_killed(w, k)
    if w.route == ADDR[INST] and not w.read_only[INST]:
        w.app_writes(3)  # the applications write on the instance meanwhile
    return run


@pytest.mark.parametrize("k", range(1, len(STEPS) + 1), ids=lambda k: STEPS[k - 1].rpartition(": ")[2])
def test_killed_after_any_step_resume_ends_cut_over_with_nothing_lost(world, k):
    w = world
    _killed_after(w, k)
    co.cutover(w.ctx, OLD)  # resume: the fleet's lane runs the server's steps again, each asked its check first
    assert co.cutover_finished(w.ctx, OLD)
    assert w.route == ADDR[INST] and not w.read_only[INST] and w.read_only[OLD]
    assert w.conns[OLD].get(REV, {}).get("running") and connection_name(OLD) not in w.conns[INST]
    assert OLD not in w.expiry
    w.app_writes(2)
    co.undo_cutover(w.ctx, OLD)  # and its rollback later loses nothing the instance took, before or after
    assert w.lost() == [] and w.route == ADDR[OLD] and not w.read_only[OLD] and w.read_only[INST]


@pytest.mark.parametrize("k", range(1, len(STEPS) + 1), ids=lambda k: STEPS[k - 1].rpartition(": ")[2])
def test_killed_after_any_step_rollback_puts_it_back_with_nothing_lost(world, k):
    """The engine's rollback: every step done (or started, when it asks to be undone), newest
    first; the first undo puts the whole cutover back, the others find nothing left."""
    w = world
    run = _killed_after(w, k)
    said = [step.undo(w.ctx) for step in reversed(run.steps()[:k]) if step.undo is not None]
    assert w.lost() == [] and w.route == ADDR[OLD] and not w.read_only[OLD] and w.read_only[INST]
    assert REV not in w.conns[OLD] and OLD not in w.expiry
    st = ConsolidateState.load(w.ctx.state)
    assert OLD not in st.fencing and OLD not in st.cut and OLD not in st.reverse
    assert all(s.startswith("nothing left to undo") for s in said[1:]), said


def test_a_server_rolled_back_on_its_own_is_cut_over_again_from_its_first_step(world):
    """The terminal session's per-server rollback ('b'): the steps journaled done earlier are asked
    their checks again, so a resume cuts that server over anew."""
    w = world
    w.in_cutover = True
    co.cutover(w.ctx, OLD)
    co.rollback_one(w.ctx, OLD)
    assert w.route == ADDR[OLD] and not w.read_only[OLD]
    w.events.clear()
    w.conns[INST][connection_name(OLD)] = {"from": 0, "running": True}  # seeded again, replicating
    co.cutover(w.ctx, OLD)
    w.in_cutover = False
    assert w.route == ADDR[INST] and not w.read_only[INST] and w.read_only[OLD]
    assert f"{OLD} read_only=ON" in w.events


def test_killed_inside_the_forward_step_after_its_statement_resume_finishes_it(world):
    """As the tool killed right after `RESET SLAVE '...' ALL` on the instance: the step journaled
    as started, the connection gone; resume runs the step again without failing on it."""
    w = world
    run = _killed_after(w, len(STEPS) - 1)
    co.applier_of(w.ctx, INST).remove_source(connection_name(OLD))
    co.cutover(w.ctx, OLD)
    assert co.cutover_finished(w.ctx, OLD) and connection_name(OLD) not in w.conns[INST]
    assert run.source == OLD


def test_a_fence_that_expired_before_the_resume_is_put_back_and_the_cutover_begun_again(world):
    """Killed after the reverse position was journaled, its fence expired before `resume` (the old
    server writable again, maybe written): the steps that go on from the routes find it writable,
    put it back and begin again from the fence, so nothing written there meanwhile is left behind."""
    w = world
    _killed_after(w, STEPS.index(f"cut over {OLD}: journal the reverse position") + 1)
    w.read_only[OLD] = False  # the expiry fired: one writable server, the instance still read-only
    w.events.clear()
    co.cutover(w.ctx, OLD)
    assert co.cutover_finished(w.ctx, OLD)
    assert w.route == ADDR[INST] and not w.read_only[INST] and w.read_only[OLD]
    assert w.events.count(f"{OLD} read_only=ON") == 1  # fenced anew
    w.app_writes(2)
    co.undo_cutover(w.ctx, OLD)
    assert w.lost() == []
