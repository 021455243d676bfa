"""Copying or wrapping a step keeps every one of its fields (a dropped undo_if_started
once left a fenced primary read-only after a rollback)."""

from __future__ import annotations

import inspect

import pytest

from dbmigrate.engine.step import STEP_FIELDS, FunctionStep, Step, replaced, with_context


def _distinct_value(field: str):
    """A value for `field` that differs from its default, recognisable after the copy."""
    if field == "name":
        return "a distinct name"
    default = getattr(Step, field, None)
    if isinstance(default, bool):
        return not default
    return lambda ctx, _field=field: (_field, ctx)


def _source_step(field: str) -> FunctionStep:
    step = FunctionStep("source", lambda ctx: "ran")
    setattr(step, field, _distinct_value(field))
    return step


def test_fields_cover_the_class():
    assert set(Step.__annotations__) | {"run"} == set(STEP_FIELDS)
    # FunctionStep can be built with each field, so a procedure can spell any of them.
    accepted = set(inspect.signature(FunctionStep.__init__).parameters) - {"self"}
    assert accepted == set(STEP_FIELDS)


@pytest.mark.parametrize("field", STEP_FIELDS)
def test_replaced_keeps_each_field(field):
    source = _source_step(field)
    copy = replaced(source)
    assert getattr(copy, field) == getattr(source, field)


@pytest.mark.parametrize("field", STEP_FIELDS)
def test_replaced_changes_only_what_it_is_told(field):
    source = _source_step(field)
    copy = replaced(source, name="renamed") if field != "name" else replaced(source, mutating=False)
    assert getattr(copy, field) == getattr(source, field)


@pytest.mark.parametrize("field", STEP_FIELDS)
def test_with_context_keeps_each_field(field):
    source = _source_step(field)
    copy = with_context(source, lambda ctx: ("adapted", ctx))
    value = getattr(copy, field)
    original = getattr(source, field)
    if callable(original) and field != "name":
        assert value("ctx") == original(("adapted", "ctx"))
    else:
        assert value == original


def test_unknown_field_is_refused():
    with pytest.raises(TypeError, match="not step fields"):
        replaced(FunctionStep("x", lambda c: ""), undo_if_begun=True)
