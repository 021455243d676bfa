"""Size counts, and every wait is bounded and named, on a fake topology.

- The convergence before the fence also waits for (or refuses, with the reason) work that is
  too big for the fenced window: a DDL or a large transaction in flight on the old primary, a
  DDL the candidate applies, a binlog backlog beyond the limit. It looks only once converged.
- The verify probe write is bounded by its timeout and a full disk is named as such.
- A replica whose SQL thread stopped with an error is named at once, and is not lag: the
  verify step pauses the run instead of finishing it.

Names: db1 is the old primary, db2 the candidate, db3 another replica.
"""

from __future__ import annotations

import pytest

from dbmigrate.db.inspector import HeavyWork
from dbmigrate.engine.runner import RunPaused
from dbmigrate.exceptions import RefusedWait, WaitTimeout
from dbmigrate.procedures.kit.switchover import Notify, Switchover, SwitchoverParams
from tests.unit.fake_topology import FakeInspector, FakeRouter, FakeTopology, cluster

ALTER = HeavyWork("DDL", 41, "app", 0, "ALTER TABLE app.big ADD COLUMN x INT, ALGORITHM=COPY")
UPDATE = HeavyWork("transaction", 42, "app", 1, "UPDATE app.big SET v = v + 1", rows=600_000)
SMALL = HeavyWork("transaction", 43, "app", 0, "UPDATE app.big SET v = 1 WHERE id < 100", rows=99)


def switchover(topo: FakeTopology, log: Notify | None = None, **settings) -> Switchover:
    return Switchover(topo, "db1", "db2", SwitchoverParams(**settings), FakeRouter(topo, "db1"), log=log,
                      clock=topo.clock)


def later(topo: FakeTopology, seconds: float) -> float:
    return topo.clock.monotonic() + seconds


# -- size counts, not only count ------------------------------------------------------------

@pytest.mark.parametrize("where, field, work, named", [
    ("db1", "heavy", ALTER, "db1 runs a DDL running for 0s (session 41, app): 'ALTER TABLE app.big ADD COLUMN x"),
    ("db1", "heavy", UPDATE, "db1 runs a transaction that has modified 600,000 rows in 1s and not committed "
                             "(session 42, app: 'UPDATE app.big SET v = v + 1')"),
    ("db2", "applying", ALTER, "db2 applies a DDL running for 0s (session 41, app)"),
])
def test_converged_by_count_it_still_waits_for_work_too_big_for_the_window(where, field, work, named):
    topo = cluster()
    getattr(topo.servers[where], field).append((later(topo, 2.0), work))
    logged = []
    sw = switchover(topo, log=lambda message, level="info": logged.append(message))
    start = topo.clock.monotonic()

    sentence, behind = sw.converge()

    assert 2.0 <= topo.clock.monotonic() - start < 2.2  # until the work ended, looking every 0.11 s
    assert behind == 0 and "ms for work too big for the fenced window" in sentence
    assert logged and logged[0].startswith("not fencing yet: " + named), logged
    assert topo.sent == []  # converging reads only


@pytest.mark.parametrize("where, field, work, why", [
    ("db1", "heavy", ALTER, "db1 runs a DDL"),
    ("db1", "heavy", UPDATE, "db1 runs a transaction that has modified 600,000 rows"),
    ("db2", "applying", ALTER, "db2 applies a DDL"),
    ("db2", "backlog", 64 << 20, "db2 has 64.0 MiB of db1's binlog still to apply (limit 1 MiB: a large transaction)"),
])
def test_work_that_outlasts_the_convergence_bound_is_refused_with_its_reason(where, field, work, why):
    topo = cluster()
    getattr(topo.servers[where], field).append((float("inf"), work))
    start = topo.clock.monotonic()

    with pytest.raises(RefusedWait) as refused:
        switchover(topo, converge_timeout_s=3).converge()

    assert refused.value.message.startswith(why), refused.value.message
    assert "inside the fenced window" in refused.value.message and "not fenced, nothing changed" in refused.value.message
    assert 3 <= topo.clock.monotonic() - start < 3.2
    assert topo.sent == [] and topo.writable() == ["db1"]


def test_a_small_transaction_and_a_small_backlog_do_not_hold_the_fence():
    topo = cluster()
    topo.servers["db1"].heavy.append((float("inf"), SMALL))
    topo.servers["db2"].backlog.append((float("inf"), 200_000))
    sentence, _ = switchover(topo).converge()
    assert "too big" not in sentence and topo.clock.sleeps == []


def test_the_size_is_read_only_once_converged_not_every_poll(monkeypatch):
    looks = []
    real = FakeInspector.heavy_work_in_flight
    monkeypatch.setattr(FakeInspector, "heavy_work_in_flight",
                        lambda self, rows: looks.append(self.topo.clock.monotonic()) or real(self, rows))
    topo = cluster()
    topo.servers["db2"].lag_until = later(topo, 0.3)
    topo.write("db1", 30)  # 30 behind for 0.3 s: about 300 polls

    switchover(topo).converge()

    assert len(topo.clock.sleeps) > 200 and len(looks) == 1


# -- the verify probe: bounded, a full disk named ------------------------------------------

def promoted() -> FakeTopology:
    """db2 the writable primary, db1 and db3 replicating from it."""
    topo = cluster()
    topo.servers["db1"].read_only = True
    topo.link("db2", None)
    topo.servers["db2"].read_only = False
    topo.link("db1", "db2")
    topo.link("db3", "db2")
    return topo


def test_writes_waiting_for_disk_space_are_named_before_any_probe_is_written():
    topo = promoted()
    topo.servers["db2"].disk_full = True

    with pytest.raises(WaitTimeout) as failed:
        switchover(topo).verify_writes_flow("r1", timeout=10)

    assert failed.value.message == ("disk full on db2: 1 session(s) wait for disk space there, the longest for 12s; "
                                    "no probe written; writes on db2 wait until space is freed")
    assert "free space on db2" in failed.value.hint and "dbmigrate resume r1" in failed.value.hint
    assert topo.statements("db2") == []  # no write of its own left waiting (and in doubt)


def test_a_probe_write_that_waits_for_disk_space_fails_within_the_timeout_and_says_disk_full(monkeypatch):
    """The disk fills with the probe itself: nothing waited before it, it waits until the timeout."""
    topo = promoted()
    topo.servers["db2"].disk_full = True
    looks = []
    real = FakeInspector.disk_full_waits

    def after_the_probe(self):
        looks.append(self.name)
        return real(self) if len(looks) > 1 else []  # the look before the probe sees nobody waiting yet

    monkeypatch.setattr(FakeInspector, "disk_full_waits", after_the_probe)
    start = topo.clock.monotonic()

    with pytest.raises(WaitTimeout) as failed:
        switchover(topo).verify_writes_flow("r1", timeout=10)

    assert 10 <= topo.clock.monotonic() - start < 10 + 2.5  # the timeout, plus one bounded look
    assert failed.value.message == ("disk full on db2: the probe write did not complete within 10s (1 session(s) "
                                    "wait for disk space there, the longest for 12s); writes on db2 wait until "
                                    "space is freed")


def test_a_probe_write_that_hangs_for_another_reason_is_bounded_too_and_says_so():
    topo = promoted()
    topo.servers["db2"].frozen = True
    start = topo.clock.monotonic()
    with pytest.raises(WaitTimeout) as failed:
        switchover(topo).verify_writes_flow("r1", timeout=4)
    assert failed.value.message.startswith("the probe write on db2 did not complete within 4s")
    assert topo.clock.monotonic() - start < 4 + 2.5


# -- a stopped SQL thread is not lag ---------------------------------------------------------

DUPLICATE = "Could not execute Write_rows_v1 event on table app.t; Duplicate entry '7' for key 'PRIMARY'"


def test_a_follower_whose_sql_thread_stopped_pauses_the_run_with_its_error_instead_of_passing_as_lag():
    topo = promoted()
    db3 = topo.servers["db3"]
    db3.sql_running, db3.last_sql_error = False, DUPLICATE

    with pytest.raises(RunPaused) as paused:
        switchover(topo).verify_writes_flow("r1", timeout=2)

    assert paused.value.message == (f"writes flow on db2, but replication stopped with an error on db3: SQL thread "
                                    f"stopped: {DUPLICATE}; not lag: it will not catch up by itself")
    assert "dbmigrate resume r1" in paused.value.hint and "dbmigrate rollback r1" in paused.value.hint


def test_a_lagging_follower_is_still_a_warning_and_the_step_passes():
    topo = promoted()
    topo.servers["db3"].lag_until = float("inf")
    warnings = []
    sw = switchover(topo, log=lambda message, level="info": warnings.append((level, message)))
    sentence = sw.verify_writes_flow("r1", timeout=2)
    assert sentence == "a probe write on db2 reached db1; NOT yet on db3 (lagging; see the log)"
    assert warnings and warnings[0][0] == "warning"


def test_repointing_a_replica_whose_sql_thread_stopped_names_its_error_without_waiting_out_the_bound():
    topo = cluster()
    db3 = topo.servers["db3"]
    db3.sql_running, db3.last_sql_error = False, DUPLICATE
    topo.write("db1", 3)  # db3 lacks them
    topo.servers["db1"].read_only = True
    topo.link("db2", None)
    topo.servers["db2"].read_only = False
    start = topo.clock.monotonic()

    sentence = switchover(topo).repoint_replicas(topo.servers["db1"].position())

    assert topo.clock.monotonic() - start < 1  # not replica_timeout_s (30 s) of "lag"
    assert sentence == (f"repointed no replica to db2; left under db1: db3 (replication on db3 stopped with an error "
                        f"(SQL thread stopped: {DUPLICATE}))")
    assert topo.servers["db3"].source == "db1"


def test_waiting_for_a_replica_to_run_names_a_stopped_sql_thread_at_once():
    topo = promoted()
    db1 = topo.servers["db1"]
    db1.sql_running, db1.last_sql_error = False, DUPLICATE
    start = topo.clock.monotonic()
    with pytest.raises(Exception) as failed:
        switchover(topo).wait_replica_running("db1", timeout=10)
    assert failed.value.message == f"replication on db1 stopped with an error (SQL thread stopped: {DUPLICATE})"
    assert topo.clock.monotonic() - start < 1


def test_once_the_ddl_ends_on_the_old_primary_the_candidate_must_apply_it_before_the_fence():
    """The ALTER commits on db1 at t+1; db2's SQL thread has not begun it (no look could see it
    applying there) and applies it by t+2. By count db2 is 1 behind, within the limit: the
    position read when the ALTER ended decides, not the count."""
    topo = cluster()
    topo.servers["db1"].heavy.append((later(topo, 1.0), ALTER))
    topo.clock.at(1.0, lambda: topo.write("db1"))  # the ALTER's transaction
    topo.servers["db2"].lag_until = later(topo, 2.0)
    start = topo.clock.monotonic()

    sentence, behind = switchover(topo).converge()

    assert topo.clock.monotonic() - start >= 2.0 and behind == 0
    assert "for work too big for the fenced window" in sentence


def test_a_candidate_that_falls_behind_while_applying_a_ddl_is_refused_naming_the_ddl():
    topo = cluster()
    topo.servers["db2"].applying.append((float("inf"), ALTER))
    topo.clock.at(0.5, lambda: setattr(topo.servers["db2"], "lag_until", float("inf")) or topo.write("db1", 30))
    with pytest.raises(RefusedWait) as refused:
        switchover(topo, converge_timeout_s=3).converge()
    assert "(last 30 behind, at most 30; earlier db2 applies a DDL running for 0s" in refused.value.message
