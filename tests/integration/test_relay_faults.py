"""The fault matrix's relay rows in the suite (the whole set: bench/faults.py --only 'promote/*-relay/*'):
the relay (router kind `relay`) in the path of sysbench and the zero-loss writer, promote holding
its sessions (hold_new_connections), and the relay killed -9 inside the fenced window (restarted
at once: the new process starts unheld, on the old primary, from its -state file), or with the
move in flight (frozen with the move in its socket, then killed: the move is in doubt, and the
relay that answers next never ran it); or the tool itself killed -9 with the move journaled and not
sent (the next process fences it off). Then at most one `resume` or `rollback`: no acknowledged
write lost, never two writable servers, healthy (one writer, the others replicating from it,
the relay sending writes to it, equal checksums). Skipped without Go, as the other relay tests."""

from __future__ import annotations

import pytest

from dbmigrate.rehearsal.faultmatrix import FaultCluster, all_scenarios, run_scenario, select
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay

pytestmark = pytest.mark.integration

RELAY_FAST = [s for s in select(all_scenarios(), fast=True) if s.router == "relay"]


@pytest.fixture(scope="module")
def cluster(boxes):
    try:
        sandbox_relay.go_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip's message
        pytest.skip(str(e))
    c = FaultCluster(boxes, "rfm")
    yield c
    c.down()


def test_the_relay_rows_are_in_the_suite():
    assert len(RELAY_FAST) >= 1
    assert all(dict(s.settings).get("hold_new_connections") for s in RELAY_FAST)


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.id) for s in RELAY_FAST])
def test_relay_fault_scenario(cluster, scenario):
    r = run_scenario(cluster, scenario)
    summary = (f"{r.id}: {'; '.join(r.why) or 'ok'}; relay: {r.details.get('relay_log', '')[-800:]}; "
               f"details: {r.details.get('run_output_tail', '')[-600:]}")
    if scenario.fault == "kill-relay":
        assert r.details.get("relay_out_ms", 0) > 0, summary  # the relay was killed and started again
    else:  # the tool was killed with the move journaled, not sent: the operator's one command finishes it
        assert r.details.get("run_exit") == -9 and r.details.get("recovery_exit") == 0, summary
        assert r.action == scenario.recovery and r.end == "done", summary
    assert r.acknowledged > 0, summary
    assert r.lost_total == 0, summary
    assert r.two_writable == 0, summary
    assert r.healthy, summary
    assert r.action in ("nothing", scenario.recovery), summary
    assert r.longest_no_writer_ms <= r.bound_ms, summary
    assert r.why == [], summary
