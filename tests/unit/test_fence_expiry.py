"""The fence's expiry on the fake topology: scheduled in the fence's own request, dropped before
the candidate opens, so that a tool frozen inside the window leaves the old primary read-only for
at most fence_expiry_s, and never two writable servers."""

from __future__ import annotations

import pytest

from dbmigrate.exceptions import SafetyError
from dbmigrate.procedures.kit.preflight_checks import fence_expiry_rule
from dbmigrate.procedures.kit.fence import EXPIRY_MARGIN_S
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams
from tests.unit.fake_topology import FakeRouter, FakeTopology
from tests.unit.test_switchover_decisions import cluster


def switchover(topo: FakeTopology, **settings) -> Switchover:
    return Switchover(topo, "db1", "db2", SwitchoverParams(**settings), FakeRouter(topo, "db1"), clock=topo.clock)


def test_the_default_expiry_covers_the_fence_and_the_catch_up_bounds():
    s = SwitchoverParams(fence_timeout_s=4, catchup_timeout_s=6)
    assert s.expiry_s() == 4 + 6 + EXPIRY_MARGIN_S
    assert SwitchoverParams(fence_expiry_s=30).expiry_s() == 30
    assert SwitchoverParams(fence_expiry="off").expiry_s() == 0


def test_the_fence_schedules_its_expiry_in_the_same_request_before_read_only():
    topo = cluster()
    sw = switchover(topo)
    sw.fence()
    assert topo.statements("db1")[:2] == ["fence expiry in 13s", "SET STATEMENT lock_wait_timeout=5 FOR SET GLOBAL "
                                                                  "read_only=ON"]
    assert sw.fence_expires_at == pytest.approx(topo.clock.now() + 13, abs=0.01)


def test_a_tool_frozen_after_the_fence_leaves_the_old_primary_read_only_no_longer_than_the_expiry():
    topo = cluster()
    sw = switchover(topo)
    sw.fence()
    topo.clock.advance(12.9)
    assert topo.writable() == []  # fenced, the candidate never opened
    topo.clock.advance(0.2)
    assert topo.writable() == ["db1"]  # expired by itself: the old primary takes writes again


def test_the_seal_drops_the_expiry_before_the_read_that_proves_the_fence_holds():
    topo = cluster()
    sw = switchover(topo)
    sw.fence()
    sw.seal_old(set())
    assert topo.statements("db1")[-1] == "cancel fence expiry"
    sw.open_candidate(stop_replica=False, sealed=True)
    topo.clock.advance(60)  # the expiry would have fired: two writable (the fake fails at once)
    assert topo.writable() == ["db2"]


def test_the_candidate_is_not_opened_when_the_fence_expires_before_the_open_can_land():
    topo = cluster()
    sw = switchover(topo)
    sw.fence()
    topo.clock.advance(11.5)  # 1.5 s left: the event scheduler may fire up to a second early
    with pytest.raises(SafetyError) as refused:
        sw.require_fence_holds(sw.fence_expires_at)
    assert "expires by itself in 1.5s" in refused.value.message
    assert not any(sql.startswith("SET GLOBAL read_only=OFF") for sql in topo.statements("db2"))


def test_a_switch_back_drops_the_expiry_of_its_own_fence_and_checks_it_held_before_opening():
    topo = cluster()
    sw = switchover(topo)
    sw.fence()
    sw.open_candidate(stop_replica=True)  # not sealed: it drops the expiry and reads read_only itself
    assert topo.statements("db1")[-1] == "cancel fence expiry"
    topo.clock.advance(60)
    assert topo.writable() == ["db2"]


def test_unfencing_drops_the_expiry_first():
    topo = cluster()
    sw = switchover(topo)
    sw.fence()
    sw.unfence_old(candidate_known_closed=True)
    assert topo.statements("db1")[-2:] == ["cancel fence expiry", "SET GLOBAL read_only=OFF"]


def test_require_refuses_a_server_without_an_event_scheduler_before_any_change():
    topo = cluster()
    topo.servers["db1"].event_scheduler = False
    sw = switchover(topo)
    with pytest.raises(SafetyError) as refused:
        sw.prepare_window()
    assert "event_scheduler=OFF" in refused.value.message and "fence_expiry: if_available" in refused.value.hint
    assert topo.statements("db1") == []


def test_if_available_fences_without_the_expiry_and_says_so():
    topo = cluster()
    topo.servers["db1"].event_scheduler = False
    logged: list[str] = []
    sw = Switchover(topo, "db1", "db2", SwitchoverParams(fence_expiry="if_available"), FakeRouter(topo, "db1"),
                    clock=topo.clock, log=lambda m, level="info": logged.append(m))
    sw.fence()
    assert not any("expiry" in sql for sql in topo.statements("db1"))
    assert sw.fence_expires_at is None
    assert any("fencing without an expiry" in m for m in logged)


def test_the_preflight_rule_per_policy():
    assert fence_expiry_rule("require", {"a": True, "b": True}).ok
    refused = fence_expiry_rule("require", {"a": True, "b": False})
    assert not refused.ok and "event_scheduler=OFF on b" in refused.reason
    warned = fence_expiry_rule("if_available", {"a": False})
    assert warned.ok and warned.reason.startswith("warning: event_scheduler=OFF on a")
    assert fence_expiry_rule("off", {"a": False}).ok


def test_a_rollback_after_a_switch_back_stopped_at_its_fence_drops_that_fence_s_expiry_on_the_server_it_leaves_a_replica():
    # Measured: a schema swap killed right after its switch back fenced the temporary primary;
    # the rollback made the original primary writable again and the temporary one its replica,
    # then the switch back's expiry fired there: two writable servers until someone noticed.
    from tests.unit.test_switchover_decisions import promoted
    from dbmigrate.procedures.kit.switchover import switch_back
    topo, router = promoted()
    back = Switchover(topo, "db2", "db1", SwitchoverParams(), router, clock=topo.clock)
    back.fence()  # the switch back's fence of db2, with its expiry; then the tool is killed
    topo.clock.advance(0.5)
    assert topo.servers["db2"].expiry_at is not None and topo.writable() == []

    switch_back(Switchover(topo, "db1", "db2", SwitchoverParams(), router, clock=topo.clock))

    assert topo.writable() == ["db1"]
    assert topo.servers["db2"].expiry_at is None
    topo.clock.advance(60)  # the expiry would have fired on the replica (the fake fails at once on two writable)
    assert topo.writable() == ["db1"]
