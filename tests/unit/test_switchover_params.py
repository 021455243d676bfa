"""Every bound of a switchover is declared once: the fence's in FenceParams, the rest in
SwitchoverParams, each with its description and limits, and each read by the kit. A procedure's
params inherit them and declare none of them again; a playbook names each the same way in every
procedure (a former name is still read, per procedure)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types
import typing
from pathlib import Path

import annotated_types
import pytest
from pydantic import BaseModel, Field, ValidationError

import dbmigrate
import dbmigrate.procedures
from dbmigrate.procedures.consolidate.context import ConsolidateParams
from dbmigrate.procedures.kit.fence import FenceParams
from dbmigrate.procedures.kit.switchover import SwitchoverParams
from dbmigrate.procedures.promote.procedure import PromoteParams
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams

KIT = Path(dbmigrate.procedures.__file__).parent / "kit"
# Consolidation is not a switchover: these bounds of its own carry the switchover's names because
# they mean the same there (with defaults of their own).
OWN_BOUNDS: dict[str, set[str]] = {"ConsolidateParams": {"catchup_timeout_s", "fence_drain_timeout_s",
                                                         "kill_app_sessions"}}
# Sent to the server, which takes whole seconds (lock_wait_timeout, the expiry event's INTERVAL).
WHOLE_SECONDS = {"fence_timeout_s", "fence_expiry_s"}


# -- the checks ---------------------------------------------------------------------------

def own_fields(cls: type) -> set[str]:
    """The fields a class declares in its own body (not inherited)."""
    return set(inspect.get_annotations(cls)) - set(getattr(cls, "__class_vars__", ()))


def redeclared(model: type[BaseModel]) -> list[str]:
    """Fields that a class of the params hierarchy declares again below the class that declared
    them (a subclass of FenceParams or SwitchoverParams that repeats one of their bounds)."""
    found = []
    line = [c for c in model.__mro__ if isinstance(c, type) and issubclass(c, FenceParams)]
    for i, cls in enumerate(line):
        for base in line[i + 1:]:
            for name in sorted(own_fields(cls) & own_fields(base)):
                found.append(f"{cls.__name__} declares {name} again ({base.__name__} does)")
    return found


def declared_beside(model: type[BaseModel], own: dict[str, set[str]] = OWN_BOUNDS) -> list[str]:
    """Bounds of a switchover declared by params that are not a switchover's (a sibling of
    SwitchoverParams), beyond the ones that class keeps as its own on purpose."""
    if issubclass(model, SwitchoverParams):
        return []
    bounds = set(SwitchoverParams.model_fields) - set(FenceParams.model_fields)
    mine = set().union(*(own_fields(c) for c in model.__mro__ if isinstance(c, type) and issubclass(c, FenceParams)))
    extra = mine & bounds - own.get(model.__name__, set())
    return [f"{model.__name__} declares the switchover's {name}; inherit SwitchoverParams" for name in sorted(extra)]


def _numeric(annotation: object) -> bool:
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    return annotation in (int, float) or any(a in (int, float) for a in args)


def undescribed(model: type[BaseModel]) -> list[str]:
    """Fields without a description, and numbers without a lower and an upper limit."""
    found = []
    for name, field in model.model_fields.items():
        if not (field.description or "").strip():
            found.append(f"{model.__name__}.{name} has no description")
        if _numeric(field.annotation):
            kinds = {type(m) for m in field.metadata}
            if not kinds & {annotated_types.Ge, annotated_types.Gt} or not kinds & {annotated_types.Le,
                                                                                    annotated_types.Lt}:
                found.append(f"{model.__name__}.{name} has no lower and upper limit")
    return found


def kit_reads() -> set[str]:
    """Every attribute name the kit reads (procedures/kit/, the switchover included)."""
    names = set()
    for path in KIT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
    return names


def unread(model: type[BaseModel], reads: set[str]) -> list[str]:
    return [f"{model.__name__}.{name} is read nowhere in the kit" for name in model.model_fields if name not in reads]


# -- the package --------------------------------------------------------------------------

def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def params_models() -> list[type[BaseModel]]:
    """PromoteParams, SchemaSwapParams, ConsolidateParams and every other params class of the
    package built on the fence's (every module of dbmigrate.procedures imported first)."""
    for info in pkgutil.walk_packages(dbmigrate.procedures.__path__, "dbmigrate.procedures."):
        importlib.import_module(info.name)
    found = {c for c in _subclasses(FenceParams) if c.__module__.startswith("dbmigrate.")}
    found |= {FenceParams, SwitchoverParams, PromoteParams, SchemaSwapParams, ConsolidateParams}
    return sorted(found, key=lambda c: c.__name__)


MODELS = params_models()


def test_every_params_class_built_on_the_fence_is_walked():
    names = {m.__name__ for m in MODELS}
    assert {"FenceParams", "SwitchoverParams", "PromoteParams", "SchemaSwapParams", "ConsolidateParams"} <= names
    assert issubclass(PromoteParams, SwitchoverParams) and issubclass(SchemaSwapParams, SwitchoverParams)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_no_bound_is_declared_twice(model):
    assert redeclared(model) == []
    assert declared_beside(model) == []


@pytest.mark.parametrize("model", [FenceParams, SwitchoverParams], ids=lambda m: m.__name__)
def test_every_bound_is_described_and_limited(model):
    assert undescribed(model) == []


def test_every_bound_of_a_switchover_is_read_by_the_kit():
    assert unread(SwitchoverParams, kit_reads()) == []


def test_what_the_server_takes_in_whole_seconds_is_an_integer():
    for name in WHOLE_SECONDS:
        annotation = FenceParams.model_fields[name].annotation
        assert annotation is int or set(typing.get_args(annotation)) == {int, type(None)}, name
    with pytest.raises(ValidationError):
        SwitchoverParams(fence_timeout_s=2.5)  # refused, not cut to 2 by the server
    assert SwitchoverParams(fence_timeout_s=3.0).fence_timeout_s == 3


# -- each check fails on a violation --------------------------------------------------------

def _redeclaring_subclass() -> type[BaseModel]:
    class Redeclaring(PromoteParams):
        catchup_timeout_s: float = 7  # type: ignore[assignment]
    return Redeclaring


def _redeclaring_fence_bound() -> type[BaseModel]:
    class FenceAgain(SwitchoverParams):
        fence_timeout_s: int = Field(9, ge=1, le=60, description="again")
    return FenceAgain


def _sibling() -> type[BaseModel]:
    class Sibling(FenceParams):
        converge_timeout_s: float = Field(3, gt=0, le=60, description="its own")
    return Sibling


def _undescribed() -> type[BaseModel]:
    class Undescribed(SwitchoverParams):
        new_bound_s: float = Field(1, gt=0, le=10)
    return Undescribed


def _unlimited() -> type[BaseModel]:
    class Unlimited(SwitchoverParams):
        new_bound_s: float = Field(1, description="no upper limit")
    return Unlimited


def _unread() -> type[BaseModel]:
    class Unread(SwitchoverParams):
        never_read_s: float = Field(1, gt=0, le=10, description="read by nobody")
    return Unread


@pytest.mark.parametrize("make, check, said", [
    (_redeclaring_subclass, redeclared, "Redeclaring declares catchup_timeout_s again (SwitchoverParams does)"),
    (_redeclaring_fence_bound, redeclared, "FenceAgain declares fence_timeout_s again (FenceParams does)"),
    (_sibling, declared_beside, "Sibling declares the switchover's converge_timeout_s"),
    (_undescribed, undescribed, "Undescribed.new_bound_s has no description"),
    (_unlimited, undescribed, "Unlimited.new_bound_s has no lower and upper limit"),
    (_unread, lambda m: unread(m, kit_reads()), "Unread.never_read_s is read nowhere in the kit"),
], ids=["redeclared-in-a-procedure", "fence-bound-redeclared", "declared-beside", "undescribed", "unlimited",
        "unread"])
def test_a_violation_is_caught(make, check, said):
    found = check(make())
    assert any(v.startswith(said) for v in found), found


# -- one name per setting; former names still read ----------------------------------------

@pytest.mark.parametrize("model, required", [(PromoteParams, {"candidate": "db2"}),
                                             (ConsolidateParams, {"plan": "plan.yaml"})],
                         ids=["promote", "consolidate"])
def test_a_former_name_is_read_under_the_one_name(model, required):
    assert model.model_validate({**required, "drain_timeout_s": 0.4}).fence_drain_timeout_s == 0.4
    assert model.model_validate({**required, "fence_drain_timeout_s": 0.4}).fence_drain_timeout_s == 0.4
    with pytest.raises(ValidationError, match="former name of fence_drain_timeout_s"):
        model.model_validate({**required, "drain_timeout_s": 0.4, "fence_drain_timeout_s": 0.5})


def test_the_schema_swap_keeps_drain_timeout_s_for_its_sides():
    p = SchemaSwapParams.model_validate({"ddl": ["ALTER TABLE app.t ADD COLUMN c INT"], "drain_timeout_s": 300,
                                         "fence_drain_timeout_s": 1})
    assert (p.drain_timeout_s, p.fence_drain_timeout_s) == (300, 1)
    assert SchemaSwapParams.RENAMED == {}


def test_the_kit_takes_the_params_as_they_are():
    grep = [str(p) for p in Path(dbmigrate.__file__).parent.rglob("*.py")
            if "settings_of(" in p.read_text() or "getattr(ctx.resources" in p.read_text()]
    assert grep == []
