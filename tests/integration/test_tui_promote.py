"""The cutover session on real servers: promote through the TUI, approve the gate, then roll back with `r`."""

from __future__ import annotations

import time

import pytest

from dbmigrate.routing import router_for
from dbmigrate.tui.session import CutoverApp
from dbmigrate.app.errors import exit_code_of_run
from dbmigrate.tui.widgets import EventLog, GateModal, LagPanel, LatencyPanel, StepList
from tests.unit.tui_screen import compact, read_by_paging
from tests.integration import promote_kit as kit

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def until(pilot, predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await pilot.pause(0.05)


def writer_port(inv, name: str) -> str:
    return router_for(inv, name).current().writer


async def test_promote_gate_at_80x24_every_check_readable_then_q_twice_refuses(boxes, tmp_path):
    """A new operator at 80x24: every check of the gate reached with PageDown and read whole, no log
    line cut, and q twice at the gate before any change is a refusal (exit 5), the screen saying
    that the second q must come within 5 s."""
    name = "tuismall"
    state, inv = kit.topology(boxes, name)
    playbook = kit.playbook(state, name, gates=[{"name": "go-ahead", "kind": "manual", "before": "cutover",
                                                 "prompt": f"Fence {name}-1 and promote {name}-new?"}])
    app = CutoverApp(playbook, journal_path=tmp_path / "journal.sqlite", monitor_interval_s=0.3)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("g")
            await until(pilot, lambda: isinstance(app.screen, GateModal), 60, "the go-ahead gate")
            await pilot.pause(0.2)
            preflight = next(g for g in app.board.gates if g.name == "preflight")
            checks = {k: v for k, v in preflight.details.items() if isinstance(v, dict) and "reason" in v}
            assert len(checks) >= 10, checks  # the switchover's whole preflight
            seen = compact(await read_by_paging(pilot, app.screen.query_one("#gate-scroll")))
            assert compact(f"Fence {name}-1 and promote {name}-new?") in seen
            for check, verdict in checks.items():
                assert compact(f"{check}: {verdict['reason']}") in seen, (check, seen)
            assert kit.writers(kit.shape(inv, name)) == [f"{name}-1"]
            # No log line loses text: each one is in the pane whole, wrapped at the pane's width.
            log = app.query_one(EventLog)
            shown = compact("".join(log.shown_lines()))
            width = log.scrollable_content_region.width
            assert all(len(row) <= width for row in log.shown_lines())
            for line in app.event_log:
                assert compact(line) in shown, line
            await pilot.press("q")
            await pilot.pause(0.1)
            assert "press q again within 5 s" in " ".join(str(n.message) for n in app._notifications)
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, 60, "the session to close")
        assert app.outcome is not None and app.outcome.status == "refused", app.outcome
        assert app.outcome.summary.startswith("refused before any change"), app.outcome.summary
        assert exit_code_of_run(app.outcome.status) == 5
        after = kit.shape(inv, name)
        assert kit.writers(after) == [f"{name}-1"]
        assert all(after[r]["source"] == f"{name}-1" and after[r]["running"] for r in after if r != f"{name}-1")
    finally:
        boxes.down(name)


async def test_promote_from_the_tui_then_roll_back_with_r(boxes, tmp_path):
    name = "tuipro"
    state, inv = kit.topology(boxes, name)
    playbook = kit.playbook(state, name, gates=[{"name": "go-ahead", "kind": "manual", "before": "cutover",
                                                 "prompt": f"Fence {name}-1 and promote {name}-new?"}])
    app = CutoverApp(playbook, journal_path=tmp_path / "journal.sqlite", monitor_interval_s=0.3)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: app.query_one(LagPanel).history, 15, "a first lag sample")
            assert set(app.query_one(LagPanel).history) == {f"{name}-2", f"{name}-3", f"{name}-new"}
            assert app.query_one(LatencyPanel).writer == f"{name}-1"

            await pilot.press("g")
            await until(pilot, lambda: isinstance(app.screen, GateModal) and app.screen.query("#gate-text"), 30,
                        "the go-ahead gate")  # pushed, then composed: its text is there a moment later
            shown = str(app.screen.query_one("#gate-text").render())
            assert f"Fence {name}-1 and promote {name}-new?" in shown
            assert "preflight: all" in shown  # the preflight gate's verdict is in front of the operator
            assert kit.writers(kit.shape(inv, name)) == [f"{name}-1"]  # nothing fenced before the answer
            await pilot.press("y")
            await until(pilot, lambda: app.busy is None, 60, "the promote run to end")
            assert app.outcome is not None and app.outcome.status == "done", app.outcome
            statuses = {row.name: row.status for row in app.board.steps}
            assert set(statuses.values()) <= {"done", "skipped"} and statuses[f"fence {name}-1"] == "done", statuses
            plain = app.query_one(StepList).plain
            assert f"✓  1. fence {name}-1" in plain and "<old primary>" not in plain  # real names replace the plan's
            after = kit.shape(inv, name)
            assert kit.writers(after) == [f"{name}-new"]
            assert after[f"{name}-1"] == {"read_only": True, "source": f"{name}-new", "running": True}
            new_port = str(inv.cluster(name).servers[f"{name}-new"].port)
            assert writer_port(inv, name).endswith(new_port)
            # The panels follow the writer to its new home.
            await until(pilot, lambda: app.query_one(LatencyPanel).writer == f"{name}-new", 10, "the new writer")

            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, GateModal) and app.screen.query("#gate-text"), 10,
                        "the rollback confirmation")
            assert "Undo" in str(app.screen.query_one("#gate-text").render())
            await pilot.press("y")
            await until(pilot, lambda: app.busy is None, 60, "the rollback to end")
            assert app.outcome.status == "rolled_back", app.outcome
            assert any(row.status == "undone" for row in app.board.steps)
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, 5, "the session to close")
        final = kit.shape(inv, name)
        assert kit.writers(final) == [f"{name}-1"]
        for replica in (f"{name}-2", f"{name}-3", f"{name}-new"):
            assert final[replica]["source"] == f"{name}-1" and final[replica]["running"], (replica, final[replica])
        assert writer_port(inv, name).endswith(str(inv.cluster(name).servers[f"{name}-1"].port))
    finally:
        boxes.down(name)
