"""Cluster lock: MySQL named lock + journal entry, against a fake lock server."""

from __future__ import annotations

import pytest

from dbmigrate.db.named_lock import SqlNamedLocks
from dbmigrate.engine import ClusterLock
from dbmigrate.engine.lock import lock_name
from dbmigrate.exceptions import LockHeld
from tests.unit.test_engine_support import FakeLockServer


def test_lock_is_taken_in_the_database_and_the_journal_and_released(journal):
    server = FakeLockServer()
    session = server.connect()
    with _lock(session, "main", journal, "20261122-180501-a1b2") as lock:
        assert server.owners == {"dbmigrate:main": session.connection_id}
        entry = journal.active_lock("main")
        assert entry["run_id"] == "20261122-180501-a1b2" and "@" in entry["holder"] and entry["pid"] > 0
        assert lock.held
    assert server.owners == {}
    assert journal.active_lock("main") is None
    assert session.sent[0] == "SELECT GET_LOCK(%s, 0) AS got"


def test_second_run_is_refused_naming_the_holder(journal):
    server = FakeLockServer()
    first = _lock(server.connect(), "main", journal, "20261122-180501-a1b2")
    first.acquire()
    holder = journal.active_lock("main")
    second = _lock(server.connect(), "main", journal, "20261122-181000-ffff")
    with pytest.raises(LockHeld) as refused:
        second.acquire()
    message = refused.value.message
    assert "locked by run 20261122-180501-a1b2" in message
    assert f"({holder['holder']} pid {holder['pid']})" in message
    assert f"since {holder['since']}" in message
    assert f"MySQL connection {first.session.session.connection_id}" in message
    assert "runs show 20261122-180501-a1b2" in refused.value.hint
    assert journal.active_lock("main")["run_id"] == "20261122-180501-a1b2"  # untouched


def test_stale_journal_entry_is_marked_and_taken_over(journal):
    server = FakeLockServer()
    crashed = server.connect()
    _lock(crashed, "main", journal, "20261122-170000-dead").acquire()
    crashed.close()  # the process died: MySQL dropped its connection and the named lock
    fresh = server.connect()
    assert _lock(fresh, "main", journal, "20261122-180000-beef").is_free()
    _lock(fresh, "main", journal, "20261122-180000-beef").acquire()
    assert journal.active_lock("main")["run_id"] == "20261122-180000-beef"
    stale = journal._rows("SELECT status, note FROM locks WHERE run_id='20261122-170000-dead'")[0]
    assert stale["status"] == "stale" and "taken over by run 20261122-180000-beef" in stale["note"]


def test_database_lock_without_journal_entry_refuses_and_says_so(journal):
    server = FakeLockServer()
    foreign = server.connect()
    foreign.query("SELECT GET_LOCK(%s, 0) AS got", ("dbmigrate:main",))
    with pytest.raises(LockHeld) as refused:
        _lock(server.connect(), "main", journal, "20261122-180000-beef").acquire()
    assert f"held (MySQL connection {foreign.connection_id})" in refused.value.message
    assert "no run in journal" in refused.value.message
    assert journal.active_lock("main") is None


def test_resume_reuses_its_own_entry_but_not_a_live_process(journal):
    server = FakeLockServer()
    original = server.connect()
    _lock(original, "main", journal, "20261122-180000-beef").acquire()
    with pytest.raises(LockHeld, match="run 20261122-180000-beef is still active"):
        _lock(server.connect(), "main", journal, "20261122-180000-beef").acquire()
    original.close()
    _lock(server.connect(), "main", journal, "20261122-180000-beef").acquire()
    rows = journal._rows("SELECT status FROM locks")
    assert [r["status"] for r in rows] == ["held"]  # one entry, reused


def test_other_clusters_do_not_conflict_and_long_names_fit_mysql(journal):
    server = FakeLockServer()
    _lock(server.connect(), "main", journal, "r1").acquire()
    _lock(server.connect(), "billing", journal, "r2").acquire()
    long = "x" * 100
    assert len(lock_name(long)) == 64 and lock_name(long) != lock_name(long + "y")


def test_a_live_run_whose_lock_is_on_the_former_primary_is_not_taken_over(journal):
    """Run A locked the old primary, then moved the primary; run B's GET_LOCK on the new
    primary succeeds, but A's process is alive: B must be refused, not take A over."""
    import subprocess
    import sys

    from dbmigrate.engine.journal import current_holder, utc_now_iso

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        journal._write("INSERT INTO locks (cluster, run_id, holder, pid, since, status) VALUES (?,?,?,?,?, 'held')",
                       ("main", "20261122-180501-a1b2", current_holder(), alive.pid, utc_now_iso()))
        new_primary = FakeLockServer()
        with pytest.raises(LockHeld, match="being changed by run 20261122-180501-a1b2"):
            _lock(new_primary.connect(), "main", journal, "20261122-181000-ffff").acquire()
        assert new_primary.owners == {}  # the lock B got for a moment was given back
    finally:
        alive.kill()
        alive.wait()
    # Once A's process is gone, its entry is stale and B may go on.
    lock = _lock(FakeLockServer().connect(), "main", journal, "20261122-181000-ffff")
    lock.acquire()
    assert journal.active_lock("main")["run_id"] == "20261122-181000-ffff"


def _lock(session, *args):
    return ClusterLock(SqlNamedLocks(session), *args)


def _dead_pid() -> int:
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_resume_ends_the_session_a_dead_process_of_this_run_left_open_and_takes_the_lock(journal):
    """The earlier process was killed while a partition kept its lock session open on the server:
    its pid is gone on this machine, so resume ends that session instead of refusing."""
    from dbmigrate.engine.journal import current_holder, utc_now_iso

    server = FakeLockServer()
    kept_open = server.connect()
    assert SqlNamedLocks(kept_open).try_lock(lock_name("main")) == 1
    journal._write("INSERT INTO locks (cluster, run_id, holder, pid, since, status) VALUES (?,?,?,?,?, 'held')",
                   ("main", "20261122-180000-beef", current_holder(), _dead_pid(), utc_now_iso()))
    resumed = server.connect()
    _lock(resumed, "main", journal, "20261122-180000-beef").acquire()
    assert f"KILL CONNECTION {kept_open.connection_id}" in resumed.sent
    assert server.owners == {lock_name("main"): resumed.connection_id}


def test_a_holder_on_another_machine_is_named_with_the_session_to_end(journal):
    from dbmigrate.engine.journal import utc_now_iso

    server = FakeLockServer()
    kept_open = server.connect()
    SqlNamedLocks(kept_open).try_lock(lock_name("main"))
    journal._write("INSERT INTO locks (cluster, run_id, holder, pid, since, status) VALUES (?,?,?,?,?, 'held')",
                   ("main", "20261122-180000-beef", "ops@elsewhere", 4242, utc_now_iso()))
    resumed = server.connect()
    with pytest.raises(LockHeld) as refused:
        _lock(resumed, "main", journal, "20261122-180000-beef").acquire()
    assert f"KILL CONNECTION {kept_open.connection_id}" in refused.value.hint
    assert not any(s.startswith("KILL") for s in resumed.sent)  # not proven gone: not ended
