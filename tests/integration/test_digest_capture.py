"""Digest capture on real MariaDB under load: settings restored, a dropped index shows
as a regression, and a crash of the tool mid-window is repaired by `digest restore`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import mysql.connector
import pytest

from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.digest.model import Digest
from dbmigrate.digest.window import capture_window
from tests import jsonlines

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = "digestit"
CUSTOMER_Q = "customer_id"


class Workload:
    """The application: its own connections as the app user (untagged SQL), reconnecting
    often, because long_query_time is copied into a session when it connects."""

    def __init__(self, host: str, port: int, creds, writes: bool, threads: int = 2):
        self.args = dict(host=host, port=port, user=creds.user, password=creds.password, database="app",
                         use_pure=True, ssl_disabled=True, autocommit=True)
        self.writes = writes
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.queries = 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, n: int) -> None:
        i = n * 100_000
        while not self.stop.is_set():
            try:
                conn = mysql.connector.connect(**self.args)
                cur = conn.cursor()
                for _ in range(40):
                    i += 1
                    cur.execute("SELECT id, amount FROM orders WHERE id = %s", (i % 20000 + 1,))
                    cur.fetchall()
                    cur.execute("SELECT id, amount FROM orders WHERE customer_id = %s", (i % 2000,))
                    cur.fetchall()
                    if self.writes:
                        cur.execute("UPDATE orders SET amount = amount + 1 WHERE id = %s", (i % 20000 + 1,))
                    self.queries += 2 + self.writes
                conn.close()
            except mysql.connector.Error as e:
                self.errors.append(str(e))
                time.sleep(0.05)

    def __enter__(self) -> "Workload":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


@pytest.fixture(scope="module")
def box(make_sandbox):
    state = make_sandbox(SANDBOX, 1)
    inv = load_inventory(state.inventory_file)
    primary = inv.open(f"{SANDBOX}-1")
    primary.execute("CREATE DATABASE IF NOT EXISTS app")
    primary.execute("CREATE TABLE app.orders (id INT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, "
                    "status VARCHAR(16) NOT NULL, amount BIGINT NOT NULL, KEY idx_customer (customer_id))")
    primary.execute("INSERT INTO app.orders (customer_id, status, amount) "
                    "SELECT seq % 2000, 'new', seq FROM app.seq_1_to_20000")
    pos = Inspector(primary).gtid_binlog_pos()
    replica = inv.open(f"{SANDBOX}-2")
    assert Inspector(replica).wait_for_gtid(pos, 30)
    yield state, inv
    primary.close()
    replica.close()


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dbmigrate", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "220"})


def slow_settings(server) -> dict:
    return Inspector(server).slow_log_settings()


def test_capture_on_primary_under_load_restores_previous_settings(box, tmp_path):
    state, inv = box
    primary = inv.open(f"{SANDBOX}-1")
    # Non-default previous settings, so that "restored" cannot be confused with "defaults".
    primary.execute("SET GLOBAL long_query_time=1.5")
    primary.execute("SET GLOBAL slow_query_log=1")
    before = slow_settings(primary)
    out = tmp_path / "primary.digest.json"
    with Workload(primary.host, primary.port, inv.app_credentials(SANDBOX), writes=True) as load:
        time.sleep(0.3)
        r = cli("digest", "capture", "--inventory", str(state.inventory_file), "--server", f"{SANDBOX}-1",
                "--seconds", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert not load.errors
    assert "captured" in r.stdout and "customer_id" in r.stdout
    after = slow_settings(primary)
    assert after == before
    assert after["long_query_time"] == 1.5 and after["slow_query_log"] == 1

    d = Digest.load(out)
    assert d.percentiles == "exact" and 2.5 < d.duration_s < 4.5
    fps = {c.fingerprint for c in d.classes}
    assert any(fp.startswith("select id, amount from orders where customer_id") for fp in fps)
    assert any(fp.startswith("update orders set amount") for fp in fps)
    assert not any("dbmigrate" in c.example for c in d.classes)  # our own statements are excluded
    update = next(c for c in d.classes if c.fingerprint.startswith("update orders"))
    assert update.count > 100 and update.p99 is not None and update.avg <= update.p99 <= update.max
    saved = json.loads((tmp_path / "primary.saved-settings.json").read_text())
    assert saved["variables"]["long_query_time"] == 1.5 and saved["restored_at"]
    assert Path(saved["window_file"]).is_file()

    # the same slow log digested again as an existing file gives the same classes
    again = tmp_path / "again.json"
    r = cli("digest", "capture", "--slow-log", saved["window_file"], "--out", str(again))
    assert r.returncode == 0, r.stderr
    assert {c.checksum for c in Digest.load(again).classes} == {c.checksum for c in d.classes}


def test_a_sampled_capture_logs_one_in_n_and_restores_the_rate(box, tmp_path):
    state, inv = box
    primary = inv.open(f"{SANDBOX}-1")
    before = primary.scalar("SELECT @@GLOBAL.log_slow_rate_limit AS r")
    out = tmp_path / "sampled.digest.json"
    with Workload(primary.host, primary.port, inv.app_credentials(SANDBOX), writes=True) as load:
        time.sleep(0.3)
        r = cli("digest", "capture", "--inventory", str(state.inventory_file), "--server", f"{SANDBOX}-1",
                "--seconds", "3", "--sample", "10", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert not load.errors
    assert "1 in 10 statements logged" in r.stdout, r.stdout
    d = Digest.load(out)
    assert d.source["sampled_1_in"] == 10 and d.query_count > 0
    assert primary.scalar("SELECT @@GLOBAL.log_slow_rate_limit AS r") == before


def test_dropped_index_on_a_replica_shows_as_a_regression(box, tmp_path):
    state, inv = box
    replica = inv.open(f"{SANDBOX}-2")
    creds = inv.app_credentials(SANDBOX)
    files = {}
    for phase in ("before", "after"):
        if phase == "after":
            # Local change only: the primary and the binlog never see it.
            ddl = replica.dedicated()
            ddl.execute("SET SESSION sql_log_bin=0")
            ddl.execute("ALTER TABLE app.orders DROP INDEX idx_customer")
            ddl.close()
        with Workload(replica.host, replica.port, creds, writes=False) as load:
            time.sleep(0.3)
            result = capture_window(replica, 3, tmp_path / f"{phase}.digest.json")
        assert not load.errors
        files[phase] = result.digest_file
    try:
        r = cli("digest", "compare", str(files["before"]), str(files["after"]), "--json")
        assert r.returncode == 0, r.stderr
        data = jsonlines.result(r.stdout)
        by_fp = {c["fingerprint"]: c for c in data["classes"]}
        lookup = next(c for fp, c in by_fp.items() if CUSTOMER_Q in fp)
        assert lookup["status"] == "matched"
        assert lookup["latency"]["avg"]["direction"] == "worse"
        assert lookup["latency"]["p95"]["direction"] == "worse"
        assert lookup["after"]["rows_examined_avg"] > 10 * lookup["before"]["rows_examined_avg"]
        pk = next(c for fp, c in by_fp.items() if "where id = ?" in fp and fp.startswith("select"))
        assert pk["latency"]["avg"]["direction"] != "worse" or pk["latency"]["avg"]["pct"] < lookup["latency"]["avg"]["pct"]
        assert data["overall"]["avg"]["direction"] == "worse"
        assert data["per_second"] is True

        r = cli("digest", "compare", str(files["before"]), str(files["after"]))
        assert r.returncode == 0, r.stderr
        line = next(ln for ln in r.stdout.splitlines() if lookup["key"][:8] in ln)
        assert "▲" in line
        assert "average latency" in r.stdout and "p95 latency" in r.stdout and "p99" in r.stdout

        r = cli("digest", "compare", str(files["before"]), str(files["after"]), "--markdown")
        assert r.returncode == 0, r.stderr
        assert "- average query latency " in r.stdout and "| query class | before | after | change |" in r.stdout
        md_line = next(ln for ln in r.stdout.splitlines() if CUSTOMER_Q in ln and ln.startswith("|"))
        assert "**▲ +" in md_line
        print(r.stdout)
    finally:
        ddl = replica.dedicated()
        ddl.execute("SET SESSION sql_log_bin=0")
        ddl.execute("ALTER TABLE app.orders ADD INDEX idx_customer (customer_id)")
        ddl.close()


def test_crash_mid_window_is_repaired_by_restore(box, tmp_path):
    state, inv = box
    primary = inv.open(f"{SANDBOX}-1")
    primary.execute("SET GLOBAL long_query_time=3")
    primary.execute("SET GLOBAL slow_query_log=0")
    out = tmp_path / "crash.digest.json"
    saved_file = tmp_path / "crash.saved-settings.json"
    inventory = str(state.inventory_file)
    proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", "digest", "capture", "--inventory", inventory,
                             "--server", f"{SANDBOX}-1", "--seconds", "120", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if saved_file.exists() and slow_settings(primary)["long_query_time"] == 0:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the capture window never opened")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    left = slow_settings(primary)
    assert left["long_query_time"] == 0 and left["slow_query_log"] == 1  # the crash left the window open

    # a new capture refuses to save the open window as "previous settings"
    r = cli("digest", "capture", "--inventory", inventory, "--server", f"{SANDBOX}-1", "--seconds", "1",
            "--out", str(tmp_path / "second.json"))
    assert r.returncode != 0 and "already logging to a dbmigrate capture file" in r.stderr

    r = cli("digest", "restore", "--inventory", inventory, "--server", f"{SANDBOX}-1", "--from-file", str(saved_file))
    assert r.returncode == 0, r.stderr
    assert "restored on" in r.stdout and "long_query_time" in r.stdout
    now = slow_settings(primary)
    assert now["long_query_time"] == 3 and now["slow_query_log"] == 0
    assert now["slow_query_log_file"] == str(state.spec(f"{SANDBOX}-1").slow_log)
    assert json.loads(saved_file.read_text())["restored_at"]

    r = cli("digest", "restore", "--inventory", inventory, "--server", f"{SANDBOX}-1", "--from-file", str(saved_file))
    assert r.returncode == 2 and "already restored" in r.stderr


def test_sigterm_mid_window_restores_before_exiting(box, tmp_path):
    state, inv = box
    primary = inv.open(f"{SANDBOX}-1")
    primary.execute("SET GLOBAL long_query_time=4")
    out = tmp_path / "term.digest.json"
    proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", "digest", "capture", "--inventory",
                             str(state.inventory_file), "--server", f"{SANDBOX}-1", "--seconds", "120", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while slow_settings(primary)["long_query_time"] != 0:
            assert time.monotonic() < deadline, "the capture window never opened"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert slow_settings(primary)["long_query_time"] == 4
    assert json.loads((tmp_path / "term.saved-settings.json").read_text())["restored_at"]
