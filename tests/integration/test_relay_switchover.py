"""What the application sees of a promote and its rollback through the relay (relay/, router
kind `relay`), on real MariaDB servers: the three application pools (go_pool, hikari_pool,
naive_pool; server-side prepared statements) and the zero-loss writer all write through the
relay; promote with hold_new_connections: the relay holds every session at its next statement
boundary, the old primary is fenced when none is busy or in a transaction, the candidate opens,
and the relay moves every session with its state to it (`move`, then `release`): no session is
ended, no statement meets the fence. Then the rollback, the same way back.

Asserted: 0 lost writes (every acknowledged id on the final primary and its replicas), never two
writable (sampled every 5 ms), 0 errors for every pool (counts, classes and longest call printed),
and reader sessions on servers that stay readers (a replica left out of the switchover, kept
connections with server-side prepared statements) untouched: each still reads at the end."""

from __future__ import annotations

import json

import mysql.connector
import pytest

from dbmigrate.app.runs import rollback_run, start_run
from dbmigrate.config import load_inventory
from dbmigrate.rehearsal.clients import ClientProcess, FixedAddress, create_table
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay
from dbmigrate.rehearsal.verify.writer import ZeroLossVerifier
from dbmigrate.rehearsal.writable_monitor import WritableMonitor
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

KINDS = ("go_pool", "hikari_pool", "naive_pool")


def sentences(run_id: str) -> str:
    from dbmigrate.app.runs import resolve_journal_path
    from dbmigrate.engine.journal import Journal

    with Journal(resolve_journal_path()) as j:
        return " | ".join(str(r["sentence"] or "") for r in j.step_rows(run_id))


def readers_kept_on(inv, name: str, server: str, count: int = 4) -> list:
    """Reader connections an application keeps on `server` (a replica it reads from directly),
    each with a prepared statement it will execute again."""
    spec, creds = inv.cluster(name).servers[server], inv.app_credentials(name)
    conns = []
    for _ in range(count):
        c = mysql.connector.connect(host=spec.host, port=spec.port, user=creds.user, password=creds.password or "",
                                    database="app", use_pure=True, ssl_disabled=True)
        read(c)
        conns.append(c)
    return conns


def read(conn) -> int:
    cur = conn.cursor(prepared=True)
    cur.execute("SELECT COUNT(*) FROM app.client_writes WHERE id > ?", (0,))
    return int(cur.fetchall()[0][0])


def test_the_pools_see_no_error_of_a_promote_and_its_rollback_through_the_relay(boxes):
    try:
        sandbox_relay.go_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip's message
        pytest.skip(str(e))
    name = "relayed"
    boxes.up(name, 2)
    boxes.add_instance(name, f"{name}-new", replica_of=f"{name}-1", buffer_pool_mb=128)
    r = sandbox_relay.start(boxes, name, max_hold_s=15, drain_s=5)
    state = boxes.find(name)
    inv = load_inventory(state.inventory_file)
    router = inv.cluster(name).router
    assert router is not None and router.kind == "relay"
    host, _, port = router.address.rpartition(":")
    creds = inv.app_credentials(name)
    assert creds is not None
    # The users file holds hashes only, mode 0600; the log holds no password nor hash.
    assert oct(__import__("os").stat(r["users_file"]).st_mode & 0o777) == "0o600"

    with inv.open(f"{name}-1") as p:
        create_table(p)
    clients = ClientProcess(FixedAddress(host, int(port)), creds, kinds=KINDS, size=3).start()
    verifier = ZeroLossVerifier(host, int(port), creds)
    verifier.prepare()
    verifier.start()
    monitor = WritableMonitor.for_cluster(inv, name).start()
    stays_reader = readers_kept_on(inv, name, f"{name}-2")  # a replica the switchover leaves alone
    try:
        assert clients.wait_for_calls(20)
        verifier.wait_for_acks(30)
        params = {"hold_new_connections": True, "fence_drain_timeout_s": 2, "catchup_timeout_s": 3}
        outcome = start_run(kit.playbook(state, name, params), assume_yes=True)
        assert outcome.status == "done", outcome.summary
        said = sentences(outcome.run_id)
        assert "the relay holds its sessions" in said and "released to" in said, said
        assert clients.wait_for_calls(40)
        after_promote = clients.summary()

        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        assert clients.wait_for_calls(60)
        seen = clients.summary()
        verifier.wait_for_acks(len(verifier.acks) + 20, timeout_s=15)
        # Never ended: each kept reader session still executes its prepared statement.
        kept = sum(1 for c in stays_reader if read(c) >= 0)
    finally:
        for c in stays_reader:
            c.close()
        clients.stop()
        verifier.stop()
        watched = monitor.stop()
    servers = [inv.open(n) for n in inv.cluster(name).servers]
    try:
        report = verifier.check(servers, catch_up_timeout_s=60)
    finally:
        for s in servers:
            s.close()
    relay_log = open(r["log"], errors="replace").read()
    print(f"\nthrough the relay, promote: errors {after_promote['client_errors']} "
          f"({json.dumps(after_promote['client_error_classes'])}), longest call "
          f"{after_promote['client_stall_max_ms']} ms; promote + rollback: errors {seen['client_errors']} "
          f"({json.dumps(seen['client_error_classes'])}), longest call {seen['client_stall_max_ms']} ms "
          f"({json.dumps(seen['client_stalls_ms'])}) over {seen['client_calls']} calls; verifier: "
          f"{report.summary()}; two writable: {watched.two_writable_moments}")
    print("relay log (moves):", " | ".join(line for line in relay_log.splitlines() if "move" in line or "hold" in line
                                            or "release" in line)[:3000])
    assert report.lost_total == 0, report.summary()
    assert watched.two_writable_moments == 0, watched.to_dict()
    assert kept == len(stays_reader) == 4
    assert creds.password and creds.password not in relay_log
    assert seen["client_errors"]["go_pool"] == 0, seen
    for kind in KINDS:
        assert not seen["client_error_classes"][kind].get("1290"), seen
    assert sum(seen["client_errors"].values()) == 0, seen
    boxes.down(name)
