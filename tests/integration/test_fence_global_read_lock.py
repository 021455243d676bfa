"""FLUSH TABLES WITH READ LOCK held on the old primary when the fence is set (a backup tool's),
on real servers: the fence gives up within its bound, nothing is opened, the old primary takes
writes again once the lock is gone, and the headline names the lock and its session, not the
clean-up that waited behind the same lock."""

from __future__ import annotations

import pytest

from dbmigrate.app.runs import start_run
from tests.integration import promote_kit as kit
from tests.integration.test_cutover_faults import Timeline

pytestmark = pytest.mark.integration

CALM_READ = "SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_current_waits'"  # the last reads before the fence


def test_a_global_read_lock_at_the_fence_is_named_as_the_cause(boxes):
    name = "ftwrl"
    state, inv = kit.topology(boxes, name)
    holder = inv.open(f"{name}-1")
    taken: list[int] = []

    def take_it() -> None:
        if not taken:
            holder.execute("FLUSH TABLES WITH READ LOCK")
            taken.append(holder.session_id)

    try:
        with Timeline() as t:
            t.on(f"{name}-1", CALM_READ, take_it)
            outcome = start_run(kit.playbook(state, name, {"fence_timeout_s": 2}), assume_yes=True)
    finally:
        holder.close()  # the backup ends: the lock with it
    assert taken, "the lock was never taken"
    assert outcome.status in ("rolled_back", "refused", "failed"), (outcome.status, outcome.summary)
    headline = outcome.summary.split("; rollback:")[0]
    assert f"{name}-1 could not be fenced: session {taken[0]}" in headline, headline
    assert "holds FLUSH TABLES WITH READ LOCK" in headline, headline
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"] or outcome.status == "rollback_failed", (outcome.summary, shape)
    boxes.down(name)
