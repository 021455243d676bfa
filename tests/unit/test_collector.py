"""The garbage collector is held off during a fenced window and always released."""

from __future__ import annotations

import gc

import pytest

from dbmigrate.engine import FunctionStep, Journal, Phase, Procedure, Runner, collector
from tests.unit.test_engine_support import new_context


@pytest.fixture(autouse=True)
def restore_gc():
    yield
    collector.release()
    gc.enable()


def test_hold_disables_collection_until_release():
    collector.collect_then_hold()
    assert not gc.isenabled() and collector.held()
    collector.collect_then_hold()  # a second hold changes nothing
    collector.release()
    assert gc.isenabled() and not collector.held()
    collector.release()  # a release without a hold is a no-op
    assert gc.isenabled()


def test_a_collector_disabled_by_someone_else_is_left_alone():
    gc.disable()
    collector.collect_then_hold()
    assert not collector.held()
    collector.release()
    assert not gc.isenabled()  # not ours to enable


@pytest.mark.parametrize("fail", [False, True])
def test_a_run_that_ends_inside_a_held_window_releases_it(tmp_path, fail):
    def fence(ctx):
        collector.collect_then_hold()
        if fail:
            raise RuntimeError("the candidate did not catch up")
        return "fenced"

    procedure = Procedure("demo", [Phase("cutover", [FunctionStep("fence", fence, mutating=False)])])
    with Journal(tmp_path / "journal.sqlite") as journal:
        outcome = Runner().run(procedure, new_context(journal))
    assert outcome.status == ("failed" if fail else "done"), outcome.summary
    assert gc.isenabled() and not collector.held()
