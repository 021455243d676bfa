"""The warm-up gate stands before the cutover: a cold candidate is not promoted;
warmed by dump-load (with its space-id check and fallback), it is."""

from __future__ import annotations

import pytest

from dbmigrate.app.runs import resolve_journal_path, start_run
from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.rehearsal.sandbox import haproxy
from dbmigrate.rehearsal.readload import create_orders

from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

COLD = {"innodb_buffer_pool_load_at_startup": "OFF", "innodb_buffer_pool_dump_at_shutdown": "OFF"}


def test_cold_candidate_blocks_then_warm_candidate_is_promoted(boxes):
    name = "prowarm"
    boxes.up(name, 1)
    boxes.add_instance(name, f"{name}-new", replica_of=f"{name}-1", buffer_pool_mb=128, extra=COLD)
    haproxy.start(boxes, name)
    state = boxes.find(name)
    inv = load_inventory(state.inventory_file)
    with inv.open(f"{name}-1") as p:
        create_orders(p, rows=60000)
        pos = Inspector(p).gtid_binlog_pos()
        p.execute("SELECT COUNT(*), SUM(amount) FROM app.orders")  # the serving server is warm
    with inv.open(f"{name}-new") as c:
        assert Inspector(c).wait_for_gtid(pos, 60)
    boxes.stop_instance(name, f"{name}-new")  # restart cold: nothing loaded at startup
    boxes.start_instance(name, f"{name}-new")

    warm = {"target_hit_ratio": 0.99, "tables": ["app.orders"]}
    cold_run = start_run(kit.playbook(state, name, params={"warm": {**warm, "method": "none"}}), assume_yes=True)
    assert cold_run.status in ("refused", "rolled_back", "failed"), cold_run.summary
    assert "warm-up" in cold_run.summary and "cold" in cold_run.summary
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"]  # never fenced: the gate stands before the cutover
    assert shape[f"{name}-new"]["source"] == f"{name}-1"

    warm_run = start_run(kit.playbook(state, name, params={"warm": {**warm, "method": "dump-load"}}), assume_yes=True)
    assert warm_run.status == "done", warm_run.summary
    assert kit.writers(kit.shape(inv, name)) == [f"{name}-new"]
    with Journal(resolve_journal_path()) as j:
        metrics = {m["name"]: m["value"] for m in j.run_detail(warm_run.run_id)["metrics"]}
    assert metrics["resident_pages_after"] > metrics["resident_pages_before"]
    boxes.down(name)


def test_checksum_gate_refuses_a_drifted_candidate(boxes):
    name = "prosum"
    state, inv = kit.topology(boxes, name)
    with inv.open(f"{name}-1") as p:
        p.execute("CREATE TABLE app.ledger (id INT PRIMARY KEY, amount INT)")
        p.execute("INSERT INTO app.ledger VALUES " + ",".join(f"({i},{i})" for i in range(1, 301)))
        pos = Inspector(p).gtid_binlog_pos()
    with inv.open(f"{name}-new") as c:
        assert Inspector(c).wait_for_gtid(pos, 30)
        c.execute("SET SESSION sql_log_bin=0")
        c.execute("UPDATE app.ledger SET amount = 0 WHERE id = 7")  # silent drift, no GTID
    outcome = start_run(kit.playbook(state, name, params={"checksum_databases": ["app"]}), assume_yes=True)
    assert outcome.status in ("refused", "rolled_back", "failed"), outcome.summary
    assert "table checksums" in outcome.summary and "app.ledger" in outcome.summary
    assert kit.writers(kit.shape(inv, name)) == [f"{name}-1"]  # nothing was fenced
    boxes.down(name)
