"""Completing a switchover without its old primary (dead after the fence), on a fake
topology: the facts decide (the candidate must hold the journaled final position and all
that an answering replica has), and the replicas move under the candidate by GTID."""

from __future__ import annotations

from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams
from tests.unit.fake_topology import FakeTopology, cluster


def gone_after_fence(extra_on_db3_only: int = 0, candidate_stuck: bool = False) -> tuple[FakeTopology, str]:
    """db1 fenced (its final position returned), then dead; db2 the candidate, db3 a replica."""
    topo = cluster()
    if candidate_stuck:
        topo.servers["db2"].lag_until = float("inf")
        topo.write("db1", 3)
    topo.servers["db1"].read_only = True
    final = topo.servers["db1"].position()
    if extra_on_db3_only:  # an account that bypasses read_only committed after the fence
        topo.servers["db2"].lag_until = float("inf")
        topo.servers["db1"].read_only = False
        topo.write("db1", extra_on_db3_only)
        topo.servers["db1"].read_only = True
    topo.servers["db1"].up = False
    topo.servers["db2"].lag_until = 0.0 if not candidate_stuck else float("inf")
    return topo, final


def sw(topo: FakeTopology) -> Switchover:
    return Switchover(topo, "db1", "db2", SwitchoverParams(), clock=topo.clock)


def test_a_candidate_holding_the_final_position_and_every_replicas_writes_may_be_promoted():
    topo, final = gone_after_fence()
    s = sw(topo)
    assert not s.old_answers()
    facts, problems = s.takeover_facts(final)
    assert problems == []
    assert facts[0] == f"db1's final position journaled at the fence: {final}"
    assert facts[1] == f"db2 has applied {final}"
    assert facts[2] == f"replica db3 has applied {final}, received {final}"


def test_a_candidate_that_lacks_part_of_the_final_position_is_refused_after_its_bounded_wait():
    topo, final = gone_after_fence(candidate_stuck=True)
    t0 = topo.clock.monotonic()
    facts, problems = sw(topo).takeover_facts(final)
    assert problems and problems[0] == "db2 lacks 3 transaction(s) of domain 0 of db1's final position"
    assert topo.clock.monotonic() - t0 <= SwitchoverParams().catchup_timeout_s + 0.01


def test_a_replica_holding_writes_the_candidate_lacks_refuses_the_takeover():
    topo, final = gone_after_fence(extra_on_db3_only=2)
    facts, problems = sw(topo).takeover_facts(final)
    assert problems == ["replica db3 has 2 transaction(s) of domain 0 that db2 lacks"]


def test_the_replicas_move_under_the_candidate_and_lose_nothing():
    topo, final = gone_after_fence()
    s = sw(topo)
    db2 = topo.servers["db2"]
    db2.io_running = db2.sql_running = db2.read_only = False
    said = s.repoint_without_old()
    assert said == "repointed db3 to db2"
    assert s.replicas_repointed()
    after = topo.write("db2", 4)
    assert topo.servers["db3"].position() == after  # db2's own writes reach db3
    assert topo.missing_on("db3") == []
