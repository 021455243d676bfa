"""The consolidation plan as data: instances with their names, ports and settings, host usage.

The plan is what provisioning, seeding and cutover read, so each instance carries
everything that later steps use: its name (`HOST-SLOT`), port (`base_port + SLOT - 1`),
server_id (`server_id_base + ordinal`), datadir, socket and the option group
(`[mariadbd.NAME]`) that makes it what the plan says. Nothing downstream re-derives
these: a port in the plan is the port the instance listens on.

Plan files: `version` 2 adds `server_id`, `socket`, `slot` per instance and
`warnings`; a version 1 file (without them) still loads, its missing fields empty.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dbmigrate.config import HostSpec
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.consolidate.demand import RESOURCES, Demand, ShardDemand

PLAN_VERSION = 2


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
    server_id: int = 0
    socket: str = ""
    slot: int = 0  # 1-based position on its host: name and port follow from it


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
    warnings: list[str] = field(default_factory=list)

    def instance(self, name: str) -> PlannedInstance:
        for i in self.instances:
            if i.name == name:
                return i
        raise KeyError(name)

    def instance_of_shard(self, shard: str) -> PlannedInstance:
        for i in self.instances:
            if shard in i.shards:
                return i
        raise KeyError(shard)

    def to_dict(self) -> dict[str, Any]:
        def demand(d: Demand) -> dict[str, float]:
            return {r: round(d.get(r), 3) for r in RESOURCES}

        return {
            "version": PLAN_VERSION,
            "strategy": self.strategy,
            "settings": self.settings,
            "shards": [asdict(s) for s in self.shards],
            "instances": [{**{k: v for k, v in asdict(i).items() if k != "demand"}, "demand": demand(i.demand),
                           "working_set_gb": round(i.working_set_gb, 3)} for i in self.instances],
            "hosts": [{"name": h.name, "capacity": demand(h.capacity), "usable": demand(h.usable),
                       "used": demand(h.used), "instances": h.instances, "max_instances": h.max_instances}
                      for h in self.hosts],
            "warnings": list(self.warnings),
        }


def plan_from_dict(doc: dict[str, Any]) -> ConsolidationPlan:
    """The inverse of to_dict (plan files written by `consolidate plan --out`)."""
    try:
        version = int(doc.get("version", 1))
        if version > PLAN_VERSION:
            raise UsageError(f"plan file version {version} is newer than this dbmigrate reads ({PLAN_VERSION})",
                             hint="upgrade dbmigrate, or write the plan again with this version")
        shards = [ShardDemand(**s) for s in doc["shards"]]
        instances = [PlannedInstance(**{**i, "demand": Demand(**i["demand"])}) for i in doc["instances"]]
        hosts = [HostUsage(h["name"], Demand(**h["capacity"]), Demand(**h["usable"]), Demand(**h["used"]),
                           list(h["instances"]), int(h["max_instances"])) for h in doc["hosts"]]
        return ConsolidationPlan(doc["strategy"], dict(doc.get("settings", {})), shards, instances, hosts,
                                 list(doc.get("warnings", [])))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"not a consolidation plan: {e}",
                         hint="write one with: dbmigrate consolidate plan --inventory F --from-inventory --out PLAN.json")


# -- names, ports and settings ----------------------------------------------------------

def instance_name(host: str, slot: int) -> str:
    return f"{host}-{slot}"


def instance_port(host: HostSpec, slot: int) -> int:
    return host.base_port + slot - 1


def connection_name(source: str) -> str:
    """Replication connection name for an old server (letters, digits and _ only)."""
    return "".join(c if c.isalnum() else "_" for c in source.lower())


def instance_config(inst: PlannedInstance) -> dict[str, str]:
    """The option group `[mariadbd.NAME]` that makes this instance what the plan says."""
    cfg = {"port": str(inst.port), "datadir": inst.datadir,
           "innodb_buffer_pool_size": f"{inst.buffer_pool_mb}M", "read_only": "ON",
           "log_bin": "mysql-bin", "binlog_format": "ROW", "log_slave_updates": "1",
           # a fence of this instance (a rollback's) expires by itself: a scheduled event
           "event_scheduler": "ON"}
    if inst.server_id:
        cfg["server_id"] = str(inst.server_id)
    if inst.socket:
        # Debian's mariadb@NAME reads the global [mariadbd] group too: every path
        # that would be shared between instances is overridden here.
        run_dir = inst.socket.rsplit("/", 1)[0]
        cfg.update({"socket": inst.socket, "pid_file": f"{run_dir}/{inst.name}.pid",
                    "bind_address": inst.address, "report_host": inst.address, "report_port": str(inst.port),
                    "relay_log": "relay-bin", "log_error": f"{inst.datadir}/{inst.name}.err",
                    "tmpdir": f"{inst.datadir}.tmp", "binlog_row_metadata": "FULL"})
    if len(inst.sources) > 1:
        # Several origins write into domain 0 with their own sequence numbers; strict
        # ordering across them cannot hold on the instance that merges them.
        cfg["gtid_strict_mode"] = "0"
    for src in inst.sources:
        mine = [s for s in inst.shards if inst.shard_sources[s] == src]
        # Per-connection filter in the option file survives a restart (SET GLOBAL does not).
        cfg[f"{connection_name(src)}.replicate_wild_do_table"] = ",".join(f"{s}.%" for s in mine)
    return cfg
