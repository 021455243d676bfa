"""Sub-steps: a step that runs a list of steps per server, side by side in threads (a fleet's
per-server cutover). Each sub-step is journaled as a step of its own under its parent, its
statements attributed to it; rollback finds it by name and undoes it, newest first, before
its parent; a sub-step killed half way is undone when it asks to be; resume asks each
sub-step's check."""

from __future__ import annotations

import threading

import pytest

from dbmigrate.engine import FunctionStep, Phase, Procedure, Runner, StepFinished
from dbmigrate.engine.substeps import SubSteps
from tests.unit.test_engine_support import World, new_context

SERVERS = ("s1", "s2")


def fleet(world: World, *, fail_at: str | None = None) -> Procedure:
    subs = {s: [world.step(f"cut {s}: {part}", fail=f"cut {s}: {part}" == fail_at)
                for part in ("fence", "open", "reverse")] for s in SERVERS}
    for steps in subs.values():
        for st in steps:
            st.undo_if_started = True

    def run(ctx) -> str:
        errors: list[BaseException] = []

        def lane(s: str) -> None:
            try:
                SubSteps(ctx, subs[s]).run()
            except BaseException as e:  # noqa: BLE001 - handed to the step
                errors.append(e)

        threads = [threading.Thread(target=lane, args=(s,)) for s in SERVERS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return "both cut"

    def undo(ctx) -> str:
        world.calls.append("undo:fleet")
        return "fleet undone"

    parent = FunctionStep("cut over 2 servers", run, check=lambda c: all(world.state.get(f"cut {s}: reverse")
                                                                         for s in SERVERS),
                          undo=undo, undo_if_started=True, substeps=[st for s in SERVERS for st in subs[s]])
    return Procedure("fleet", [Phase("prepare", [world.step("a")]), Phase("cutover", [parent])])


def test_sub_steps_run_in_threads_are_journaled_each_with_its_own_row_and_statements(journal):
    world = World()
    ctx = new_context(journal)
    events: list = []
    ctx.bus.subscribe(events.append)
    assert Runner().run(fleet(world), ctx).status == "done"
    rows = [r for r in journal.step_rows(ctx.run_id) if r["phase"] == "cutover"]
    # every row finished (no dangling "started" row left by another thread's step)
    assert sorted((r["name"], r["status"]) for r in rows) == sorted(
        [("cut over 2 servers", "done")] + [(f"cut {s}: {p}", "done") for s in SERVERS
                                             for p in ("fence", "open", "reverse")])
    assert {r["index"] for r in rows} == {1}  # under the parent's index
    subs = [e for e in events if isinstance(e, StepFinished) and e.parent]
    assert len(subs) == 6 and {e.parent for e in subs} == {"cut over 2 servers"}
    # each sub-step's statement belongs to its own row
    by_step = journal._rows("SELECT s.name AS name, t.sql AS sql FROM statements t JOIN steps s ON s.id = t.step_id "
                            "WHERE t.run_id=?", (ctx.run_id,))
    assert all(r["sql"] == f"DO '{r['name']}'" for r in by_step), by_step


def test_rollback_undoes_each_sub_step_newest_first_then_its_parent(journal):
    world = World()
    ctx = new_context(journal)
    proc = fleet(world)
    Runner().run(proc, ctx)
    out = Runner(assume_yes=True).rollback(proc, ctx)
    assert out.status == "rolled_back", out.summary
    undos = world.undos()
    assert undos[-2:] == ["undo:fleet", "undo:a"]  # the parent after every sub-step, then the earlier phase
    for s in SERVERS:
        mine = [u for u in undos if u.startswith(f"undo:cut {s}:")]
        assert mine == [f"undo:cut {s}: reverse", f"undo:cut {s}: open", f"undo:cut {s}: fence"]
    assert proc.find_step("cutover", "cut s2: open") is not None
    assert proc.parent_of("cutover", "cut s2: open") == "cut over 2 servers"
    assert proc.parent_of("cutover", "cut over 2 servers") == ""


def test_a_killed_run_is_resumed_by_each_sub_steps_check_and_its_half_done_sub_step_undone_on_rollback(journal):
    world = World()
    ctx = new_context(journal)
    proc = fleet(world, fail_at="cut s1: open")
    out = Runner().run(proc, ctx)
    assert out.status == "failed"
    # As a kill leaves it: the failed sub-step asks to be undone even though it did not finish.
    unfinished = {r["name"] for r in journal.unfinished_steps(ctx.run_id)}
    assert "cut s1: open" in unfinished
    world.calls.clear()
    out = Runner(assume_yes=True).rollback(proc, new_context(journal, run_id=ctx.run_id))
    assert out.status == "rolled_back", out.summary
    assert "undo:cut s1: open" in world.undos() and world.undos().index("undo:cut s1: open") < \
        world.undos().index("undo:cut s1: fence")


def test_resume_skips_the_sub_steps_whose_check_finds_them_in_place(journal):
    world = World()
    ctx = new_context(journal)
    proc = fleet(world, fail_at="cut s2: reverse")
    Runner().run(proc, ctx)
    world.calls.clear()
    ok = fleet(world)  # the cause fixed
    out = Runner().run(ok, new_context(journal, run_id=ctx.run_id), resume=True)
    assert out.status == "done", out.summary
    assert world.runs() == ["run:cut s2: reverse"]
