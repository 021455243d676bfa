"""The fence waits for the candidate to come close to the primary, on a fake topology:
it converges (and fences at once), or it refuses with the lag it saw and changes nothing.

Names: db1 is the old primary, db2 the candidate, db3 another replica.
"""

from __future__ import annotations

import math
import re

import pytest

from dbmigrate.engine.events import EventBus
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import DbmigrateError, WaitTimeout
from dbmigrate.procedures.kit import cutover as kit
from dbmigrate.procedures.kit.cutover import CutoverState
from dbmigrate.procedures.kit.fence import Fence
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams
from tests.unit.fake_topology import FakeRouter, FakeTopology, cluster


def switchover(topo: FakeTopology, **settings) -> Switchover:
    return Switchover(topo, "db1", "db2", SwitchoverParams(**settings), FakeRouter(topo, "db1"), clock=topo.clock)


def lagging(behind: int, for_s: float) -> FakeTopology:
    """db2 applies nothing for `for_s` seconds (inf: never) while db1 wrote `behind` more transactions."""
    topo = cluster()
    topo.servers["db2"].lag_until = topo.clock.monotonic() + for_s
    topo.write("db1", behind)
    return topo


def masked(sentence: str) -> str:
    return re.sub(r"\d+\.\d+ ms", "N ms", sentence)


def test_a_caught_up_candidate_converges_at_once_without_waiting():
    topo = cluster()
    sentence, behind = switchover(topo).converge()
    assert (masked(sentence), behind) == ("db2 was 0 transaction(s) behind db1 (limit 10; at most 0 while waiting N ms)", 0)
    assert topo.clock.sleeps == [] and topo.sent == []


def test_a_lagging_candidate_is_waited_for_in_short_polls_then_converges():
    topo = lagging(30, for_s=0.3)
    start = topo.clock.monotonic()
    sentence, behind = switchover(topo).converge()
    assert behind == 0 and "at most 30" in sentence
    assert 0.3 <= topo.clock.monotonic() - start < 0.302  # it saw the end of the lag within a poll
    assert set(topo.clock.sleeps) == {0.001}
    assert topo.sent == []  # converging reads only


def test_a_candidate_far_behind_is_polled_slowly_until_it_comes_close():
    """More than 4 x converge_max_trx behind, the loop polls every 10 ms, not every 1 ms: its
    reads would load a primary that may be saturated, for nothing until the candidate is close."""
    topo = lagging(41, for_s=0.3)
    sentence, behind = switchover(topo).converge()
    assert behind == 0 and "at most 41" in sentence
    assert set(topo.clock.sleeps) == {0.01} and 29 <= len(topo.clock.sleeps) <= 31
    topo = lagging(40, for_s=0.3)
    switchover(topo).converge()
    assert set(topo.clock.sleeps) == {0.001}


def test_once_converged_it_waits_for_a_moment_with_no_row_lock_wait_on_the_old_primary():
    """A fence set while a transaction waits for a row lock would wait behind it (and every
    write behind the fence): the convergence returns once none waits."""
    topo = cluster()
    topo.servers["db1"].row_lock_waits_until = topo.clock.monotonic() + 0.03
    start = topo.clock.monotonic()
    sentence, behind = switchover(topo).converge()
    assert behind == 0 and 0.03 <= topo.clock.monotonic() - start < 0.032
    assert sentence.endswith("; waited 30.0 ms for no row-lock wait on db1"), sentence
    assert topo.sent == []


def test_row_lock_waits_that_do_not_end_are_waited_for_only_up_to_the_bound_then_fenced_anyway():
    topo = cluster()
    topo.servers["db1"].row_lock_waits_until = math.inf
    start = topo.clock.monotonic()
    sentence, behind = switchover(topo, fence_calm_wait_s=0.2).converge()
    assert behind == 0 and 0.2 <= topo.clock.monotonic() - start < 0.202
    assert sentence.endswith("; 1 transaction(s) on db1 still waited for a row lock after 200 ms: fenced anyway")


def test_the_wait_for_no_row_lock_wait_ends_at_the_convergence_deadline_without_refusing():
    """Converged: the fence is not refused because row-lock waits go on; it is set at the deadline."""
    topo = cluster()
    topo.servers["db1"].row_lock_waits_until = math.inf
    start = topo.clock.monotonic()
    sentence, _ = switchover(topo, fence_calm_wait_s=5, converge_timeout_s=0.1).converge()
    assert 0.1 <= topo.clock.monotonic() - start < 0.102 and "fenced anyway" in sentence


def test_without_a_calm_wait_the_old_primary_is_not_asked_for_row_lock_waits():
    topo = cluster()
    topo.servers["db1"].row_lock_waits_until = math.inf
    sentence, _ = switchover(topo, fence_calm_wait_s=0).converge()
    assert "row lock" not in sentence and topo.clock.sleeps == []


def test_exactly_at_the_threshold_converges_one_more_does_not():
    sentence, behind = switchover(lagging(10, for_s=math.inf)).converge()
    assert behind == 10 and sentence.startswith("db2 was 10 transaction(s) behind db1 (limit 10;")

    topo = lagging(11, for_s=math.inf)
    with pytest.raises(WaitTimeout):
        switchover(topo, converge_timeout_s=0.05).converge()


def test_a_candidate_that_never_converges_is_refused_with_its_lag_and_nothing_changes():
    topo = lagging(500, for_s=math.inf)
    start = topo.clock.monotonic()
    with pytest.raises(WaitTimeout) as refused:
        switchover(topo, converge_timeout_s=2).converge()
    assert refused.value.message == ("db2 did not apply db1's writes to within 10 transaction(s) in 2s "
                                     "(last 500 behind, at most 500): not fenced, nothing changed")
    assert "converge_max_trx" in refused.value.hint
    assert 2 <= topo.clock.monotonic() - start < 2.01  # bounded by converge_timeout_s
    assert topo.sent == [] and topo.writable() == ["db1"]


def test_a_candidate_with_replication_stopped_is_refused_before_waiting():
    topo = cluster()
    topo.servers["db2"].sql_running = False
    with pytest.raises(DbmigrateError) as refused:
        switchover(topo).converge()
    assert refused.value.message == "db2 is not applying replication (SQL thread No)"
    assert topo.sent == [] and topo.clock.sleeps == []


def test_a_candidate_delayed_by_configuration_is_not_waited_for():
    topo = lagging(500, for_s=math.inf)
    topo.servers["db2"].sql_delay_s = 3
    sentence, behind = switchover(topo).converge()
    assert (sentence, behind) == ("db2 was 500 transaction(s) behind db1 and replicates with a configured delay of 3s: "
                                  "not waiting for it to converge", 500)
    assert topo.clock.sleeps == [] and topo.sent == []


def test_dry_run_only_says_what_it_would_wait_for():
    topo = lagging(500, for_s=math.inf)
    sw = Switchover(topo, "db1", "db2", SwitchoverParams(), dry_run=True, clock=topo.clock)
    assert sw.converge() == ("would wait up to 10s for db2 to be within 10 transaction(s) of db1", 0)


# -- the fence step: converge, journal, fence ------------------------------------------

@pytest.fixture
def run(tmp_path):
    with Journal(tmp_path / "j.sqlite") as j:
        j.create_run("run1", procedure="promote", cluster="c", params={}, playbook="", playbook_sha="", dry_run=False)
        yield lambda topo: RunContext(run_id="run1", procedure="promote", cluster="c", journal=j, bus=EventBus(),
                                      clock=topo.clock)


def cut_of(topo: FakeTopology, **settings) -> kit.Cutover:
    return kit.Cutover(old="db1", new="db2", switchover=lambda c, record, routed: switchover(topo, **settings))


def test_the_fence_step_journals_the_convergence_before_read_only(run):
    topo = lagging(20, for_s=0.01)
    ctx = run(topo)
    cut = cut_of(topo)
    seen = []
    real_fence = Switchover.fence

    def fence_seeing_journal(sw, before_retry=None):
        seen.append(CutoverState.load(ctx.state).converged)
        return real_fence(sw, before_retry)

    Switchover.fence = fence_seeing_journal
    try:
        sentence = kit.fence_step(cut).run(ctx)
    finally:
        Switchover.fence = real_fence
    assert seen and seen[0].startswith("db2 was 0 transaction(s) behind db1")
    assert CutoverState.load(ctx.state).lag_at_fence_trx == 0
    assert "fenced db1 (read_only=ON)" in sentence and topo.servers["db1"].read_only


def test_a_fence_step_that_never_converged_is_undone_without_touching_any_server(run):
    topo = lagging(500, for_s=math.inf)
    ctx = run(topo)
    step = kit.fence_step(cut_of(topo, converge_timeout_s=1))
    with pytest.raises(WaitTimeout):
        step.run(ctx)
    assert step.undo(ctx) == "nothing to undo: db1 was not fenced"
    assert topo.sent == [] and topo.writable() == ["db1"]


def test_a_fence_that_gave_up_converges_again_before_its_next_attempt(run):
    """Writes flow between two attempts: the candidate may fall behind meanwhile. The next
    attempt waits for it again, so that its catch-up stays outside the fenced window."""
    from dbmigrate.exceptions import RefusedWait

    topo = cluster()
    ctx = run(topo)
    cut = cut_of(topo, fence_attempts=2, fence_retry_pause_s=0.2)
    attempts: list[float] = []
    real_once = Fence._fence_once

    def blocked_once_then_real(sw):
        attempts.append(topo.clock.monotonic())
        if len(attempts) == 1:
            # The blocked attempt gives up; meanwhile db1 took 40 writes that db2 applies only 0.5 s later.
            topo.servers["db2"].lag_until = topo.clock.monotonic() + 0.5
            topo.write("db1", 40)
            raise RefusedWait("the fence on db1 waited 0.5s behind running statement(s): gave up, nothing changed")
        return real_once(sw)

    Fence._fence_once = blocked_once_then_real
    try:
        sentence = kit.fence_step(cut).run(ctx)
    finally:
        Fence._fence_once = real_once
    assert "(attempt 2 of 2)" in sentence and topo.servers["db1"].read_only
    assert attempts[1] - attempts[0] >= 0.5  # not after the 0.2 s pause alone: after db2 caught up
    st = CutoverState.load(ctx.state)
    assert st.converged.startswith("db2 was 0 transaction(s) behind db1") and "at most 40" in st.converged
    assert st.lag_at_fence_trx == 0 and topo.missing_on("db2") == []


def stalling_after_first_convergence(topo: FakeTopology, stall_s: float) -> tuple[list[float], object]:
    """db2 converged, then stalls for `stall_s` while db1 takes 20 more writes (more than
    converge_max_trx) just before the first fence: the fenced catch-up of that attempt cannot
    finish soon, and the next convergence waits for the stall to end."""
    attempts: list[float] = []
    real_once = Fence._fence_once

    def once(sw):
        attempts.append(topo.clock.monotonic())
        if len(attempts) == 1:
            topo.servers["db2"].lag_until = topo.clock.monotonic() + stall_s
            topo.write("db1", 20)
        return real_once(sw)

    return attempts, once


def read_only_spans(topo: FakeTopology, name: str) -> list[str]:
    return [sql for sql in topo.statements(name) if "read_only" in sql]


def test_a_candidate_that_stalls_after_the_fence_is_unfenced_within_the_budget_and_tried_again(run, monkeypatch):
    topo = cluster()
    ctx = run(topo)
    logged: list[str] = []
    settings = SwitchoverParams(fence_attempts=3, fence_retry_pause_s=0.2, fenced_catchup_budget_s=0.05)
    cut = kit.Cutover(old="db1", new="db2", switchover=lambda c, record, routed: Switchover(
        topo, "db1", "db2", settings, routed(FakeRouter(topo, "db1"), settings), clock=topo.clock,
        log=lambda message, level="info": logged.append(message)))
    attempts, once = stalling_after_first_convergence(topo, stall_s=0.4)
    monkeypatch.setattr(Fence, "_fence_once", once)
    sentence = kit.fence_step(cut).run(ctx)
    assert "(attempt 2 of 3)" in sentence and "; db2 applied it in 0.0 ms" in sentence
    assert topo.servers["db1"].read_only and topo.writable() == []
    # The first attempt: fenced, then unfenced once the 50 ms budget ran out, not after the stall.
    refusal = next(m for m in logged if "fenced catch-up budget of 50 ms" in m)
    assert "db2 did not apply db1's final position" in refusal and "unfenced db1 (read_only=OFF)" in refusal
    assert "waited 50.0 ms" in refusal
    assert len(read_only_spans(topo, "db1")) == 3  # on, off, on
    # The second attempt came after db2 caught up (converged again), not after the pause alone.
    assert attempts[1] - attempts[0] >= 0.4
    assert topo.missing_on("db2") == []
    # Seen applied within the budget: the catch-up step does not ask db2 again inside the window.
    st = CutoverState.load(ctx.state)
    assert st.applied_pos == st.fence_pos and st.fence_pos
    t0 = topo.clock.monotonic()
    assert kit.catch_up_step(cut).run(ctx) == f"db2 had applied {st.fence_pos} within the fence step"
    assert topo.clock.monotonic() == t0


def test_the_last_attempt_leaves_the_catch_up_to_its_own_step(run, monkeypatch):
    """No budget on the last attempt: a candidate that stalls then is waited for by the
    catch-up step, up to catchup_timeout_s, as without a budget."""
    topo = cluster()
    ctx = run(topo)
    cut = cut_of(topo, fence_attempts=1, fenced_catchup_budget_s=0.05)
    attempts, once = stalling_after_first_convergence(topo, stall_s=0.4)
    monkeypatch.setattr(Fence, "_fence_once", once)
    sentence = kit.fence_step(cut).run(ctx)
    assert "applied it" not in sentence and "attempt" not in sentence
    assert len(read_only_spans(topo, "db1")) == 1 and topo.servers["db1"].read_only
    assert CutoverState.load(ctx.state).applied_pos is None
    t0 = topo.clock.monotonic()
    said = kit.catch_up_step(cut).run(ctx)
    assert said.startswith("db2 applied") and topo.clock.monotonic() - t0 >= 0.3


def test_a_candidate_that_stalls_at_every_attempt_is_waited_for_only_at_the_last(run, monkeypatch):
    topo = cluster()
    ctx = run(topo)
    cut = cut_of(topo, fence_attempts=2, fence_retry_pause_s=0.2, fenced_catchup_budget_s=0.05)
    real_once = Fence._fence_once

    def always_stalls(sw):
        topo.servers["db2"].lag_until = topo.clock.monotonic() + 0.4
        topo.write("db1", 5)
        return real_once(sw)

    monkeypatch.setattr(Fence, "_fence_once", always_stalls)
    sentence = kit.fence_step(cut).run(ctx)
    assert "(attempt 2 of 2)" in sentence and "applied it" not in sentence
    assert kit.catch_up_step(cut).run(ctx).startswith("db2 applied")
    assert topo.missing_on("db2") == []


def test_the_cutover_hands_its_maker_a_router_that_journals_every_change_unless_dry_run(tmp_path):
    from dbmigrate.procedures.kit.switchover.router import JournaledRouter

    topo = cluster()
    settings = SwitchoverParams(router_doubt_wait_s=7)
    cut = kit.Cutover(old="db1", new="db2", switchover=lambda c, record, routed: Switchover(
        topo, "db1", "db2", settings, routed(FakeRouter(topo, "db1"), settings), clock=topo.clock,
        dry_run=c.dry_run))
    with Journal(tmp_path / "j.sqlite") as j:
        for run_id, dry in (("run1", False), ("run2", True)):
            j.create_run(run_id, procedure="promote", cluster="c", params={}, playbook="", playbook_sha="", dry_run=dry)
            ctx = RunContext(run_id=run_id, procedure="promote", cluster="c", journal=j, bus=EventBus(),
                             clock=topo.clock, dry_run=dry)
            router = cut.sw(ctx).router
            if dry:
                assert isinstance(router, FakeRouter)  # a dry run sends nothing: nothing to journal
            else:
                assert isinstance(router, JournaledRouter) and isinstance(router.router, FakeRouter), router
                assert router.wait_s == 7  # the playbook's bound, not a default
                cut.sw(ctx).switch_router()
                assert CutoverState.load(ctx.state).router_seq >= 1  # journaled before it was sent
