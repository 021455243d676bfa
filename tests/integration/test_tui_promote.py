"""The cutover session on real servers: promote through the TUI, approve the gate, then roll back with `r`."""

from __future__ import annotations

import time

import pytest

from dbmigrate.routing import router_for
from dbmigrate.tui.app import CutoverApp
from dbmigrate.tui.widgets import GateModal, LagPanel, LatencyPanel, StepList
from tests.integration import promote_kit as kit

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def until(pilot, predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await pilot.pause(0.05)


def writer_port(inv, name: str) -> str:
    return router_for(inv, name).current().writer


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
            await until(pilot, lambda: isinstance(app.screen, GateModal), 30, "the go-ahead gate")
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
            await until(pilot, lambda: isinstance(app.screen, GateModal), 10, "the rollback confirmation")
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
