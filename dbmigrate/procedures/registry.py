"""Where procedures are found by name.

    class PromoteParams(BaseModel):
        model_config = ConfigDict(extra="forbid")
        candidate: str
        max_lag_s: float = 5

    @register("promote", params=PromoteParams,
              gates={"replica-lag": lag_gate},          # offered to playbooks' `gates:`
              prepare_resources=connect_inventory)       # a Preparer: (playbook, state) -> Prepared
    def build(ctx: RunContext, params: PromoteParams) -> Procedure:
        return Procedure("promote", [Phase("preflight", [...]), ...])

build() must be side-effect free: `plan` calls it without any server, and
steps do their work only when the runner calls them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict

from dbmigrate.engine.step import GateVerdict, Procedure, RunContext
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.contract import Preparer, no_resources

Builder = Callable[[RunContext, Any], Procedure]
# A gate offered to playbooks: called with the run context and the validated params.
GateCheck = Callable[[RunContext, Any], "GateVerdict | tuple[bool, str]"]


class NoParams(BaseModel):
    """For procedures that take no parameters: any key in `params` is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ProcedureEntry:
    name: str
    build: Builder
    params: type[BaseModel] = NoParams
    gates: Mapping[str, GateCheck] = field(default_factory=dict)
    prepare_resources: Preparer = no_resources
    description: str = ""
    takeover: bool = False  # a run can be completed without its old primary (--without-old-primary)


_REGISTRY: dict[str, ProcedureEntry] = {}


def register(
    name: str,
    *,
    params: type[BaseModel] = NoParams,
    gates: Mapping[str, GateCheck] | None = None,
    prepare_resources: Preparer | None = None,
    description: str = "",
    takeover: bool = False,
) -> Callable[[Builder], Builder]:
    """Decorate a `build(ctx, params) -> Procedure` function to make it runnable by name."""

    def decorate(build: Builder) -> Builder:
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


def get(name: str) -> ProcedureEntry:
    from dbmigrate.procedures import load_builtin

    load_builtin(name)
    entry = _REGISTRY.get(name)
    if entry is None:
        names = known()
        listed = ", ".join(names) if names else "(none registered)"
        raise UsageError(f"unknown procedure '{name}'; known procedures: {listed}")
    return entry
