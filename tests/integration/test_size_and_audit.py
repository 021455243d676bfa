"""Size counts, every wait is named, and what a fenced or errant server wrote is read from its
binlog, on real servers.

One sandbox serves the module (primary NAME-1, replica NAME-2, candidate NAME-new, HAProxy),
with a table big enough that copying it takes a while. Tests run in file order: the
convergence and wait tests leave the topology as they found it, the audit test promotes
NAME-new, and the errant-GTID test, last, leaves an errant transaction behind.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pymysql
import pytest

from dbmigrate.app.runs import resolve_journal_path, start_run
from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.runner import RunPaused
from dbmigrate.exceptions import RefusedWait, WaitTimeout
from dbmigrate.procedures.kit.switchover import ReplicationStopped, Switchover, SwitchoverParams, SwitchoverServers
from dbmigrate.rehearsal.sandbox import haproxy

from tests import jsonlines
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

NAME = "sizeaud"
OLD, REPLICA, NEW = f"{NAME}-1", f"{NAME}-2", f"{NAME}-new"
ROWS = 200_000
ADMIN, ADMIN_PW = "ops_admin", "ops-admin-pw"  # an account that bypasses read_only (READ ONLY ADMIN)


@pytest.fixture(scope="module")
def cluster(boxes):
    boxes.up(NAME, 1)
    boxes.add_instance(NAME, NEW, replica_of=OLD, buffer_pool_mb=128)
    haproxy.start(boxes, NAME)
    state = boxes.find(NAME)
    inv = load_inventory(state.inventory_file)
    with inv.open(OLD) as p:
        p.execute("CREATE DATABASE IF NOT EXISTS app")
        p.execute("CREATE TABLE app.big (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, pad CHAR(100) NOT NULL)")
        p.execute(f"INSERT INTO app.big (v, pad) SELECT seq, REPEAT('x', 100) FROM app.seq_1_to_{ROWS}")
        p.execute("CREATE TABLE app.small (id INT PRIMARY KEY, note VARCHAR(40))")
        p.execute(f"CREATE USER '{ADMIN}'@'%' IDENTIFIED BY '{ADMIN_PW}'")
        p.execute(f"GRANT READ ONLY ADMIN ON *.* TO '{ADMIN}'@'%'")
        p.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE, LOCK TABLES ON app.* TO '{ADMIN}'@'%'")
        pos = Inspector(p).gtid_binlog_pos()
    for r in (REPLICA, NEW):
        with inv.open(r) as s:
            assert Inspector(s).wait_for_gtid(pos, 120)
    yield state, inv
    boxes.down(NAME)


def topology(inv) -> SwitchoverServers:
    return SwitchoverServers(servers={n: inv.open(n) for n in (OLD, REPLICA, NEW)}, repl=inv.replication_credentials(NAME))


def connect(inv, name: str, user: str | None = None, password: str | None = None):
    spec = inv.find_server(name)[1]
    creds = inv.credentials_for(spec)
    return pymysql.connect(host=spec.host, port=spec.port, user=user or creds.user,
                           password=password if user else (creds.password or ""), autocommit=True,
                           ssl_disabled=True, read_timeout=120)


def in_background(inv, name: str, sql: str, quiet: bool = False) -> threading.Thread:
    def run():
        c = connect(inv, name)
        try:
            c.cursor().execute(sql)
        except pymysql.err.MySQLError:
            if not quiet:
                raise
        finally:
            c.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def wait_for(predicate, timeout_s: float = 30, what: str = "", every_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)


def scalar(inv, name: str, sql: str):
    with inv.open(name) as s:
        return s.scalar(sql)


def catch_up_after(topo: SwitchoverServers) -> float:
    """How long the candidate takes to apply the old primary's position now: what a fence set
    at this moment would have had inside its window."""
    pos = Inspector(topo.servers[OLD]).gtid_binlog_pos()
    t0 = time.monotonic()
    assert Inspector(topo.servers[REPLICA]).wait_for_gtid(pos, 120)
    return time.monotonic() - t0


# -- size counts, not only count ---------------------------------------------------------------

def test_an_alter_copy_started_just_before_the_fence_is_applied_before_it(cluster):
    state, inv = cluster
    topo = topology(inv)
    alter = in_background(inv, OLD, "ALTER TABLE app.big ADD COLUMN c1 INT NULL, ALGORITHM=COPY")
    wait_for(lambda: scalar(inv, OLD, "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST "
                                      "WHERE INFO LIKE 'ALTER TABLE app.big%%'"), what="the ALTER to run")
    sw = Switchover(topo, OLD, REPLICA, SwitchoverParams(converge_timeout_s=120))
    t0 = time.monotonic()
    sentence, behind = sw.converge()
    waited = time.monotonic() - t0
    inside = catch_up_after(topo)
    alter.join(60)
    print(f"ALTER COPY of {ROWS} rows: convergence waited {waited:.2f}s; catch-up a fence would hold: "
          f"{inside * 1000:.0f} ms")
    assert "for work too big for the fenced window" in sentence, sentence
    # The candidate applied the ALTER before the convergence ended: a fence then holds no copy.
    assert scalar(inv, REPLICA, "SELECT COUNT(*) AS n FROM information_schema.COLUMNS "
                                "WHERE TABLE_SCHEMA='app' AND TABLE_NAME='big' AND COLUMN_NAME='c1'") == 1
    assert inside < 1.0


def test_a_large_update_started_just_before_the_fence_is_applied_before_it(cluster):
    state, inv = cluster
    topo = topology(inv)
    update = in_background(inv, OLD, "UPDATE app.big SET v = v + 1")
    wait_for(lambda: (scalar(inv, OLD, "SELECT COALESCE(MAX(trx_rows_modified), 0) AS n "
                                       "FROM information_schema.INNODB_TRX") or 0) >= 10_000,
             what="the UPDATE to modify 10,000 rows", every_s=0.15)  # INNODB_TRX: a cache refreshed after 0.1 s unread
    assert update.is_alive()  # still running: the convergence starts "just after" it
    sw = Switchover(topo, OLD, REPLICA, SwitchoverParams(converge_timeout_s=120))
    t0 = time.monotonic()
    sentence, _ = sw.converge()
    waited = time.monotonic() - t0
    inside = catch_up_after(topo)
    update.join(60)
    print(f"UPDATE of {ROWS} rows: convergence waited {waited:.2f}s; catch-up a fence would hold: "
          f"{inside * 1000:.0f} ms")
    assert "for work too big for the fenced window" in sentence, sentence
    assert scalar(inv, REPLICA, "SELECT MIN(v) - MIN(id) AS d FROM app.big") == 1  # every row updated there
    assert inside < 1.0


def test_a_large_transaction_that_outlasts_the_bound_is_refused_with_its_reason(cluster):
    state, inv = cluster
    topo = topology(inv)
    c = connect(inv, OLD)
    try:
        cur = c.cursor()
        cur.execute("BEGIN")
        cur.execute("UPDATE app.big SET v = v + 1 WHERE id <= 20000")
        time.sleep(0.2)  # InnoDB refreshes INNODB_TRX at most every 0.1 s
        with pytest.raises(RefusedWait) as refused:
            Switchover(topo, OLD, REPLICA, SwitchoverParams(converge_timeout_s=1)).converge()
        cur.execute("ROLLBACK")
    finally:
        c.close()
    assert refused.value.message.startswith(f"{OLD} runs a transaction that has modified 20,000 rows"), \
        refused.value.message
    assert "not fenced, nothing changed" in refused.value.message
    assert not Inspector(topo.servers[OLD]).read_only()


# -- every wait bounded and named ------------------------------------------------------------------

def test_the_fence_refusal_names_the_idle_session_holding_lock_tables_write(cluster):
    state, inv = cluster
    topo = topology(inv)
    holder = connect(inv, OLD, ADMIN, ADMIN_PW)
    try:
        holder.cursor().execute("LOCK TABLES app.small WRITE")
        holder_id = holder.thread_id()
        sw = Switchover(topo, OLD, REPLICA, SwitchoverParams(fence_block_s=0.3))
        sw.prepare_window()
        with pytest.raises(RefusedWait) as refused:
            sw.fence()
    finally:
        holder.close()
    assert f"session {holder_id} ({ADMIN}, idle for" in refused.value.message, refused.value.message
    assert "holds LOCK TABLES app.small WRITE" in refused.value.message
    assert not Inspector(topo.servers[OLD]).read_only()  # gave up: nothing changed


def test_a_stopped_sql_thread_is_named_at_once_and_pauses_the_verify_step(cluster):
    state, inv = cluster
    topo = topology(inv)
    with inv.open(REPLICA) as r:
        r.execute("SET STATEMENT sql_log_bin=0 FOR INSERT INTO app.small VALUES (7, 'only on the replica')")
    with inv.open(OLD) as p:
        p.execute("INSERT INTO app.small VALUES (7, 'on the primary')")
    wait_for(lambda: scalar(inv, REPLICA, "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST "
                                          "WHERE COMMAND = 'Slave_SQL'") == 0, what="the SQL thread to stop")
    try:
        sw = Switchover(topo, NEW, OLD, SwitchoverParams())
        t0 = time.monotonic()
        with pytest.raises(ReplicationStopped) as stopped:
            sw.wait_replica_running(REPLICA, timeout=20)
        assert time.monotonic() - t0 < 10  # named, not waited out as lag
        assert "SQL thread stopped" in stopped.value.message and "Duplicate entry '7'" in stopped.value.message

        # OLD is the writable primary, REPLICA its broken follower: the probe reaches nobody else.
        topo.replicas = [REPLICA]
        with pytest.raises(RunPaused) as paused:
            sw.verify_writes_flow("run-x", timeout=3, old_gone=True)
        assert paused.value.message.startswith(f"writes flow on {OLD}, but replication stopped with an error on "
                                               f"{REPLICA}: SQL thread stopped:"), paused.value.message
        assert "Duplicate entry '7'" in paused.value.message
    finally:
        with inv.open(REPLICA) as r:
            r.execute("SET STATEMENT sql_log_bin=0 FOR DELETE FROM app.small WHERE id = 7")
            r.execute("START SLAVE")
        with inv.open(OLD) as p:
            pos = Inspector(p).gtid_binlog_pos()
        with inv.open(REPLICA) as r:
            assert Inspector(r).wait_for_gtid(pos, 30)


# -- what a fenced or errant server wrote, from its binlog ---------------------------------------

def test_a_row_written_past_the_fence_by_a_bypassing_account_is_audited_and_the_candidate_has_it(cluster, monkeypatch):
    state, inv = cluster
    sessions = []
    real_fence = Switchover.fence

    def fence_then_bypass(self, before_retry=None):
        sentence, pos = real_fence(self, before_retry)
        # read_only=ON does not stop READ ONLY ADMIN: this row lands past the final position.
        c = connect(inv, OLD, ADMIN, ADMIN_PW)
        c.cursor().execute("INSERT INTO app.small VALUES (4242, 'written past the fence')")
        sessions.append(c)  # left open: the seal ends it before the candidate opens
        return sentence, pos

    monkeypatch.setattr(Switchover, "fence", fence_then_bypass)
    try:
        pb = kit.playbook(state, NAME, {"allow_read_only_bypass": [ADMIN], "verify_timeout_s": 10})
        outcome = start_run(pb, assume_yes=True)
    finally:
        for c in sessions:
            try:
                c.close()
            except Exception:
                pass
    assert outcome.status == "done", outcome.summary
    with Journal(resolve_journal_path()) as j:
        detail = j.run_detail(outcome.run_id)
    audit = detail["state"]["post_fence_audit"]["data"]
    assert audit["candidate_has_them"] is True and audit["read_error"] is None
    [trx] = audit["transactions"]
    assert trx["tables"] == {"app.small": {"inserted": 1, "updated": 0, "deleted": 0,
                                           "rows": [trx["tables"]["app.small"]["rows"][0]]}}
    assert "4242" in trx["tables"]["app.small"]["rows"][0]
    assert trx["account"].startswith(ADMIN) and "INSERT INTO app.small VALUES (4242" in trx["statements"][0]
    opened = next(s for s in detail["steps"] if s["name"] == f"open {NEW} for writes" and s["action"] == "run")
    assert f"{OLD} logged 1 transaction(s) after the fence ({trx['gtid']}: app.small: 1 inserted" in opened["sentence"]
    assert scalar(inv, NEW, "SELECT note FROM app.small WHERE id = 4242") == "written past the fence"


def test_check_shows_what_an_errant_transaction_on_a_candidate_changed(cluster, cli):
    state, inv = cluster
    # NEW is the primary now; REPLICA replicates from it. A new binlog file on the replica: the
    # check reads from the newest file that begins before the errant write, not the 70 MB before.
    with inv.open(REPLICA) as r:
        r.execute("FLUSH BINARY LOGS")
    # A bypassing account writes on the replica.
    c = connect(inv, REPLICA, ADMIN, ADMIN_PW)
    try:
        c.cursor().execute("UPDATE app.small SET note = 'changed on the replica' WHERE id = 4242")
    finally:
        c.close()
    r = cli("check", "-i", str(state.inventory_file), "-c", NAME, "--candidate", REPLICA, "--json")
    assert r.returncode == 1, r.stderr[-2000:]
    doc = jsonlines.result(r.stdout)
    errant_gate = next(g for g in doc["gates"] if g["name"] == "errant_gtids")
    assert not errant_gate["ok"]
    assert len(doc["errant_transactions"]) == 1, (doc.get("errant_note"), errant_gate)
    [trx] = doc["errant_transactions"]
    assert trx["gtid"] in errant_gate["details"]["errant"]
    assert trx["tables"]["app.small"]["updated"] == 1
    assert "changed on the replica" in trx["tables"]["app.small"]["rows"][0]
    assert "UPDATE app.small SET note = 'changed on the replica'" in trx["statements"][0]

    shown = cli("check", "-i", str(state.inventory_file), "-c", NAME, "--candidate", REPLICA)
    assert shown.returncode == 1
    assert "what the errant transactions on" in shown.stdout and trx["gtid"] in shown.stdout


def test_a_probe_write_on_a_full_disk_fails_within_the_timeout_and_says_disk_full(cluster, boxes, tmp_path):
    """A primary whose binlog directory is full (a 4 MB tmpfs, filled): the write waits for
    space (MariaDB retries every 60 s); the verify probe gives up at its timeout and says why."""
    state, _ = cluster
    binlogs = tmp_path / "binlogs"
    binlogs.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "none", str(binlogs)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    full = f"{NAME}-df"
    try:
        boxes.add_instance(NAME, full, cluster=f"{NAME}df", extra={"log_bin": str(binlogs / "bin")})
        inv = load_inventory(boxes.find(NAME).inventory_file)
        with inv.open(full) as s:
            s.execute("SET GLOBAL read_only=OFF")  # a standalone primary
            s.execute("CREATE DATABASE fill")
            s.execute("CREATE TABLE fill.t (pad VARCHAR(2000))")
        subprocess.run(["dd", "if=/dev/zero", f"of={binlogs / 'fill'}", "bs=64k"], capture_output=True)
        # The binlog's last page still has room for a small write: an application write fills it,
        # and waits; every later write then waits too.
        in_background(inv, full, "INSERT INTO fill.t SELECT REPEAT('x', 2000) FROM fill.seq_1_to_200",
                      quiet=True)  # its server is killed at the end
        wait_for(lambda: scalar(inv, full, "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST "
                                           "WHERE STATE LIKE 'Waiting for someone to free space%%'"),
                 what="a write to wait for disk space")
        topo = SwitchoverServers(servers={OLD: inv.open(OLD), full: inv.open(full)}, repl=inv.replication_credentials(NAME))
        sw = Switchover(topo, OLD, full, SwitchoverParams(probe_timeout_s=2))
        t0 = time.monotonic()
        with pytest.raises(WaitTimeout) as failed:
            sw.verify_writes_flow("run-df", timeout=3, old_gone=True)
        took = time.monotonic() - t0
        # The application's write already waits: named at once, and no probe of ours joins it.
        assert failed.value.message.startswith(f"disk full on {full}: 1 session(s) wait for disk space there"), \
            failed.value.message
        assert "no probe written" in failed.value.message and "free space on" in failed.value.hint
        assert took < 3 + 2 + 3  # the timeout, one bounded look, and slack for a loaded machine
    finally:
        boxes.kill_instance(NAME, full)  # waiting for disk space, it would not shut down
        subprocess.run(["umount", "-l", str(binlogs)], capture_output=True)
