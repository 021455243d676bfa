"""How a run stops: a step that refuses (changed nothing), a signal between steps, a second
signal inside a step, and runs whose process is gone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from dbmigrate.app.runs import SignalStop, mark_orphans
from dbmigrate.engine import FunctionStep, Phase, Procedure, Runner
from dbmigrate.exceptions import RefusedWait
from tests.unit.test_engine_support import World, new_context


def refusing(name: str) -> FunctionStep:
    def run(ctx):
        raise RefusedWait("the fence waited 0.5s behind running statement(s): gave up, nothing changed")
    return FunctionStep(name, run, undo=lambda c: "undid", undo_if_started=True)


def test_a_step_that_refuses_before_any_change_ends_the_run_refused_not_rolled_back(journal):
    world = World()
    ctx = new_context(journal)
    proc = Procedure("demo", [Phase("cutover", [refusing("fence"), world.step("open")])], rollback_on_failure=True)
    outcome = Runner().run(proc, ctx)
    assert outcome.status == "refused"
    assert outcome.summary.startswith("refused before any change: step 'fence' in phase 'cutover' failed: "
                                      "the fence waited 0.5s")
    assert [(r["name"], r["status"]) for r in journal.step_rows(ctx.run_id)] == [("fence", "refused")]


def test_a_step_that_refuses_after_earlier_changes_undoes_them(journal):
    world = World()
    ctx = new_context(journal)
    proc = Procedure("demo", [Phase("prepare", [world.step("share reads")]), Phase("cutover", [refusing("fence")])],
                     rollback_on_failure=True)
    outcome = Runner().run(proc, ctx)
    assert outcome.status == "rolled_back" and "undid 1 step(s)" in outcome.summary
    assert world.calls[-1] == "undo:share reads"


def test_a_step_that_finds_what_only_the_operator_can_fix_pauses_the_run_and_undoes_nothing(journal):
    """A replica broken after the cutover: the run must not end done (exit 0) as if it were lag,
    and undoing a healthy cutover for a read replica would cost a second write outage."""
    from dbmigrate.app.errors import exit_code_of_run
    from dbmigrate.engine.runner import RunPaused

    world = World()
    ctx = new_context(journal)

    def verify(ctx):
        raise RunPaused("writes flow on db2, but replication stopped with an error on db3: SQL thread stopped: ...")

    proc = Procedure("demo", [Phase("cutover", [world.step("open"), FunctionStep("verify", verify)])],
                     rollback_on_failure=True)
    outcome = Runner().run(proc, ctx)
    assert outcome.status == "paused" and exit_code_of_run(outcome.status) == 4
    assert outcome.summary.startswith("writes flow on db2, but replication stopped")
    assert not any(c.startswith("undo:") for c in world.calls)
    assert [(r["name"], r["status"]) for r in journal.step_rows(ctx.run_id)] == [("open", "done"), ("verify", "failed")]


def test_a_cancel_before_any_change_stops_without_claiming_a_rollback(journal):
    world = World()
    ctx = new_context(journal)
    cancel = threading.Event()
    cancel.set()
    proc = Procedure("demo", [Phase("cutover", [world.step("fence")])], rollback_on_failure=True)
    outcome = Runner(cancel=cancel).run(proc, ctx)
    assert outcome.status == "cancelled"
    assert outcome.summary == "stopped before any change: cancelled by the operator before the gates of phase 'cutover'"
    assert world.calls == []


def test_a_first_signal_lets_the_step_finish_then_the_cutover_is_rolled_back(journal):
    world = World()
    ctx = new_context(journal)
    said: list[str] = []
    stop = SignalStop(said.append)
    ctx.bus.subscribe(stop.subscriber)

    def fence(c):
        stop.handle(signal.SIGTERM)  # arrives while the step runs
        world.calls.append("run:fence")
        return "fenced"

    proc = Procedure("demo", [Phase("cutover", [FunctionStep("fence", fence, undo=lambda c: "unfenced"),
                                                world.step("open")])], rollback_on_failure=True)
    outcome = Runner(cancel=stop.cancel).run(proc, ctx)
    assert outcome.status == "rolled_back" and "cancelled by the operator before step 'open'" in outcome.summary
    assert world.calls == ["run:fence"]  # finished, and open never ran
    assert said[0].startswith("SIGTERM: stopping in step 'fence' (running ")
    assert [(r["name"], r["action"], r["status"]) for r in journal.step_rows(ctx.run_id)] == [
        ("fence", "run", "done"), ("fence", "undo", "undone")]


def test_a_second_signal_interrupts_the_step_and_the_journal_names_it(journal):
    ctx = new_context(journal)
    said: list[str] = []
    stop = SignalStop(said.append)
    ctx.bus.subscribe(stop.subscriber)

    def catch_up(c):
        stop.handle(signal.SIGINT)
        stop.handle(signal.SIGINT)
        return "never"

    proc = Procedure("demo", [Phase("cutover", [FunctionStep("wait for db2", catch_up)])], rollback_on_failure=True)
    with pytest.raises(KeyboardInterrupt):
        Runner(cancel=stop.cancel).run(proc, ctx)
    assert said[1].startswith("SIGINT again: interrupting in step 'wait for db2' (running ")
    assert f"dbmigrate rollback {ctx.run_id}" in said[1]
    run = journal.get_run(ctx.run_id)
    assert run.status == "interrupted"
    assert run.summary == (f"interrupted by the operator in step 'wait for db2', which may be half done; undo "
                              f"with: dbmigrate rollback {ctx.run_id}, or continue with: dbmigrate resume {ctx.run_id}")
    assert [(r["name"], r["status"]) for r in journal.step_rows(ctx.run_id)] == [("wait for db2", "interrupted")]


def test_a_first_signal_during_a_rollback_does_not_stop_it():
    said: list[str] = []
    stop = SignalStop(said.append, rollback=True)
    stop.handle(signal.SIGTERM)
    assert not stop.cancel.is_set()
    assert said[0].startswith("SIGTERM: the rollback goes on (between steps)")


def test_runs_whose_process_is_gone_are_orphaned_with_the_commands_to_finish_them():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = f"someone@{socket.gethostname()}"
    runs = [{"id": "r-dead", "status": "running", "pid": dead.pid, "holder": here, "summary": None},
            {"id": "r-alive", "status": "running", "pid": os.getpid(), "holder": here, "summary": None},
            {"id": "r-away", "status": "running", "pid": dead.pid, "holder": "x@elsewhere", "summary": None},
            {"id": "r-done", "status": "done", "pid": dead.pid, "holder": here, "summary": "ok"}]
    marked = {r["id"]: (r["status"], r["summary"]) for r in mark_orphans(runs)}
    assert marked["r-dead"] == ("orphaned", f"its process {dead.pid} is gone; continue: dbmigrate resume r-dead, "
                                            f"or undo: dbmigrate rollback r-dead")
    assert [marked[k][0] for k in ("r-alive", "r-away", "r-done")] == ["running", "running", "done"]
