"""Where procedures are found by name.

    class PromoteParams(BaseModel):
        model_config = ConfigDict(extra="forbid")
        candidate: str
        max_lag_s: float = 5

    @register("promote", params=PromoteParams,
              gates={"replica-lag": lag_gate},          # offered to playbooks' `gates:`
              prepare_resources=connect_inventory)       # a Preparer: (playbook, state) -> Prepared
    def build(ctx: RunContext[PromoteParams, PromoteResources | None], params: PromoteParams) -> Procedure:
        return Procedure("promote", [Phase("preflight", [...]), ...])

build() must be side-effect free: `plan` calls it without any server (its context holds no
resources, hence `| None`), and steps do their work only when the runner calls them, each
with a `RunContext[PromoteParams, PromoteResources]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict

from dbmigrate.engine.step import GateVerdict, Procedure, RunContext
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.contract import Preparer, no_resources

P = TypeVar("P", bound=BaseModel)  # the procedure's params model
R = TypeVar("R")  # the resources its preparer hands to a run

# Builds the procedure; `plan` calls it with no resources.
Builder = Callable[[RunContext[P, "R | None"], P], Procedure]
# A gate offered to playbooks: called with the run context and the validated params.
GateCheck = Callable[[RunContext[P, R], P], "GateVerdict | tuple[bool, str]"]


class NoParams(BaseModel):
    """For procedures that take no parameters: any key in `params` is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ProcedureEntry(Generic[P, R]):
    name: str
    build: Builder[P, R]
    params: type[P] = NoParams  # type: ignore[assignment]  # P is NoParams when no model is given
    gates: Mapping[str, GateCheck[P, R]] = field(default_factory=dict)
    prepare_resources: Preparer = no_resources
    description: str = ""
    takeover: bool = False  # a run can be completed without its old primary (--without-old-primary)


_REGISTRY: dict[str, ProcedureEntry[Any, Any]] = {}


def register(
    name: str,
    *,
    params: type[P] = NoParams,  # type: ignore[assignment]  # P is NoParams when no model is given
    gates: Mapping[str, GateCheck[P, R]] | None = None,
    prepare_resources: Preparer | None = None,
    description: str = "",
    takeover: bool = False,
) -> Callable[[Builder[P, R]], Builder[P, R]]:
    """Decorate a `build(ctx, params) -> Procedure` function to make it runnable by name."""

    def decorate(build: Builder[P, R]) -> Builder[P, R]:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.build is not build:
            raise ValueError(f"procedure {name!r} is already registered by {existing.build.__module__}")
        _REGISTRY[name] = ProcedureEntry(
            name=name,
            build=build,
            params=params,
            gates=dict(gates or {}),
            prepare_resources=prepare_resources or no_resources,
            description=description or (build.__doc__ or "").strip().split("\n")[0],
            takeover=takeover,
        )
        return build

    return decorate


def known() -> list[str]:
    from dbmigrate.procedures import load_builtin

    load_builtin()
    return sorted(_REGISTRY)


def get(name: str) -> ProcedureEntry[Any, Any]:
    from dbmigrate.procedures import load_builtin

    load_builtin(name)
    entry = _REGISTRY.get(name)
    if entry is None:
        names = known()
        listed = ", ".join(names) if names else "(none registered)"
        raise UsageError(f"unknown procedure '{name}'; known procedures: {listed}")
    return entry
