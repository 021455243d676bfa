"""Inside a fenced window the tool's own pauses are held off (the garbage collector, display
rendering) and always released: when the window closes, when a step fails, when the run ends."""

from __future__ import annotations

import gc

import pytest

from dbmigrate.engine import EventBus, FunctionStep, Journal, Log, Phase, Procedure, Runner, collector
from tests.unit.test_engine_support import new_context


@pytest.fixture(autouse=True)
def restore_gc():
    yield
    collector.release()
    gc.enable()


def test_hold_disables_collection_until_release():
    collector.hold()
    assert not gc.isenabled() and collector.held()
    collector.hold()  # a second hold changes nothing
    collector.release()
    assert gc.isenabled() and not collector.held()
    collector.release()  # a release without a hold is a no-op
    assert gc.isenabled()


def test_a_collector_disabled_by_someone_else_is_left_alone():
    gc.disable()
    collector.hold()
    assert not collector.held()
    collector.release()
    assert not gc.isenabled()  # not ours to enable


class Display:
    deferrable = True

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, event) -> None:
        self.seen.append(getattr(event, "message", type(event).__name__))


def test_a_held_bus_queues_display_events_in_order_and_delivers_the_rest_at_once():
    bus, display, journal, other = EventBus(), Display(), [], []
    bus.subscribe(display)
    bus.subscribe(lambda e: journal.append(e.message), critical=True)
    bus.subscribe(lambda e: other.append(e.message))  # not marked deferrable: a pause point, a timer
    bus.emit(Log(level="info", message="before"))
    bus.hold()
    bus.emit(Log(level="info", message="fenced"))
    bus.emit(Log(level="info", message="caught up"))
    assert display.seen == ["before"]
    assert journal == other == ["before", "fenced", "caught up"]
    bus.release()
    assert display.seen == ["before", "fenced", "caught up"]
    bus.emit(Log(level="info", message="after"))
    assert display.seen[-1] == "after"
    bus.release()  # nothing held: a no-op
    assert display.seen.count("after") == 1


@pytest.mark.parametrize("fail", [False, True])
def test_a_run_that_ends_inside_a_held_window_releases_it(tmp_path, fail):
    display = Display()

    def fence(ctx):
        ctx.hold_for_fenced_window()
        ctx.log("fenced")
        if fail:
            raise RuntimeError("the candidate did not catch up")
        return "fenced"

    procedure = Procedure("demo", [Phase("cutover", [FunctionStep("fence", fence, mutating=False)])])
    with Journal(tmp_path / "journal.sqlite") as journal:
        ctx = new_context(journal)
        ctx.bus.subscribe(display)
        outcome = Runner().run(procedure, ctx)
    assert outcome.status == ("failed" if fail else "done"), outcome.summary
    assert gc.isenabled() and not collector.held()
    assert "fenced" in display.seen and display.seen[-1] == "RunFinished"
