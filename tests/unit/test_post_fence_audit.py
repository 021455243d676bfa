"""The post-fence audit on a fake topology: when the old primary's binlog moved past its final
position (an account that bypasses read_only wrote after the fence), the open reports each
transaction (GTID, schema.table, rows, statement, account where known), journals it, and opens
the candidate only once it has applied all of them.

Names: db1 is the old primary, db2 the candidate, db3 another replica.
"""

from __future__ import annotations

import pytest

from dbmigrate.db.binlog import BinlogTransaction, TableChange
from dbmigrate.db.gtid import MariaGtid
from dbmigrate.db.inspector import Session
from dbmigrate.engine.events import EventBus
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import SafetyError
from dbmigrate.procedures.kit import cutover as kit
from dbmigrate.procedures.kit.audit import PostFenceAudit
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams
from tests.unit.fake_topology import FakeRouter, FakeTopology, cluster

ADMIN = Session(77, "ops_admin", "10.0.0.5:4000", "shop", "Sleep", 0, None)  # it wrote just after the fence


@pytest.fixture
def world(tmp_path):
    with Journal(tmp_path / "j.sqlite") as j:
        j.create_run("run1", procedure="promote", cluster="c", params={}, playbook="", playbook_sha="", dry_run=False)
        topo = cluster()
        db1 = topo.servers["db1"]
        db1.bypass_users, db1.sessions = {"ops_admin"}, [ADMIN]
        sw = Switchover(topo, "db1", "db2", SwitchoverParams(catchup_timeout_s=3), FakeRouter(topo, "db1"),
                        clock=topo.clock)
        ctx = RunContext(run_id="run1", procedure="promote", cluster="c", journal=j, bus=EventBus(), clock=topo.clock)
        cut = kit.Cutover(old="db1", new="db2", switchover=lambda c, record, routed: sw)
        yield topo, ctx, cut


def fence_then_write_past_it(topo: FakeTopology, ctx, cut) -> str:
    """Fence db1 (the step journals its final position), then a bypassing session commits there."""
    sw = cut.sw(ctx)
    with kit.CutoverState.edit(ctx.state) as s:
        s.bypass_users = sorted(sw.prepare_window())
    kit.fence(cut, ctx, sw)
    db1 = topo.servers["db1"]
    gtid = MariaGtid(0, 1, max(g.seq for g in db1.log) + 1)
    db1.log.append(gtid)  # read_only does not stop an account with READ ONLY ADMIN
    db1.binlog_says[str(gtid)] = BinlogTransaction(
        str(gtid), {"shop.orders": TableChange(inserted=1, rows=["{'id': 9001, 'amount': 5}"])},
        ["INSERT INTO shop.orders VALUES (9001, 5)"])
    return str(gtid)


def test_a_write_past_the_fence_is_reported_journaled_and_the_candidate_opens_with_it(world):
    topo, ctx, cut = world
    gtid = fence_then_write_past_it(topo, ctx, cut)

    said = kit.open_candidate(cut, ctx)

    assert (f"db1 logged 1 transaction(s) after the fence ({gtid}: shop.orders: 1 inserted (by 'INSERT INTO "
            f"shop.orders VALUES (9001, 5)'); account ops_admin (the one account with a session past read_only, "
            f"ended at the seal))") in said, said
    assert "the old primary moved after the fence" in said and "db2 is writable" in said
    audit = PostFenceAudit.load(ctx.state)
    assert audit.candidate_has_them and [t["gtid"] for t in audit.transactions] == [gtid]
    assert audit.transactions[0]["tables"]["shop.orders"]["inserted"] == 1
    assert gtid in topo.servers["db2"].position()
    assert topo.servers["db1"].sessions == []  # the seal ended the bypassing session


def test_the_open_refuses_when_the_candidate_does_not_have_what_was_written_past_the_fence(world):
    topo, ctx, cut = world
    topo.servers["db2"].lag_until = float("inf")  # it will not apply the new transaction
    gtid = fence_then_write_past_it(topo, ctx, cut)

    with pytest.raises(SafetyError) as refused:
        kit.open_candidate(cut, ctx)

    assert refused.value.message.startswith("db1 logged transaction(s) after the fence that db2 has not applied")
    assert f"{gtid}: shop.orders: 1 inserted" in refused.value.message
    assert refused.value.message.endswith("db2 is not opened")
    assert topo.writable() == []  # db1 still fenced, db2 never opened: the run's undo decides
    assert PostFenceAudit.load(ctx.state).candidate_has_them is False


def test_a_binlog_that_cannot_be_read_is_said_so_and_the_gtid_check_still_decides(world):
    topo, ctx, cut = world
    topo.servers["db1"].binlog_error = "Access denied; you need the REPLICATION SLAVE privilege"
    topo.servers["db2"].lag_until = float("inf")
    fence_then_write_past_it(topo, ctx, cut)

    with pytest.raises(SafetyError) as refused:
        kit.open_candidate(cut, ctx)

    assert "not read (cannot read db1's binlog: Access denied" in refused.value.message
    assert PostFenceAudit.load(ctx.state).read_error.startswith("cannot read db1's binlog")


def test_nothing_written_past_the_fence_reads_no_binlog(world):
    topo, ctx, cut = world
    topo.servers["db1"].binlog_error = "must not be read"
    cut_sw = cut.sw(ctx)
    with kit.CutoverState.edit(ctx.state) as s:
        s.bypass_users = sorted(cut_sw.prepare_window())
    kit.fence(cut, ctx, cut_sw)
    said = kit.open_candidate(cut, ctx)
    assert "after the fence" not in said and PostFenceAudit.load(ctx.state).sealed_pos is None


def test_a_mixed_binlog_skips_the_rows_named_as_needing_row_and_the_gtid_check_still_decides(world):
    topo, ctx, cut = world
    topo.servers["db1"].binlog_format = "MIXED"
    gtid = fence_then_write_past_it(topo, ctx, cut)

    said = kit.open_candidate(cut, ctx)

    assert "binlog_format MIXED: not available: the post-fence audit's rows" in said, said
    assert "db2 is writable" in said and gtid in topo.servers["db2"].position()
    audit = PostFenceAudit.load(ctx.state)
    assert audit.candidate_has_them and audit.transactions == [] and "need ROW" in audit.read_error
