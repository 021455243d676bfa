"""What every part of a schema swap reads from the run: its params, resources and roles."""

from __future__ import annotations

from typing import Any

from dbmigrate.config import load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit.resources import typed
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams
from dbmigrate.procedures.schema_swap.resources import SchemaSwapResources

# What a schema swap's steps see; `build` sees the resources as optional (`plan` has none).
SwapContext = RunContext[SchemaSwapParams, SchemaSwapResources]
SwapBuildContext = RunContext[SchemaSwapParams, "SchemaSwapResources | None"]


def plan_names(ctx: RunContext[Any, Any], params: SchemaSwapParams) -> tuple[str, list[str], str]:
    """(primary, sides, candidate) for building the procedure: from the resources in a run,
    from the inventory's declared roles for `plan` (which connects to nothing)."""
    r = typed(ctx, SchemaSwapResources)
    if r is not None:
        return r.primary, list(r.sides), r.candidate
    primary, sides = "<primary>", ["<replica>"]
    path = ctx.playbook.inventory_path if ctx.playbook is not None else None
    if path is not None:
        try:
            spec = load_inventory(path).cluster(ctx.cluster)
            primary = spec.primary_hint() or primary
            sides = [n for n in spec.servers if n != primary] or sides
        except DbmigrateError:
            pass
    candidate = params.candidate if params.candidate in sides else sides[0]
    return primary, sides, candidate


def server_of(ctx: SwapContext, name: str) -> Server:
    return ctx.resources.servers[name]


def current_primary(ctx: SwapContext, side: str) -> str:
    """Who serves writes while `side` is altered: the original primary for replicas, the
    promoted candidate for the primary's own side."""
    r = ctx.resources
    return r.candidate if side == r.primary else r.primary

