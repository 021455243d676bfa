"""The cluster lease's decisions: who may take it, what a refusal says, and a lost lease
stopping the run at the next step boundary without undoing anything."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import pytest

from dbmigrate.engine import FunctionStep, Journal, Phase, Procedure, Runner
from dbmigrate.engine.lease import Lease, LeaseRow, may_take
from dbmigrate.exceptions import LockHeld
from tests.unit.test_engine_support import World, new_context

NOW = datetime(2026, 1, 1, 12, 0, 0)


def row(run_id: str, left_s: float) -> LeaseRow:
    return LeaseRow(run_id=run_id, holder="ops@db1", host="db1", pid=42, expires_at=NOW + timedelta(seconds=left_s),
                    now=NOW)


class Store:
    def __init__(self, found: LeaseRow | None = None, renew: tuple[str, LeaseRow | None] = ("renewed", None)):
        self.found, self.renew_answer = found, renew
        self.released, self.closed = [], 0

    def take(self, cluster, run_id, holder, host, pid, ttl_s):
        return may_take(self.found, run_id), self.found

    def renew(self, cluster, run_id, ttl_s):
        return self.renew_answer

    def release(self, cluster, run_id):
        self.released.append(run_id)

    def close(self):
        self.closed += 1


@pytest.mark.parametrize("found, ok", [(None, True), (row("", 10), True), (row("r1", -1), True),
                                       (row("r1", 10), True), (row("r2", 10), False)])
def test_a_lease_may_be_taken_when_free_expired_or_already_ours(found, ok):
    assert may_take(found, "r1") is ok


def test_a_live_lease_of_another_run_refuses_naming_its_holder():
    store = Store(row("r2", 12))
    with pytest.raises(LockHeld) as e:
        Lease(store, "c1", "r1", "me@here", "here", 7).acquire()
    assert "cluster 'c1' is leased to run r2 (ops@db1 on db1 pid 42; lease expires in 12s)" in e.value.message
    assert store.closed == 1


def test_a_lease_taken_over_by_another_run_is_lost_and_not_cleared():
    store = Store(renew=("lost", row("r2", 20)))
    lease = Lease(store, "c1", "r1", "me@here", "here", 7, renew_every_s=3600)
    lease.acquire()
    assert lease.stop_reason() is None
    lease.renew_once()
    assert lease.stop_reason().startswith("the cluster lease was taken over by run r2")
    lease.release()
    assert store.released == []  # the row is the other run's now


def test_no_writable_server_only_pauses_renewal():
    store = Store(renew=("unwritable", None))  # inside the fenced window every server is read-only
    lease = Lease(store, "c1", "r1", "me@here", "here", 7, renew_every_s=3600)
    lease.acquire()
    lease.renew_once()
    assert lease.stop_reason() is None and lease.renewals == 0
    lease.release()
    assert store.released == ["r1"]


def test_a_lost_lease_stops_the_run_before_the_next_step_and_undoes_nothing(tmp_path):
    world = World()
    with Journal(tmp_path / "j.sqlite") as journal:
        ctx = new_context(journal)
        # asked before the phase's gates, before 'fence', then before 'open'
        reasons: list[str | None] = [None, None, "the cluster lease was taken over by run r2"]
        runner = Runner()
        runner.stop_check = lambda: reasons.pop(0) if len(reasons) > 1 else reasons[0]
        proc = Procedure("demo", [Phase("cutover", [world.step("fence"), world.step("open")])],
                         rollback_on_failure=True)
        outcome = runner.run(proc, ctx)
    assert outcome.status == "failed"
    assert "taken over by run r2: stopped before step 'open', nothing undone" in outcome.summary, outcome.summary
    assert world.calls == ["check:fence", "run:fence"], world.calls  # the fence stays for whoever holds the cluster now


def test_a_step_of_a_procedure_without_lease_is_not_stopped(tmp_path):
    with Journal(tmp_path / "j.sqlite") as journal:
        ctx = new_context(journal)
        outcome = Runner().run(Procedure("demo", [Phase("p", [FunctionStep("s", lambda c: "ok")])]), ctx)
    assert outcome.status == "done"


def test_a_lease_whose_holder_on_this_host_is_gone_may_be_taken_another_hosts_only_once_expired():
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    held = LeaseRow(run_id="r2", holder="ops@db1", host="here", pid=gone.pid, expires_at=NOW + timedelta(seconds=25),
                    now=NOW)
    assert may_take(held, "r1", host="here")  # killed: it renews nothing, waiting 25 s would help nobody
    assert not may_take(held, "r1", host="elsewhere")  # another host's process cannot be asked
    alive = LeaseRow(run_id="r2", holder="ops@db1", host="here", pid=os.getppid(), expires_at=held.expires_at, now=NOW)
    assert not may_take(alive, "r1", host="here")


class _KilledOnce:
    """A dedicated session whose first write fails as a session the seal ended does."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def dedicated(self) -> "_KilledOnce":
        return _KilledOnce(self.log)

    def bounded(self, seconds: float):
        import contextlib

        return contextlib.nullcontext()

    def execute(self, sql: str, params=None) -> int:
        from dbmigrate.exceptions import DbmigrateError

        self.log.append(sql)
        if len(self.log) == 1:
            raise DbmigrateError("Lost connection to server during query")
        return 1

    def close(self) -> None:
        self.log.append("close")


def test_the_release_is_sent_again_on_a_new_session_when_the_seal_ended_the_leases_own():
    from dbmigrate.db.lease import SqlLease

    log: list[str] = []
    lease = SqlLease({"db-1": _KilledOnce(log)}, primary="db-1")
    lease.release("orders", "r1")
    updates = [sql for sql in log if sql.startswith("UPDATE")]
    assert len(updates) == 2 and "close" in log, log  # the ended session dropped, the release sent again
