"""Fencing generations on the fake topology: a change sent under an older decision, landing after
a later decision (a new process: rollback, resume) bumped the server's generation, does nothing.
The tool's process is killed with the change in flight and nothing journaled it (`die()`): only
the generation stands between the late change and the server. Each case has its control, the
same story without generations, which the fake fails on (two writable) to show the test bites.
The rendering of the guarded SQL, and the generations a process holds in its ledger, are tested last."""

from __future__ import annotations

import contextlib

import pytest

from dbmigrate.db.connection import Unresponsive
from dbmigrate.db.flavor import MariaDB, MySQL
from dbmigrate.db.generation import BUMP_BOUND_S, Generations, Superseded, send_guarded
from dbmigrate.db.ledger import SafetyLedger
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams, switch_back
from tests.unit.fake_topology import FakeRouter, FakeTopology, cluster

LATE_S = 20.0  # the dead process's packets reach the server this long after the heal (RTO backoff)


def switchover(topo: FakeTopology, router: FakeRouter) -> Switchover:
    return Switchover(topo, "db1", "db2", SwitchoverParams(), router, clock=topo.clock)


def let_time_pass(topo: FakeTopology, seconds: float) -> None:
    """Second by second: what lands late may schedule what fires later (an expiry)."""
    for _ in range(int(seconds)):
        topo.clock.advance(1.0)


def no_ops(topo: FakeTopology, name: str) -> list[str]:
    return [sql for who, sql in topo.sent if who == name and "no-op>" in sql]


# -- late open -------------------------------------------------------------------------------

def killed_with_the_open_in_flight(generations: bool) -> tuple[FakeTopology, FakeRouter]:
    """db1 fenced, the router on db2, the open sent into a partition of db2; the tool killed."""
    topo = cluster()
    if generations:
        topo.new_decision()
    router = FakeRouter(topo, "db1")
    sw = switchover(topo, router)
    sw.fence()
    sw.switch_router(persist=False)
    assert not sw.is_open()  # db2 read (and bumped) before the partition, as by the run's checks
    topo.servers["db2"].partitioned = True
    with pytest.raises(Unresponsive):
        sw.open_candidate(stop_replica=False, sealed=True)
    topo.die()
    topo.generations = generations
    topo.heal("db2", lands_after_s=LATE_S)
    return topo, router


def test_a_late_open_is_a_no_op_after_the_rollback_bumped_the_candidate():
    topo, router = killed_with_the_open_in_flight(generations=True)

    switch_back(switchover(topo, router), candidate_opened=True, router_switched=True)  # the rollback's process

    assert topo.writable() == ["db1"]
    let_time_pass(topo, LATE_S + 30)  # the open lands meanwhile
    assert topo.writable() == ["db1"]
    assert no_ops(topo, "db2") == ["SET GLOBAL read_only=OFF <generation 1, server holds 2: no-op>"]
    assert router.writer == "127.0.0.1:3301"


def test_control_without_generations_the_late_open_makes_two_writable():
    topo, router = killed_with_the_open_in_flight(generations=False)
    switch_back(switchover(topo, router), candidate_opened=True, router_switched=True)
    with pytest.raises(AssertionError, match="two primaries"):
        let_time_pass(topo, LATE_S + 30)


# -- late fence (and the expiry it would re-arm) ------------------------------------------------

def killed_with_the_fence_in_flight_then_resumed(generations: bool) -> tuple[FakeTopology, FakeRouter]:
    """The fence (with its expiry) sent into a partition of db1, the tool killed, healed; the
    resume's process fences again and completes: db2 the primary, db1 its replica."""
    topo = cluster()
    if generations:
        topo.new_decision()
    router = FakeRouter(topo, "db1")
    sw = switchover(topo, router)
    sw.prepare_window()
    topo.servers["db1"].partitioned = True
    with pytest.raises(DbmigrateError):
        sw.fence()
    topo.die()
    topo.generations = generations
    topo.heal("db1", lands_after_s=LATE_S)

    resumed = switchover(topo, router)
    resumed.prepare_window()
    _, pos = resumed.fence()
    resumed.wait_catchup(pos)
    resumed.open_candidate()
    resumed.switch_router()
    resumed.start_reverse()
    assert topo.writable() == ["db2"] and topo.servers["db1"].source == "db2"
    return topo, router


def test_a_late_fence_is_a_no_op_and_re_arms_no_expiry_after_the_resume_bumped_the_old_primary():
    topo, router = killed_with_the_fence_in_flight_then_resumed(generations=True)

    let_time_pass(topo, LATE_S + 60)  # the fence lands, and its expiry would have fired

    assert topo.writable() == ["db2"]
    assert topo.servers["db1"].expiry_at is None
    assert no_ops(topo, "db1") == ["fence with expiry in 13s <generation 1, server holds 2: no-op>"]


def test_control_without_generations_the_late_fence_re_arms_an_expiry_that_opens_a_replica():
    topo, router = killed_with_the_fence_in_flight_then_resumed(generations=False)
    with pytest.raises(AssertionError, match="two primaries"):
        let_time_pass(topo, LATE_S + 60)


# -- late expiry --------------------------------------------------------------------------------

def fenced_with_expiry_then_killed() -> tuple[FakeTopology, FakeRouter, float]:
    topo = cluster()
    topo.new_decision()
    router = FakeRouter(topo, "db1")
    sw = switchover(topo, router)
    sw.prepare_window()
    sw.fence()
    assert sw.fence_expires_at is not None
    topo.die()  # killed inside the window: its expiry stays scheduled on db1
    return topo, router, sw.s.expiry_after(sw.s.catchup_timeout_s)


def test_a_late_expiry_is_a_no_op_after_a_later_decision_bumped_the_server():
    topo, router, expiry_s = fenced_with_expiry_then_killed()
    topo.servers["db2"].read_only = False  # a later decision made db2 the writer ...
    topo.servers["db2"].io_running = topo.servers["db2"].sql_running = False
    assert switchover(topo, router).is_fenced()  # ... and read db1 first: bumped

    topo.clock.advance(expiry_s + 1)

    assert topo.writable() == ["db2"]
    assert no_ops(topo, "db1") == [
        "fence expiry <generation 1, server holds 2, replicating False: no-op>"]


def test_a_late_expiry_never_opens_a_server_that_replicates_even_under_its_own_generation():
    topo, router, expiry_s = fenced_with_expiry_then_killed()
    topo.generations = False  # nobody decided since: the generation still matches
    topo.servers["db1"].source, topo.servers["db1"].io_running, topo.servers["db1"].sql_running = "db2", True, True
    topo.servers["db2"].read_only = False
    topo.servers["db2"].io_running = topo.servers["db2"].sql_running = False

    topo.clock.advance(expiry_s + 1)

    assert topo.writable() == ["db2"]
    assert no_ops(topo, "db1") == ["fence expiry <generation 1, server holds 1, replicating True: no-op>"]


def test_control_an_expiry_under_its_own_generation_on_a_server_that_does_not_replicate_unfences():
    topo, router, expiry_s = fenced_with_expiry_then_killed()
    topo.generations = False
    topo.clock.advance(expiry_s + 1)
    assert topo.writable() == ["db1"]  # the bound the expiry exists for


# -- the SQL the server runs ------------------------------------------------------------------

def test_mariadb_guards_each_role_change_with_the_generation_under_the_named_lock():
    f = MariaDB()
    [sql] = f.guarded_sql(7, [*f.fence_expiry_sql(13, 7), *f.set_read_only_sql(True, 5)], 10)
    assert sql.startswith("BEGIN NOT ATOMIC") and sql.endswith("END")
    assert "IF GET_LOCK('dbmigrate_generation', 10) = 1" in sql
    assert "IF (SELECT gen FROM mysql.dbmigrate_generation WHERE id = 1) = 7 THEN" in sql
    assert "EXECUTE IMMEDIATE 'SET STATEMENT sql_log_bin=0 FOR CREATE OR REPLACE EVENT" in sql  # error 1576 otherwise
    assert "*/ SET STATEMENT lock_wait_timeout=5 FOR SET GLOBAL read_only=ON;" in sql
    assert "RELEASE_LOCK('dbmigrate_generation'); RESIGNAL" in sql  # an error never leaves the lock held
    [opened] = f.guarded_sql(7, f.set_read_only_sql(False), 10)
    assert "*/ SET GLOBAL read_only=OFF" in opened  # what watches the wire still recognises the open


def test_the_expiry_checks_its_generation_and_replication_and_the_bump_never_binlogs():
    f = MariaDB()
    [event] = f.fence_expiry_sql(13, 7)
    assert "= 7 AND (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = " \
           "'SLAVES_RUNNING') = 0 THEN SET @@GLOBAL.read_only=0" in event
    assert f.fence_expiry_sql(13) == [event.split(" DO ")[0] + " DO SET @@GLOBAL.read_only=0"]  # off a run: as before
    create, bump = f.generation_bump_sql("run-1")
    assert create.startswith("SET STATEMENT sql_log_bin=0 FOR CREATE TABLE IF NOT EXISTS mysql.dbmigrate_generation")
    assert "SET STATEMENT sql_log_bin=0 FOR INSERT INTO mysql.dbmigrate_generation" in bump
    assert "ON DUPLICATE KEY UPDATE gen = gen + 1" in bump


def test_mysql_guards_through_a_procedure_and_sends_event_ddl_as_it_is():
    f = MySQL()
    out = f.guarded_sql(3, [*f.fence_expiry_sql(13, 3), *f.set_read_only_sql(False)], 10)
    assert "CALL dbmigrate.guarded(3, 'SET GLOBAL read_only=OFF', 10)" in out
    assert any(s.startswith("CREATE EVENT dbmigrate.fence_expiry") and "= 3 AND" in s for s in out)


# -- the generations a process holds (in its ledger) ------------------------------------------

class Wire:
    """A scripted session: answers the guard's check with `ran` and the server's generation. It
    has a ledger of its own, as a handle is given one (the process's, outside tests)."""

    def __init__(self, server_gen: int, ran: int):
        self.name, self.address, self.flavor = "db1", "127.0.0.1:3301", MariaDB()
        self.ledger = SafetyLedger()
        self.server_gen, self.ran, self.sent = server_gen, ran, []

    def bounded(self, seconds):
        return contextlib.nullcontext(self)

    def scalar_after(self, statements, sql):
        self.sent += statements
        return self.server_gen

    def query_after(self, statements, sql):
        self.sent += statements
        return [{"dbmigrate_ran": self.ran, "dbmigrate_gen": self.server_gen, "pos": "0-1-5"}]


def test_a_decision_bumps_each_server_once_and_a_new_decision_bumps_again():
    wire = Wire(server_gen=4, ran=1)
    gens = wire.ledger.generations
    gens.arm("run-1")
    gens.ensure(wire)  # type: ignore[arg-type]
    gens.ensure(wire)  # type: ignore[arg-type]
    assert gens.current(wire.address) == 4
    assert sum("gen = gen + 1" in s for s in wire.sent) == 1
    gens.new_decision()
    wire.server_gen = 5
    gens.ensure(wire)  # type: ignore[arg-type]
    assert gens.current(wire.address) == 5
    gens.disarm()
    assert gens.current(wire.address) is None


def test_a_role_change_refused_under_a_later_generation_says_another_decision_took_over():
    wire = Wire(server_gen=4, ran=1)
    wire.ledger.generations.arm("run-1")
    wire.ledger.generations.ensure(wire)  # type: ignore[arg-type]
    assert send_guarded(wire, ["SET GLOBAL read_only=OFF"], "SELECT @@GLOBAL.gtid_binlog_pos AS pos") == \
        [{"pos": "0-1-5"}]  # type: ignore[arg-type]
    wire.server_gen, wire.ran = 5, 0  # another process bumped db1 since
    with pytest.raises(Superseded, match="generation 5, this run holds 4"):
        send_guarded(wire, ["SET GLOBAL read_only=OFF"])  # type: ignore[arg-type]


def test_a_role_change_outside_a_decision_is_sent_as_it_is():
    wire = Wire(server_gen=4, ran=0)  # a guard would refuse it: it is not guarded
    wire.executed = []
    wire.execute = wire.executed.append
    assert send_guarded(wire, ["SET GLOBAL read_only=OFF"]) == []  # type: ignore[arg-type]
    assert wire.executed == ["SET GLOBAL read_only=OFF"] and wire.sent == []


class _Bumps:
    """A server whose first bump succeeds and whose next ones fail (a global read lock taken since)."""

    name, address = "db-1", "127.0.0.1:3306"

    def __init__(self) -> None:
        self.bumps = 0
        self.bounds: list[float] = []

    def bounded(self, seconds):
        self.bounds.append(seconds)
        return contextlib.nullcontext(self)

    @property
    def flavor(self):
        from dbmigrate.db.flavor import MariaDB

        return MariaDB()

    def scalar_after(self, statements, sql):
        from dbmigrate.db.connection import Unresponsive

        self.bumps += 1
        if self.bumps > 1:
            raise Unresponsive("db-1 did not answer within 2.0s (Waiting for global read lock)")
        return 7


def test_an_undo_that_cannot_bump_keeps_its_own_generation_and_a_new_process_cannot():
    from dbmigrate.db.connection import Unresponsive

    gens, server = Generations(), _Bumps()
    gens.arm("r1")
    gens.ensure(server)
    assert gens.current(server.address) == 7
    gens.new_decision()  # the run's own undo: bump again; the read lock stops it, 7 is kept
    gens.ensure(server)
    assert gens.current(server.address) == 7 and server.bumps == 2
    fresh = Generations()  # a resume or rollback in a new process holds nothing to keep
    fresh.arm("r1")
    with pytest.raises(Unresponsive):
        fresh.ensure(server)
    assert fresh.current(server.address) is None
    # Each bump had a bound of its own: a read lock held for minutes costs the undo BUMP_BOUND_S,
    # not the connection's read timeout.
    assert server.bounds == [BUMP_BOUND_S] * 3
