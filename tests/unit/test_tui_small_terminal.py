"""The cutover session at 80x24, read as an operator reads it: the gate dialog's every check
can be reached with the keys and read whole, the log never loses text, panels keep to
their own rows, quitting before any change is a refusal, and a lost terminal stops the run."""

from __future__ import annotations

import os
import signal
import textwrap

import pytest

from dbmigrate.app.errors import REFUSED, exit_code_of_run
from dbmigrate.engine import FunctionStep, Journal, Phase, Procedure
from dbmigrate.procedures import registry
from dbmigrate.procedures.contract import Prepared
from dbmigrate.tui.session import CutoverApp
from dbmigrate.tui.widgets import EventLog, GateModal, LagPanel, LatencyPanel, StepList, WarmPanel
from tests.unit.test_engine_support import FakeLockServer
from tests.unit.tui_screen import compact, read_by_paging, screen_rows, squash, until

pytestmark = pytest.mark.asyncio

LONG = ("'dbm_repl'@'%' can replicate from the candidate back to the old primary once it is promoted, "
        "checked with the inventory's replication account against every server")
CHECKS = {f"check_{i:02d}": {"ok": True, "reason": f"{i:02d} {LONG}"} for i in range(14)}
CHECKS["space_ids"] = {"ok": False, "reason": "space ids differ on 2 tables: the warm-up goes by replay "
                                              "instead of the page list (not a blocker)"}
CHECKS["binlog_row_image"] = {"ok": True, "warn": True, "reason": "warning: binlog_row_image is MINIMAL on "
                                                                  "the candidate; FULL is safer for reverse replication"}


class Quiet:
    """A procedure whose gated phase comes first: nothing changes before the operator's answer."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def build(self, ctx, params) -> Procedure:
        def step(name: str) -> FunctionStep:
            return FunctionStep(name, lambda c: self.calls.append(name) or f"did {name}",
                                undo=lambda c: f"undid {name}")
        return Procedure("tuiquiet", [Phase("prepare", []), Phase("cutover", [step("fence"), step("promote")])],
                         rollback_on_failure=True)


@pytest.fixture
def quiet(monkeypatch, tmp_path):
    q = Quiet()
    lock_server = FakeLockServer()
    entry = registry.ProcedureEntry("tuiquiet", q.build,
                                    prepare_resources=lambda p, state, old_gone=False: Prepared(
                                        lock_session=lock_server.connect()),
                                    gates={"preflight": lambda ctx, p: (True, f"all {len(CHECKS)} checks run",
                                                                        CHECKS)})
    monkeypatch.setitem(registry._REGISTRY, "tuiquiet", entry)
    q.journal = tmp_path / "journal.sqlite"
    q.playbook = tmp_path / "quiet.yaml"
    q.playbook.write_text(textwrap.dedent("""
        procedure: tuiquiet
        cluster: main
        gates:
          - {name: preflight, kind: auto, before: cutover}
          - {name: go-ahead, kind: manual, before: cutover, prompt: "Fence db-1 and promote db-2 now?"}
        """))
    return q


async def open_gate(pilot) -> GateModal:
    await pilot.press("g")
    await until(pilot, lambda: isinstance(pilot.app.screen, GateModal), what="the gate dialog")
    await pilot.pause(0.1)
    return pilot.app.screen


@pytest.mark.parametrize("key", ["pagedown", "down"])
async def test_every_check_of_the_gate_can_be_reached_and_read_at_80x24(quiet, key):
    app = CutoverApp(quiet.playbook, journal_path=quiet.journal)
    async with app.run_test(size=(80, 24)) as pilot:
        gate = await open_gate(pilot)
        rows = screen_rows(app)
        assert any("PgUp/PgDn" in row and "Home/End" in row for row in rows), rows  # the dialog says how
        scroll = gate.query_one("#gate-scroll")
        assert scroll.max_scroll_y > 0  # it does not fit: the test is about scrolling
        # What needs the operator's eyes is on the first screen: the failed check, then the warned one.
        first = squash("\n".join(rows))
        assert "✗ space_ids" in first and "! binlog_row_image" in first, first
        assert first.index("space_ids") < first.index("binlog_row_image")
        seen = compact(await read_by_paging(pilot, scroll, key))
        assert compact("Fence db-1 and promote db-2 now?") in seen
        for name, verdict in CHECKS.items():
            assert compact(f"{name}: {verdict['reason']}") in seen, name
        await pilot.press("end")
        await pilot.pause(0.05)
        assert scroll.scroll_y == scroll.max_scroll_y
        await pilot.press("home")
        await pilot.pause(0.05)
        assert scroll.scroll_y == 0
        await pilot.press("n")
        await until(pilot, lambda: app.busy is None, what="the run to end")


async def test_the_log_wraps_long_lines_and_loses_no_text_at_80x24_and_132x43(quiet):
    line = "press g to start the run; " + " ".join(f"word{i}" for i in range(80)) + " END"
    for size in ((80, 24), (132, 43)):
        app = CutoverApp(quiet.playbook, journal_path=quiet.journal)
        async with app.run_test(size=size) as pilot:
            app.say(line)
            await pilot.pause(0.1)
            log = app.query_one(EventLog)
            width = log.scrollable_content_region.width
            assert all(len(row) <= width for row in log.shown_lines())
            assert compact(line) in compact("".join(log.shown_lines())), size
            # Seen on the screen itself: the last rows of the log pane hold the line's end.
            region = log.content_region
            rows = screen_rows(app)[region.y:region.bottom]
            assert any("END" in row[region.x:region.right] for row in rows), (size, rows)


async def test_panels_keep_to_their_rows_at_80x24(quiet):
    app = CutoverApp(quiet.playbook, journal_path=quiet.journal)
    async with app.run_test(size=(80, 24)) as pilot:
        from dbmigrate.engine.events import Metric
        latency = app.query_one(LatencyPanel)
        for i in range(8):
            latency.add_metric(Metric(name=f"a_rather_long_metric_name_number_{i}", value=1234.5 * i, unit="ms"))
        latency.add_probe("db-1", 2.5)
        await pilot.pause(0.1)
        widgets = [app.query_one("#left"), app.query_one(LagPanel), latency, app.query_one(EventLog)]
        regions = [w.region for w in widgets]
        for i, a in enumerate(regions):
            assert a.height > 0 and a.bottom <= 23, (widgets[i], a)
            for b in regions[i + 1:]:
                assert not a.overlaps(b), (a, b)
        assert app.query_one(EventLog).region.height >= 5  # the log keeps room to be read
        text = latency.plain
        assert "db-1: last 2.5 ms" in text and "max 2.5 ms in 1 s" in text
        assert "@@read_only" in latency.border_title  # what the round trip times


async def test_the_log_keeps_five_lines_while_the_warm_up_panel_shows_at_80x24(quiet):
    from dbmigrate.engine.events import Metric

    app = CutoverApp(quiet.playbook, journal_path=quiet.journal)
    async with app.run_test(size=(80, 24)) as pilot:
        latency, warm = app.query_one(LatencyPanel), app.query_one(WarmPanel)
        latency.add_probe("db-1", 2.5)
        latency.add_metric(Metric(name="baseline_queries", value=1234, unit=""))
        for metric in (Metric(name="warm_progress", value=0.4, labels={"server": "db-4", "message": "scanning"}),
                       Metric(name="hit_ratio_before", value=0.41, labels={"server": "db-4"}),
                       Metric(name="resident_pages_before", value=120, unit="pages", labels={"server": "db-4"})):
            warm.add_metric(metric)
        await pilot.pause(0.1)
        assert warm.region.height > 0
        log = app.query_one(EventLog)
        assert log.scrollable_content_region.height >= 5, log.region


async def test_quitting_at_the_gate_before_any_change_is_a_refusal(quiet):
    app = CutoverApp(quiet.playbook, journal_path=quiet.journal)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_gate(pilot)
        await pilot.press("q")
        await pilot.pause(0.05)
        assert app.is_running
        toast = " ".join(str(n.message) for n in app._notifications)
        assert "press q again within 5 s" in toast, toast
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the session to close")
    assert quiet.calls == []
    assert app.outcome is not None and app.outcome.status == "refused", app.outcome
    assert app.outcome.summary.startswith("refused before any change")
    assert exit_code_of_run(app.outcome.status) == REFUSED == 5


async def test_a_lost_terminal_stops_the_run_as_sigterm_does_and_the_journal_says_so(quiet):
    saved = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM)}
    marker = lambda *a: None  # noqa: E731 - what the command had installed before the session
    signal.signal(signal.SIGHUP, marker)
    try:
        app = CutoverApp(quiet.playbook, journal_path=quiet.journal, handle_signals=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await open_gate(pilot)
            os.kill(os.getpid(), signal.SIGHUP)
            await until(pilot, lambda: not app.is_running, what="the session to close after SIGHUP")
        assert signal.getsignal(signal.SIGHUP) is marker  # the command's handler is back
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert app.stopped_by == "SIGHUP" and quiet.calls == []
    assert app.outcome.status == "refused" and "stopped by SIGHUP (the terminal was lost)" in app.outcome.summary
    with Journal(quiet.journal) as j:
        logs = j.run_detail(app.outcome.run_id)["logs"]
    assert any("SIGHUP (the terminal was lost): the session stops the run" in log["message"]
               and "as on SIGTERM" in log["message"] for log in logs), logs


async def test_tui_refuses_without_a_terminal_in_one_line(tmp_path):
    import subprocess
    import sys

    playbook = tmp_path / "p.yaml"
    playbook.write_text("procedure: promote\ncluster: x\nparams: {candidate: y}\n")
    r = subprocess.run([sys.executable, "-m", "dbmigrate", "tui", str(playbook)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""  # no escape codes
    assert "dbmigrate tui needs an interactive terminal, and its stdin and stdout are not one" in r.stderr
    assert "\x1b" not in r.stderr


async def test_tui_help_names_its_argument_as_the_manual_does():
    from typer.testing import CliRunner

    from dbmigrate.cli.main import app

    r = CliRunner().invoke(app, ["tui", "--help"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.stdout
    usage = next(line for line in r.stdout.splitlines() if "Usage:" in line)
    assert usage.split()[-2:] == ["[OPTIONS]", "PLAYBOOK"], usage


async def test_the_warm_up_panel_shows_the_server_warmed_now_not_the_last_ones_figures(quiet):
    from dbmigrate.engine.events import Metric

    app = CutoverApp(quiet.playbook, journal_path=quiet.journal)
    async with app.run_test(size=(80, 24)) as pilot:
        warm = app.query_one(WarmPanel)
        for server, ratio in (("db-2", 0.987), ("db-3", None)):
            warm.add_metric(Metric(name="warm_progress", value=1.0 if ratio else 0.3,
                                   labels={"server": server, "message": f"scanning on {server}"}))
            if ratio:
                warm.add_metric(Metric(name="hit_ratio_after", value=ratio, labels={"server": server}))
        await pilot.pause(0.1)
        assert warm.border_title == "warm-up of db-3"
        assert "30%" in warm.plain and "scanning on db-3" in warm.plain
        assert "db-2" not in warm.plain and "0.987" not in warm.plain, warm.plain
