"""Use case `consolidate plan`: shard demands (measured live or read from a sizes file),
target hosts (a hosts file or the inventory's `hosts:`), a placement, and optionally
the what-if table of instances per host."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dbmigrate.config import HostSpec, Inventory, PlanningSpec, load_hosts, load_inventory
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.consolidate.demand import ShardDemand
from dbmigrate.procedures.consolidate.measure import measure_shards
from dbmigrate.procedures.consolidate.model import ConsolidationPlan
from dbmigrate.procedures.consolidate.plan import plan
from dbmigrate.procedures.consolidate.sizes import load_sizes
from dbmigrate.procedures.consolidate.whatif import WhatIfRow, parse_range, what_if


@dataclass
class PlanRequest:
    inventory: Path | None = None
    sizes: Path | None = None
    hosts: Path | None = None
    from_inventory: bool = False
    strategy: str = "instance-per-group"
    instances_per_host: int | None = None
    what_if: str | None = None
    model_host: str | None = None
    sample_s: float = 5.0
    parallel: int = 8
    headroom_pct: float | None = None
    out: Path | None = None


@dataclass
class PlanResult:
    plan: ConsolidationPlan
    what_if: list[WhatIfRow] = field(default_factory=list)
    model_host: str | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = self.plan.to_dict()
        if self.what_if:
            doc["what_if"] = {"model_host": self.model_host, "rows": [r.to_dict() for r in self.what_if]}
        return doc


def _targets(req: PlanRequest, inv: Inventory | None) -> tuple[dict[str, HostSpec], PlanningSpec]:
    if bool(req.hosts) == req.from_inventory:
        raise UsageError("give exactly one of --hosts FILE and --from-inventory",
                         hint="target hosts: cores, memory_gb, disk_gb, max_instances per host")
    if req.hosts:
        hf = load_hosts(req.hosts)
        return hf.hosts, hf.planning
    if inv is None:
        raise UsageError("--from-inventory needs --inventory FILE")
    if not inv.hosts:
        raise UsageError(f"{inv.path} has no `hosts:` section", hint="add one, or pass --hosts FILE")
    return inv.hosts, inv.planning


def _demands(req: PlanRequest, inv: Inventory | None, settings: PlanningSpec, log: Callable[[str], None]) -> list[ShardDemand]:
    if req.sizes:
        return load_sizes(req.sizes, settings.working_set_fraction)
    if inv is None:
        raise UsageError("give --inventory FILE (to measure the old servers) or --sizes FILE (measured sizes)")
    return measure_shards(inv, sample_s=req.sample_s, working_set_fraction=settings.working_set_fraction,
                          parallel=req.parallel, log=log)


def make_plan(req: PlanRequest, log: Callable[[str], None] = lambda m: None) -> PlanResult:
    """Validate everything given before measuring anything; then measure or read, place, write."""
    counts = parse_range(req.what_if) if req.what_if else []
    inv = load_inventory(req.inventory) if req.inventory else None
    host_specs, settings = _targets(req, inv)
    if req.headroom_pct is not None:
        if not 0 <= req.headroom_pct < 100:
            raise UsageError(f"--headroom-pct {req.headroom_pct:g}: give 0 to 99")
        settings = settings.model_copy(update={"headroom_pct": req.headroom_pct})
    model = None
    if counts:
        model = req.model_host or sorted(host_specs)[0]
        if model not in host_specs:
            raise UsageError(f"--model-host {model}: no such host", hint=f"hosts: {', '.join(sorted(host_specs))}")
    shards = _demands(req, inv, settings, log)
    result = PlanResult(plan(shards, host_specs, settings, req.strategy, req.instances_per_host))
    if counts and model:
        result.what_if, result.model_host = what_if(shards, host_specs[model], settings, req.strategy, counts), model
    if req.out:
        write_plan(req.out, result.plan)
    return result


def write_plan(path: Path, p: ConsolidationPlan) -> None:
    """Atomically: a reader never sees half a plan."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(p.to_dict(), indent=2) + "\n")
    os.replace(tmp, path)
