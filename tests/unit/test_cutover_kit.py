"""The cutover steps every procedure gets from the kit: the fence is undone even when
its step did not finish, in promote and in a schema swap alike (a schema swap once ran
rebuilt copies of these steps that had lost that flag)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbmigrate.app.runs import plan_playbook
from dbmigrate.procedures.kit import cutover as kit

ROOT = Path(__file__).resolve().parents[2]


def _cutover():
    return kit.Cutover(old="p1", new="r1", switchover=lambda ctx, record, routed: None)


def test_the_kit_fence_is_undone_even_when_it_did_not_finish():
    fence = kit.fence_step(_cutover())
    assert fence.undo_if_started and fence.undo is not None and fence.check is not None


def test_every_cutover_step_that_changes_something_can_be_undone():
    steps = kit.cutover_steps(_cutover())
    assert [s.name for s in steps] == ["fence p1", "wait for r1 to catch up", "switch router", "open r1 for writes",
                                       "save router state", "end application sessions on p1",
                                       "reset replication on r1", "repoint replicas", "reverse replication p1 <- r1"]
    no_undo = [s.name for s in steps if s.mutating and s.undo is None]
    # Ending sessions of a fenced server needs no undo; the saved route follows the live one
    # (a rollback switches the router back and saves again).
    assert no_undo == ["save router state", "end application sessions on p1"]


@pytest.mark.parametrize("playbook, phase", [("promote-replica.yaml", "cutover"), ("schema-ab-swap.yaml", "switchover")])
def test_shipped_procedures_fence_with_the_kit_step(playbook, phase):
    procedure = plan_playbook(ROOT / "playbooks" / playbook)
    fence = procedure.phase(phase).steps[0]
    assert fence.name.startswith("fence ")
    assert fence.undo_if_started, f"{playbook}: the fence would stay in place after a failed fence step"
    kinds = {s.name.split(" ")[0]: s.undo_if_started for s in procedure.phase(phase).steps}
    assert [k for k, v in kinds.items() if v] == ["fence"]
