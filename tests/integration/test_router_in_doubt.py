"""A router change in doubt, on real servers behind a real HAProxy under the zero-loss writer:
HAProxy frozen (SIGSTOP) across the writer flip keeps the flip in its buffer and runs it when
it wakes. The run must neither say "router not changed" nor leave writes routed to the
read-only candidate: it waits for the flip, reads the route and sends writes back (or stops in
doubt, and the rollback does it). Writes succeed again within a bound; never two writable."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from dbmigrate.app.runs import rollback_run, start_run
from dbmigrate.rehearsal.writable_monitor import WritableMonitor
from tests.integration import promote_kit as kit
from tests.integration.test_cutover_faults import CATCH_UP, Timeline, _last_run, _replicating_from

pytestmark = pytest.mark.integration

FROZEN_S = 8.0


def test_haproxy_frozen_across_the_flip_then_writes_flow_again_and_never_two_writable(boxes):
    name = "hafrz"
    state, inv = kit.topology(boxes, name)
    pid = state.haproxy["pid"]
    v = kit.start_verifier(inv, name)
    monitor = WritableMonitor.for_cluster(inv, name).start()
    frozen_at: list[float] = []

    def freeze() -> None:  # the candidate has caught up: the flip is next, into a frozen HAProxy
        os.kill(pid, signal.SIGSTOP)
        frozen_at.append(time.monotonic())
        threading.Timer(FROZEN_S, os.kill, (pid, signal.SIGCONT)).start()

    try:
        with Timeline() as t:
            t.on(f"{name}-new", CATCH_UP, freeze)
            outcome = start_run(kit.playbook(state, name), assume_yes=True)
        assert frozen_at, "the catch-up was never sent"
        if outcome.status == "rollback_failed":
            time.sleep(max(0.0, frozen_at[0] + FROZEN_S + 0.5 - time.monotonic()))
            outcome = rollback_run(outcome.run_id, assume_yes=True)
        done_at = time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert outcome.status == "rolled_back", outcome.summary
    undone = " ".join(s["sentence"] or "" for s in _last_run(outcome.run_id)["steps"] if s["action"] == "undo")
    assert "router not changed" not in undone, undone
    # Writes flow again through HAProxy, to the old primary, within the freeze and a margin.
    assert done_at - frozen_at[0] <= FROZEN_S + 6, done_at - frozen_at[0]
    report = kit.finish_verifier(v, inv, name)
    seen = monitor.stop()
    assert report.lost_total == 0, report.summary()
    assert seen.two_writable_moments == 0, seen.to_dict()
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"]
    _replicating_from(shape, f"{name}-1", [f"{name}-2", f"{name}-3", f"{name}-new"])
    boxes.down(name)
