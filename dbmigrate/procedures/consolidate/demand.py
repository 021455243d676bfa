"""What shards need and what hosts offer, in GB of disk and memory and in cores.

Resources per shard: disk (today's size plus growth), memory (its hot working set,
which becomes buffer pool) and CPU (queries per second over what one core serves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from dbmigrate.config import HostSpec, PlanningSpec
from dbmigrate.exceptions import DbmigrateError

RESOURCES = ("disk", "memory", "cpu")
UNITS = {"disk": "GB", "memory": "GB", "cpu": "cores"}
MB = 1024 * 1024
GB = 1024 * MB


class PlanDoesNotFit(DbmigrateError):
    """The shards need more than the target hosts offer (names the resource and by how much)."""


@dataclass(frozen=True)
class ShardDemand:
    """One logical shard (a schema) on its old server, as measured or estimated."""

    name: str
    source: str  # old server name in the inventory
    size_bytes: int  # data + index today
    working_set_bytes: int
    qps: float
    estimates: dict[str, str] = field(default_factory=dict)  # figure -> how it was obtained


@dataclass(frozen=True)
class Demand:
    """What something needs: GB of disk and memory, cores."""

    disk: float = 0.0
    memory: float = 0.0
    cpu: float = 0.0

    def __add__(self, other: "Demand") -> "Demand":
        return Demand(self.disk + other.disk, self.memory + other.memory, self.cpu + other.cpu)

    def get(self, resource: str) -> float:
        return float(getattr(self, resource))

    def fits(self, free: "Demand") -> bool:
        return (self.disk <= free.disk + 1e-9 and self.memory <= free.memory + 1e-9
                and self.cpu <= free.cpu + 1e-9)

    def minus(self, other: "Demand") -> "Demand":
        return Demand(self.disk - other.disk, self.memory - other.memory, self.cpu - other.cpu)

    def scaled(self, factor: float) -> "Demand":
        return Demand(self.disk * factor, self.memory * factor, self.cpu * factor)


def total(demands: Iterable[Demand]) -> Demand:
    out = Demand()
    for d in demands:
        out = out + d
    return out


def shard_demand(shard: ShardDemand, settings: PlanningSpec) -> Demand:
    return Demand(disk=shard.size_bytes * (1 + settings.growth_pct / 100) / GB,
                  memory=shard.working_set_bytes / GB,
                  cpu=shard.qps / settings.qps_per_core)


def usable(host: HostSpec, settings: PlanningSpec) -> Demand:
    """What the plan may use on a host: capacity minus headroom (memory also minus the OS reserve)."""
    keep = 1 - settings.headroom_pct / 100
    return Demand(disk=host.disk_gb * keep,
                  memory=max(0.0, host.memory_gb * keep - settings.reserved_memory_gb),
                  cpu=host.cores * keep)


def capacity(host: HostSpec) -> Demand:
    return Demand(host.disk_gb, host.memory_gb, host.cores)


def _share(need: float, ref: float) -> float:
    if ref > 0:
        return need / ref
    return float("inf") if need > 0 else 0.0


def dominant(d: Demand, ref: Demand) -> float:
    """The largest share of `ref` that `d` needs (infinite when `ref` has none of a resource `d` needs)."""
    return max(_share(d.disk, ref.disk), _share(d.memory, ref.memory), _share(d.cpu, ref.cpu))


def fmt(resource: str, value: float) -> str:
    if UNITS[resource] == "GB" and abs(value) < 1:
        return f"{value * 1024:.1f} MB"  # small shards and rehearsals: GB would round to 0.00
    return f"{value:.2f} {UNITS[resource]}"
