"""The consolidation board: its state from the run's events (no terminal), and the board at 80x24
with 40 old servers (scrolls, failed and stalled on top) and keys that say why they cannot act."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbmigrate.app.consolidate.board import FleetLayout, TargetHost, TargetInstance, fleet_layout
from dbmigrate.engine.events import GateDecided, Metric, StepFinished
from dbmigrate.tui.session import CutoverApp
from dbmigrate.tui.fleet import FleetBoard
from dbmigrate.tui.widgets.fleet import FleetTable
from tests.unit.tui_screen import screen_rows, until

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "consolidate-shards.yaml"


def layout(n: int = 3) -> FleetLayout:
    servers = {f"old-{i:02d}": [f"shard_{i}a", f"shard_{i}b"] for i in range(1, n + 1)}
    inst = {f"h{(i - 1) // 4 + 1}-{(i - 1) % 4 + 1}": TargetInstance(f"h{(i - 1) // 4 + 1}-{(i - 1) % 4 + 1}",
                                                                      f"h{(i - 1) // 4 + 1}", f"10.0.0.{i}:3306",
                                                                      2.5, 40.0, 2048) for i in range(1, n + 1)}
    names = list(inst)
    targets = {s: [inst[names[k]]] for k, s in enumerate(servers)}
    hosts = [TargetHost(h, [i for i in inst if i.startswith(h + "-")], 10.0, 15.0, 160.0, 400.0)
             for h in sorted({i.host for i in inst.values()})]
    return FleetLayout(servers, targets, hosts, inst, throttle_mb_s=8, max_source_p999_ms=50, progress_every_s=2)


def server(name: str, stage: str, status: str, text: str = "") -> Metric:
    return Metric(name="fleet_server_s", value=1, unit="s",
                  labels={"server": name, "stage": stage, "status": status, "text": text})


def progress(source: str, done: int, total: int, rate: float, throttle: str = "capped at 8 MB/s") -> Metric:
    return Metric(name="seed_rate_mb_s", value=rate, unit="MB/s",
                  labels={"source": source, "instance": "i", "bytes": str(done), "total_bytes": str(total),
                          "eta_s": "12", "source_p999_ms": "4.2", "throttle": throttle, "paused_s": "0"})


def test_a_server_goes_from_waiting_through_seeding_and_catch_up_to_cut_over_and_back():
    now = [0.0]
    board = FleetBoard(layout(), clock=lambda: now[0])
    row = board.rows["old-01"]
    assert row.stage == "waiting" and row.shards == ["shard_1a", "shard_1b"]
    board.apply(server("old-01", "seed", "started"))
    board.apply(progress("old-01", 30_000_000, 120_000_000, 6.5))
    assert row.stage == "seeding" and row.figures() == "25% · 6.5 MB/s · ETA 12 s"
    detail = board.detail("old-01")
    assert "copied 30.0 MB of ~120 MB at 6.5 MB/s" in detail and "copy: capped at 8 MB/s" in detail
    assert "source p99.9 4.2 ms" in detail and "h1-1 on h1 (10.0.0.1:3306; plan 2.5 GB mem, 40 GB disk)" in detail
    assert "source p99.9 4.2 ms (worst copy, last 2 s) vs limit 50 ms" in board.throttle_line()
    assert "8 MB/s per copy (set by playbook)" in board.throttle_line()
    board.apply(progress("old-01", 40_000_000, 120_000_000, 0.0, "paused: source p99.9 61.0 ms > 50 ms"))
    assert row.stage == "paused"
    board.apply(server("old-01", "seed", "done", "copied old-01 physically"))
    assert row.stage == "seeded"
    board.apply(GateDecided(phase="cutover", gate="caught-up", kind="auto", ok=True, reason="ok", by="auto",
                            details={"h1-1<-old-01": {"io": "Yes", "sql": "Yes", "seconds_behind": 0.4}}))
    assert row.stage == "catching up" and row.figures() == "lag 400 ms"
    board.apply(server("old-01", "cutover", "started"))
    board.apply(Metric(name="fenced_window_ms", value=83.0, unit="ms", labels={"source": "old-01"}))
    board.apply(server("old-01", "cutover", "done", "routes switched"))
    assert row.stage == "cut over" and row.figures() == "fenced 83 ms"
    board.apply(server("old-01", "rollback", "done", "routes shard_1a, shard_1b back to old-01"))
    assert row.stage == "rolled back" and "back to old-01" in board.detail("old-01")


def test_failed_and_stalled_servers_come_first_and_a_silent_copy_is_stalled():
    now = [0.0]
    board = FleetBoard(layout(6), clock=lambda: now[0])
    for name in ("old-01", "old-02", "old-03"):
        board.apply(server(name, "seed", "started"))
        board.apply(progress(name, 1, 10, 1.0))
    board.apply(server("old-04", "seed", "done"))
    board.apply(server("old-04", "cutover", "done"))
    board.apply(server("old-05", "seed", "failed", "mariadb-backup exited 1: disk full"))
    now[0] = 5.0
    board.apply(progress("old-01", 2, 10, 1.0))
    now[0] = board.stalled_after_s() + 1  # old-02 and old-03 silent since t=0, old-01 since t=5
    assert board.tick()
    order = [r.name for r in board.ordered()]
    assert order[:3] == ["old-05", "old-02", "old-03"], order
    assert board.rows["old-05"].figures() == "seed failed: mariadb-backup exited 1: disk full"
    assert board.rows["old-02"].stage == "stalled" and "no progress for" in board.rows["old-02"].reason
    assert order[-1] == "old-04"  # cut over: nothing left to watch
    assert board.rows["old-01"].stage == "seeding"


def test_a_rolled_back_run_marks_every_moved_server_rolled_back():
    board = FleetBoard(layout(2))
    board.apply(server("old-01", "cutover", "done"))
    board.apply(server("old-02", "seed", "done"))
    board.apply(StepFinished(index=3, phase="cutover", name="cut over 2 old server(s)", status="undone",
                             action="undo"))
    board.apply(StepFinished(index=2, phase="seed", name="seed", status="undone", action="undo"))
    assert board.rows["old-01"].stage == "rolled back" and board.rows["old-02"].stage == "seed undone"


def test_the_layout_comes_from_the_playbook_and_its_plan_without_a_server():
    fl = fleet_layout(PLAYBOOK)
    assert fl is not None and set(fl.servers) == {"db-legacy-1", "db-legacy-2"}
    assert all(fl.targets[s] for s in fl.servers) and fl.hosts[0].instances
    assert fleet_layout(PLAYBOOK.parent / "promote-replica.yaml") is None


@pytest.mark.asyncio
async def test_forty_servers_at_80x24_scroll_with_the_failed_on_top_and_keys_say_why_not(tmp_path):
    app = CutoverApp(PLAYBOOK, journal_path=tmp_path / "j.sqlite")
    app.fleet = FleetBoard(layout(40))
    app.fleet.apply(server("old-37", "seed", "failed", "mariadb-backup exited 1"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        table = app.query_one(FleetTable)
        assert table.row_count == 40
        rows = "\n".join(screen_rows(app))
        assert "old-37" in rows and "seed failed: mariadb-backup" in rows  # on top, on the first screen
        assert table.region.height >= 5
        table.focus()
        await pilot.press("end")
        await pilot.pause(0.1)
        assert table.scroll_y > 0 and table.selected == table.get_row_at(39)[0].plain
        assert table.selected in "\n".join(screen_rows(app))
        assert app.query_one("#fleet-detail").plain.startswith(f"{table.selected}: waiting")
        for key, why in (("plus", "+: no run in progress"), ("minus", "-: no run in progress"),
                         ("p", "p: no run in progress"), ("b", "b: no run yet")):
            await pilot.press(key)
            await until(pilot, lambda: any(line.startswith(why) for line in app.event_log), what=why)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert "roll the selected old server back" in app.screen.plain and "+ / -" in app.screen.plain


def test_the_swap_board_follows_each_side_through_its_stages():
    from dbmigrate.app.runs import plan_playbook
    from dbmigrate.engine.events import StepStarted
    from dbmigrate.tui.board import RunBoard
    from dbmigrate.tui.swap import SwapBoard

    board = RunBoard(plan_playbook(PLAYBOOK.parent / "schema-ab-swap.yaml"))
    swap = SwapBoard(board)
    assert swap.sides == ["db-orders-2", "db-orders-3", "db-orders-4", "db-orders-1"]
    assert swap.primary == "db-orders-1"
    assert [r.stage for r in swap.rows()] == ["in pool"] * 4
    assert swap.switchover().startswith("switchover: pending")

    def finish(name_part: str, status: str = "done", error: str | None = None) -> None:
        row = next(r for r in board.steps if name_part in r.name)
        board.apply(StepStarted(index=row.index, phase=row.phase, name=row.name))
        board.apply(StepFinished(index=row.index, phase=row.phase, name=row.name, status=status, error=error))

    finish("take db-orders-2 out")
    assert swap.rows()[0].stage == "out of pool"
    finish("end client sessions on db-orders-2")
    finish("apply DDL on db-orders-2")
    assert swap.rows()[0].stage == "altered"
    finish("verify the change on db-orders-2")
    finish("warm db-orders-2")
    swap.apply(Metric(name="hit_ratio_after", value=0.987, labels={"server": "db-orders-2"}))
    assert swap.rows()[0].stage == "warmed, hit 0.987"
    row = next(r for r in board.steps if r.name.startswith("put db-orders-2"))
    board.apply(StepStarted(index=row.index, phase=row.phase, name=row.name))
    assert swap.rows()[0].stage == "returning…"
    assert swap.last_step_line() == f"last step: {row.name}"
    finish("put db-orders-2 back")
    assert swap.rows()[0].stage == "back in pool"
    finish("take db-orders-3 out")
    finish("end client sessions on db-orders-3")
    finish("apply DDL on db-orders-3", "failed", "Duplicate column name 'note'")
    third = swap.rows()[1]
    assert third.stage == "failed" and "Duplicate column name 'note'" in third.last
    for name in ("fence db-orders-1", "wait for db-orders-2"):
        finish(name)
    assert swap.switchover() == "switchover: in progress, 2 of 10 steps done"


@pytest.mark.asyncio
async def test_the_consolidation_boards_log_tells_the_runs_gates_and_lines(tmp_path):
    from dbmigrate.engine.events import GateDecided, Log
    from dbmigrate.tui.messages import EngineEvent
    from dbmigrate.tui.session import CutoverApp

    app = CutoverApp(PLAYBOOK, journal_path=tmp_path / "journal.sqlite", monitor=False, stamp=lambda: "01:02:03")
    async with app.run_test(size=(80, 24)) as pilot:
        for event in (GateDecided(phase="preflight", gate="preflight", kind="auto", ok=True, by="auto",
                                  reason="every old server checked"),
                      Log(message="seeding db-legacy-1 physically", level="info"),
                      server("db-legacy-1", "seed", "started")):
            app.on_engine_event(EngineEvent(event))
        await pilot.pause(0.1)
        assert "gate preflight passed (auto): every old server checked" in app.event_log, app.event_log
        assert "seeding db-legacy-1 physically" in app.event_log
        assert app.fleet.rows["db-legacy-1"].stage == "seeding"
