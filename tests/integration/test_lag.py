"""Lag against a real 1+2 sandbox: idle, a stopped SQL thread under writes, stale heartbeat, writer safety."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.exceptions import SafetyError
from dbmigrate.lag import HeartbeatTable, HeartbeatWriter, sample_lag
from tests import jsonlines

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NAME = "lagbox"


def lag_once(inv: Path) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "dbmigrate", "lag", "watch", "--inventory", str(inv), "--cluster", NAME,
                        "--once", "--json"], cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True,
                       timeout=60)
    assert r.stdout, r.stderr
    return r.returncode, {x["name"]: x for x in jsonlines.result(r.stdout)["replicas"]}


class Writes:
    """Inserts into app.w on the primary until stopped: 'writes continue'."""

    def __init__(self, server):
        self.server, self.n = server.dedicated(), 0
        self.server.execute("CREATE TABLE IF NOT EXISTS app.w (id INT AUTO_INCREMENT PRIMARY KEY, at DATETIME(6))")
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.02):
            self.server.execute("INSERT INTO app.w (at) VALUES (NOW(6))")
            self.n += 1

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(5)
        self.server.close()


@pytest.fixture(scope="module")
def box(boxes, make_sandbox):
    state = make_sandbox(NAME, 2)
    inv = load_inventory(state.inventory_file)
    servers = {n: inv.open(n) for n in state.instances}
    yield state, servers
    for s in servers.values():
        s.close()
    boxes.down(NAME)


def test_idle_healthy_replicas_lag_below_a_second(box):
    state, _ = box
    rc, reps = lag_once(state.inventory_file)
    assert rc == 0
    assert set(reps) == {f"{NAME}-2", f"{NAME}-3"}
    for r in reps.values():
        assert r["lag_ms"] is not None and r["lag_ms"] < 1000
        assert r["heartbeat"] == "fresh" and r["io_running"] == r["sql_running"] == "Yes"
        assert r["behind"] == {"0": 0} and r["seconds_behind_master"] == 0


def test_stopped_sql_thread_with_writes_shows_lag_above_a_second(box):
    state, s = box
    lag_once(state.inventory_file)  # the replica has applied a heartbeat before it stops
    s[f"{NAME}-3"].execute("STOP SLAVE SQL_THREAD")
    try:
        with Writes(s[f"{NAME}-1"]) as w:
            time.sleep(1.2)
            rc, reps = lag_once(state.inventory_file)
        assert w.n > 10
        stopped, healthy = reps[f"{NAME}-3"], reps[f"{NAME}-2"]
        assert rc == 1
        assert stopped["sql_running"] == "No" and stopped["lag_ms"] > 1000
        assert stopped["behind"]["0"] > 10 and stopped["heartbeat"] == "fresh"
        assert healthy["lag_ms"] < 1000 and healthy["sql_running"] == "Yes"
    finally:
        s[f"{NAME}-3"].execute("START SLAVE SQL_THREAD")
    assert s[f"{NAME}-3"].scalar("SELECT MASTER_GTID_WAIT(%s, 10) AS r", (s[f"{NAME}-1"].scalar(
        "SELECT @@gtid_binlog_pos AS p"),)) == 0


def test_stale_heartbeat_is_not_mistaken_for_lag(box):
    _, s = box
    sample_lag(s[f"{NAME}-1"], [s[f"{NAME}-2"]])  # a row exists everywhere
    time.sleep(1.1)
    [r] = sample_lag(s[f"{NAME}-1"], [s[f"{NAME}-2"]], write=False, fresh_ms=1000)
    assert r.heartbeat == "stale" and r.lag_ms is None
    assert r.ok and "GTID distance decides" in r.reason


def test_writer_keeps_heartbeat_fresh_and_refuses_unsafe_writes(box):
    _, s = box
    primary, replica = s[f"{NAME}-1"], s[f"{NAME}-2"]
    with pytest.raises(SafetyError, match="replicates from"):
        HeartbeatWriter(replica).start()
    with HeartbeatWriter(primary, interval_s=0.05) as w:
        time.sleep(0.4)
        [r] = sample_lag(primary, [replica], write=False, fresh_ms=500)
        assert r.heartbeat == "fresh" and r.lag_ms is not None and r.lag_ms < 1000
        assert w.writes >= 4 and w.errors == 0
        before = primary.scalar("SELECT @@gtid_binlog_pos AS p")
        primary.execute("SET GLOBAL read_only=ON")  # fenced: our admin account would bypass it
        try:
            paused = w.paused
            time.sleep(0.3)
            assert w.paused > paused
            assert primary.scalar("SELECT @@gtid_binlog_pos AS p") == before
        finally:
            primary.execute("SET GLOBAL read_only=OFF")


def test_reads_pt_heartbeat_table(box):
    _, s = box
    primary, replica = s[f"{NAME}-1"], s[f"{NAME}-2"]
    primary.execute("CREATE DATABASE IF NOT EXISTS percona")
    primary.execute("CREATE TABLE IF NOT EXISTS percona.heartbeat (ts varchar(26) NOT NULL, "
                    "server_id int unsigned NOT NULL PRIMARY KEY, file varchar(255), position bigint unsigned, "
                    "relay_master_log_file varchar(255), exec_master_log_pos bigint unsigned)")
    now = datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds")
    primary.execute("REPLACE INTO percona.heartbeat (ts, server_id) VALUES (%s, @@server_id)", (now,))
    time.sleep(0.2)
    [r] = sample_lag(primary, [replica], write=False, hb=HeartbeatTable.pt_heartbeat())
    assert r.heartbeat == "fresh" and r.lag_ms == 0.0 and r.ok
