"""Runner behaviour with fake steps that change a fake world."""

from __future__ import annotations

import io
import json

import pytest

from dbmigrate.engine import (
    AutoGate,
    EventBus,
    FunctionStep,
    Journal,
    ManualGate,
    Phase,
    Procedure,
    Runner,
    StepFinished,
)
from dbmigrate.cli.render import JsonLinesRenderer
from dbmigrate.engine.runner import not_undone_sentence
from dbmigrate.exceptions import GateFailed, NotUndone, SafetyError
from tests.unit.test_engine_support import World, new_context, two_phase_procedure


def statuses(journal, run_id, action="run"):
    return [(r["name"], r["status"]) for r in journal.step_rows(run_id) if r["action"] == action]


def test_steps_run_in_order_and_are_journaled_with_sentences(journal):
    world = World()
    ctx = new_context(journal)
    outcome = Runner().run(two_phase_procedure(world), ctx)
    assert outcome.status == "done" and outcome.ok
    assert world.runs() == ["run:a", "run:b", "run:c", "run:d"]
    assert [c for c in world.calls if c.endswith(":a")] == ["check:a", "run:a"]  # check before run
    rows = journal.step_rows(ctx.run_id)
    assert [(r["phase"], r["name"], r["status"], r["sentence"]) for r in rows] == [
        ("prepare", "a", "done", "did a"), ("prepare", "b", "done", "did b"),
        ("cutover", "c", "done", "did c"), ("cutover", "d", "done", "did d"),
    ]
    assert journal.get_run(ctx.run_id).status == "done"
    assert outcome.summary == "demo finished: 4 done"


def test_step_whose_check_says_done_is_skipped(journal):
    world = World()
    world.state["b"] = True
    ctx = new_context(journal)
    Runner().run(two_phase_procedure(world), ctx)
    assert world.runs() == ["run:a", "run:c", "run:d"]
    assert statuses(journal, ctx.run_id)[1] == ("b", "skipped")


def test_rerunning_a_finished_run_skips_every_step_by_check(journal):
    world = World()
    procedure = two_phase_procedure(world)
    first = new_context(journal)
    Runner().run(procedure, first)
    world.calls.clear()
    again = Runner().run(procedure, new_context(journal))
    assert again.status == "done" and again.summary == "demo finished: 4 skipped"
    assert world.runs() == []
    resumed = Runner().run(procedure, first, resume=True)
    assert resumed.status == "done" and world.runs() == []


def test_failing_automatic_gate_stops_before_its_phase(journal):
    world = World()
    procedure = two_phase_procedure(world)
    procedure.phase("cutover").gates.append(
        AutoGate("replica-lag", lambda ctx: (False, "lag 12.0s > 5s on db-2", {"lag_s": 12.0})))
    ctx = new_context(journal)
    outcome = Runner().run(procedure, ctx)
    assert outcome.status == "refused"
    assert isinstance(outcome.error, GateFailed)
    assert "gate 'replica-lag' before phase 'cutover' refused: lag 12.0s > 5s on db-2" == outcome.error.message
    assert world.runs() == ["run:a", "run:b"]
    gate = journal.run_detail(ctx.run_id)["gates"][0]
    assert (gate["name"], gate["ok"], gate["reason"], gate["decided_by"], gate["details"]) == (
        "replica-lag", False, "lag 12.0s > 5s on db-2", "auto", {"lag_s": 12.0})
    assert journal.get_run(ctx.run_id).status == "refused"


def test_gate_check_that_raises_counts_as_refusal(journal):
    world = World()
    procedure = two_phase_procedure(world)

    def broken(ctx):
        raise ConnectionError("db-2 unreachable")

    procedure.phases[0].gates.append(AutoGate("reachable", broken))
    outcome = Runner().run(procedure, new_context(journal))
    assert outcome.status == "refused" and world.runs() == []
    assert "ConnectionError: db-2 unreachable" in outcome.summary


def with_manual_gate(world):
    procedure = two_phase_procedure(world)
    procedure.phase("cutover").gates.append(ManualGate("go-ahead", "Fence db-1 now?"))
    return procedure


def test_manual_gate_denied_by_operator_stops_the_run(journal):
    world = World()
    asked = []
    runner = Runner(approver=lambda waiting: asked.append(waiting.prompt) or False)
    ctx = new_context(journal)
    outcome = runner.run(with_manual_gate(world), ctx)
    assert asked == ["Fence db-1 now?"]
    assert outcome.status == "refused" and world.runs() == ["run:a", "run:b"]
    gate = journal.run_detail(ctx.run_id)["gates"][0]
    assert (gate["ok"], gate["decided_by"], gate["reason"]) == (False, "operator", "declined by operator")


def test_manual_gate_approved_by_operator_continues(journal):
    world = World()
    ctx = new_context(journal)
    outcome = Runner(approver=lambda waiting: (True, "checked dashboards")).run(with_manual_gate(world), ctx)
    assert outcome.status == "done" and len(world.runs()) == 4
    gate = journal.run_detail(ctx.run_id)["gates"][0]
    assert (gate["ok"], gate["decided_by"], gate["reason"]) == (True, "operator", "checked dashboards")


def test_manual_gate_approved_by_yes_without_asking(journal):
    world = World()

    def never(waiting):
        raise AssertionError("--yes must not ask")

    ctx = new_context(journal)
    outcome = Runner(approver=never, assume_yes=True).run(with_manual_gate(world), ctx)
    assert outcome.status == "done"
    assert journal.run_detail(ctx.run_id)["gates"][0]["decided_by"] == "--yes"


def test_manual_gate_without_anyone_to_ask_is_refused(journal):
    world = World()
    outcome = Runner().run(with_manual_gate(world), new_context(journal))
    assert outcome.status == "refused" and "pass --yes" in outcome.summary


def test_failed_step_stops_the_run_and_journals_the_error(journal):
    world = World()
    procedure = Procedure("demo", [Phase("p", [world.step("a"), world.step("b", fail=True), world.step("c")])])
    ctx = new_context(journal)
    outcome = Runner().run(procedure, ctx)
    assert outcome.status == "failed"
    assert world.runs() == ["run:a", "run:b"]
    row = journal.step_rows(ctx.run_id)[1]
    assert (row["name"], row["status"], row["error"]) == ("b", "failed", "RuntimeError: b exploded")
    assert outcome.error.hint and f"dbmigrate resume {ctx.run_id}" in outcome.error.hint


def test_verify_failure_fails_the_step(journal):
    def verify(ctx):
        raise AssertionError("read_only is still OFF on db-1")

    step = FunctionStep("fence", lambda ctx: "fenced db-1", verify=verify)
    ctx = new_context(journal)
    outcome = Runner().run(Procedure("demo", [Phase("p", [step])]), ctx)
    assert outcome.status == "failed"
    assert journal.step_rows(ctx.run_id)[0]["error"] == (
        "postcondition not met: AssertionError: read_only is still OFF on db-1")


def test_rollback_on_failure_undoes_completed_steps_newest_first(journal):
    world = World()
    procedure = Procedure("demo", [
        Phase("one", [world.step("a"), world.step("b", with_undo=False)]),
        Phase("two", [world.step("c"), world.step("d", fail=True), world.step("e")]),
    ], rollback_on_failure=True)
    world.state["c"] = True  # already in place before the run: skipped, so not ours to undo
    ctx = new_context(journal)
    outcome = Runner().run(procedure, ctx)
    assert outcome.status == "rolled_back" and not outcome.ok  # undone, but the run still failed
    assert world.undos() == ["undo:a"]  # b has nothing to undo, c was skipped, d failed, e never ran
    assert statuses(journal, ctx.run_id, "undo") == [("b", "skipped"), ("a", "undone")]
    assert world.state == {"b": True, "c": True}


def test_a_step_whose_undo_leaves_its_change_is_reported_not_undone_everywhere(journal):
    """An undo that cannot remove its change says so: listed "not undone" with server and statement
    in the step, the summary, the hint and runs show; the rollback goes on with the other steps."""
    world = World()

    def alter(ctx):
        ctx.record_statement("db-2", "ALTER TABLE app.t ADD COLUMN c INT")
        return "altered db-2"

    def keep(ctx):
        raise NotUndone("schema left as is on db-2: no undo_ddl given")

    procedure = Procedure("demo", [Phase("one", [world.step("a"), FunctionStep("alter db-2", alter, undo=keep)]),
                                   Phase("two", [world.step("d", fail=True)])], rollback_on_failure=True)
    ctx = new_context(journal)
    outcome = Runner().run(procedure, ctx)
    assert outcome.status == "rolled_back" and world.undos() == ["undo:a"]
    assert statuses(journal, ctx.run_id, "undo") == [("alter db-2", "not_undone"), ("a", "undone")]
    said = "not undone (left in place): step 'alter db-2' (db-2: ALTER TABLE app.t ADD COLUMN c INT)"
    assert outcome.summary.endswith("rollback: undid 1 step(s); " + said), outcome.summary
    assert said in outcome.error.hint and "NOT" in outcome.error.hint
    assert not outcome.error.hint.startswith("the completed steps were undone")
    detail = journal.run_detail(ctx.run_id)
    assert detail["not_undone"] == [{"phase": "one", "step": "alter db-2",
                                     "sentence": "not undone: schema left as is on db-2: no undo_ddl given",
                                     "left": [{"server": "db-2", "sql": "ALTER TABLE app.t ADD COLUMN c INT"}]}]
    assert said in detail["summary"]
    # still not undone: a later rollback tries again and says so again
    again = Runner(assume_yes=True).rollback(procedure, new_context(journal, run_id=ctx.run_id))
    assert said in again.summary


def test_the_not_undone_sentence_names_each_step_and_caps_its_statements():
    rows = [{"step": "s", "sentence": "x", "left": [{"server": "a", "sql": f"Q{i}"} for i in range(5)]},
            {"step": "t", "sentence": "not undone: kept", "left": []}]
    assert not_undone_sentence(rows) == ("not undone (left in place): step 's' (a: Q0; a: Q1; a: Q2; +2 more), "
                                         "step 't' (not undone: kept)")
    assert not_undone_sentence([]) == ""


def test_a_gate_refusal_before_any_change_is_refused_not_rolled_back(journal):
    world = World()
    procedure = Procedure("demo", [Phase("one", [world.step("a")])], rollback_on_failure=True)
    procedure.phase("one").gates.append(AutoGate("reachable", lambda ctx: (False, "db-3 does not answer", {})))
    ctx = new_context(journal)
    outcome = Runner().run(procedure, ctx)
    assert outcome.status == "refused" and world.runs() == [] and world.undos() == []
    assert outcome.summary == "refused before any change: gate 'reachable' before phase 'one' refused: db-3 does not answer"
    assert "undone" not in (outcome.error.hint or "")
    assert journal.get_run(ctx.run_id).status == "refused"


def test_a_gate_refusal_after_a_change_still_rolls_that_change_back(journal):
    world = World()
    procedure = Procedure("demo", [Phase("one", [world.step("a")]), Phase("two", [world.step("b")])],
                          rollback_on_failure=True)
    procedure.phase("two").gates.append(AutoGate("lag", lambda ctx: (False, "lag 9s", {})))
    outcome = Runner().run(procedure, new_context(journal))
    assert outcome.status == "rolled_back" and world.undos() == ["undo:a"]


def test_rollback_of_a_finished_run_undoes_in_reverse_and_is_repeatable(journal):
    world = World()
    procedure = two_phase_procedure(world)
    ctx = new_context(journal)
    Runner().run(procedure, ctx)
    outcome = Runner(assume_yes=True).rollback(procedure, ctx)
    assert outcome.status == "rolled_back" and outcome.summary == "undid 4 step(s)"
    assert world.undos() == ["undo:d", "undo:c", "undo:b", "undo:a"]
    assert world.state == {}
    assert Runner(assume_yes=True).rollback(procedure, ctx).summary == "nothing to undo"
    assert len(world.undos()) == 4


def test_rollback_stops_at_a_failing_undo_and_continues_later(journal):
    world = World()
    flaky = world.step("b", fail_undo=True)
    procedure = Procedure("demo", [Phase("p", [world.step("a"), flaky, world.step("c")])])
    ctx = new_context(journal)
    Runner().run(procedure, ctx)
    outcome = Runner(assume_yes=True).rollback(procedure, ctx)
    assert outcome.status == "rollback_failed"
    assert "undo of 'b' failed: RuntimeError: cannot undo b; 1 step(s) undone before it" == outcome.summary
    assert world.undos() == ["undo:c", "undo:b"]
    fixed = Procedure("demo", [Phase("p", [world.step("a"), world.step("b"), world.step("c")])])
    assert Runner(assume_yes=True).rollback(fixed, ctx).status == "rolled_back"
    assert world.undos() == ["undo:c", "undo:b", "undo:b", "undo:a"]


def test_rollback_needs_approval_and_refuses_unknown_steps(journal):
    world = World()
    procedure = two_phase_procedure(world)
    ctx = new_context(journal)
    Runner().run(procedure, ctx)
    declined = Runner(approver=lambda w: False).rollback(procedure, ctx)
    assert declined.status == "declined" and world.undos() == []
    assert journal.get_run(ctx.run_id).status == "done"
    renamed = Procedure("demo", [Phase("prepare", [world.step("a")])])
    with pytest.raises(SafetyError, match="prepare/b"):
        Runner(assume_yes=True).rollback(renamed, ctx)


def test_dry_run_describes_mutating_steps_and_runs_read_only_ones(journal):
    world = World()
    procedure = Procedure("demo", [Phase("p", [world.step("inspect", mutating=False), world.step("fence")])])
    ctx = new_context(journal, dry_run=True)
    outcome = Runner().run(procedure, ctx)
    assert outcome.status == "done"
    assert world.runs() == ["run:inspect"]  # the read-only step really ran
    rows = journal.step_rows(ctx.run_id)
    assert (rows[1]["status"], rows[1]["sentence"]) == ("dry-run", "would send 1 statement: db-1: DO 'fence'")
    statements = [(s["server"], s["sql"], s["dry_run"]) for s in journal.run_detail(ctx.run_id)["statements"]]
    assert statements == [("db-1", "DO 'inspect'", True), ("db-1", "DO 'fence'", True)]


CRASH_POINTS = ["a", "b", "c", "d"]


@pytest.mark.parametrize("crashed_step", CRASH_POINTS)
@pytest.mark.parametrize("effect_applied", [False, True], ids=["before-effect", "after-effect"])
@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_resume_after_a_crash_at_each_step_completes_the_run(journal, crashed_step, effect_applied, how):
    world = World()
    crashed = []

    def crash_once(name):
        inner = world.step(name)

        def run(ctx):
            if name == crashed_step and not crashed:
                crashed.append(name)
                world.calls.append(f"run:{name}")
                if effect_applied:
                    world.state[name] = True
                raise KeyboardInterrupt
            return inner.run(ctx)

        return FunctionStep(name, run, check=inner.check, undo=inner.undo)

    procedure = Procedure("demo", [Phase("prepare", [crash_once("a"), crash_once("b")]),
                                   Phase("cutover", [crash_once("c"), crash_once("d")])])
    ctx = new_context(journal)
    with pytest.raises(KeyboardInterrupt):
        Runner().run(procedure, ctx)
    if how == "sigkill":
        # What a SIGKILL leaves behind: the step row still 'started', the run 'running'.
        journal._write("UPDATE steps SET status='started', finished_at=NULL WHERE status='interrupted'")
        journal._write("UPDATE runs SET status='running', finished_at=NULL")
    else:
        assert journal.get_run(ctx.run_id).status == "interrupted"
    position = CRASH_POINTS.index(crashed_step)
    assert world.runs() == [f"run:{n}" for n in CRASH_POINTS[: position + 1]]

    world.calls.clear()
    outcome = Runner().run(procedure, ctx, resume=True)

    assert outcome.status == "done"
    assert world.state == {n: True for n in CRASH_POINTS}
    again = CRASH_POINTS[position:] if not effect_applied else CRASH_POINTS[position + 1:]
    assert world.runs() == [f"run:{n}" for n in again]
    latest = journal.last_step_status(ctx.run_id)
    assert all(latest[(p, n)] in ("done", "skipped") for (p, n) in latest) and len(latest) == 4
    assert journal.get_run(ctx.run_id).status == "done"


def test_resume_trusts_the_journal_for_steps_without_check(journal):
    world = World()
    procedure = Procedure("demo", [Phase("p", [world.step("a", with_check=False), world.step("b", fail=True)])])
    ctx = new_context(journal)
    Runner().run(procedure, ctx)
    fixed = Procedure("demo", [Phase("p", [world.step("a", with_check=False), world.step("b")])])
    world.calls.clear()
    assert Runner().run(fixed, ctx, resume=True).status == "done"
    assert world.runs() == ["run:b"]
    assert journal.step_rows(ctx.run_id)[-2]["sentence"] == "already done earlier in this run (journal)"


def test_resume_does_not_ask_gates_already_passed(journal):
    world = World()
    procedure = Procedure("demo", [
        Phase("one", [world.step("a")], gates=[ManualGate("first")]),
        Phase("two", [world.step("b", fail=True)], gates=[ManualGate("second")]),
    ])
    ctx = new_context(journal)
    Runner(assume_yes=True).run(procedure, ctx)
    asked = []
    fixed = Procedure("demo", [Phase("one", [world.step("a")], gates=[ManualGate("first")]),
                               Phase("two", [world.step("b")], gates=[ManualGate("second")])])
    outcome = Runner(approver=lambda w: asked.append(w.gate) or True).run(fixed, ctx, resume=True)
    assert outcome.status == "done" and asked == []


def test_json_lines_renderer_writes_one_parsable_object_per_event(journal):
    stream = io.StringIO()
    bus = EventBus()
    bus.subscribe(JsonLinesRenderer(stream))
    world = World()
    procedure = two_phase_procedure(world)
    procedure.phases[0].gates.append(AutoGate("ok", lambda ctx: (True, "fine", {"n": 1})))
    ctx = new_context(journal, bus=bus)
    Runner().run(procedure, ctx)
    lines = stream.getvalue().splitlines()
    objects = [json.loads(line) for line in lines]
    kinds = [o["event"] for o in objects]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    assert kinds.count("StepFinished") == 4 and "GateDecided" in kinds
    finished = [o for o in objects if o["event"] == "StepFinished"]
    assert finished[0]["name"] == "a" and finished[0]["status"] == "done" and finished[0]["sentence"] == "did a"
    assert all(o["run_id"] == ctx.run_id for o in objects)


def test_a_broken_renderer_does_not_stop_the_run(journal, capsys):
    bus = EventBus()

    def broken(event):
        raise ValueError("terminal gone")

    bus.subscribe(broken)
    seen = []
    bus.subscribe(lambda e: seen.append(e))
    world = World()
    outcome = Runner().run(two_phase_procedure(world), new_context(journal, bus=bus))
    assert outcome.status == "done" and len(world.runs()) == 4
    assert sum(isinstance(e, StepFinished) for e in seen) == 4
    assert capsys.readouterr().err.count("terminal gone") == 1


def test_context_state_survives_in_the_journal(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        ctx = new_context(journal)
        ctx.state["old_primary_gtid"] = "0-1-42"
        ctx.state.set("long_query_time", {"db-1": 10.0})
        run_id = ctx.run_id
    with Journal(path) as reopened:
        ctx = new_context(reopened, run_id=run_id)
        assert ctx.state["old_primary_gtid"] == "0-1-42"
        assert ctx.state.get("long_query_time") == {"db-1": 10.0}
        assert "missing" not in ctx.state and ctx.state.get("missing", 7) == 7


def test_metrics_and_logs_emitted_by_steps_reach_the_journal(journal):
    def measure(ctx):
        ctx.metric("fenced_window", 2.1, "ms", server="db-1")
        ctx.log("db-2 caught up")
        return "measured"

    ctx = new_context(journal)
    Runner().run(Procedure("demo", [Phase("p", [FunctionStep("measure", measure, mutating=False)])]), ctx)
    detail = journal.run_detail(ctx.run_id)
    assert [(m["name"], m["value"], m["unit"], m["labels"]) for m in detail["metrics"]] == [
        ("fenced_window", 2.1, "ms", {"server": "db-1"})]
    assert [(log["level"], log["message"]) for log in detail["logs"]] == [("info", "db-2 caught up")]


def test_a_step_that_failed_half_way_is_undone_when_it_asks_for_it(journal):
    """A fence that took effect and then failed (e.g. the position read broke) must be undone."""
    world = World()
    effects = []

    def fence(ctx):
        effects.append("fenced")  # the effect lands...
        raise RuntimeError("lost connection reading the position")  # ...then the step fails

    def unfence(ctx):
        effects.append("unfenced")
        return "unfenced"

    procedure = Procedure("demo", [Phase("cut", [
        world.step("a"),
        FunctionStep("fence", fence, undo=unfence, undo_if_started=True),
        world.step("b"),
    ])], rollback_on_failure=True)
    ctx = new_context(journal)
    outcome = Runner().run(procedure, ctx)
    assert outcome.status == "rolled_back"
    assert effects == ["fenced", "unfenced"] and world.undos() == ["undo:a"]


def test_rollback_after_a_kill_mid_step_undoes_the_unfinished_step(journal):
    world = World()
    steps = [world.step("a"),
             FunctionStep("fence", lambda c: "fenced", undo=lambda c: "unfenced", undo_if_started=True),
             FunctionStep("plain", lambda c: "x", undo=lambda c: "undid plain")]
    ctx = new_context(journal)
    Runner().run(Procedure("demo", [Phase("cut", steps[:1])]), ctx)
    # The tool was killed inside "fence", then (another run's view) inside "plain": started, never finished.
    journal.step_started(ctx.run_id, 1, "cut", "fence")
    journal.step_started(ctx.run_id, 2, "cut", "plain")
    outcome = Runner(assume_yes=True).rollback(Procedure("demo", [Phase("cut", steps)]), ctx)
    assert outcome.status == "rolled_back"
    assert statuses(journal, ctx.run_id, "undo") == [("fence", "undone"), ("a", "undone")]
    # "plain" has no undo_if_started: an unfinished step without the flag is left alone


def _late_gate_procedure(world, verdicts: list[bool]):
    gate = AutoGate("warm-up", lambda ctx: (verdicts.pop(0), "still cold"), pause_on_refusal=True)
    return Procedure("demo", [
        Phase("alter", [world.step("a"), world.step("b")]),
        Phase("finish", [world.step("c")], gates=[gate]),
    ], rollback_on_failure=True)


def test_a_pausing_gate_stops_the_run_without_undoing_it_and_resume_asks_again(journal):
    world = World()
    verdicts = [False, True]
    procedure = _late_gate_procedure(world, verdicts)
    ctx = new_context(journal)
    outcome = Runner(assume_yes=True).run(procedure, ctx)  # scripted: never overrides a check
    assert outcome.status == "paused" and not outcome.ok
    assert "paused at gate 'warm-up'" in outcome.summary and "still cold" in outcome.summary
    assert "nothing was undone" in outcome.error.hint and f"dbmigrate resume {ctx.run_id}" in outcome.error.hint
    assert world.state == {"a": True, "b": True}  # nothing undone, phase 'finish' not started
    assert statuses(journal, ctx.run_id, "undo") == []
    assert journal.get_run(ctx.run_id).status == "paused"
    resumed = Runner(assume_yes=True).run(procedure, ctx, resume=True)
    assert resumed.status == "done" and world.state["c"] and verdicts == []


def test_an_operator_may_continue_past_a_pausing_gate(journal):
    world = World()
    asked = []

    def approver(waiting):
        asked.append(waiting.prompt)
        return True, "yes"

    ctx = new_context(journal)
    outcome = Runner(approver=approver).run(_late_gate_procedure(world, [False]), ctx)
    assert outcome.status == "done" and world.state["c"]
    assert asked == ["still cold. Continue anyway? (no: the run pauses, nothing is undone)"]
    decided = [(g["ok"], g["decided_by"]) for g in journal.run_detail(ctx.run_id)["gates"]]
    assert decided == [(0, "auto"), (1, "operator")]
