"""Shards into instances, instances onto hosts. Pure and deterministic (ties broken by name).

Shards into instances:
- instance-per-group: the shards of one old server stay together in one instance
  (one replication source per instance); a group too big for any host is split;
- merge without a target: as few instances as fit (first-fit decreasing);
- merge with a target count: each old server's shards form a unit; the biggest
  units are halved until there are as many units as instances wanted, then units go
  to the least loaded instance (longest-processing-time first), so instances come
  out about equal and most old servers feed a single instance.

Instances onto hosts: balanced. The biggest instance goes first, each to the host
with the fewest instances so far, then the lowest load after adding it, among the
hosts where it fits. Every host gets an instance while there are enough of them, and
instance counts differ by at most one where the resources allow. When balancing
cannot fit everything, first-fit decreasing is tried before giving up.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Protocol, Sequence

from dbmigrate.procedures.consolidate.demand import Demand, dominant


class PlacedShard(Protocol):
    """What placement reads of a shard: its name and the old server it comes from."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...

Named = tuple[list[str], Demand]  # (member names, summed demand)


def first_fit_decreasing(items: list[tuple[str, Demand]], cap: Demand) -> list[list[str]]:
    """Pack named demands into as few bins of `cap` as FFD finds."""
    order = sorted(items, key=lambda it: (-dominant(it[1], cap), it[0]))
    bins: list[tuple[list[str], Demand]] = []
    for name, d in order:
        for i, (names, used) in enumerate(bins):
            if (used + d).fits(cap):
                names.append(name)
                bins[i] = (names, used + d)
                break
        else:
            bins.append(([name], d))
    return [sorted(names) for names, _ in bins]


def total_of(demands: Iterable[Demand]) -> Demand:
    disk = memory = cpu = 0.0
    for d in demands:
        disk, memory, cpu = disk + d.disk, memory + d.memory, cpu + d.cpu
    return Demand(disk, memory, cpu)


def _sum(names: list[str], demands: dict[str, Demand]) -> Demand:
    return total_of(demands[n] for n in names)


def _halve(names: list[str], demands: dict[str, Demand], ref: Demand) -> tuple[list[str], list[str]]:
    """Two halves of about equal load (each shard to the lighter half, biggest first)."""
    halves: list[list[str]] = [[], []]
    loads = [Demand(), Demand()]
    for n in sorted(names, key=lambda n: (-dominant(demands[n], ref), n)):
        k = 0 if dominant(loads[0], ref) <= dominant(loads[1], ref) else 1
        halves[k].append(n)
        loads[k] = loads[k] + demands[n]
    return sorted(halves[0]), sorted(halves[1])


def group_by_source(shards: Iterable[PlacedShard], demands: dict[str, Demand], cap: Demand) -> list[list[str]]:
    by_source: dict[str, list[tuple[str, Demand]]] = {}
    for s in shards:
        by_source.setdefault(s.source, []).append((s.name, demands[s.name]))
    out: list[list[str]] = []
    for source in sorted(by_source):
        members = by_source[source]
        whole = total_of(d for _, d in members)
        # split only when one group is too big
        out.extend([sorted(n for n, _ in members)] if whole.fits(cap) else first_fit_decreasing(members, cap))
    return out


def merge_to_count(shards: Sequence[PlacedShard], demands: dict[str, Demand], cap: Demand, count: int) -> list[list[str]]:
    """About `count` equal instances, keeping each old server's shards together where possible."""
    count = max(1, min(count, len(shards)))
    # Units, heaviest first out of the heap; too few of them: halve the heaviest splittable one.
    units = [(-dominant(_sum(u, demands), cap), u) for u in group_by_source(shards, demands, cap)]
    heapq.heapify(units)
    whole: list[tuple[float, list[str]]] = []  # single-shard units: cannot be halved
    while len(units) + len(whole) < count and units:
        weight, unit = heapq.heappop(units)
        if len(unit) == 1:
            whole.append((weight, unit))
            continue
        for half in _halve(unit, demands, cap):
            heapq.heappush(units, (-dominant(_sum(half, demands), cap), half))
    # Longest processing time first: each unit to the least loaded instance it fits in.
    loads = [(0.0, k) for k in range(count)]
    bins: list[tuple[list[str], Demand]] = [([], Demand()) for _ in range(count)]
    for _, unit in sorted(units + whole, key=lambda wu: (wu[0], wu[1])):
        d = _sum(unit, demands)
        skipped = []
        while True:
            load, k = heapq.heappop(loads)
            if (bins[k][1] + d).fits(cap) or not loads:
                break  # an instance too big anyway is refused when it is placed on a host
            skipped.append((load, k))
        bins[k] = (bins[k][0] + unit, bins[k][1] + d)
        heapq.heappush(loads, (dominant(bins[k][1], cap), k))
        for item in skipped:
            heapq.heappush(loads, item)
    return [sorted(names) for names, _ in bins if names]


def balanced(instances: list[Named], hosts: list[str], room: dict[str, Demand],
             limits: dict[str, int], ref: Demand) -> dict[str, list[Named]] | None:
    """Instances onto hosts, spread evenly; None when some instance finds no host."""
    placed: dict[str, list[Named]] = {h: [] for h in hosts}
    used = {h: Demand() for h in hosts}
    for g, d in sorted(instances, key=lambda gd: (-dominant(gd[1], ref), gd[0])):
        fitting = [h for h in hosts if len(placed[h]) < limits[h] and (used[h] + d).fits(room[h])]
        if not fitting:
            return None
        h = min(fitting, key=lambda h: (len(placed[h]), dominant(used[h] + d, room[h]), h))
        placed[h].append((g, d))
        used[h] = used[h] + d
    return placed


def first_fit(instances: list[Named], hosts: list[str], room: dict[str, Demand],
              limits: dict[str, int], ref: Demand) -> dict[str, list[Named]] | None:
    """Instances onto hosts, the first host that fits each (the tightest packing this tries)."""
    placed: dict[str, list[Named]] = {h: [] for h in hosts}
    used = {h: Demand() for h in hosts}
    for g, d in sorted(instances, key=lambda gd: (-dominant(gd[1], ref), gd[0])):
        h = next((h for h in hosts if len(placed[h]) < limits[h] and (used[h] + d).fits(room[h])), None)
        if h is None:
            return None
        placed[h].append((g, d))
        used[h] = used[h] + d
    return placed
