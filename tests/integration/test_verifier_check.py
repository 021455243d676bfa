"""The verifier on the shared sandbox, straight to the primary (no router): it rides
out a read-only fence, and its check does find writes missing on a server."""

from __future__ import annotations

import time

import pytest

from dbmigrate.db.applier import Applier
from dbmigrate.db.credentials import Credentials
from dbmigrate.exceptions import ConnectionFailed
from dbmigrate.rehearsal.verify import ZeroLossVerifier, zero_loss_gate

pytestmark = pytest.mark.integration


def verifier_on_primary(inv, table: str) -> ZeroLossVerifier:
    spec = inv.cluster("shared").servers["shared-1"]
    return ZeroLossVerifier(spec.host, spec.port, inv.app_credentials("shared"), table=table, interval_s=0.002)


def test_verifier_rides_out_a_read_only_fence_without_loss(demo_inventory):
    inv = demo_inventory
    primary = inv.open("shared-1")
    v = verifier_on_primary(inv, "app.dbmigrate_verify_fence")
    v.prepare()
    try:
        v.start()
        v.wait_for_acks(50)
        Applier(primary).set_read_only(True)
        try:
            time.sleep(0.08)  # the fenced window the writer must report
        finally:
            Applier(primary).set_read_only(False)
        n = len(v.acks)
        v.wait_for_acks(n + 50)
        v.stop()
        replicas = [inv.open("shared-2"), inv.open("shared-3")]
        report = v.check([primary, *replicas], catch_up_timeout_s=10)
        ok, reason, _ = zero_loss_gate(report)
        assert ok, reason
        assert report.errors.get("read_only", 0) >= 1
        assert report.max_gap_ms >= 80  # the fence is measured, not hidden
        assert report.caught_up == {"shared-1": True, "shared-2": True, "shared-3": True}
        assert report.acks_by_server_id == {1: report.acknowledged}
        ids = [a.id for a in v.acks]
        assert ids == list(range(ids[0], ids[0] + len(ids)))  # contiguous: retried until acknowledged
    finally:
        Applier(primary).sql("DROP TABLE IF EXISTS app.dbmigrate_verify_fence")
        for s in (primary,):
            s.close()


def test_verifier_check_reports_writes_missing_on_a_replica(demo_inventory):
    inv = demo_inventory
    primary, r2, r3 = (inv.open(n) for n in ("shared-1", "shared-2", "shared-3"))
    v = verifier_on_primary(inv, "app.dbmigrate_verify_loss")
    first = v.prepare()
    try:
        v.start()
        v.wait_for_acks(30)
        v.stop()
        assert v.missing_on(r2, [a.id for a in v.acks], 10) == []
        # Make shared-2 lose two acknowledged writes (outside the binlog, on this table only).
        r2d = r2.dedicated()
        r2d.execute("SET SESSION sql_log_bin=0")
        r2d.execute("DELETE FROM app.dbmigrate_verify_loss WHERE id IN (%s, %s)", (first + 3, first + 4))
        r2d.close()
        report = v.check([primary, r2, r3], catch_up_timeout_s=0.3)
        assert report.lost == {"shared-1": [], "shared-2": [first + 3, first + 4], "shared-3": []}
        assert report.caught_up["shared-2"] is False
        ok, reason, _ = zero_loss_gate(report)
        assert not ok and reason == "acknowledged writes are missing: 2 on shared-2"
    finally:
        # The DROP replicates and removes the diverged table everywhere: shared is as we found it.
        Applier(primary).sql("DROP TABLE IF EXISTS app.dbmigrate_verify_loss")
        for s in (primary, r2, r3):
            s.close()


def test_verifier_prepare_fails_clearly_on_bad_credentials(demo_inventory):
    spec = demo_inventory.cluster("shared").servers["shared-1"]
    v = ZeroLossVerifier(spec.host, spec.port, Credentials("dbm_app", "wrong-password"))
    with pytest.raises(ConnectionFailed, match="verifier cannot connect .* as dbm_app") as e:
        v.prepare()
    assert "wrong-password" not in str(e.value)
