"""`dbmigrate rehearse promote --tui`: the rehearsal's run in the terminal session, driven here by
Textual's pilot at 80x24 as a newcomer would (y at the go-ahead, watch it finish, q), on a real
sandbox under load; the rehearsal's verdict (0 lost writes) is printed after the session closes."""

from __future__ import annotations

import asyncio
import time

import pytest
from typer.testing import CliRunner

import dbmigrate.cli.rehearse as rehearse_cli
from dbmigrate.cli.main import app as cli
from dbmigrate.tui.rehearsal import SessionDriver
from dbmigrate.tui.session import CutoverApp
from dbmigrate.tui.widgets import GateModal, LagPanel
from tests.unit.tui_screen import screen_rows, until

pytestmark = pytest.mark.integration

NAME = "tuirh"


def test_rehearse_promote_tui_runs_to_done_in_the_session_then_prints_the_verdict(monkeypatch):
    seen: dict = {}

    async def newcomer(app: CutoverApp) -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, GateModal), 120, "the go-ahead gate")
            await pilot.pause(0.2)
            seen["gate"] = "\n".join(screen_rows(app))
            await pilot.press("y")
            await until(pilot, lambda: app.busy is None and app.board.status != "running", 120, "the run to end")
            await until(pilot, lambda: app.query_one(LagPanel).sample is not None, 10, "a lag sample")
            await pilot.pause(0.3)
            seen["end"] = "\n".join(screen_rows(app))
            seen["status"], seen["steps"] = app.board.status, app.board.counts()
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, 10, "the session to close")
        seen["closed_at"] = time.monotonic()

    def drive(app: CutoverApp) -> None:
        asyncio.run(newcomer(app))

    # The terminal check is the command line's own (tests/unit/test_rehearse_tui.py): here the
    # session is Textual's headless one, driven by the pilot.
    monkeypatch.setattr(rehearse_cli, "session_driver", lambda tui: SessionDriver(drive) if tui else None)
    r = CliRunner().invoke(cli, ["rehearse", "promote", "--tui", "--no-guard", "--load-seconds", "1",
                                 "--name", NAME], env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.exit_code, r.stdout[-3000:], r.stderr[-2000:], r.exception)
    assert "operator go-ahead" in seen["gate"] and "approve (y)" in seen["gate"], seen["gate"]
    assert seen["status"] == "done" and set(seen["steps"]) <= {"done", "skipped"}, seen
    assert "done: promote finished" in seen["end"] and f"behind {NAME}-new" in seen["end"], seen["end"]
    # The rehearsal's verdict comes after the session: 0 lost of what was acknowledged, the candidate primary.
    out = r.stdout
    assert "lost: 0; run" in out and " done" in out, out[-3000:]
    assert f"new primary: {NAME}-new" in out, out[-3000:]
