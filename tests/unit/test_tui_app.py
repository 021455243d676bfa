"""The cutover session driven by Textual's pilot, with a fake procedure whose steps record their calls."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest

from dbmigrate.engine import FunctionStep, Journal, Phase, Procedure
from dbmigrate.exceptions import ConnectionFailed
from dbmigrate.procedures import registry
from dbmigrate.procedures.contract import Prepared
from dbmigrate.tui.session import CutoverApp
from dbmigrate.tui.widgets import GateModal, KeysScreen, LagPanel, LatencyPanel, StepList, WarmPanel
from tests.unit.test_engine_support import FakeLockServer

pytestmark = pytest.mark.asyncio


class Demo:
    """A three-step procedure; `hold` makes step 'fence' block until released."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.hold = False
        self.fail_prepare: Exception | None = None
        self.entered = threading.Event()
        self.release = threading.Event()

    def step(self, name: str) -> FunctionStep:
        def run(ctx) -> str:
            self.calls.append(f"run:{name}")
            if name == "snapshot":
                ctx.metric("warm_progress", 0.5, message="replayed 1000 of 2000 queries")
                ctx.metric("hit_ratio_after", 0.987, server="db-2")
                ctx.metric("baseline_queries", 1234)
                ctx.log("candidate buffer pool is warm", "warning")
            if self.hold and name == "fence":
                self.entered.set()
                assert self.release.wait(10), "the test never released the step"
            return f"did {name}"

        def undo(ctx) -> str:
            self.calls.append(f"undo:{name}")
            return f"undid {name}"

        return FunctionStep(name, run, undo=undo)

    def build(self, ctx, params) -> Procedure:
        return Procedure("tuidemo", [
            Phase("prepare", [self.step("snapshot")]),
            Phase("cutover", [self.step("fence"), self.step("promote")]),
        ], rollback_on_failure=True)


@pytest.fixture
def demo(monkeypatch, tmp_path):
    d = Demo()
    lock_server = FakeLockServer()
    def prepare(playbook, state, *, old_gone=False):
        if d.fail_prepare is not None:
            raise d.fail_prepare
        return Prepared(lock_session=lock_server.connect())

    entry = registry.ProcedureEntry(
        "tuidemo", d.build, prepare_resources=prepare,
        gates={"healthy": lambda ctx, p: (True, "replicas healthy", {"lag": {"ok": True, "reason": "lag 3 ms"}})})
    monkeypatch.setitem(registry._REGISTRY, "tuidemo", entry)
    d.journal = tmp_path / "journal.sqlite"
    d.playbook = tmp_path / "demo.yaml"
    d.playbook.write_text(textwrap.dedent("""
        procedure: tuidemo
        cluster: main
        gates:
          - {name: healthy, kind: auto, before: cutover}
          - {name: go, kind: manual, before: cutover, prompt: "Fence db-1 and promote db-2?"}
        """))
    yield d
    d.release.set()  # never leave a worker blocked


def new_app(demo: Demo) -> CutoverApp:
    return CutoverApp(demo.playbook, journal_path=demo.journal)


async def until(pilot, predicate, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)


def step_lines(app: CutoverApp) -> dict[str, str]:
    """Step name -> its line as shown in the step list."""
    lines = app.query_one(StepList).plain.splitlines()
    return {name: next(line for line in lines if line.endswith(f". {name}") or f". {name} " in line)
            for name in ("snapshot", "fence", "promote")}


def run_status(demo: Demo, run_id: str) -> str:
    with Journal(demo.journal) as j:
        return j.get_run(run_id).status


async def test_steps_render_pending_then_done_after_the_gate_is_approved(demo):
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        lines = step_lines(app)
        assert all(line.lstrip().startswith("·") for line in lines.values()), lines
        assert demo.calls == []  # nothing runs before `g`
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        dialog = app.screen.query_one("#gate-text").render()
        shown = str(dialog)
        assert "Fence db-1 and promote db-2?" in shown
        assert "healthy: replicas healthy" in shown and "lag: lag 3 ms" in shown  # the auto gate's verdict
        assert demo.calls == ["run:snapshot"]  # the gate holds the cutover phase
        assert step_lines(app)["snapshot"].lstrip().startswith("✓")
        await pilot.press("y")
        await until(pilot, lambda: app.busy is None, what="the run to end")
        assert app.outcome is not None and app.outcome.status == "done", app.outcome
        assert demo.calls == ["run:snapshot", "run:fence", "run:promote"]
        lines = step_lines(app)
        assert all(line.lstrip().startswith("✓") for line in lines.values()), lines
        plain = app.query_one(StepList).plain
        assert "did fence" in plain and "gate go: approved by operator" in plain
        assert any("gate go passed (operator)" in line for line in app.event_log)
        assert run_status(demo, app.outcome.run_id) == "done"


async def test_declining_the_gate_stops_before_the_phase_and_undoes_what_ran(demo):
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.press("enter")  # Enter lands on decline: approving takes a deliberate `y`
        await until(pilot, lambda: app.busy is None, what="the run to end")
        assert demo.calls == ["run:snapshot", "undo:snapshot"]  # rollback_on_failure undid the prepare phase
        assert app.outcome.status == "rolled_back"
        assert "declined by operator" in app.outcome.summary
        lines = step_lines(app)
        assert lines["snapshot"].lstrip().startswith("↶")
        assert lines["fence"].lstrip().startswith("·") and lines["promote"].lstrip().startswith("·")


async def test_abort_stops_before_the_next_step_and_rolls_back(demo):
    demo.hold = True
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.press("y")
        await until(pilot, demo.entered.is_set, what="step fence to start")
        await until(pilot, lambda: step_lines(app)["fence"].lstrip().startswith("▶"), what="fence shown running")
        await pilot.press("a")
        assert app.cancel.is_set()
        demo.release.set()
        await until(pilot, lambda: app.busy is None, what="the run to end")
        # fence finished (never interrupted mid-step), promote never started, completed steps undone.
        assert demo.calls == ["run:snapshot", "run:fence", "undo:fence", "undo:snapshot"]
        assert app.outcome.status == "rolled_back"
        assert "cancelled by the operator before step 'promote'" in app.outcome.summary
        assert step_lines(app)["promote"].lstrip().startswith("·")
        assert any("abort requested" in line for line in app.event_log)


async def test_quit_is_refused_while_a_step_runs_unless_pressed_twice(demo):
    demo.hold = True
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.press("y")
        await until(pilot, demo.entered.is_set, what="step fence to start")
        await pilot.press("q")
        await pilot.pause(0.05)
        assert app.is_running and not app.cancel.is_set()  # first q only warns
        await pilot.press("q")
        await pilot.pause(0.05)
        assert app.cancel.is_set()  # the run stops at the next step boundary
        # The screen stays up and says so while the run stops and undoes what it did.
        assert app.is_running and app.stopping and app.sub_title.startswith("stopping…")
        assert any(line.startswith("stopping…") for line in app.event_log)
        demo.release.set()
        await until(pilot, lambda: not app.is_running, what="the app to exit once the run stopped")
    assert "run:promote" not in demo.calls
    assert demo.calls[-2:] == ["undo:fence", "undo:snapshot"]
    assert app.outcome is not None and app.outcome.status == "rolled_back"
    assert any("undoing" in line for line in app.event_log)


async def test_quit_when_idle_exits_at_once(demo):
    app = new_app(demo)
    async with app.run_test() as pilot:
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to exit")
    assert demo.calls == []


async def test_rollback_key_undoes_a_finished_run_after_confirmation(demo):
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.press("y")
        await until(pilot, lambda: app.busy is None, what="the run to end")
        await pilot.press("g")  # a finished run that changed things is not started again
        await pilot.pause(0.05)
        assert app.busy is None and demo.calls.count("run:snapshot") == 1
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the rollback confirmation")
        assert "Undo 3 step(s)" in str(app.screen.query_one("#gate-text").render())
        await pilot.press("y")
        await until(pilot, lambda: app.busy is None, what="the rollback to end")
        assert demo.calls[-3:] == ["undo:promote", "undo:fence", "undo:snapshot"]
        assert app.outcome.status == "rolled_back"
        assert all(line.lstrip().startswith("↶") for line in step_lines(app).values())
        assert run_status(demo, app.outcome.run_id) == "rolled_back"


async def test_run_metrics_and_logs_reach_the_panels(demo):
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        assert "no inventory" in app.query_one(LagPanel).text.plain  # nothing to sample without one
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        warm = app.query_one(WarmPanel).text.plain
        assert "50%" in warm and "replayed 1000 of 2000 queries" in warm and "hit ratio after 0.987" in warm
        assert app.query_one(WarmPanel).border_title == "warm-up of db-2"
        assert "baseline_queries: 1234" in app.query_one(LatencyPanel).text.plain
        assert "candidate buffer pool is warm" in app.event_log
        await pilot.press("n")
        await until(pilot, lambda: app.busy is None, what="the run to end")


async def test_abort_from_the_gate_dialog_declines_the_gate(demo):
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.press("a")
        await until(pilot, lambda: app.busy is None, what="the run to end")
        assert not isinstance(app.screen, GateModal) and app.cancel.is_set()
        assert demo.calls == ["run:snapshot", "undo:snapshot"]
        assert "run aborted by operator" in app.outcome.summary


async def test_a_run_that_cannot_start_says_why_and_can_be_started_again(demo):
    demo.fail_prepare = ConnectionFailed("db-1 (127.0.0.1:1) refused the connection", hint="is it running?")
    app = new_app(demo)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: app.busy is None and app.error is not None, what="the start to fail")
        assert app.board.status == "did not start" and app.outcome is None
        steps = app.query_one(StepList).plain
        assert "did not start: run " in steps and "refused before any change: db-1 (127.0.0.1:1) refused the " \
            "connection" in steps
        assert "hint: is it running?" in app.event_log
        demo.fail_prepare = None
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog of the new run")
        await pilot.press("y")
        await until(pilot, lambda: app.busy is None, what="the run to end")
        assert app.outcome.status == "done" and app.error is None


async def test_dry_run_started_by_flag_changes_nothing_and_marks_steps_dry_run(demo):
    app = CutoverApp(demo.playbook, journal_path=demo.journal, autostart=True, dry_run=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog without pressing g")
        await pilot.press("y")
        await until(pilot, lambda: app.busy is None, what="the dry run to end")
        assert demo.calls == [] and app.outcome.status == "done"
        assert all(line.lstrip().startswith("≈") for line in step_lines(app).values())
        assert "done (dry run)" in app.query_one(StepList).plain


# -- a small terminal ------------------------------------------------------------------

def inside(region, screen_size) -> bool:
    return (region.width > 0 and region.height > 0 and region.x >= 0 and region.y >= 0
            and region.right <= screen_size.width and region.bottom <= screen_size.height)


async def test_at_80x24_the_gate_dialogs_buttons_are_on_screen_even_with_many_verdicts(demo, monkeypatch):
    many = {f"check {i}": {"ok": True, "reason": f"check number {i} passed with a long enough reason"}
            for i in range(40)}
    registry._REGISTRY["tuidemo"].gates["healthy"] = lambda ctx, p: (True, "replicas healthy", many)
    app = new_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.pause(0.1)
        for button in ("#approve", "#decline"):
            region = app.screen.query_one(button).region
            assert inside(region, app.screen.size), (button, region, app.screen.size)
        await pilot.click("#approve")  # a click where the button is shown approves
        await until(pilot, lambda: app.busy is None, what="the run to end")
        assert app.outcome.status == "done"


async def test_question_mark_shows_the_keys_also_inside_the_gate_dialog(demo):
    app = new_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, KeysScreen), what="the keys list")
        shown = app.screen.plain
        for key in ("g ", "y ", "n, Enter, Esc", "a ", "r ", "q ", "Tab / Shift+Tab", "PgUp PgDn", "Home End"):
            assert key in shown, key
        assert "move between panels" in shown and "twice within 5 s" in shown
        assert sum("g start the run" in line for line in app.event_log) == 1
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, KeysScreen), what="the keys list to close")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, KeysScreen), what="the keys list over the gate")
        assert sum("g start the run" in line for line in app.event_log) == 2
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog again")
        assert app.busy == "run"  # help does not answer the gate
        await pilot.press("n")
        await until(pilot, lambda: app.busy is None, what="the run to end")


async def test_q_works_while_the_gate_dialog_is_open(demo):
    app = new_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GateModal), what="the gate dialog")
        await pilot.press("q")
        await pilot.pause(0.05)
        assert app.is_running and isinstance(app.screen, GateModal)  # the first q warns
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to exit")
    assert demo.calls == ["run:snapshot", "undo:snapshot"]  # the gate was declined, nothing else ran
    assert app.outcome.status == "rolled_back"


async def test_the_plan_names_the_real_servers_before_the_run(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    app = CutoverApp(root / "playbooks/promote-replica.yaml", journal_path=tmp_path / "j.sqlite", monitor=False)
    async with app.run_test(size=(80, 24)):
        plain = app.query_one(StepList).plain
        assert "fence db-orders-1" in plain and "open db-orders-4 for writes" in plain
        assert "<old primary>" not in plain and "<candidate>" not in plain, plain
