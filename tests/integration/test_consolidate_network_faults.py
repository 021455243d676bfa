"""Consolidation meeting a partition at its per-server fence, for real.

Two old servers with two shards each, a writer per shard following the DSN file; the
consolidate playbook runs as an operator's `dbmigrate run` would, and the first old
server's port is dropped with iptables from its fence's first packet for the fence's
bound, then healed. Judged like the fault matrix's rows (`bench/faults.py --only
'consolidate/*'` runs them all), until a while after the tool and the operator's one
`rollback` exited: every acknowledged id on the server its shard's route names, never
both servers of a shard writable, no shard without a writable server past the row's
bound, each shard on one writable server taking its writes again.
"""

from __future__ import annotations

import os
import shutil

import pytest

from dbmigrate.rehearsal.faultmatrix import netfault
from dbmigrate.rehearsal.faultmatrix.consolidate_rows import run_consolidate_scenario, shard_cluster
from dbmigrate.rehearsal.faultmatrix.scenarios import consolidate_matrix

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("iptables"),
                                 reason="partitions need root and iptables")]

ROW = "consolidate/partition-old/fence@1x/rollback"
AFTER_EXIT_S = 10  # the matrix judges 30 s after exit; the suite keeps this row short


@pytest.fixture(scope="module")
def shards(boxes):
    c = shard_cluster(boxes, "cnf")
    yield c
    c.down()
    assert netfault.remove_leftovers() == 0, "a fault rule outlived its row"


def test_the_old_servers_fence_partitioned_for_its_bound(shards):
    sc = next(s for s in consolidate_matrix() if s.id == ROW)
    r = run_consolidate_scenario(shards, sc, after_exit_s=AFTER_EXIT_S)
    summary = (f"{r.id}: {'; '.join(r.why) or 'ok'}; run {r.run_status}, operator {r.action} -> {r.action_status}; "
               f"run: {r.details.get('run_summary', '')[:600]}; recovery: {r.details.get('recovery_summary', '')[:300]}; "
               f"two writable: {r.details.get('two_writable')}")
    assert r.details.get("fault_started"), f"the partition never began: {summary}"
    assert r.details.get("fault_held_s", 0) >= sc.hold_s - 0.1, summary
    assert r.details.get("judged_after_exit_s") == AFTER_EXIT_S, summary
    assert r.acknowledged > 0, summary
    assert r.lost_total == 0, summary
    assert r.two_writable == 0, summary
    assert r.longest_no_writer_ms <= r.bound_ms, summary
    assert r.healthy, summary
    assert r.action in ("nothing", "rollback"), summary
    assert r.why == [], summary
