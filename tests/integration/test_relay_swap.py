"""What the application sees of a schema swap (procedure `schema-swap`) through the relay (relay/,
router kind `relay`), on real MariaDB servers: the three application pools (go_pool, hikari_pool,
naive_pool; server-side prepared statements) and the zero-loss writer all write through the relay
while an index is added to the pools' own table one side at a time: each replica altered with the
binlog off, then the primary's side through a switchover to the altered candidate and, once the
old primary is altered too, the switch back. Both switchovers go through the relay's hold
(`hold_new_connections: true`): every session held at its next statement boundary, the writer
fenced once none is busy, the other opened, the sessions moved with their state (their prepared
INSERT prepared again on an altered server) and released.

The relay routes writes only: reads reach the replicas directly (the applications' own list), and
the swap takes no side out of them. A Go-like reader pool reads from swap-3 directly throughout,
and reader connections are kept on swap-3 from its return on: it stays a reader through the
switchover, the old primary's alter and the switch back.

Asserted: 0 client errors for each writing pool, 0 lost writes (every acknowledged id on every
server), never two writable (sampled every 5 ms), the change on every server, the old primary
writable again behind the relay, the reader sessions on swap-3 untouched from its return on
(the same connections still read, the reader pool saw no error), and the relay's password never
in its log. The counts are printed."""

from __future__ import annotations

import json
import os
import threading
import time

import mysql.connector
import pytest
import yaml

from dbmigrate.app.runs import start_run
from dbmigrate.config import load_inventory
from dbmigrate.engine.events import StepFinished
from dbmigrate.rehearsal.clients import ClientProcess, FixedAddress, create_table
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay
from dbmigrate.rehearsal.verify.writer import ZeroLossVerifier
from dbmigrate.rehearsal.writable_monitor import WritableMonitor
from dbmigrate.routing import router_for
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

KINDS = ("go_pool", "hikari_pool", "naive_pool")
NAME = "relswap"
INDEX = "ix_kind_ts"
DDL = f"ALTER TABLE app.client_writes ADD INDEX {INDEX} (kind, ts), ALGORITHM=INPLACE, LOCK=NONE"


def sentences(run_id: str) -> str:
    from dbmigrate.app.runs import resolve_journal_path
    from dbmigrate.engine.journal import Journal

    with Journal(resolve_journal_path()) as j:
        return " | ".join(str(r["sentence"] or "") for r in j.step_rows(run_id))


class KeptReaders:
    """Reader connections opened straight to `server` once the swap has put it back (its own
    alter is over): from then on it stays a reader, and nothing may end them."""

    def __init__(self, inv, server: str, count: int = 4):
        self.spec, self.creds, self.count = inv.cluster(NAME).servers[server], inv.app_credentials(NAME), count
        self.step = f"put {server} back in the reader pool"
        self.conns: list[tuple[object, int]] = []
        self.since: float | None = None
        self.opened = threading.Event()

    def __call__(self, event) -> None:
        if not isinstance(event, StepFinished) or event.name != self.step or self.opened.is_set():
            return
        self.since = time.time()
        for _ in range(self.count):
            c = mysql.connector.connect(host=self.spec.host, port=self.spec.port, user=self.creds.user,
                                        password=self.creds.password or "", database="app", use_pure=True,
                                        ssl_disabled=True, autocommit=True)
            cur = c.cursor()
            cur.execute("SELECT CONNECTION_ID()")
            self.conns.append((c, int(cur.fetchone()[0])))
        self.opened.set()

    def still_read(self) -> int:
        """Connections that still answer, on the session they were opened with."""
        ok = 0
        for c, cid in self.conns:
            cur = c.cursor(prepared=True)  # type: ignore[attr-defined]
            cur.execute("SELECT CONNECTION_ID(), COUNT(*) FROM app.client_writes WHERE id > ?", (0,))
            got = cur.fetchall()[0]
            ok += int(got[0] == cid)
        return ok

    def close(self) -> None:
        for c, _ in self.conns:
            c.close()  # type: ignore[attr-defined]


def test_the_pools_see_no_error_of_a_schema_swap_through_the_relay(boxes):
    try:
        sandbox_relay.go_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip's message
        pytest.skip(str(e))
    boxes.up(NAME, 2)
    r = sandbox_relay.start(boxes, NAME, max_hold_s=15, drain_s=5)
    state = boxes.find(NAME)
    inv = load_inventory(state.inventory_file)
    router = inv.cluster(NAME).router
    assert router is not None and router.kind == "relay"
    host, _, port = router.address.rpartition(":")
    creds = inv.app_credentials(NAME)
    assert creds is not None
    assert oct(os.stat(r["users_file"]).st_mode & 0o777) == "0o600"
    servers = list(inv.cluster(NAME).servers)
    assert servers == [f"{NAME}-1", f"{NAME}-2", f"{NAME}-3"]
    stays = inv.cluster(NAME).servers[f"{NAME}-3"]

    with inv.open(f"{NAME}-1") as p:
        create_table(p)
    clients = ClientProcess(FixedAddress(host, int(port)), creds, kinds=KINDS, size=3).start()
    # The relay routes no reads: a Go-like reader pool reads from swap-3 directly.
    reads = ClientProcess(FixedAddress(stays.host, stays.port), creds, kinds=(),
                          reader=FixedAddress(stays.host, stays.port)).start()
    verifier = ZeroLossVerifier(host, int(port), creds)
    verifier.prepare()
    verifier.start()
    monitor = WritableMonitor.for_cluster(inv, NAME).start()
    kept = KeptReaders(inv, f"{NAME}-3")
    doc = {"procedure": "schema-swap", "inventory": str(state.inventory_file), "cluster": NAME,
           "params": {"ddl": [DDL], "candidate": f"{NAME}-2", "switch_back": True, "hold_new_connections": True,
                      "fence_drain_timeout_s": 2, "catchup_timeout_s": 3, "drain_timeout_s": 2,
                      "max_lag_ms": 2000, "replay_capture_s": 0}}
    pb = state.path / "relay-swap.yaml"
    pb.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        assert clients.wait_for_calls(20) and reads.wait_for_calls(20)
        verifier.wait_for_acks(30)
        outcome = start_run(pb, subscribers=[kept], assume_yes=True)
        assert outcome.status == "done", outcome.summary
        assert clients.wait_for_calls(40)
        seen = clients.summary()
        assert kept.opened.is_set() and kept.since is not None, "swap-3 was never put back"
        read_after = reads.summary(since=kept.since)
        read_all = reads.summary()
        still = kept.still_read()
        verifier.wait_for_acks(len(verifier.acks) + 20, timeout_s=15)
    finally:
        clients.stop()
        reads.stop()
        verifier.stop()
        watched = monitor.stop()
        kept.close()
    opened = [inv.open(n) for n in servers]
    try:
        report = verifier.check(opened, catch_up_timeout_s=60)
        altered = {s.name: INDEX in s.query("SHOW CREATE TABLE app.client_writes")[0]["Create Table"] for s in opened}
    finally:
        for s in opened:
            s.close()
    said = sentences(outcome.run_id)
    relay_log = open(r["log"], errors="replace").read()
    writer = router_for(inv, NAME).current().writer
    print(f"\nschema swap through the relay: errors {seen['client_errors']} "
          f"({json.dumps(seen['client_error_classes'])}), longest call {seen['client_stall_max_ms']} ms "
          f"({json.dumps(seen['client_stalls_ms'])}) over {seen['client_calls']} calls; verifier: "
          f"{report.summary()}; two writable: {watched.two_writable_moments}; reader pool on {NAME}-3: "
          f"{read_after['client_reads']} since its return, {read_all['client_reads']} over the whole run; "
          f"{still} of {len(kept.conns)} kept reader session(s) untouched; altered: {altered}")
    print("relay log (holds and moves):", " | ".join(
        line for line in relay_log.splitlines() if "move" in line or "hold" in line or "release" in line)[:3000])
    assert said.count("the relay holds its sessions") >= 2 and "released to" in said, said  # there and back
    assert all(altered.values()), altered
    assert writer == f"{inv.cluster(NAME).servers[f'{NAME}-1'].host}:{inv.cluster(NAME).servers[f'{NAME}-1'].port}"
    assert report.lost_total == 0, report.summary()
    assert report.acknowledged > 100, report.summary()
    assert watched.two_writable_moments == 0, watched.to_dict()
    assert creds.password and creds.password not in relay_log
    assert len(kept.conns) == 4 and still == len(kept.conns), (still, kept.conns)
    assert read_after["client_reads"]["errors"] == 0, read_after
    assert seen["client_errors"]["go_pool"] == 0, seen
    for kind in KINDS:
        assert seen["client_errors"][kind] == 0, seen
    boxes.down(NAME)
