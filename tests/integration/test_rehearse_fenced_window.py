"""The promote rehearsal's fenced window is the gap across the cutover itself: a stall of the
application's writes during the baseline capture, well before the fence, is reported apart,
with the step it fell in, and is not taken for the fenced window."""

from __future__ import annotations

import threading
import time

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.engine.events import StepStarted
from dbmigrate.rehearsal.rehearse import GUARD_POLICY, rehearse_promote
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.rehearsal.verify.writer import DEFAULT_TABLE

pytestmark = pytest.mark.integration

STALL_S = 3.0
NAME = "fwin"


class BaselineStall:
    """When the baseline capture starts, the verifier's table on the old primary is locked
    for STALL_S seconds from another session: the application's writes stop there."""

    def __init__(self) -> None:
        self.held: tuple[float, float] | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def __call__(self, event) -> None:
        if isinstance(event, StepStarted) and event.action == "run" and event.name == "collect baseline digest" \
                and self.thread is None:
            self.thread = threading.Thread(target=self._hold, daemon=True)
            self.thread.start()

    def _hold(self) -> None:
        try:
            inv = load_inventory(Sandboxes().find(NAME).inventory_file)
            with inv.open(f"{NAME}-1") as s:
                s.execute(f"LOCK TABLES {DEFAULT_TABLE} WRITE")
                began = time.time()
                time.sleep(STALL_S)
                s.execute("UNLOCK TABLES")
                self.held = (began, time.time())
        except BaseException as e:  # reported by the test
            self.error = e


def test_a_stall_during_the_baseline_capture_is_not_the_fenced_window():
    stall = BaselineStall()
    policy = {**GUARD_POLICY, "window_s": 5, "min_samples": 20, "min_class_samples": 5}
    report = rehearse_promote(load_seconds=1, subscribers=[stall], name=NAME,
                              playbook_extra={"guard": policy, "params": {"baseline_seconds": 5}})
    assert stall.thread is not None and stall.error is None and stall.held is not None, stall.error
    assert report["run_status"] == "done" and report["lost_writes"] == 0, report.get("verifier")
    stalled = [g for g in report["other_write_gaps"] if g["ms"] >= STALL_S * 1000 * 0.8]
    assert stalled, report["other_write_gaps"]
    assert "collect baseline digest" in stalled[0]["steps"], stalled
    fenced = report["fenced_window"]
    assert fenced is not None and fenced["gap"] is not None
    assert fenced["gap"]["start"] != stalled[0]["start"]
    assert 0 < report["fenced_ms"] < stalled[0]["ms"], (report["fenced_ms"], stalled)
    assert report["longest_write_gap_ms"] >= stalled[0]["ms"]
