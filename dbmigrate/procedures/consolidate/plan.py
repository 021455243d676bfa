"""Capacity plan for consolidating logical shards onto multi-instance hosts.

Two halves:
- `plan(shards, hosts, settings, strategy)` is pure: demands in, placement out,
  deterministic (ties broken by name), and it refuses a plan that does not fit,
  naming the resource and the shortfall;
- `measure_shards(inventory, ...)` reads the old servers (sizes, buffer pool
  pages, query rates) and says, per figure, which estimate it used.

Resources per shard: disk (today's size plus growth), memory (its hot working
set, which becomes buffer pool) and CPU (queries per second over what one core
serves). Packing is first-fit decreasing on the dominant resource, i.e. the
largest share of the biggest host that the item needs.

Strategies:
- instance-per-group: the shards of one old server stay together in one instance
  (one replication source per instance); a group too big for any host is split;
- merge: shards of several old servers share instances (multi-source replication),
  as few instances as fit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Literal

from dbmigrate.config import HostSpec, PlanningSpec
from dbmigrate.engine.wait import Clock as EngineClock
from dbmigrate.exceptions import DbmigrateError, UsageError

Strategy = Literal["instance-per-group", "merge"]
STRATEGIES: tuple[str, ...] = ("instance-per-group", "merge")
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
        return all(self.get(r) <= free.get(r) + 1e-9 for r in RESOURCES)

    def minus(self, other: "Demand") -> "Demand":
        return Demand(self.disk - other.disk, self.memory - other.memory, self.cpu - other.cpu)


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


@dataclass
class PlannedInstance:
    name: str
    host: str
    address: str
    port: int
    datadir: str
    shards: list[str]
    sources: list[str]
    demand: Demand  # includes the per-instance memory overhead
    working_set_gb: float
    buffer_pool_mb: int = 0
    config: dict[str, str] = field(default_factory=dict)
    shard_sources: dict[str, str] = field(default_factory=dict)  # shard -> old server
    sandbox: str | None = None  # rehearsal: created in this local sandbox instead of by provisioning


@dataclass
class HostUsage:
    name: str
    capacity: Demand
    usable: Demand
    used: Demand
    instances: list[str]
    max_instances: int


@dataclass
class ConsolidationPlan:
    strategy: str
    settings: dict[str, Any]
    shards: list[ShardDemand]
    instances: list[PlannedInstance]
    hosts: list[HostUsage]

    def instance(self, name: str) -> PlannedInstance:
        for i in self.instances:
            if i.name == name:
                return i
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        def demand(d: Demand) -> dict[str, float]:
            return {r: round(d.get(r), 3) for r in RESOURCES}

        return {
            "strategy": self.strategy,
            "settings": self.settings,
            "shards": [asdict(s) for s in self.shards],
            "instances": [{**{k: v for k, v in asdict(i).items() if k != "demand"}, "demand": demand(i.demand),
                           "working_set_gb": round(i.working_set_gb, 3)} for i in self.instances],
            "hosts": [{"name": h.name, "capacity": demand(h.capacity), "usable": demand(h.usable),
                       "used": demand(h.used), "instances": h.instances, "max_instances": h.max_instances}
                      for h in self.hosts],
        }


def plan_from_dict(doc: dict[str, Any]) -> ConsolidationPlan:
    """The inverse of to_dict (plan files written by `consolidate plan --out`)."""
    try:
        shards = [ShardDemand(**s) for s in doc["shards"]]
        instances = [PlannedInstance(**{**i, "demand": Demand(**i["demand"])}) for i in doc["instances"]]
        hosts = [HostUsage(h["name"], Demand(**h["capacity"]), Demand(**h["usable"]), Demand(**h["used"]),
                           list(h["instances"]), int(h["max_instances"])) for h in doc["hosts"]]
        return ConsolidationPlan(doc["strategy"], dict(doc.get("settings", {})), shards, instances, hosts)
    except (KeyError, TypeError) as e:
        raise UsageError(f"not a consolidation plan: {e}",
                         hint="write one with: dbmigrate consolidate plan --inventory F --from-inventory --out PLAN.json")


# -- packing -------------------------------------------------------------------------

def _dominant(d: Demand, ref: Demand) -> float:
    return max((d.get(r) / ref.get(r)) if ref.get(r) > 0 else float("inf") * (d.get(r) > 0)
               for r in RESOURCES)


def _fmt(resource: str, value: float) -> str:
    if UNITS[resource] == "GB" and abs(value) < 1:
        return f"{value * 1024:.1f} MB"  # small shards and rehearsals: GB would round to 0.00
    return f"{value:.2f} {UNITS[resource]}"


def _check_totals(total: Demand, hosts: dict[str, HostSpec], settings: PlanningSpec) -> None:
    offered = Demand()
    for h in hosts.values():
        offered = offered + usable(h, settings)
    short = [(r, total.get(r) - offered.get(r)) for r in RESOURCES if total.get(r) > offered.get(r) + 1e-9]
    if short:
        parts = [f"{r}: need {_fmt(r, total.get(r))}, the hosts offer {_fmt(r, offered.get(r))} usable "
                 f"(short by {_fmt(r, s)})" for r, s in short]
        raise PlanDoesNotFit("the shards do not fit on the target hosts: " + "; ".join(parts),
                             hint=f"add hosts or capacity, or lower planning.headroom_pct "
                                  f"({settings.headroom_pct:g}%) / growth_pct ({settings.growth_pct:g}%)")


def _first_fit_decreasing(items: list[tuple[str, Demand]], capacity: Demand) -> list[list[str]]:
    """Pack named demands into as few bins of `capacity` as FFD finds (deterministic)."""
    order = sorted(items, key=lambda it: (-_dominant(it[1], capacity), it[0]))
    bins: list[tuple[list[str], Demand]] = []
    for name, d in order:
        for i, (names, used) in enumerate(bins):
            if (used + d).fits(capacity):
                names.append(name)
                bins[i] = (names, used + d)
                break
        else:
            bins.append(([name], d))
    return [sorted(names) for names, _ in bins]


def _groups(shards: list[ShardDemand], demands: dict[str, Demand], strategy: str,
            instance_cap: Demand) -> list[list[str]]:
    if strategy == "merge":
        return _first_fit_decreasing([(s.name, demands[s.name]) for s in shards], instance_cap)
    out: list[list[str]] = []
    for source in sorted({s.source for s in shards}):
        members = [(s.name, demands[s.name]) for s in shards if s.source == source]
        out.extend(_first_fit_decreasing(members, instance_cap))  # split only when one group is too big
    return out


def plan(shards: Iterable[ShardDemand], hosts: dict[str, HostSpec], settings: PlanningSpec | None = None,
         strategy: str = "instance-per-group") -> ConsolidationPlan:
    """Place shards in instances and instances on hosts, or raise PlanDoesNotFit."""
    settings = settings or PlanningSpec()
    shards = sorted(shards, key=lambda s: s.name)
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy '{strategy}'", hint=f"use one of: {', '.join(STRATEGIES)}")
    if not hosts:
        raise UsageError("no target hosts described", hint="add a `hosts:` section (cores, memory_gb, disk_gb, max_instances)")
    if not shards:
        raise UsageError("no shards to place", hint="list each old server's schemas under `shards:` in the inventory")
    names = [s.name for s in shards]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"shard names must be unique across old servers: {', '.join(dup)}")
    demands = {s.name: shard_demand(s, settings) for s in shards}
    overhead = Demand(memory=settings.instance_overhead_mb / 1024)
    total = Demand()
    for d in demands.values():
        total = total + d
    _check_totals(total, hosts, settings)

    # An instance can be no bigger than one host can hold: per resource, the biggest host's usable share.
    ref = Demand(*(max(usable(h, settings).get(r) for h in hosts.values()) for r in RESOURCES))
    cap = ref.minus(overhead)
    for s in shards:
        if not demands[s.name].fits(cap):
            worst = max(RESOURCES, key=lambda r: demands[s.name].get(r) - cap.get(r))
            raise PlanDoesNotFit(
                f"shard {s.name} alone needs {_fmt(worst, demands[s.name].get(worst))} of {worst}; no host offers "
                f"more than {_fmt(worst, cap.get(worst))} to one instance "
                f"(short by {_fmt(worst, demands[s.name].get(worst) - cap.get(worst))})",
                hint="a shard cannot be split by this tool: use a bigger host or split the schema first")

    groups = _groups(shards, demands, strategy, cap)
    group_demand = []
    for g in groups:
        d = overhead
        for n in g:
            d = d + demands[n]
        group_demand.append((g, d))

    # Instances onto hosts: first-fit decreasing on the dominant share.
    order = sorted(group_demand, key=lambda gd: (-_dominant(gd[1], ref), gd[0]))
    host_names = sorted(hosts)
    used = {h: Demand() for h in host_names}
    placed: dict[str, list[tuple[list[str], Demand]]] = {h: [] for h in host_names}
    for g, d in order:
        for h in host_names:
            if len(placed[h]) < hosts[h].max_instances and (used[h] + d).fits(usable(hosts[h], settings)):
                placed[h].append((g, d))
                used[h] = used[h] + d
                break
        else:
            raise PlanDoesNotFit(_no_host_message(g, d, hosts, settings, used, placed),
                                 hint="add a host, raise max_instances, or use --strategy merge to share instances")

    by_name = {s.name: s for s in shards}
    instances: list[PlannedInstance] = []
    usage: list[HostUsage] = []
    for h in host_names:
        spec = hosts[h]
        members = sorted(placed[h], key=lambda gd: gd[0])
        host_instances = []
        for k, (g, d) in enumerate(members, 1):
            name = f"{h}-{k}"
            ws = sum(by_name[n].working_set_bytes for n in g) / GB
            srcs = sorted({by_name[n].source for n in g})
            host_instances.append(PlannedInstance(
                name=name, host=h, address=spec.address, port=spec.base_port + k - 1,
                datadir=f"{spec.datadir_root.rstrip('/')}/{name}", shards=list(g), sources=srcs, demand=d,
                working_set_gb=ws, shard_sources={n: by_name[n].source for n in g}, sandbox=spec.sandbox))
        _share_buffer_pool(host_instances, usable(spec, settings), settings)
        for inst in host_instances:
            inst.config = instance_config(inst)
        instances.extend(host_instances)
        usage.append(HostUsage(h, Demand(spec.disk_gb, spec.memory_gb, spec.cores), usable(spec, settings),
                               used[h], [i.name for i in host_instances], spec.max_instances))
    return ConsolidationPlan(strategy, settings.model_dump(), shards, instances, usage)


def _no_host_message(group: list[str], d: Demand, hosts: dict[str, HostSpec], settings: PlanningSpec,
                     used: dict[str, Demand], placed: dict[str, list]) -> str:
    reasons = []
    for h in sorted(hosts):
        if len(placed[h]) >= hosts[h].max_instances:
            reasons.append(f"{h} already runs max_instances={hosts[h].max_instances}")
            continue
        free = usable(hosts[h], settings).minus(used[h])
        r = max(RESOURCES, key=lambda r: d.get(r) - free.get(r))
        reasons.append(f"{h} lacks {_fmt(r, d.get(r) - free.get(r))} of {r} "
                       f"(needs {_fmt(r, d.get(r))}, {_fmt(r, max(0.0, free.get(r)))} left)")
    return (f"no host can take the instance for {', '.join(group)} (disk {d.disk:.2f} GB, memory {d.memory:.2f} GB, "
            f"cpu {d.cpu:.2f} cores): " + "; ".join(reasons))


def _share_buffer_pool(instances: list[PlannedInstance], host_usable: Demand, settings: PlanningSpec) -> None:
    """Each instance's buffer pool: the host's usable memory (after per-instance overhead)
    split in proportion to working sets, so the hottest instance gets the most."""
    if not instances:
        return
    budget_mb = host_usable.memory * 1024 - settings.instance_overhead_mb * len(instances)
    total_ws = sum(i.working_set_gb for i in instances)
    for i in instances:
        share = i.working_set_gb / total_ws if total_ws > 0 else 1 / len(instances)
        # InnoDB rounds the pool to whole chunks; whole 8 MB steps keep the figures honest.
        i.buffer_pool_mb = max(settings.min_buffer_pool_mb, int(budget_mb * share) // 8 * 8)


def connection_name(source: str) -> str:
    """Replication connection name for an old server (letters, digits and _ only)."""
    return "".join(c if c.isalnum() else "_" for c in source.lower())


def instance_config(inst: PlannedInstance) -> dict[str, str]:
    """The my.cnf settings that make this instance what the plan says."""
    cfg = {"port": str(inst.port), "datadir": inst.datadir,
           "innodb_buffer_pool_size": f"{inst.buffer_pool_mb}M", "read_only": "ON",
           "log_bin": "mysql-bin", "binlog_format": "ROW", "log_slave_updates": "1"}
    if len(inst.sources) > 1:
        # Several origins write into domain 0 with their own sequence numbers; strict
        # ordering across them cannot hold on the instance that merges them.
        cfg["gtid_strict_mode"] = "0"
    for src in inst.sources:
        mine = [s for s in inst.shards if inst.shard_sources[s] == src]
        # Per-connection filter in the option file survives a restart (SET GLOBAL does not).
        cfg[f"{connection_name(src)}.replicate_wild_do_table"] = ",".join(f"{s}.%" for s in mine)
    return cfg


# -- measuring ------------------------------------------------------------------------

Clock = Callable[[], float]


def measure_shards(inventory, *, sample_s: float = 5.0, max_scan_pool_gb: float = 8.0,
                   working_set_fraction: float | None = None, sleep: Callable[[float], None] = EngineClock().sleep,
                   log: Callable[[str], None] = lambda m: None) -> list[ShardDemand]:
    """Measure every shard listed under `shards:` of the inventory's servers."""
    from dbmigrate.db.inspector import Inspector

    fraction = working_set_fraction if working_set_fraction is not None else inventory.planning.working_set_fraction
    out: list[ShardDemand] = []
    listed = [(n, s) for c in inventory.clusters.values() for n, s in c.servers.items() if s.shards]
    if not listed:
        raise UsageError(f"no server in {inventory.path} lists `shards:`",
                         hint="add `shards: [schema, ...]` to each old server that holds logical shards")
    for name, spec in listed:
        with inventory.open(name) as srv:
            insp = Inspector(srv)
            out.extend(measure_server(insp, name, list(spec.shards), sample_s=sample_s,
                                      max_scan_pool_gb=max_scan_pool_gb, fraction=fraction, sleep=sleep, log=log))
    return out


def measure_server(insp, source: str, shards: list[str], *, sample_s: float, max_scan_pool_gb: float,
                   fraction: float, sleep: Callable[[float], None], log: Callable[[str], None]) -> list[ShardDemand]:
    sizes = insp.schema_sizes(shards)
    missing = [s for s in shards if s not in sizes]
    if missing:
        raise UsageError(f"{source}: shard schema(s) {', '.join(missing)} do not exist there",
                         hint="fix the server's `shards:` list in the inventory")
    # Working set: resident buffer pool pages per schema, when scanning the pool is cheap.
    pool_gb = int(insp.variable("innodb_buffer_pool_size")) / GB
    pages: dict[str, int] | None = None
    if pool_gb <= max_scan_pool_gb:
        page = int(insp.variable("innodb_page_size"))
        pages = {s: 0 for s in shards}
        for table, n in insp.buffer_pool_pages_by_table(shards).items():
            pages[table.split(".", 1)[0]] += n * page
    # Query rate: one window of global counters, split by rows touched per schema if userstat is on.
    rates, how = split_query_rate(insp, shards, sizes, sample_s, sleep)
    log(f"{source}: {len(shards)} shards measured ({how})")
    out = []
    for s in shards:
        est = {"size": "information_schema.TABLES data+index", "qps": how}
        if pages is not None and pages[s] > 0:
            ws, est["working_set"] = pages[s], "buffer pool pages (INNODB_BUFFER_PAGE)"
        else:
            ws = int(sizes[s] * fraction)
            why = "pool not scanned (too big)" if pages is None else "no resident pages"
            est["working_set"] = f"{fraction:g} of size ({why})"
        out.append(ShardDemand(s, source, sizes[s], ws, round(rates[s], 3), est))
    return out


QUERY_COUNTERS = ("Com_select", "Com_insert", "Com_update", "Com_delete", "Com_replace")


def split_query_rate(insp, shards: list[str], sizes: dict[str, int], sample_s: float,
                     sleep: Callable[[float], None]) -> tuple[dict[str, float], str]:
    """(queries per second per shard, how it was split) from one sampling window."""
    userstat = insp.userstat_enabled()
    before = insp.status(*QUERY_COUNTERS)
    rows_before = insp.rows_touched_by_schema(shards) if userstat else {}
    sleep(sample_s)
    after = insp.status(*QUERY_COUNTERS)
    rows_after = insp.rows_touched_by_schema(shards) if userstat else {}
    qps = sum(int(after[c.lower()]) - int(before[c.lower()]) for c in QUERY_COUNTERS) / max(sample_s, 1e-6)
    if userstat:
        delta = {s: rows_after.get(s, 0) - rows_before.get(s, 0) for s in shards}
        if sum(delta.values()) > 0:
            return ({s: qps * delta[s] / sum(delta.values()) for s in shards},
                    f"Com_* over {sample_s:g}s split by TABLE_STATISTICS rows per schema")
    return split_by_size(qps, sizes, shards), f"Com_* over {sample_s:g}s split in proportion to size" + \
        ("" if userstat else " (userstat is off)")


def split_by_size(total: float, sizes: dict[str, int], shards: list[str]) -> dict[str, float]:
    weight = sum(sizes[s] for s in shards)
    return {s: (total * sizes[s] / weight if weight else total / len(shards)) for s in shards}
