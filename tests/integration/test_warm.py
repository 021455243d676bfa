"""Warm-up on real servers: a primary and a replica that is restarted cold
(O_DIRECT, no load at startup) before each method.

app.t1 is created the normal way, so its tablespace id is the same on both.
Before app.t2 reaches the replica, the replica burns one tablespace id on a
table of its own (not binlogged), so app.t2 has a different id there: the
dump-load must load t1 from the page list and fall back to replay for t2.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.warm import methods as warm
from tests import jsonlines

pytestmark = pytest.mark.integration

BOX = "warmit"
TARGET = f"{BOX}-t"
COLD = {"innodb_flush_method": "O_DIRECT", "innodb_buffer_pool_load_at_startup": "OFF",
        "innodb_buffer_pool_dump_at_shutdown": "OFF"}
TABLES = ["app.t1", "app.t2"]
ROWS = 80_000  # ~14 MB per table: two fit in the 64 MB pool with room to spare
REPO = Path(__file__).resolve().parents[2]


def _create_and_fill(primary, table: str) -> None:
    primary.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, KEY k (k))")
    primary.execute(f"INSERT INTO {table} SELECT seq, FLOOR(RAND(7) * {ROWS}), REPEAT(CHAR(65 + seq % 26), 120) "
                    f"FROM app.seq_1_to_{ROWS}")


@pytest.fixture(scope="module")
def box(make_sandbox, boxes):
    state = make_sandbox(BOX, replicas=0)
    boxes.add_instance(BOX, TARGET, replica_of=f"{BOX}-1", extra=COLD)
    inv = load_inventory(boxes.find(BOX).inventory_file)
    with inv.open(f"{BOX}-1") as primary, inv.open(TARGET) as target:
        _create_and_fill(primary, "app.t1")
        Inspector(target).wait_for_gtid(Inspector(primary).gtid_binlog_pos(), 60)
        # Burn one tablespace id on the replica only, so that app.t2 gets another id there.
        target.execute("SET SESSION sql_log_bin=0")
        target.execute("CREATE TABLE app.local_only (id INT PRIMARY KEY)")
        _create_and_fill(primary, "app.t2")
        assert Inspector(target).wait_for_gtid(Inspector(primary).gtid_binlog_pos(), 60)
    return state


@pytest.fixture(scope="module")
def inv(box, boxes):
    return load_inventory(boxes.find(BOX).inventory_file)


@pytest.fixture
def cold_target(boxes, inv):
    """The replica, restarted: its buffer pool is empty and nothing is loaded at startup."""
    boxes.stop_instance(BOX, TARGET)
    boxes.start_instance(BOX, TARGET)
    with inv.open(TARGET) as t:
        yield t


@pytest.fixture
def primary(inv):
    with inv.open(f"{BOX}-1") as p:
        yield p


def _slow_log_of_reads(primary) -> None:
    """Let the primary log every statement while it serves some reads (and one write, to be refused)."""
    primary.execute("SET GLOBAL long_query_time=0")
    primary.execute("SET GLOBAL slow_query_log=ON")
    try:
        with primary.dedicated() as app:  # a new session picks up long_query_time=0
            app.execute("USE app")
            rng = random.Random(3)
            for _ in range(50):
                app.query("SELECT c FROM t1 WHERE id = %s", (rng.randint(1, ROWS),))
                app.query("SELECT id, k FROM t2 WHERE k BETWEEN %s AND %s", (v := rng.randint(1, ROWS), v + 20))
            app.execute("UPDATE t1 SET c = c WHERE id = 1")
            app.query("SELECT c FROM t1 WHERE id = 2 FOR UPDATE")
    finally:
        primary.execute("SET GLOBAL slow_query_log=OFF")
        primary.execute("SET GLOBAL long_query_time=10")


def _assert_warmed(result: warm.WarmResult, tables=TABLES) -> None:
    hb, ha = result.hit_ratio_before.ratio, result.hit_ratio_after.ratio
    assert hb < 0.95, f"the target was not cold to begin with: {result.sentence()}"
    assert ha >= 0.99 and ha > hb + 0.05, result.sentence()
    assert result.pages_gained > 1500, result.sentence()  # both tables are ~2,000 pages
    for t in tables:
        assert result.after.pages_by_table[t] > result.before.pages_by_table.get(t, 0) + 500, (t, result.to_dict())


def test_dump_load_loads_matching_tables_and_replays_the_one_whose_space_id_differs(cold_target, primary):
    seen = []
    result = warm.dump_load(primary, cold_target, per_table=True, on_progress=lambda f, m: seen.append((f, m)))
    d = result.details
    assert "app.t1" in d["space_ids"]["matched"]
    assert list(d["space_ids"]["differing"]) == ["app.t2"]
    assert d["space_ids_match"] is False
    assert d["fallback"]["method"] == "replay" and d["fallback"]["tables"] == ["app.t2"]
    assert d["fallback"]["scanned"] == ["app.t2"]
    assert any("app.t2" in n and "replay" in n for n in result.notes)
    assert any("falling back to replay" in m for _, m in seen)
    assert "load completed" in d["load_status"]
    assert 0 < d["pages_loaded"] < d["pages_dumped"]
    assert [f for f, _ in seen] == sorted(f for f, _ in seen) and seen[-1][0] == 1.0
    _assert_warmed(result)


def test_replay_from_the_serving_servers_slow_log(cold_target, primary):
    _slow_log_of_reads(primary)
    plan = warm.replay_plan_from_server(primary)
    assert {c.fingerprint for c in plan.classes} >= {"select c from t? where id = ?",
                                                      "select id, k from t? where k between ? and ?"}
    refused = dict(plan.refused)
    assert refused["update t? set c = c where id = ?"] == "not a SELECT (UPDATE)"
    assert refused["select c from t? where id = ? for update"] == "locks rows (FOR UPDATE)"
    result = warm.replay(cold_target, plan, per_table=True, threads=2)
    assert result.details["replay"]["done"] >= 2 and result.details["replay"]["error_count"] == 0
    assert sorted(result.details["scanned"]) == TABLES
    _assert_warmed(result)


def test_numbered_siblings_of_a_digest_table_are_warmed_too(inv):
    # pt-query-digest folds t1 and t2 into one class "t?" whose example names only one of them.
    with inv.open(TARGET) as target:
        tables, notes = warm.expand_numbered_tables(target, ["app.t1"])
    assert tables == ["app.t1", "app.t2"]
    assert notes == ["the digest folds numbered tables together: app.t1 also stands for app.t2"]


def test_gate_blocks_while_cold_and_passes_once_warm(cold_target):
    ok, reason, details = warm.warm_gate(cold_target, 0.99, tables=TABLES, probe_queries=400)
    assert not ok and "still cold" in reason, reason
    assert details["probe"]["reads"] > 0 and details["probe"]["ratio"] < 0.99
    result = warm.scan(cold_target, TABLES, target_hit_ratio=0.99, probe_queries=200)
    assert result.hit_ratio_after.ratio >= 0.99
    ok, reason, details = warm.warm_gate(cold_target, 0.99, tables=TABLES, probe_seconds=0.5)
    assert ok, reason
    assert details["probe"]["ratio"] >= 0.99 and details["probe"]["queries"] > 50


def test_gate_accepts_a_completed_load_only_when_asked(cold_target):
    ok, reason, _ = warm.warm_gate(cold_target, 0.99, accept_completed_load=True)
    assert not ok  # restarted without loading: no completed load, and no tables to probe
    assert "nothing to probe" in reason


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dbmigrate", "warm", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))


def test_cli_dump_load_prints_the_result_record(box, cold_target):
    p = _cli("--inventory", str(box.inventory_file), "--target", TARGET, "--from", f"{BOX}-1",
             "--method", "dump-load", "--json")
    assert p.returncode == 0, p.stderr
    rec = jsonlines.result(p.stdout)
    assert rec["method"] == "dump-load" and rec["source"] == f"{BOX}-1"
    assert rec["after"]["pages_data"] > rec["before"]["pages_data"] + 1500
    assert rec["hit_ratio_after"]["ratio"] >= 0.99 > rec["hit_ratio_before"]["ratio"]
    gate = _cli("--inventory", str(box.inventory_file), "--target", TARGET, "--check", "--tables", ",".join(TABLES))
    assert gate.returncode == 0 and "reaches 99.00%" in gate.stdout, gate.stdout + gate.stderr


def test_cli_explains_bad_input(box, tmp_path):
    inv = str(box.inventory_file)
    p = _cli("--inventory", inv, "--target", "nosuch", "--from", f"{BOX}-1")
    assert p.returncode == 2 and "unknown server 'nosuch'" in p.stderr and f"{BOX}-1" in p.stderr

    p = _cli("--inventory", inv, "--target", TARGET, "--method", "scan", "--tables", "shop.orders,app.t1")
    assert p.returncode == 2 and f"{TARGET} has no InnoDB table shop.orders" in p.stderr

    digest = tmp_path / "writes.json"
    digest.write_text(json.dumps({"classes": [{"fingerprint": "delete from t?", "query_count": 3,
                                               "example": {"query": "DELETE FROM app.t1 WHERE id=1"},
                                               "tables": [], "metrics": {}}]}))
    p = _cli("--inventory", inv, "--target", TARGET, "--method", "replay", "--slow-log", str(digest))
    assert p.returncode == 2 and "none of its 1 query classes is a replayable SELECT" in p.stderr

    p = _cli("--inventory", inv, "--target", TARGET, "--method", "replay", "--tables", "app.t1")
    assert p.returncode == 2 and "replay needs a digest" in p.stderr


def test_dump_load_onto_a_server_without_the_schema_is_refused(boxes, box, primary):
    boxes.add_instance(BOX, f"{BOX}-empty", cluster="other")  # standalone, no app tables
    inv = load_inventory(boxes.find(BOX).inventory_file)
    with inv.open(f"{BOX}-empty") as empty:
        with pytest.raises(Exception) as e:
            warm.dump_load(primary, empty)
    assert "exist on" in e.value.message and "app.t1" in e.value.message
    assert "copy of the source" in e.value.hint
