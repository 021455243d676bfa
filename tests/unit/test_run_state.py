"""Typed run state: saved whole with its version; flat keys of older runs migrate; a state
this version cannot read is refused with what to do, never misread."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from dbmigrate import __version__
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.state import TypedState
from dbmigrate.engine.step import RunState
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.kit.cutover import CutoverState
from dbmigrate.procedures.promote.resources import PromoteState
from dbmigrate.procedures.schema_swap.resources import SchemaSwapState


@pytest.fixture
def store():
    with Journal(":memory:") as j:
        j.create_run("r1", procedure="promote", cluster="c", params={}, playbook="", playbook_sha="", dry_run=False)
        yield RunState(j, "r1")


def test_fresh_run_has_defaults(store):
    s = CutoverState.load(store)
    assert s.fence_pos is None and s.candidate_opened is False and s.switched_at is None


def test_save_then_load_round_trips_with_its_version(store):
    with CutoverState.edit(store) as s:
        s.fence_pos, s.candidate_opened = "0-1-42", True
    record = store.get("cutover")
    assert record["version"] == CutoverState.VERSION and record["written_by"] == __version__
    again = CutoverState.load(store)
    assert (again.fence_pos, again.candidate_opened) == ("0-1-42", True)


def test_an_empty_fence_position_is_not_a_missing_one(store):
    with CutoverState.edit(store) as s:
        s.fence_pos = ""
    assert CutoverState.load(store).fence_pos == ""


def test_flat_keys_of_an_older_run_migrate(store):
    for key, value in {"fence_pos": "0-1-7", "candidate_opened": True, "switched_at": 12.5, "old": "db-1",
                       "new": "db-2", "swap_primary": "db-1", "swap_sides": ["db-2", "db-3"],
                       "swap_primary_altered": False, "readers_before:db-2": ["a:1", "b:2"],
                       "readers_added:db-2": ["p:3"], "readers_at_start": ["a:1", "b:2"],
                       "readers_before_final": ["x"], "fenced.db-1": True}.items():
        store[key] = value
    cut = CutoverState.load(store)
    assert (cut.fence_pos, cut.candidate_opened, cut.switched_at) == ("0-1-7", True, 12.5)
    promote = PromoteState.load(store)
    assert (promote.old, promote.new) == ("db-1", "db-2")
    swap = SchemaSwapState.load(store)
    assert swap.primary == "db-1" and swap.sides == ["db-2", "db-3"] and swap.primary_altered is False
    assert swap.readers_before == {"db-2": ["a:1", "b:2"]} and swap.readers_added == {"db-2": ["p:3"]}
    assert swap.readers_at_start == ["a:1", "b:2"]


def test_a_plain_dict_of_journaled_state_reads_too():
    assert CutoverState.load({"cutover": {"version": 1, "data": {"switched_at": 3.0}}}).switched_at == 3.0


def test_a_newer_version_is_refused_with_what_to_do(store):
    store["cutover"] = {"version": CutoverState.VERSION + 1, "written_by": "9.9.9", "data": {"fence_pos": "x"}}
    with pytest.raises(UsageError) as e:
        CutoverState.load(store)
    assert "written by dbmigrate 9.9.9 (state version 2)" in e.value.message
    assert "dbmigrate rollback RUN" in e.value.hint and "new run" in e.value.hint


class _V2(TypedState):
    KEY = "demo"
    VERSION = 2
    position: Optional[str] = None

    @classmethod
    def migrate(cls, version: int, data: dict[str, Any]) -> dict[str, Any] | None:
        return {"position": data["pos"]} if version == 1 else None


def test_a_known_older_version_is_migrated(store):
    store["demo"] = {"version": 1, "written_by": "0.1.0", "data": {"pos": "0-1-5"}}
    assert _V2.load(store).position == "0-1-5"


def test_an_unknown_older_version_is_refused(store):
    store["demo"] = {"version": 0, "written_by": "0.0.1", "data": {}}
    with pytest.raises(UsageError, match=r"written by dbmigrate 0\.0\.1 \(state version 0\)"):
        _V2.load(store)


def test_unknown_fields_are_refused_not_dropped(store):
    store["cutover"] = {"version": 1, "data": {"fence_position": "typo"}}
    with pytest.raises(Exception):
        CutoverState.load(store)


def test_what_this_process_wrote_is_read_back_without_the_journal_and_written_through(store):
    journal = store._journal
    store.set("k", {"a": [1]})
    assert journal.get_state("r1", "k") == {"a": [1]}  # written through, for resume and other processes
    reads: list[str] = []
    original = journal.get_state
    journal.get_state = lambda *a, **kw: reads.append(a[1]) or original(*a, **kw)  # type: ignore[method-assign]
    got = store.get("k")
    got["a"].append(2)  # a caller changing what it got changes nothing stored
    assert store.get("k") == {"a": [1]} and reads == []
    # A key another process writes (a live throttle) is always read from the journal.
    journal.set_state("r1", "other", {"mb_s": 5})
    assert store.get("other") == {"mb_s": 5} and reads == ["other"]
    journal.set_state("r1", "other", {"mb_s": 9})
    assert store.get("other") == {"mb_s": 9}


def test_a_typed_state_saved_then_loaded_in_one_process_is_the_one_saved(store):
    with CutoverState.edit(store) as s:
        s.fence_pos, s.switched_at = "0-1-7", 12.5
    s = CutoverState.load(store)
    assert (s.fence_pos, s.switched_at, s.candidate_opened) == ("0-1-7", 12.5, False)
    assert RunState(store._journal, "r1").get(CutoverState.KEY)["data"]["fence_pos"] == "0-1-7"  # another reader
