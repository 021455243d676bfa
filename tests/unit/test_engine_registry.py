"""Procedure registry and the event bus contract."""

from __future__ import annotations

import threading

import pytest

from dbmigrate.engine import EventBus, Log
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures import registry
from dbmigrate.procedures.contract import Prepared


def test_register_and_get(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", {})

    @registry.register("noop")
    def build(ctx, params):
        """Does nothing, carefully."""

    entry = registry.get("noop")
    assert entry.build is build and entry.params is registry.NoParams
    assert entry.description == "Does nothing, carefully."
    assert entry.prepare_resources(None, None) == Prepared()
    with pytest.raises(ValueError, match="already registered"):
        registry.register("noop")(lambda ctx, params: None)


def test_unknown_procedure_lists_known_ones(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", {})
    registry.register("promote")(lambda ctx, params: None)
    registry.register("consolidate")(lambda ctx, params: None)
    with pytest.raises(UsageError) as caught:
        registry.get("promot")
    assert caught.value.message == "unknown procedure 'promot'; known procedures: consolidate, promote"
    assert caught.value.exit_code == 2


def test_bus_delivers_every_event_once_from_many_threads():
    bus = EventBus()
    seen = []
    bus.subscribe(seen.append)
    threads = [threading.Thread(target=lambda i=i: [bus.emit(Log(level="info", message=f"{i}-{n}"))
                                                   for n in range(200)]) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 1600 and len({e.message for e in seen}) == 1600


def test_critical_subscriber_errors_propagate_and_unsubscribe_works():
    bus = EventBus()

    def journal_down(event):
        raise OSError("disk full")

    unsubscribe = bus.subscribe(journal_down, critical=True)
    with pytest.raises(OSError):
        bus.emit(Log(level="info", message="x"))
    unsubscribe()
    bus.emit(Log(level="info", message="x"))


def test_critical_subscribers_see_each_event_before_displays():
    # A display subscribed before the journal must still see events only once journaled.
    bus = EventBus()
    order = []
    bus.subscribe(lambda e: order.append("display"))
    bus.subscribe(lambda e: order.append("journal"), critical=True)
    bus.subscribe(lambda e: order.append("tui"))
    bus.emit(Log(level="info", message="x"))
    assert order == ["journal", "display", "tui"]


def test_a_failing_journal_stops_the_event_before_any_display_shows_it():
    bus = EventBus()
    shown = []
    bus.subscribe(shown.append)

    def journal_down(event):
        raise OSError("disk full")

    bus.subscribe(journal_down, critical=True)
    with pytest.raises(OSError):
        bus.emit(Log(level="info", message="x"))
    assert shown == []
