"""HAProxy in front of a real 1+1 sandbox: routing, a hand-made switchover under the
zero-loss verifier, a restart that keeps the writer, and a clean `sandbox down`.

Reads like a runbook: fence the old primary, let the candidate catch up, open it,
flip the router, then prove that no acknowledged write was lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pymysql
import pytest

from dbmigrate.config import load_inventory
from dbmigrate.db.applier import Applier
from dbmigrate.db.inspector import Inspector
from dbmigrate.routing import HAProxyRouter, router_for
from dbmigrate.rehearsal.sandbox import haproxy as hap
from dbmigrate.rehearsal.sandbox.instance import pid_alive
from dbmigrate.rehearsal.verify import ZeroLossVerifier, zero_loss_gate
from tests import jsonlines

pytestmark = pytest.mark.integration

WORKTREE = Path(__file__).resolve().parents[2]
NAME = "rtflip"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dbmigrate", *args], cwd=WORKTREE, capture_output=True, text=True,
                          timeout=120, env=os.environ.copy())


def app_connect(port: int, creds) -> pymysql.Connection:
    return pymysql.connect(host="127.0.0.1", port=port, user=creds.user, password=creds.password,
                           connect_timeout=2, read_timeout=5, ssl_disabled=True, autocommit=True)


def server_id_via(port: int, creds) -> int:
    conn = app_connect(port, creds)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


@pytest.fixture(scope="module")
def flip_box(boxes):
    """A 1+1 sandbox with HAProxy, started the way an operator does: through the CLI."""
    done = cli("sandbox", "up", "--name", NAME, "--replicas", "1", "--haproxy", "--json")
    assert done.returncode == 0, done.stderr
    out = jsonlines.result(done.stdout)
    assert out["haproxy"]["writer_port"] and out["haproxy"]["pid"]
    yield boxes.find(NAME)
    try:
        boxes.find(NAME)
    except Exception:
        return  # the test took it down already
    boxes.down(NAME)


def test_sandbox_haproxy_routes_writes_to_primary_and_reads_to_replica(flip_box):
    inv = load_inventory(flip_box.inventory_file)
    spec = inv.cluster(NAME)
    assert spec.router.kind == "haproxy" and spec.router.state_file
    router = router_for(inv, NAME)
    p1, p2 = (f"127.0.0.1:{spec.servers[n].port}" for n in (f"{NAME}-1", f"{NAME}-2"))
    st = router.current()
    assert (st.writer, st.writers, st.readers) == (p1, [p1], [p2])
    assert router.verify(p1)[0]

    app = inv.app_credentials(NAME)
    assert server_id_via(spec.router.writer_port, app) == 1
    assert server_id_via(spec.router.reader_port, app) == 2

    # readers: weights and membership through the runtime API, then back as found
    assert router.set_reader_weights({p2: 40}).reader_weights == {p2: 40}
    st = router.set_readers([p1, p2])
    assert sorted(st.readers) == sorted([p1, p2])
    st = router.set_readers([p2])  # p1 drained: no new reads, existing ones finish
    assert st.readers == [p2]
    router.set_reader_weights({p2: 1})
    router.set_server_state("readers", p1, "maint")
    assert router.current().readers == [p2]


def test_a_flip_inside_a_fenced_window_is_read_back_and_saved_afterwards(flip_box, boxes):
    inv = load_inventory(flip_box.inventory_file)
    router = router_for(inv, NAME)
    spec = inv.cluster(NAME)
    p1, p2 = (f"127.0.0.1:{spec.servers[n].port}" for n in (f"{NAME}-1", f"{NAME}-2"))
    saved = Path(spec.router.state_file)
    before = saved.read_text()

    router.prepare_switch(p2, p1)
    router.switch_writer(p2, p1, persist=False)
    assert router.current().writers == [p2]  # live at once
    assert saved.read_text() == before  # no disk write inside the window
    router.switch_writer(p2, p1)  # after the window: read back and saved
    assert router.verify(p2)[2]["state_file_writers"] == [p2]

    # A router restarted between the flip and the save comes back with the old route: the
    # save switches again instead of failing.
    router.switch_writer(p1, p2, persist=False)
    hap.restart(boxes, NAME)
    assert router.current().writers == [p2]
    router.switch_writer(p1, p2)
    assert router.current().writers == [p1] and router.verify(p1)[2]["state_file_writers"] == [p1]


def test_switchover_through_haproxy_loses_no_acknowledged_write(flip_box, boxes):
    inv = load_inventory(flip_box.inventory_file)
    router = router_for(inv, NAME)
    assert isinstance(router, HAProxyRouter)
    old, new = inv.open(f"{NAME}-1"), inv.open(f"{NAME}-2")
    new_id = Inspector(new).server_id()

    verifier = ZeroLossVerifier.for_cluster(inv, NAME, interval_s=0.003)
    verifier.prepare()
    verifier.start()
    try:
        verifier.wait_for_acks(150)

        # the switchover, by hand: fence, catch up, open, flip
        t_fence = time.monotonic()
        Applier(old).set_read_only(True)
        target = Inspector(old).gtid_binlog_pos()
        assert Inspector(new).wait_for_gtid(target, 5), "candidate did not catch up"
        Applier(new).stop_replica()
        Applier(new).set_read_only(False)
        router.switch_writer(new, old)
        t_flipped = time.monotonic()
        acked_at_flip = len(verifier.acks)

        verifier.wait_for_acks(acked_at_flip + 150)
    finally:
        verifier.stop()
    report = verifier.check([new], catch_up_timeout_s=5)

    ok, reason, details = zero_loss_gate(report)
    assert ok, reason
    assert report.lost == {f"{NAME}-2": []}
    assert report.acknowledged >= acked_at_flip + 150
    assert report.max_gap_ms is not None and 0 < report.max_gap_ms < 5000
    assert report.gap.start < report.gap.end
    assert report.errors.get("read_only", 0) + report.errors.get("lost_connection", 0) + \
        report.errors.get("connect_failed", 0) >= 1  # the fence was seen and survived
    print(f"\nswitchover: {(t_flipped - t_fence) * 1000:.1f} ms fence-to-flip; {report.summary()}")

    # every write acknowledged after the flip went to the new primary, and only there
    after = [a for a in verifier.acks if a.mono > t_flipped]
    assert after and {a.server_id for a in after} == {new_id}
    after_ids = [a.id for a in after]
    on_old = {int(r["id"]) for r in old.query("SELECT id FROM app.dbmigrate_verify WHERE id BETWEEN %s AND %s",
                                                  (after_ids[0], after_ids[-1]))}
    assert on_old == set(), "the fenced old primary took writes after the flip"
    before_ids = [a.id for a in verifier.acks if a.mono < t_fence]
    assert verifier.missing_on(old, before_ids, 5) == []

    # the route survives an HAProxy restart (server-state-file)
    ok, reason, details = router.verify(new)
    assert ok, reason
    assert details["state_file_writers"] == [new.address]
    old_pid = boxes.find(NAME).haproxy["pid"]
    hap.restart(boxes, NAME)
    assert boxes.find(NAME).haproxy["pid"] != old_pid and not pid_alive(old_pid)
    assert router.current().writers == [new.address]
    assert server_id_via(inv.cluster(NAME).router.writer_port, inv.app_credentials(NAME)) == new_id
    old.close()
    new.close()

    # `sandbox down` stops HAProxy and both servers, by pid
    state = boxes.find(NAME)
    pids = boxes.pids(NAME) + [state.haproxy["pid"]]
    assert len(pids) == 3 and all(pid_alive(p) for p in pids)
    done = cli("sandbox", "down", NAME)
    assert done.returncode == 0, done.stderr
    assert [p for p in pids if pid_alive(p)] == []
    leftover = subprocess.run(["pgrep", "-f", state.dir], capture_output=True, text=True).stdout.split()
    assert leftover == []
