"""A `resume` past a blind pause before the cutover is the operator's decision, recorded once:
the same blindness after the cutover does not pause the run again (it warns); a run that was
never paused before the cutover still pauses after it."""

from __future__ import annotations

import pytest

from dbmigrate.digest.policy import GuardPolicy
from dbmigrate.engine.events import EventBus
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.runner import RunPaused
from dbmigrate.engine.step import RunContext
from dbmigrate.clock import FakeClock
from dbmigrate.procedures.kit.guard import GuardState, act_blind

POLICY = GuardPolicy.model_validate({"window": "wire", "rules": [{"metric": "avg", "max_regression_pct": 50}]})


@pytest.fixture
def ctx(tmp_path):
    with Journal(tmp_path / "j.sqlite") as j:
        j.create_run("run1", procedure="promote", cluster="c", params={}, playbook="", playbook_sha="", dry_run=False)
        yield RunContext(run_id="run1", procedure="promote", cluster="c", journal=j, bus=EventBus(),
                         clock=FakeClock(42.0))


def test_a_resume_past_a_blind_pause_is_not_asked_again_after_the_cutover(ctx):
    with pytest.raises(RunPaused):
        act_blind(ctx, POLICY, "the baseline holds 3 of the application's queries", "before the cutover")
    # ... the operator resumes: the run cuts over, and the guard is blind again for the same reason.
    said = act_blind(ctx, POLICY, "3 of the application's queries in 20s", "after the cutover")
    assert "not paused again" in said and "wire window saw too few" in said
    blind = GuardState.load(ctx.state).guard_blind
    assert blind["decided_at_resume"] and blind["action"] == "warn"


def test_a_run_never_paused_before_the_cutover_pauses_after_it(ctx):
    with pytest.raises(RunPaused):
        act_blind(ctx, POLICY, "no sample could be judged", "after the cutover")
