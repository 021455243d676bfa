"""`dbmigrate shape capture` on a fixture schema with every hazard a migration meets."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.db.credentials import private_defaults_file

from tests import jsonlines

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "shapes" / "ca.sql"
PROXY_FIXTURE = FIXTURE.with_name("ca-proxy.sql")


def sql_statements(path: Path) -> list[str]:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def test_shape_capture_keeps_every_hazard_and_no_secret(boxes, cli, tmp_path):
    state = boxes.up("shape", 0)
    try:
        inv = load_inventory(state.inventory_file)
        name = next(iter(inv.cluster("shape").servers))
        spec = inv.cluster("shape").servers[name]
        with private_defaults_file(inv.credentials_for(spec), spec.host, spec.port) as cnf:
            p = subprocess.run(["mariadb", f"--defaults-file={cnf}"], stdin=FIXTURE.open("rb"),
                               capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        with state.instance(name).root_server() as root:  # PROXY takes root's grant option
            for statement in sql_statements(PROXY_FIXTURE):
                root.execute(statement)
        out = tmp_path / "shape"
        r = cli("shape", "capture", "-i", str(state.inventory_file), "-c", "shape", "-o", str(out),
                "--schema", "ca", "--json")
        assert r.returncode == 0, r.stderr + r.stdout
        assert jsonlines.result(r.stdout)["tables_and_views"] == 5
        shape = json.loads((out / "shape.json").read_text())
        tables = {t["name"]: t for t in shape["schemas"]["ca"]["tables"]}
        certs = tables["certificates"]
        assert certs["partitioned"] and "PARTITION BY RANGE" in certs["create"]
        assert "mediumblob" in certs["create"] and "CHARACTER SET ascii" in certs["create"]
        assert "CHARACTER SET latin1" in certs["create"]
        assert certs["columns"]["der"]["max_len"] == 40 * 1024 and "min" not in certs["columns"]["serial"]
        assert not tables["audit_log"]["has_primary_key"] and tables["orders"]["foreign_keys"] == 1
        assert tables["pending"]["type"] == "view" and "USE INDEX (`ix_status_created`)" in tables["pending"]["create"]
        sc = shape["schemas"]["ca"]
        assert [r["name"] for r in sc["routines"]] == ["expire_orders"]
        assert [t["name"] for t in sc["triggers"]] == ["orders_audit"]
        assert [e["name"] for e in sc["events"]] == ["nightly_expire"]
        grants = {a["user"]: a["grants"] for a in shape["accounts"]}
        assert any("SELECT (`id`, `status`)" in g or "SELECT (`status`, `id`)" in g for g in grants["ca_ocsp"])
        assert any("EXECUTE ON PROCEDURE `ca`.`expire_orders`" in g for g in grants["ca_ocsp"])
        # The role with its privilege, held by default by ca_audit, and ca_audit's PROXY grant.
        [reader] = [r for r in shape["roles"] if r["name"] == "ca_reader"]
        assert any("GRANT SELECT ON `ca`.`accounts` TO `ca_reader`" in g for g in reader["grants"]), reader
        audit = next(a for a in shape["accounts"] if a["user"] == "ca_audit")
        assert audit["roles"] == [{"name": "ca_reader", "host": ""}] == audit["default_roles"]
        assert audit["proxies"] == [{"user": "ca_ocsp", "host": "%", "with_grant": False}]
        assert jsonlines.result(r.stdout)["proxy_grants"] == 1
        text = (out / "shape.json").read_text() + (out / "schema.sql").read_text()
        assert "ca-audit-secret" not in text and "ca-app-secret" not in text and not re.search(r"\*[0-9A-F]{40}", text)  # no password, no hash
        assert all("<redacted>" in g[0] or "IDENTIFIED" not in g[0] for g in grants.values())
        assert "Ærø" not in text and "postmaster@aero.example" not in text  # no row of data
        assert "sessions" in shape
    finally:
        boxes.down("shape")


class PooledApp:
    """An application whose pool connected before the window and set long_query_time=11.2 on
    each connection: a slow-log window never sees its queries. It also runs one server-side
    prepared statement, which MariaDB's performance_schema counts without a digest."""

    def __init__(self, port: int):
        import threading

        import mysql.connector

        self.conns = []
        for _ in range(2):
            c = mysql.connector.connect(host="127.0.0.1", port=port, user="ca_app", password="ca-app-secret",
                                        autocommit=True, use_pure=True, ssl_disabled=True)
            cur = c.cursor()
            cur.execute("SET SESSION long_query_time = 11.2")
            cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES'")
            cur.close()
            self.conns.append(c)
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        import time

        while not self.stop.is_set():
            for c in self.conns:
                cur = c.cursor()
                cur.execute("SELECT id, account_id FROM ca.orders USE INDEX (ix_status_created) "
                            "WHERE status = 'pending' ORDER BY created LIMIT 5")
                cur.fetchall()
                cur.execute("UPDATE ca.orders SET status = 'valid' WHERE id = 1")
                cur.close()
                prepared = c.cursor(prepared=True)
                prepared.execute("SELECT status FROM ca.orders WHERE id = %s", (1,))
                prepared.fetchall()
                prepared.close()
                self.sent += 3
            time.sleep(0.03)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for c in self.conns:
            c.close()


def test_a_pool_with_its_own_long_query_time_is_captured_by_performance_schema(boxes, cli, tmp_path):
    state = boxes.up("shapeps", 0, extra={"performance_schema": "ON",
                                          "performance-schema-consumer-events-statements-current": "ON",
                                          "performance-schema-consumer-events-statements-history": "ON",
                                          "performance-schema-consumer-events-statements-history-long": "ON",
                                          # MariaDB keeps another session's SET only while this ring holds it:
                                          # sized for the pool's statements between its connect and the read.
                                          "performance-schema-events-statements-history-long-size": 20000})
    app = None
    try:
        inv = load_inventory(state.inventory_file)
        spec = inv.cluster("shapeps").servers["shapeps-1"]
        with private_defaults_file(inv.credentials_for(spec), spec.host, spec.port) as cnf:
            p = subprocess.run(["mariadb", f"--defaults-file={cnf}"], stdin=FIXTURE.open("rb"),
                               capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        app = PooledApp(spec.port)
        out = tmp_path / "shape"
        r = cli("shape", "capture", "-i", str(state.inventory_file), "-c", "shapeps", "-o", str(out),
                "--schema", "ca", "--seconds", "3", "--window", "performance_schema", timeout=120)
        assert r.returncode == 0, r.stderr + r.stdout
        assert "query window: performance_schema statement digests" in r.stdout, r.stdout
        # The prepared statement's executions are counted outside every digest: said, with how many.
        unseen = re.search(r"NOT SEEN: (\d+) execution\(s\) of server-side prepared statements", r.stdout)
        assert unseen and int(unseen.group(1)) > 0, r.stdout
        digest = json.loads((out / "digest.json").read_text())
        assert digest["source"]["kind"] == "performance_schema"
        classes = {c["example"]: c for c in digest["classes"]}
        hinted = [c for e, c in classes.items() if "USE INDEX (ix_status_created)" in e]
        assert hinted and hinted[0]["count"] >= 20 and hinted[0]["user"] == "ca_app", classes.keys()
        assert "'pending'" not in hinted[0]["example"]  # literals redacted
        assert any(e.startswith("UPDATE ca.orders") for e in classes)
        assert not any("performance_schema" in e or "information_schema" in e.lower() for e in classes)
        sessions = json.loads((out / "shape.json").read_text())["sessions"]
        assert sessions["available"] and sessions["set_since_start"]["long_query_time"] >= 2, sessions
        assert float(sessions["by_account"]["ca_app"]["long_query_time"]) == 11.2  # the pool's own setting
        assert sessions["by_account"]["ca_app"]["sql_mode"] == "STRICT_ALL_TABLES"
        # The same window through the slow log sees none of the pool's queries: the reason for the above.
        r = cli("shape", "capture", "-i", str(state.inventory_file), "-c", "shapeps", "-o", str(tmp_path / "slow"),
                "--schema", "ca", "--seconds", "2", "--window", "slow_log", "--allow-empty", timeout=120)
        assert r.returncode == 0, r.stderr + r.stdout
        assert "query window: slow-log window" in r.stdout
        assert "captured 0 classes of the application" in r.stdout + r.stderr  # said, and allowed
        slow = json.loads((tmp_path / "slow" / "digest.json").read_text())
        assert not any("ix_status_created" in c["example"] for c in slow["classes"])
    finally:
        if app is not None:
            app.close()
        boxes.down("shapeps")
