"""A consolidation cutover with an application that behaves like a real pooled client.

One old server holds shard_p (an application table, the writer's table, a blob table of
BLOB_MB) and a second application account with table and column grants only. The writer is
a pool like Go's database/sql: it keeps its connections after SQL errors (1290 read-only
included) and reads the DSN file only when it opens a new one. Such a pool moves only when
its sessions on the old server are ended after the route names the instance; ended before,
it reconnects to the fenced server at once and writes nothing until someone rolls back.

  - the cutover: the pool writes through the instance within the cutover's bound, 0 lost;
    the copy was verified before the fence (every range of the blob table equal there) and
    the fenced window does not hold a pass over the shard; rollback brings the pool back.
  - the kit fence in a consolidation: a row-lock wait on the old server holds the fence back
    (calm wait), an instance that stalls applying makes the first attempt give up within the
    fenced catch-up budget (unfenced, nothing changed), and the second attempt moves it.
  - a logical seed copies every account with privileges on the shard, at every level, and
    the roles that give some of them theirs (the role, its grants, who holds it, the default
    role), and each logs in to the instance and reaches its tables.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from dbmigrate.app.runs import resolve_journal_path, rollback_run, start_run
from dbmigrate.config import HostSpec
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.faultpoint import ENV_FILE, ENV_MAX_S, ENV_POINT
from dbmigrate.procedures.consolidate.plan import measure_shards, plan
from dbmigrate.procedures.consolidate.resources import ConsolidateState
from dbmigrate.rehearsal.provision import install as install_sandbox_provisioner
from dbmigrate.rehearsal.sandbox.ports import free_port_range
from dbmigrate.rehearsal.verify.pooled_writer import PooledWriter
from dbmigrate.rehearsal.verify.shard_writer import ids_on
from dbmigrate.routing.dsn_file import DsnFileRouter

from tests.integration.shard_kit import legacy_shards

pytestmark = pytest.mark.integration

NAME = "cpool"
OLD = "cpool-1"
SHARD = "shard_p"
BLOB_MB = int(os.environ.get("DBMIGRATE_TEST_BLOB_MB", "96"))
ROW_KB = 64
APP2 = Credentials("certs_ro", "app2-secret")
APP3 = Credentials("certs_rw", "app3-secret")  # reaches the shard only through a role


@pytest.fixture(scope="module", autouse=True)
def sandbox_provisioner():
    """The runs here are started in this process: the sandbox creates the planned instances."""
    install_sandbox_provisioner()


@pytest.fixture(scope="module")
def legacy(boxes):
    state, inv, routes = legacy_shards(boxes, NAME, {OLD: [SHARD]}, rows=300)
    with inv.open(OLD) as s:
        # A blob table as big as asked, generated fast: one row, then INSERT ... SELECT doubling,
        # kept out of the binlog (the seed copies it; replication has nothing to carry).
        s.execute("SET SESSION sql_log_bin=0")
        s.execute(f"CREATE TABLE {SHARD}.docs (id INT PRIMARY KEY AUTO_INCREMENT, body MEDIUMBLOB NOT NULL, "
                  "label VARCHAR(40) CHARACTER SET latin1) ")
        s.execute(f"INSERT INTO {SHARD}.docs (body, label) VALUES (RANDOM_BYTES(1024), 'x')")
        s.execute(f"UPDATE {SHARD}.docs SET body = REPEAT(body, {ROW_KB})")
        rows = BLOB_MB * 1024 // ROW_KB
        n = 1
        while n < rows:
            s.execute(f"INSERT INTO {SHARD}.docs (body, label) SELECT body, label FROM {SHARD}.docs "
                      f"LIMIT {min(n, rows - n)}")
            n += min(n, rows - n)
        s.execute(f"ANALYZE TABLE {SHARD}.docs")
        s.execute("SET SESSION sql_log_bin=1")
        # A second application: its own account, table and column grants only.
        s.execute(f"CREATE USER {APP2.user}@'%' IDENTIFIED BY '{APP2.password}'")
        s.execute(f"GRANT SELECT ON {SHARD}.items TO {APP2.user}@'%'")
        s.execute(f"GRANT SELECT (id, label), UPDATE (label) ON {SHARD}.docs TO {APP2.user}@'%'")
        # A third: no grant of its own, a role that writes one table, started with by default.
        s.execute("CREATE ROLE certs_writer")
        s.execute(f"GRANT SELECT, INSERT, UPDATE ON {SHARD}.items TO certs_writer")
        s.execute(f"CREATE USER {APP3.user}@'%' IDENTIFIED BY '{APP3.password}'")
        s.execute(f"GRANT certs_writer TO {APP3.user}@'%'")
        s.execute(f"SET DEFAULT ROLE certs_writer FOR {APP3.user}@'%'")
    yield state, inv, routes
    boxes.down(NAME)


def address(inv, server: str) -> str:
    spec = inv.cluster(NAME).servers[server]
    return f"{spec.host}:{spec.port}"


def make_plan(state, inv, host: str) -> Path:
    shards = measure_shards(inv, sample_s=0.1)
    p = plan(shards, {host: HostSpec(cores=2, memory_gb=1, disk_gb=5, max_instances=1, sandbox=NAME,
                                     base_port=free_port_range(1))}, inv.planning, "instance-per-group")
    out = state.path / f"plan-{host}.json"
    out.write_text(json.dumps(p.to_dict()))
    return out


def playbook(state, plan_file: Path, **params) -> Path:
    path = state.path / f"consolidate-{plan_file.stem}.yaml"
    path.write_text(yaml.safe_dump({
        "procedure": "consolidate", "inventory": "legacy.yaml", "cluster": NAME,
        "params": {"plan": plan_file.name, "catchup_timeout_s": 10, "fence_drain_timeout_s": 0.5, **params}}))
    return path


def detail(run_id: str) -> dict:
    with Journal(resolve_journal_path()) as j:
        return j.run_detail(run_id)


def instance_server(inv, addr: str) -> Server:
    host, _, port = addr.rpartition(":")
    return Server("instance", host, int(port), inv.credentials_for(inv.cluster(NAME).servers[OLD]))


def test_pooled_client_writes_through_the_instance_after_the_cutover_and_back_after_rollback(legacy):
    state, inv, routes = legacy
    plan_file = make_plan(state, inv, "pa")
    pool = PooledWriter(routes, SHARD, inv.app_credentials(NAME), size=4)
    pool.start()
    old = address(inv, OLD)
    try:
        assert pool.wait_acks_on(old, 50, 20), pool.error_counts()
        outcome = start_run(playbook(state, plan_file), assume_yes=True)
        assert outcome.status == "done", outcome.summary
        run = detail(outcome.run_id)
        st = ConsolidateState.load(run["state"])
        new = st.instances["pa-1"]
        cut_at = max(t for _, a, t in pool.acks if a == old)  # the last write the old server took
        # The pool writes through the instance within the cutover's bound, though it keeps its
        # connections after errors: its sessions on the fenced server were ended after the switch.
        assert pool.wait_acks_on(new, 100, 20), (pool.error_counts(), pool.opened[-6:])
        first_new = pool.first_ack_on(new)
        assert first_new is not None and first_new - cut_at < 3.0, (first_new, cut_at, pool.error_counts())
        assert all(a == new for a, t in pool.opened if t > first_new)  # no connection back to the old server
        cut = next(s["sentence"] for s in run["steps"] if s["name"].startswith("cut over"))
        assert f"app session(s) on {OLD} ended" in cut and "logs in to" in cut, cut
        assert "reconnected to the instance(s)" in cut, cut
        # Every account that writes the shard is checked there, not only the inventory's one:
        # the second application writes one column of docs.
        assert "every account that writes the shards can write there" in cut and f"{APP2.user}@%" in cut, cut
        verify = next(s["sentence"] for s in run["steps"] if s["name"].startswith("verify shard routes"))
        assert "no application session left on an old server" in verify, verify
        # The copy was verified before the fence, range by range; inside it only what kept changing.
        sums = st.checksums[SHARD]
        assert sums["old"]["docs"] >= BLOB_MB // 4 and not any("docs" in c for c in sums["left_for_fence"]), sums
        assert sums.get("in_fence", 0) <= 2, sums  # the writer's table at most: not a pass over the shard
        fenced = [m["value"] for m in run["metrics"] if m["name"] == "fenced_window_ms"]
        print(f"fenced window {fenced[0]:.0f} ms for a {BLOB_MB} MB blob table; pool errors {pool.error_counts()}; "
              f"first write on the instance {(first_new - cut_at) * 1000:.0f} ms after the last on the old server")
        assert fenced and fenced[0] < 1000, fenced  # generous on a loaded machine; bench/consolidate_window.py
        # Rollback: the pool follows the route back the same way.
        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        assert pool.wait_acks_on(old, pool.acked_on(old) + 50, 20), pool.error_counts()
    finally:
        pool.stop()
    acked = {i for i, *_ in pool.acks}
    with inv.open(OLD) as srv:
        missing = acked - ids_on(srv, SHARD)
    assert pool.acked_on(new) >= 100 and not missing, f"{len(missing)} acknowledged writes lost: {sorted(missing)[:5]}"


def test_the_kit_fence_waits_for_calm_and_gives_up_over_its_catch_up_budget_in_a_consolidation(legacy, tmp_path,
                                                                                              monkeypatch):
    state, inv, routes = legacy
    plan_file = make_plan(state, inv, "pb")
    marker = tmp_path / "paused"
    # Paused when the cutover step starts (instances seeded, the gate passed): the stalls are set then.
    monkeypatch.setenv(ENV_POINT, "before:cut over")
    monkeypatch.setenv(ENV_FILE, str(marker))
    monkeypatch.setenv(ENV_MAX_S, "60")
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(outcome=start_run(
        playbook(state, plan_file, checksum=False, fence_calm_wait_s=5, fence_attempts=2,
                 fenced_catchup_budget_s=0.2, fence_retry_pause_s=0.5), assume_yes=True)))
    runner.start()
    holder = waiter = inst_lock = None
    try:
        deadline = time.monotonic() + 90
        while not marker.exists() and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), result
        new = json.loads(plan_file.read_text())["instances"][0]
        inst_addr = f"127.0.0.1:{new['port']}"
        # The instance stalls: a session there holds a row lock that the next replicated change needs.
        inst_lock = instance_server(inv, inst_addr)
        inst_lock.execute("BEGIN")
        inst_lock.query(f"SELECT * FROM {SHARD}.items WHERE id = 1 FOR UPDATE")
        with inv.open(OLD) as s:
            s.execute(f"UPDATE {SHARD}.items SET qty = qty + 1 WHERE id = 1")
        # The old server: one transaction waits for another's row lock, for about 0.6 s.
        holder, waiter = inv.open(OLD), inv.open(OLD)
        holder.execute("BEGIN")
        holder.execute(f"UPDATE {SHARD}.items SET qty = qty + 1 WHERE id = 2")
        blocked = threading.Thread(target=lambda: waiter.execute(f"UPDATE {SHARD}.items SET qty = qty + 1 WHERE id = 2"))
        blocked.start()
        time.sleep(0.1)
        threading.Timer(0.6, lambda: holder.execute("COMMIT")).start()
        threading.Timer(1.5, lambda: inst_lock.execute("COMMIT")).start()
        marker.unlink()
        runner.join(120)
        blocked.join(10)
    finally:
        for s in (holder, waiter, inst_lock):
            if s is not None:
                s.close()
    outcome = result["outcome"]
    assert outcome.status == "done", outcome.summary
    run = detail(outcome.run_id)
    cut = next(s["sentence"] for s in run["steps"] if s["name"].startswith("cut over"))
    logs = " | ".join(r["message"] for r in run["logs"])
    # The calm wait held the first fence until the row-lock wait ended (not its 5 s bound).
    assert "for no row-lock wait on cpool-1" in logs + cut, logs
    # The first attempt gave up within the budget, unfenced; the second moved the shard.
    assert "fenced catch-up budget of 200 ms" in logs and "unfenced cpool-1" in logs, logs
    assert "(attempt 2 of 2)" in cut, cut
    assert DsnFileRouter(SHARD, routes).current().writer == inst_addr
    back = rollback_run(outcome.run_id, assume_yes=True)
    assert back.status == "rolled_back", back.summary


def test_a_logical_seed_copies_every_account_of_the_shard_and_each_reaches_its_tables(legacy):
    state, inv, routes = legacy
    plan_file = make_plan(state, inv, "pc")
    outcome = start_run(playbook(state, plan_file, seed={"method": "logical"}), assume_yes=True)
    try:
        assert outcome.status == "done", outcome.summary
        run = detail(outcome.run_id)
        st = ConsolidateState.load(run["state"])
        seed = next(iter(st.seeds.values()))
        assert seed["method"] == "logical" and seed["accounts"] >= 3, seed
        inst = st.instances["pc-1"]
        host, _, port = inst.rpartition(":")
        # Each account logs in to the instance with its own password and reaches its tables.
        app = inv.app_credentials(NAME)
        with Server("as-app", host, int(port), app) as s:
            s.query(f"SELECT COUNT(*) AS n FROM {SHARD}.seq")
        with Server("as-app2", host, int(port), APP2) as s:
            assert s.scalar(f"SELECT COUNT(*) AS n FROM {SHARD}.items") == 300
            s.query(f"SELECT id, label FROM {SHARD}.docs LIMIT 1")
            s.execute(f"UPDATE {SHARD}.docs SET label = 'seen' WHERE id = 1")
            with pytest.raises(Exception, match="denied"):
                s.query(f"SELECT body FROM {SHARD}.docs LIMIT 1")  # the column grant, no more
        with Server("as-app3", host, int(port), APP3) as s:  # its default role, no SET ROLE
            assert s.scalar("SELECT CURRENT_ROLE() AS r") == "certs_writer"
            assert s.scalar(f"SELECT COUNT(*) AS n FROM {SHARD}.items") == 300
            s.execute(f"UPDATE {SHARD}.items SET qty = qty WHERE id = 1")
            with pytest.raises(Exception, match="denied"):
                s.query(f"SELECT id FROM {SHARD}.docs LIMIT 1")  # the role's table only
    finally:
        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
