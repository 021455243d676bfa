"""What the application sees of a consolidation cutover and its rollback when each moved shard's
route is a relay of its own (the cluster's `shard_routers`, router kind `relay`), on real MariaDB
servers: one old server with two shards, each shard's applications writing through its relay
(backend: the old server) with the three pools (go_pool, hikari_pool, naive_pool; server-side
prepared statements) and the zero-loss writer. The cutover holds both relays before the old
server's fence, moves them held at the routes step and releases them once the instance opens,
ending no session; the rollback the same way back.

Asserted: 0 lost writes (every acknowledged id on the old server after the rollback), never two
writable (the old server and the instance, sampled every 5 ms over the cutover and rollback),
no relay password in the relays' logs, and 0 client errors for every pool; counts, classes and
the longest call printed."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from dbmigrate.app.runs import resolve_journal_path, rollback_run, start_run
from dbmigrate.config import HostSpec, load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.engine.journal import Journal
from dbmigrate.faultpoint import ENV_FILE, ENV_MAX_S, ENV_POINT
from dbmigrate.procedures.consolidate.plan import measure_shards, plan
from dbmigrate.rehearsal.clients import ClientProcess, FixedAddress, create_table
from dbmigrate.rehearsal.provision import install as install_sandbox_provisioner
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay
from dbmigrate.rehearsal.sandbox import shard_relays
from dbmigrate.rehearsal.sandbox.ports import free_port_range
from dbmigrate.rehearsal.verify.writer import ZeroLossVerifier
from dbmigrate.rehearsal.writable_monitor import WritableMonitor
from tests.integration.shard_kit import legacy_shards

pytestmark = pytest.mark.integration

NAME = "rcons"
OLD = "rcons-1"
SHARDS = ["shard_a", "shard_b"]
KINDS = ("go_pool", "hikari_pool", "naive_pool")


@pytest.fixture(scope="module", autouse=True)
def sandbox_provisioner():
    install_sandbox_provisioner()


def detail(run_id: str) -> dict:
    with Journal(resolve_journal_path()) as j:
        return j.run_detail(run_id)


def test_the_pools_see_no_error_of_a_consolidation_and_its_rollback_through_the_shards_relays(boxes, tmp_path,
                                                                                             monkeypatch):
    try:
        sandbox_relay.go_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip's message
        pytest.skip(str(e))
    state, inv, _ = legacy_shards(boxes, NAME, {OLD: SHARDS}, rows=200)
    try:
        _run(boxes, state, inv, tmp_path, monkeypatch)
    finally:
        boxes.down(NAME)


def _run(boxes, state, inv, tmp_path, monkeypatch) -> None:
    shards = measure_shards(inv, sample_s=0.1)
    p = plan(shards, {"rc": HostSpec(cores=2, memory_gb=1, disk_gb=5, max_instances=1, sandbox=NAME,
                                     base_port=free_port_range(1))}, inv.planning, "instance-per-group")
    plan_file = state.path / "plan-rc.json"
    plan_file.write_text(json.dumps(p.to_dict()))
    inst_port = p.instances[0].port
    creds = inv.app_credentials(NAME)
    assert creds is not None and creds.password
    old_spec = inv.cluster(NAME).servers[OLD]
    with inv.open(OLD) as s:
        for shard in SHARDS:
            create_table(s, database=shard)  # the pools' table, in the shard (copied by the seed)

    relays = shard_relays.start(boxes, NAME, {shard: OLD for shard in SHARDS}, max_hold_s=15, drain_s=5)
    doc = yaml.safe_load(inv.path.read_text())
    doc["clusters"][NAME]["shard_routers"] = shard_relays.inventory_entries(relays)
    inv.path.write_text(yaml.safe_dump(doc, sort_keys=False))
    inv = load_inventory(inv.path)
    assert set(inv.cluster(NAME).shard_routers) == set(SHARDS)
    playbook = state.path / "consolidate-relay.yaml"
    playbook.write_text(yaml.safe_dump({
        "procedure": "consolidate", "inventory": inv.path.name, "cluster": NAME,
        "params": {"plan": plan_file.name, "catchup_timeout_s": 10, "fence_drain_timeout_s": 2}}))

    clients, verifiers = {}, {}
    for shard in SHARDS:
        host, _, port = relays[shard]["address"].rpartition(":")
        clients[shard] = ClientProcess(FixedAddress(host, int(port)), creds, database=shard, kinds=KINDS,
                                       size=2).start()
        verifiers[shard] = ZeroLossVerifier(host, int(port), creds, table=f"{shard}.dbmigrate_verify")
        verifiers[shard].prepare()
        verifiers[shard].start()
    # Paused when the cutover step starts (instances seeded and replicating): writability is
    # watched from there (the instance is written by its seed before).
    marker = tmp_path / "paused"
    monkeypatch.setenv(ENV_POINT, "before:cut over")
    monkeypatch.setenv(ENV_FILE, str(marker))
    monkeypatch.setenv(ENV_MAX_S, "300")
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(outcome=start_run(playbook, assume_yes=True)))
    monitor = None
    try:
        for c in clients.values():
            assert c.wait_for_calls(20)
        for v in verifiers.values():
            v.wait_for_acks(30)
        runner.start()
        deadline = time.monotonic() + 600
        while not marker.exists() and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), result
        admin = inv.credentials_for(old_spec)
        monitor = WritableMonitor({OLD: (old_spec.host, old_spec.port, admin),
                                   "instance": ("127.0.0.1", inst_port, admin)}).start()
        before = {s: c.summary() for s, c in clients.items()}
        marker.unlink()
        runner.join(600)
        outcome = result["outcome"]
        assert outcome.status == "done", outcome.summary
        run = detail(outcome.run_id)
        cut = next(s["sentence"] for s in run["steps"] if s["name"].startswith("cut over "))
        assert "relays moved the app sessions" in cut, cut
        for shard in SHARDS:
            assert clients[shard].wait_for_calls(40)
        after_cut = {s: c.summary() for s, c in clients.items()}

        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        for shard in SHARDS:
            assert clients[shard].wait_for_calls(60)
            verifiers[shard].wait_for_acks(len(verifiers[shard].acks) + 20, timeout_s=15)
        seen = {s: c.summary() for s, c in clients.items()}
    finally:
        for c in clients.values():
            c.stop()
        for v in verifiers.values():
            v.stop()
        watched = monitor.stop() if monitor is not None else None
        runner.join(5)
    reports = {}
    with inv.open(OLD) as old:
        for shard, v in verifiers.items():
            reports[shard] = v.check([old], catch_up_timeout_s=60)
    logs = {shard: open(r["log"], errors="replace").read() for shard, r in relays.items()}

    def errors(summaries: dict, key: str = "client_errors") -> dict:
        return {k: sum(s[key][k] for s in summaries.values()) for k in KINDS}

    def classes(summaries: dict) -> dict:
        out: dict = {}
        for s in summaries.values():
            for kind, by in s["client_error_classes"].items():
                for cls, n in by.items():
                    out.setdefault(kind, {}).setdefault(cls, 0)
                    out[kind][cls] += n
        return out

    print(f"\nthrough the shards' relays: before the cutover errors {errors(before)}; after the cutover "
          f"{errors(after_cut)} ({json.dumps(classes(after_cut))}); cutover + rollback {errors(seen)} "
          f"({json.dumps(classes(seen))}); longest call {max(s['client_stall_max_ms'] for s in seen.values())} ms "
          f"over {sum(sum(s['client_calls'].values()) for s in seen.values())} calls; verifiers: "
          + "; ".join(f"{k}: {r.summary()}" for k, r in reports.items())
          + f"; two writable: {watched.two_writable_moments if watched else None}")
    for shard, log in logs.items():
        print(f"relay {shard}:", " | ".join(line for line in log.splitlines() if "move" in line or "hold" in line
                                          or "release" in line)[:1500])
    assert all(r.lost_total == 0 for r in reports.values()), {k: r.summary() for k, r in reports.items()}
    assert watched is not None and watched.two_writable_moments == 0, watched.to_dict() if watched else None
    for log in logs.values():
        assert creds.password not in log
    total = errors(seen)
    assert total["go_pool"] == 0, (total, classes(seen))
    for kind, by in classes(seen).items():
        assert not by.get("1290"), classes(seen)
    assert sum(total.values()) == 0, (total, classes(seen))
    with Server("old", old_spec.host, old_spec.port, inv.credentials_for(old_spec)) as s:
        assert s.scalar("SELECT @@read_only AS r") in (0, "0", "OFF")
