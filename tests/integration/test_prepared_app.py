"""An application the slow log cannot see (tests/fixtures/prepared_app.py: binary-protocol
prepared statements, unqualified tables, its own long_query_time per connection) judged and
captured through the wire window: the guard rolls back a regressed candidate and keeps a clean
one, and `shape capture --window wire` sees its classes, each with its database and account."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.prepared_app import ACCOUNT_INDEX, PreparedApp
from tests import jsonlines
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

POLICY = {"window": "wire", "window_s": 6, "min_samples": 40, "min_class_samples": 5, "blind": "pause",
          "rules": [{"metric": "avg", "scope": "overall", "max_regression_pct": 100, "min_abs_us": 300}]}


def _app(inv, name: str) -> PreparedApp:
    router = inv.cluster(name).router
    creds = inv.app_credentials(name)
    return PreparedApp(router.address, router.writer_port, creds.user, creds.password or "", rows=20000,
                       threads=2, pause_s=0.003)


def test_the_wire_guard_judges_a_prepared_statement_application(boxes, cli):
    name = "wireguard"
    state, inv = kit.topology(boxes, name)
    try:
        app = _app(inv, name)
        app.setup()
        # The regression: the candidate loses the index the per-account query needs (not replicated).
        with inv.open(f"{name}-new") as new:
            kit_wait = new.scalar("SELECT COUNT(*) FROM app.pa_orders")
            assert kit_wait is not None
            new.execute(f"SET STATEMENT sql_log_bin=0 FOR ALTER TABLE app.pa_orders DROP INDEX {ACCOUNT_INDEX}")
        with app:
            pb = kit.playbook(state, name, params={"baseline_seconds": 4}, guard=POLICY)
            r = cli("run", str(pb), "--yes", timeout=300)
            said = r.stdout + r.stderr
            assert "latency guard: " in said, said[-3000:]  # tripped by the guard itself
            assert "blind" not in said, said[-3000:]  # the wire saw the application on both sides
            assert kit.writers(kit.shape(inv, name)) == [f"{name}-1"], said[-3000:]  # rolled back
            assert r.returncode != 0
        with inv.open(f"{name}-new") as new:
            new.execute(f"SET STATEMENT sql_log_bin=0 FOR ALTER TABLE app.pa_orders ADD INDEX {ACCOUNT_INDEX} (account)")
        with app:
            pb = kit.playbook(state, name, params={"baseline_seconds": 4}, guard=POLICY)
            r = cli("run", str(pb), "--yes", timeout=300)
            said = r.stdout + r.stderr
            assert r.returncode == 0, said[-3000:]
            assert "no regression past the policy" in said, said[-3000:]
            assert kit.writers(kit.shape(inv, name)) == [f"{name}-new"]
        assert app.errors.get(1176, 0) == 0  # the hinted index was never missing
    finally:
        boxes.down(name)


def test_shape_capture_on_the_wire_sees_every_class_with_its_database(boxes, cli, tmp_path):
    name = "wireshape"
    state = boxes.up(name, 1)
    from dbmigrate.config import load_inventory

    inv = load_inventory(state.inventory_file)
    spec = inv.cluster(name).servers[f"{name}-1"]
    with inv.open(f"{name}-1") as admin:  # the application's own account and database
        admin.execute("CREATE DATABASE shop")
        admin.execute("CREATE USER shop_app@'%' IDENTIFIED BY 'shop-app-pw-1'")
        admin.execute("GRANT ALL ON shop.* TO shop_app@'%'")

    class creds:
        user = "shop_app"

    app = PreparedApp(spec.host, spec.port, "shop_app", "shop-app-pw-1", database="shop", rows=5000, max_uses=60)
    app.setup()
    try:
        with app:
            r = cli("shape", "capture", "-i", str(state.inventory_file), "-c", name, "-o", str(tmp_path / "shape"),
                    "--seconds", "4", "--schema", "shop", "--window", "wire", "--json", timeout=120)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        summary = jsonlines.result(r.stdout)
        assert summary["digest_classes"] >= 5 and summary["digest_source"].startswith("wire"), summary
        digest = json.loads((tmp_path / "shape" / "digest.json").read_text())
        fingerprints = {c["fingerprint"]: c for c in digest["classes"]}
        assert any("use index (idx_status)" in f for f in fingerprints), list(fingerprints)
        app_classes = [c for f, c in fingerprints.items() if "pa_orders" in f]
        assert len(app_classes) >= 5 and all(c["db"] == "shop" and c["user"] == creds.user for c in app_classes)
        assert digest["source"]["prepared_executions"] > 0
        shape = json.loads((tmp_path / "shape" / "shape.json").read_text())
        settings = shape["sessions"]["by_account"][creds.user]
        assert settings["long_query_time"] == "11.2" and settings["max_statement_time"] == "5"

        # A window that saw nothing of the application fails unless told otherwise.
        r = cli("shape", "capture", "-i", str(state.inventory_file), "-c", name, "-o", str(tmp_path / "empty"),
                "--seconds", "1", "--schema", "app", "--window", "slow_log", timeout=120)
        assert r.returncode != 0 and "captured 0 classes" in r.stdout + r.stderr, r.stdout + r.stderr
    finally:
        boxes.down(name)

    # The rehearsal replays them as the application ran them (its database, its settings): 0 errors.
    r = cli("rehearse", "promote", "--shape", str(tmp_path / "shape"), "--scale", "0.2", "--no-guard",
            "--load-seconds", "2", "--json", timeout=500)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    report = jsonlines.result(r.stdout)
    replayed = [c for c in report["classes"] if "pa_orders" in c["class"]]
    assert len(replayed) >= 5, report["classes"]
    for c in replayed:
        assert c["db"] == "shop"
        assert c["before"]["count"] > 0 and c["before"]["errors"] == 0 and c["after"]["errors"] == 0, c
    assert report["shape"]["failed_classes"] == []


def test_a_swap_without_a_replay_digest_keeps_a_side_whose_readers_queries_fail_out_of_traffic(boxes):
    """The swap captures the readers' queries itself (the wire, before the side leaves the pool):
    a DROP INDEX of the index the application's `USE INDEX` names keeps the side out, and the start
    of the side names the hinted class."""
    import yaml

    from dbmigrate.app.runs import resolve_journal_path, rollback_run, start_run
    from dbmigrate.config import load_inventory
    from dbmigrate.engine.journal import Journal
    from dbmigrate.rehearsal.sandbox import haproxy
    from dbmigrate.routing import router_for
    from tests.fixtures.prepared_app import HINTED_INDEX

    name = "wireswap"
    boxes.up(name, 1)
    haproxy.start(boxes, name)
    state = boxes.find(name)
    inv = load_inventory(state.inventory_file)
    router, creds = inv.cluster(name).router, inv.app_credentials(name)
    try:
        PreparedApp(router.address, router.writer_port, creds.user, creds.password or "", rows=5000).setup()
        readers_before = sorted(router_for(inv, name).current().readers)
        reads = PreparedApp(router.address, router.reader_port, creds.user, creds.password or "", rows=5000,
                            writes=False, max_uses=50, threads=3, pause_s=0.001)
        doc = {"procedure": "schema-swap", "inventory": str(state.inventory_file), "cluster": name,
               "params": {"drain_timeout_s": 1, "catchup_timeout_s": 3, "max_lag_ms": 2000, "primary": "skip",
                          "replay_capture_s": 6, "ddl": [f"DROP INDEX {HINTED_INDEX} ON app.pa_orders"],
                          "undo_ddl": [f"CREATE INDEX {HINTED_INDEX} ON app.pa_orders (status)"]}}
        pb = state.path / "wire-swap.yaml"
        pb.write_text(yaml.safe_dump(doc, sort_keys=False))
        with reads:
            outcome = start_run(pb, assume_yes=True)
        with Journal(resolve_journal_path()) as j:
            said = " | ".join(str(s.get("result") or s.get("message") or s) for s in
                              j.run_detail(outcome.run_id).get("steps", []))
        assert outcome.status == "paused", (outcome.summary, said, dict(reads.executions))
        assert f"{name}-2 is kept out of traffic" in outcome.summary and "1176" in outcome.summary, outcome.summary
        assert "use index" in outcome.summary.lower()
        with Journal(resolve_journal_path()) as j:
            logs = " | ".join(r["message"] for r in j.run_detail(outcome.run_id)["logs"])
            steps = " | ".join(str(s) for s in j.run_detail(outcome.run_id).get("steps", []))
        assert f"names index {HINTED_INDEX.lower()} in a hint, and the DDL drops it" in logs, logs + steps
        s2 = inv.cluster(name).servers[f"{name}-2"]
        assert f"{s2.host}:{s2.port}" not in router_for(inv, name).current().readers
        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        assert sorted(router_for(inv, name).current().readers) == readers_before
    finally:
        boxes.down(name)
