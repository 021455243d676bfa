"""The session's pure parts: the run board folding events, the gate keeper, the runner's cancel check."""

from __future__ import annotations

import threading

from dbmigrate.engine import (
    AutoGate,
    FunctionStep,
    GateDecided,
    GateWaiting,
    Journal,
    ManualGate,
    Phase,
    Procedure,
    RunFinished,
    RunStarted,
    Runner,
    StepFinished,
    StepStarted,
)
from dbmigrate.tui.board import RunBoard
from dbmigrate.tui.gatekeeper import GateKeeper
from tests.unit.test_engine_support import World, new_context


def planned() -> Procedure:
    noop = lambda ctx: "ok"  # noqa: E731
    return Procedure("promote", [
        Phase("preflight", [], gates=[AutoGate("preflight", lambda c: (True, "fine"))]),
        Phase("cutover", [FunctionStep("fence <old primary>", noop, undo=noop),
                          FunctionStep("open <candidate> for writes", noop)],
              gates=[ManualGate("go", "Go?")]),
    ], rollback_on_failure=True)


def test_board_renames_planned_steps_from_the_run_and_tracks_statuses():
    board = RunBoard(planned())
    assert [(r.name, r.status, r.undoable) for r in board.steps] == [
        ("fence <old primary>", "pending", True), ("open <candidate> for writes", "pending", False)]
    board.apply(RunStarted(run_id="r1", procedure="promote", cluster="main", dry_run=False))
    board.apply(StepStarted(index=0, phase="cutover", name="fence db-1"))
    assert (board.steps[0].name, board.steps[0].status) == ("fence db-1", "running")
    assert board.running_step() is board.steps[0] and board.active
    board.apply(StepFinished(index=0, phase="cutover", name="fence db-1", status="done", sentence="db-1 read-only",
                             duration_ms=3.5))
    assert (board.steps[0].icon, board.steps[0].sentence, board.steps[0].duration_ms) == ("✓", "db-1 read-only", 3.5)
    assert board.running_step() is None
    board.apply(RunFinished(status="done", summary="promote finished: 1 done"))
    assert not board.active and board.status == "done" and board.counts() == {"done": 1, "pending": 1}


def test_board_undo_events_mark_steps_undone_but_nothing_to_undo_keeps_the_forward_status():
    board = RunBoard(planned())
    board.apply(StepFinished(index=0, phase="cutover", name="fence db-1", status="done"))
    board.apply(StepFinished(index=1, phase="cutover", name="open db-2 for writes", status="done"))
    board.apply(RunStarted(procedure="promote", cluster="main", dry_run=False, rollback=True))
    assert board.status == "rolling back"
    board.apply(StepFinished(index=1, phase="cutover", name="open db-2 for writes", status="skipped",
                             sentence="nothing to undo", action="undo"))
    board.apply(StepStarted(index=0, phase="cutover", name="fence db-1", action="undo"))
    assert board.steps[0].status == "undoing"
    board.apply(StepFinished(index=0, phase="cutover", name="fence db-1", status="undone", action="undo"))
    assert [r.status for r in board.steps] == ["undone", "done"]


def test_board_keeps_gate_verdicts_for_the_manual_gate_dialog():
    board = RunBoard(planned())
    board.apply(GateWaiting(phase="preflight", gate="preflight", kind="auto"))
    assert board.gates[0].status == "waiting" and board.automatic_verdicts("cutover") == []
    board.apply(GateDecided(phase="preflight", gate="preflight", kind="auto", ok=True, reason="all 7 passed",
                            by="auto", details={"lag": {"ok": True, "reason": "3 ms"}}))
    verdicts = board.automatic_verdicts("cutover")
    assert [(g.name, g.reason, g.details["lag"]["reason"]) for g in verdicts] == [("preflight", "all 7 passed", "3 ms")]
    assert board.automatic_verdicts("preflight") == verdicts
    board.apply(GateDecided(phase="rollback", gate="rollback", kind="manual", ok=True, reason="yes", by="operator"))
    assert [g.name for g in board.gates] == ["preflight", "go", "rollback"]  # unplanned gates are kept too
    board.reset()
    assert all(g.status == "pending" for g in board.gates) and board.status == "idle" and len(board.gates) == 2


def test_gatekeeper_blocks_the_worker_until_the_operator_answers():
    asked: list[GateWaiting] = []
    keeper = GateKeeper(ask=asked.append)
    waiting = GateWaiting(phase="cutover", gate="go", kind="manual", prompt="Go?")
    answers: list[tuple[bool, str]] = []
    worker = threading.Thread(target=lambda: answers.append(keeper(waiting)))
    worker.start()
    worker.join(0.1)
    assert worker.is_alive() and asked == [waiting] and keeper.pending is waiting
    assert keeper.answer(True)
    worker.join(2)
    assert answers == [(True, "approved by operator")] and keeper.pending is None
    assert not keeper.answer(False)  # nothing pending any more


def test_gatekeeper_refuse_all_releases_a_waiting_worker_and_declines_later_gates():
    keeper = GateKeeper(ask=lambda w: None)
    waiting = GateWaiting(phase="cutover", gate="go", kind="manual")
    answers: list[tuple[bool, str]] = []
    worker = threading.Thread(target=lambda: answers.append(keeper(waiting)))
    worker.start()
    worker.join(0.1)
    keeper.refuse_all("run aborted by operator")
    worker.join(2)
    assert not worker.is_alive() and answers == [(False, "run aborted by operator")]
    assert keeper(waiting) == (False, "run aborted by operator")  # no question reaches the screen any more
    keeper.reopen()
    threading.Timer(0.05, lambda: keeper.answer(False, "not now")).start()
    assert keeper(waiting) == (False, "not now")


def test_runner_cancel_stops_before_the_next_step_and_rolls_back(tmp_path):
    world = World()
    cancel = threading.Event()
    stopper = FunctionStep("b", lambda ctx: (cancel.set(), "did b")[1], undo=lambda ctx: world.calls.append("undo:b"))
    procedure = Procedure("demo", [Phase("p", [world.step("a"), stopper, world.step("c")])],
                          rollback_on_failure=True)
    with Journal(tmp_path / "j.sqlite") as journal:
        ctx = new_context(journal)
        outcome = Runner(cancel=cancel).run(procedure, ctx)
        assert world.runs() == ["run:a"] and "run:c" not in world.calls
        assert world.undos() == ["undo:b", "undo:a"]
        assert outcome.status == "rolled_back" and "cancelled by the operator before step 'c'" in outcome.summary
        assert journal.get_run(ctx.run_id).status == "rolled_back"


def test_runner_cancel_without_rollback_leaves_a_resumable_cancelled_run(tmp_path):
    world = World()
    cancel = threading.Event()
    cancel.set()
    with Journal(tmp_path / "j.sqlite") as journal:
        ctx = new_context(journal)
        outcome = Runner(cancel=cancel).run(Procedure("demo", [Phase("p", [world.step("a")])]), ctx)
        assert world.calls == [] and outcome.status == "cancelled" and not outcome.ok
        assert f"dbmigrate resume {ctx.run_id}" in outcome.error.hint
        assert journal.get_run(ctx.run_id).status == "cancelled"
