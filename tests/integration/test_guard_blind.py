"""A latency guard that cannot see the application says so and acts by its policy, never
a silent pass: an application whose pooled sessions set their own long_query_time (as real
ones do) leaves the slow-log window empty; the run pauses before any fence by default, and
with `blind: warn` it cuts over with a warning naming why."""

from __future__ import annotations

import threading
import time

import pymysql
import pytest

from dbmigrate.app.errors import PAUSED
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

POLICY = {"window_s": 4, "min_samples": 50, "min_class_samples": 5,
          "rules": [{"metric": "avg", "scope": "overall", "max_regression_pct": 200}]}


class PooledClient:
    """An application through the router: keeps its connection, sets its own long_query_time
    on every new session, reconnects after errors."""

    def __init__(self, inv, cluster: str):
        self.port = inv.cluster(cluster).router.writer_port
        self.creds = inv.app_credentials(cluster)
        self.writes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _connect(self):
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user=self.creds.user,
                               password=self.creds.password or "", autocommit=True, ssl_disabled=True,
                               connect_timeout=2, read_timeout=2, write_timeout=2)
        with conn.cursor() as cur:
            cur.execute("SET SESSION long_query_time = 11.2")
            cur.execute("CREATE TABLE IF NOT EXISTS app.pooled (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
        return conn

    def _loop(self) -> None:
        conn = None
        while not self.stop.is_set():
            try:
                conn = conn or self._connect()
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO app.pooled (v) VALUES (1)")
                    cur.execute("SELECT COUNT(*) FROM app.pooled WHERE v = 1")
                self.writes += 1
            except pymysql.MySQLError:
                conn = None
                time.sleep(0.05)
            time.sleep(0.005)

    def __enter__(self) -> "PooledClient":
        self.thread.start()
        deadline = time.monotonic() + 20
        while self.writes < 20:
            assert time.monotonic() < deadline, "the pooled client never wrote"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)


def test_a_blind_guard_refuses_silence(boxes, cli):
    name = "guardblind"
    state, inv = kit.topology(boxes, name)
    try:
        with PooledClient(inv, name) as app:
            # Default policy: blind -> pause, known from the baseline, before any fence.
            pb = kit.playbook(state, name, params={"baseline_seconds": 2}, guard=POLICY)
            r = cli("run", str(pb), "--yes", timeout=180)
            assert r.returncode == PAUSED, r.stdout[-3000:] + r.stderr[-2000:]
            said = r.stdout + r.stderr
            assert "latency guard is blind before the cutover" in said and "long_query_time" in said, said[-3000:]
            assert "fewer than the policy's min_samples 50" in said
            s = kit.shape(inv, name)
            assert kit.writers(s) == [f"{name}-1"], s  # nothing was fenced or switched
            with inv.open(f"{name}-1") as p:
                assert float(p.scalar("SELECT @@GLOBAL.long_query_time")) > 0  # the baseline window closed
            before = app.writes
            r = cli("rollback", "last", "--cluster", name, "--yes", timeout=120)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

            # blind: warn cuts over, and says so on the way and at the end.
            pb = kit.playbook(state, name, params={"baseline_seconds": 2}, guard={**POLICY, "blind": "warn"})
            r = cli("run", str(pb), "--yes", timeout=240)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
            said = r.stdout + r.stderr
            assert "latency guard is blind before the cutover" in said, said[-3000:]
            assert "latency guard is blind after the cutover" in said, said[-3000:]
            assert "no regression past the policy" not in said  # never the sentence of a guard that judged
            assert kit.writers(kit.shape(inv, name)) == [f"{name}-new"]
            time.sleep(0.5)
            assert app.writes > before  # the application writes through the new primary
    finally:
        boxes.down(name)
