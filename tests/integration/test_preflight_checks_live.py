"""Preflight gates against a real 1+2 sandbox: healthy, then each failure the gates exist to catch.

Order matters inside this module: the errant-GTID test comes last, because an
errant transaction cannot be taken back.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.procedures.kit.preflight_checks import Limits, run_preflight
from tests import jsonlines

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NAME = "gatebox"


def check_cli(inv: Path, candidate: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dbmigrate", "check", "--inventory", str(inv), "--cluster", NAME,
                           "--candidate", candidate, *extra], cwd=ROOT, env=os.environ.copy(),
                          capture_output=True, text=True, timeout=60)


def gates(inv, candidate: str, **limits) -> dict:
    return {g.name: g for g in run_preflight(inv, NAME, candidate, Limits(**limits))}


@pytest.fixture(scope="module")
def box(boxes, make_sandbox):
    state = make_sandbox(NAME, 2)
    inv = load_inventory(state.inventory_file)
    servers = {n: inv.open(n) for n in state.instances}
    servers[f"{NAME}-1"].execute("CREATE TABLE app.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
    yield state, inv, servers
    for s in servers.values():
        s.close()
    boxes.down(NAME)


def test_healthy_topology_passes_every_gate(box):
    state, inv, _ = box
    r = check_cli(state.inventory_file, f"{NAME}-2", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = jsonlines.result(r.stdout)
    names = [g["name"] for g in doc["gates"]]
    assert names == ["topology", "replication_running", "lag", "errant_gtids", "candidate_binlog", "versions",
                     "replication_filters", "read_only", "long_transactions", "reverse_path", "read_only_bypass", "app_user_fenced", "fence_expiry", "disk",
                     "servers_answer", "router", "replication_login"]
    assert all(g["ok"] for g in doc["gates"]), [g for g in doc["gates"] if not g["ok"]]
    assert all(set(g) >= {"name", "ok", "reason", "details"} for g in doc["gates"])
    table = check_cli(state.inventory_file, f"127.0.0.1:{state.instances[f'{NAME}-2'].port}")
    assert table.returncode == 0 and "all gates pass" in table.stdout


def test_every_account_that_writes_the_application_schemas_is_checked(box):
    """A second application account with a table-level grant is named by app_user_fenced, and
    fails it once it can bypass read_only (unless allowed by name)."""
    _, inv, s = box
    primary = s[f"{NAME}-1"]
    primary.execute("CREATE USER 'billing'@%s IDENTIFIED BY %s", ("%", secrets.token_urlsafe(12)))
    try:
        primary.execute("GRANT SELECT, INSERT ON app.t TO 'billing'@%s", ("%",))
        g = gates(inv, f"{NAME}-2")["app_user_fenced"]
        assert g.ok and "billing (table)" in g.reason, g.reason
        for server in g.details["servers"].values():  # the primary and the candidate
            assert server["checked"]["billing"] == ["table"] and server["checked"]["dbm_app"] == ["schema"]
            assert "dbm_admin" in server["excluded"] and "dbm_admin" not in server["checked"]
        primary.execute("GRANT SUPER ON *.* TO 'billing'@%s", ("%",))
        g = gates(inv, f"{NAME}-2")["app_user_fenced"]
        assert not g.ok and "'billing' writes the application's schemas (table) and bypasses read_only" in g.reason
        allowed = gates(inv, f"{NAME}-2", allow_read_only_bypass=("billing",))["app_user_fenced"]
        assert allowed.ok and "'billing' (table) bypasses read_only: allowed" in allowed.reason
    finally:
        primary.execute("DROP USER IF EXISTS 'billing'@%s", ("%",))


def test_unknown_candidate_is_a_usage_error(box):
    state, _, _ = box
    r = check_cli(state.inventory_file, "nosuch-9")
    assert r.returncode == 2 and "unknown server 'nosuch-9'" in r.stderr
    r = check_cli(state.inventory_file, f"{NAME}-1")
    assert r.returncode == 2 and "is the current primary" in r.stderr


def test_old_open_transaction_on_primary_fails_the_long_transaction_gate(box):
    _, inv, s = box
    holder = s[f"{NAME}-1"].dedicated()
    try:
        holder.execute("START TRANSACTION")
        holder.execute("INSERT INTO app.t (v) VALUES (1)")
        thread_id = holder.scalar("SELECT CONNECTION_ID() AS id")
        time.sleep(1.3)
        g = gates(inv, f"{NAME}-3", max_trx_age_s=1)["long_transactions"]
        assert not g.ok and f"(connection {thread_id})" in g.reason and "> 1s" in g.reason
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    time.sleep(0.2)  # information_schema.INNODB_TRX is a cache refreshed at most every 100 ms
    assert gates(inv, f"{NAME}-3", max_trx_age_s=1)["long_transactions"].ok


def test_missing_replication_user_on_candidate_fails_the_reverse_path_gate(box):
    _, inv, s = box
    cand = s[f"{NAME}-3"]
    repl = inv.replication_credentials(NAME)
    hosts = [r["Host"] for r in cand.query("SELECT Host FROM mysql.user WHERE User=%s", (repl.user,))]
    grants = {h: cand.query("SHOW GRANTS FOR %s@%s", (repl.user, h)) for h in hosts}
    cand.execute("SET SESSION sql_log_bin=0")
    try:
        for h in hosts:
            cand.execute("DROP USER %s@%s", (repl.user, h))
        ok, reason, details = gates(inv, f"{NAME}-3")["reverse_path"]
        assert not ok and f"'{repl.user}' does not exist on" in reason and details["hosts"] == []
        assert gates(inv, f"{NAME}-2")["reverse_path"].ok  # only the candidate lost it
    finally:
        for h in hosts:
            cand.execute("CREATE USER %s@%s IDENTIFIED BY %s", (repl.user, h, repl.password))
            for row in grants[h]:
                line = re.sub(r" IDENTIFIED BY PASSWORD '[^']*'", "", next(iter(row.values())))
                cand.execute(line)
        cand.execute("SET SESSION sql_log_bin=1")
    assert gates(inv, f"{NAME}-3")["reverse_path"].ok


def test_stopped_sql_thread_with_writes_fails_the_lag_gate_in_ms(box):
    _, inv, s = box
    primary, cand = s[f"{NAME}-1"], s[f"{NAME}-3"]
    gates(inv, f"{NAME}-3")  # a heartbeat is applied everywhere before the thread stops
    cand.execute("STOP SLAVE SQL_THREAD")
    stop = threading.Event()
    writer = primary.dedicated()

    def writes():
        while not stop.wait(0.02):
            writer.execute("INSERT INTO app.t (v) VALUES (2)")

    t = threading.Thread(target=writes, daemon=True)
    t.start()
    try:
        time.sleep(1.2)
        result = gates(inv, f"{NAME}-3", max_lag_ms=1000)
    finally:
        stop.set()
        t.join(5)
        writer.close()
        cand.execute("START SLAVE SQL_THREAD")
    lag = result["lag"]
    [sample] = [r for r in lag.details["replicas"] if r["name"] == f"{NAME}-3"]
    assert not lag.ok and sample["lag_ms"] > 1000
    import re

    m = re.search(rf"{NAME}-3: replication sql thread not running; lag (\d+) ms", lag.reason)
    assert m and abs(int(m.group(1)) - sample["lag_ms"]) <= 1, lag.reason  # the figure, in ms
    assert not result["replication_running"].ok
    assert cand.scalar("SELECT MASTER_GTID_WAIT(%s, 10) AS r", (primary.scalar("SELECT @@gtid_binlog_pos AS p"),)) == 0


def test_transaction_written_on_candidate_fails_the_errant_gate_naming_it(box):
    state, inv, s = box
    cand = s[f"{NAME}-2"]  # admin bypasses read_only: exactly how errant transactions happen
    cand.execute("INSERT INTO app.t (v) VALUES (99)")
    errant = cand.scalar("SELECT @@gtid_binlog_pos AS p")
    assert errant.startswith(f"0-{state.instances[f'{NAME}-2'].server_id}-")
    r = check_cli(state.inventory_file, f"{NAME}-2", "--json")
    assert r.returncode == 1
    g = {x["name"]: x for x in jsonlines.result(r.stdout)["gates"]}["errant_gtids"]
    assert not g["ok"] and g["details"]["errant"] == [errant] and errant in g["reason"]
    assert gates(inv, f"{NAME}-3")["errant_gtids"].ok  # the other replica is clean
