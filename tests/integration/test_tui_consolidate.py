"""A consolidation rehearsal driven from the terminal session at 80x24: the board shows the copies'
progress, `-` lowers the throttle (as `consolidate throttle`) and the copies' pace follows, `b`
rolls one old server back (as `consolidate rollback`), and every shard ends served with 0 lost."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

import pytest

from dbmigrate.app.runs import resolve_journal_path
from dbmigrate.engine.events import utc_now_iso
from dbmigrate.engine.journal import Journal
from dbmigrate.procedures.consolidate.resources import LIVE_THROTTLE_KEY
from dbmigrate.rehearsal.consolidate import rehearse_consolidate
from dbmigrate.tui.session import CutoverApp
from dbmigrate.tui.widgets.fleet import ConfirmModal, FleetTable
from tests.unit.tui_screen import screen_rows, until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CAP_MB_S = 2.0  # the playbook's cap per copy; `-` halves it


class TuiDriver:
    """The rehearsal's run and its one-server rollback, handed to the test's terminal session."""

    def __init__(self) -> None:
        self.asks: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.answers: queue.Queue[tuple[bool, Any]] = queue.Queue()

    def run(self, playbook):
        self.asks.put(("run", playbook))
        return self._answer()

    def roll_back(self, run_id: str, server: str) -> str:
        self.asks.put(("roll_back", server))
        return self._answer()

    def _answer(self):
        ok, value = self.answers.get(timeout=900)
        if not ok:
            raise RuntimeError(f"the terminal session did not do it: {value}")
        return value


async def asked(driver: TuiDriver, what: str, worker: threading.Thread, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            kind, value = driver.asks.get_nowait()
            assert kind == what, (kind, what)
            return value
        except queue.Empty:
            assert worker.is_alive(), f"the rehearsal ended before asking to {what}"
            assert time.monotonic() < deadline, f"the rehearsal did not ask to {what} within {timeout} s"
            await asyncio.sleep(0.2)


async def test_consolidation_from_the_tui_throttle_key_paces_the_copies_and_b_rolls_one_server_back():
    driver = TuiDriver()
    out: dict[str, Any] = {}

    def rehearse() -> None:
        try:
            out["report"] = rehearse_consolidate(rows=2000, throttle_mb_s=CAP_MB_S, name="tuicon", driver=driver)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            out["error"] = exc

    worker = threading.Thread(target=rehearse, name="rehearsal", daemon=True)
    worker.start()
    app = None
    try:
        playbook = await asked(driver, "run", worker, 400)
        app = CutoverApp(playbook, monitor=False)
        async with app.run_test(size=(80, 24)) as pilot:
            fleet = app.fleet
            assert fleet is not None and len(fleet.rows) == 4 and fleet.cap_mb_s == CAP_MB_S
            await pilot.press("g")
            # Seeding progress on the board: % copied, MB/s and ETA of a running copy, on screen.
            await until(pilot, lambda: any(r.stage == "seeding" and r.pct is not None for r in fleet.rows.values()),
                        180, "a copy's first progress report")
            await pilot.pause(0.3)
            shown = "\n".join(screen_rows(app))
            assert "seeding" in shown and "MB/s · ETA" in shown and "% ·" in shown, shown
            assert f"{CAP_MB_S:g} MB/s per copy" in shown and "vs limit 250 ms" in shown, shown
            # Lower the throttle with a key: the run's live throttle (what `consolidate throttle` sets).
            pressed_at = utc_now_iso()
            waiting = {r.name for r in fleet.rows.values() if r.stage == "waiting"}
            await pilot.press("minus")
            await pilot.pause(0.2)
            assert fleet.cap_mb_s == CAP_MB_S / 2 and fleet.cap_by == "the operator"
            assert any(f"--mb-s {CAP_MB_S / 2:g}" in line for line in app.event_log), app.event_log[-5:]
            run_id = app.board.run_id
            with Journal(resolve_journal_path()) as j:
                assert j.get_state(run_id, LIVE_THROTTLE_KEY) == {"mb_s": CAP_MB_S / 2}
            await until(pilot, lambda: app.busy is None, 420, "the consolidation run to end")
            outcome = app.outcome
            assert outcome is not None and outcome.status == "done", outcome
            assert all(r.stage == "cut over" for r in fleet.rows.values()), {r.name: r.stage for r in fleet.rows.values()}
            driver.answers.put((True, outcome))

            # Roll one server back with a key, after a confirmation naming what it does.
            server = await asked(driver, "roll_back", worker, 120)
            table = app.query_one(FleetTable)
            table.focus()
            await pilot.press("home")
            for _ in range(len(fleet.rows)):
                if table.selected == server:
                    break
                await pilot.press("down")
                await pilot.pause(0.05)
            assert table.selected == server
            await pilot.press("b")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal), 10, "the rollback confirmation")
            body = app.screen.body
            assert f"back to {server}" in body and all(s in body for s in fleet.rows[server].shards), body
            assert f"dbmigrate consolidate rollback {run_id} --server {server}" in body
            await pilot.press("y")
            await until(pilot, lambda: app.busy is None and fleet.rows[server].stage in ("rolled back", "cut over"),
                        180, "the server's rollback")
            assert fleet.rows[server].stage == "rolled back", fleet.rows[server]
            driver.answers.put((True, fleet.rows[server].reason))
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, 10, "the session to close")
    except BaseException as exc:
        driver.answers.put((False, repr(exc)))
        raise
    finally:
        worker.join(600)
    assert "error" not in out, out.get("error")
    rep = out["report"]
    # Every shard served where it should be, with every acknowledged write there.
    assert rep["ok"], {k: rep[k] for k in ("summary", "lost_writes", "misrouted_shards", "checksum_differences")}
    assert rep["lost_writes"] == 0 and rep["misrouted_shards"] == 0 and rep["checksum_differences"] == 0
    assert rep["rolled_back_server"] == server and rep["fleet"][server]["stage"] == "rollback"
    for shard, s in rep["shards"].items():
        assert s["served_by"] == s["expected"] and s["lost"] == 0, (shard, s)
    # The copies' pace followed the key: progress reported well after it (the rate is measured over
    # 5 s) is within the new cap, and a copy that started after it averaged within it too.
    with Journal(resolve_journal_path()) as j:
        detail = j.run_detail(run_id)
    # From the backup's first locking stage the copy is never paced (every byte held back would hold
    # the source's commits): a rate measured over a window that saw such a stage says nothing of the cap.
    unpaced: dict[str, list[float]] = {}
    for m in detail["metrics"]:
        if m["name"] == "seed_rate_mb_s" and "not paced" in (m["labels"].get("throttle") or ""):
            unpaced.setdefault(m["labels"]["source"], []).append(_epoch(m["at"]))
    reports = [(m["at"], m["value"], m["labels"]["source"]) for m in detail["metrics"]
               if m["name"] == "seed_rate_mb_s" and "bytes" in m["labels"]
               and not any(0 <= _epoch(m["at"]) - t <= 6 for t in unpaced.get(m["labels"]["source"], []))]
    before = [rate for at, rate, _ in reports if at < pressed_at]
    assert before and max(before) > 1.3, reports  # the copies did run near the first cap
    settle = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(_epoch(pressed_at) + 7))
    after = [rate for at, rate, _ in reports if at > settle]
    # The median: a copy's short locking stage (never paced) can still lift one 5 s window.
    assert after and sorted(after)[len(after) // 2] <= CAP_MB_S / 2 * 1.4, reports
    later = [key for key in rep["seeds"] if key.split("<-")[1] in waiting]
    assert later, (waiting, rep["seeds"])
    for key in later:  # its paced reports (its average also holds the unpaced locking stages)
        source = key.split("<-")[1]
        paced = sorted(rate for at, rate, src in reports if src == source and at > settle)
        assert paced and paced[len(paced) // 2] <= CAP_MB_S / 2 * 1.4, (key, paced, rep["seeds"][key])
    assert any("throttle set by the terminal session" in log["message"] for log in detail["logs"])
    print(f"copy pace: before the key up to {max(before):.2f} MB/s; 7 s after it up to {max(after):.2f} MB/s; "
          f"copies started after it (average, locking stages included): "
          + ", ".join(f"{k} {rep['seeds'][k]['rate_mb_s']:.2f} MB/s" for k in later))


def _epoch(iso: str) -> float:
    import calendar

    return calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S"))
