"""What a consolidation run opens (typed resources) and what it journals (typed run state)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import BaseModel, Field

from dbmigrate.config import Inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.engine.playbook_view import PlaybookView
from dbmigrate.engine.state import TypedState
from dbmigrate.engine.step import RunState
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.contract import Prepared
from dbmigrate.procedures.consolidate.plan import ConsolidationPlan, plan_from_dict
from dbmigrate.procedures.kit.resources import handed_over, inventory_of


class CutRecord(BaseModel):
    targets: list[str]
    at: float
    # Every step of its cutover ran (its forward connections dropped last); False: a resume runs
    # the steps after the reverse connection again (each is idempotent).
    finished: bool = False


class ConsolidateState(TypedState):
    """Instances created, old servers cut over, and the reverse connections rollback needs."""

    KEY = "consolidate"
    VERSION = 3  # 2: `fencing`; 3: `held`, `relay_changes`, `relay_seq`
    FLAT_KEYS = {"instances": "instances", "checksums": "checksums"}

    instances: dict[str, str] = Field(default_factory=dict)  # instance -> host:port where it was created
    cut: dict[str, CutRecord] = Field(default_factory=dict)  # old server -> where its shards went
    # Old servers whose cutover began (journaled before the fence) and neither completed nor was
    # undone: a crash there leaves one fenced, or half moved; rollback and resume put it back first.
    fencing: dict[str, float] = Field(default_factory=dict)  # old server -> when its cutover began
    reverse: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)  # old server -> instance -> [file, pos]
    checksums: dict[str, Any] = Field(default_factory=dict)  # shard -> {"old": ..., "new": ...}
    seeds: dict[str, dict[str, Any]] = Field(default_factory=dict)  # "instance<-source" -> method, bytes, s, position
    servers: dict[str, dict[str, Any]] = Field(default_factory=dict)  # old server -> fleet stage, status, error
    # Shards routed through a relay (inventory `shard_routers`): each relay's hold of its sessions,
    # journaled before it is sent (a process that dies holding leaves it to rollback and resume),
    # and each relay's change sent and not answered yet (in doubt), as promote's router changes.
    held: dict[str, dict[str, Any]] = Field(default_factory=dict)  # control socket -> {source, address, ...}
    relay_changes: dict[str, dict[str, Any]] = Field(default_factory=dict)  # control socket -> change in doubt
    relay_seq: int = 0  # the number of the last relay change this run sent

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> dict[str, Any]:
        out = super().from_flat(flat)
        out["cut"] = {k[4:]: v for k, v in flat.items() if k.startswith("cut.") and v}
        out["reverse"] = {k[8:]: v for k, v in flat.items() if k.startswith("reverse.") and v}
        return out

    @classmethod
    def migrate(cls, version: int, data: dict[str, Any]) -> dict[str, Any] | None:
        return dict(data) if version in (1, 2) else None  # 1: no begun cutover journaled; 2: no relay hold


# Under a key of its own, not in ConsolidateState: `consolidate throttle` writes it from
# another process while the run rewrites its state, and neither may undo the other's change.
LIVE_THROTTLE_KEY = "consolidate.throttle"  # {"mb_s": float | None, "paused": bool}


class Servers:
    """Open sessions by server name (old servers from the inventory, instances from the plan).

    Sessions are per thread: fleet workers talk to their servers in parallel, and a
    client session must never be shared between threads."""

    def __init__(self, inventory: Inventory, plan: ConsolidationPlan, created: Callable[[], dict[str, str]]) -> None:
        self.inventory = inventory
        self.plan = plan
        self._created = created  # instances created by this run: name -> host:port
        self._open: dict[tuple[int, str], Server] = {}
        self._lock = threading.Lock()

    def address(self, name: str) -> str:
        if name in {s.source for s in self.plan.shards}:
            _, spec = self.inventory.find_server(name)
            return f"{spec.host}:{spec.port}"
        created = self._created().get(name)
        if created:
            return created
        inst = self.plan.instance(name)
        return f"{inst.address}:{inst.port}"

    def __getitem__(self, name: str) -> Server:
        key = (threading.get_ident(), name)
        with self._lock:
            srv = self._open.get(key)
        if srv is None:
            if name in {s.source for s in self.plan.shards}:
                srv = self.inventory.open(name)
            else:
                host, _, port = self.address(name).rpartition(":")
                srv = Server(name, host, int(port), self.admin_credentials(),
                             connect_timeout=self.inventory.defaults.connect_timeout,
                             read_timeout=self.inventory.defaults.read_timeout)
            with self._lock:
                self._open[key] = srv
        return srv

    def admin_credentials(self) -> Credentials:
        ref = self.inventory.defaults.credentials
        if ref is None:
            raise UsageError(f"{self.inventory.path}: defaults.credentials is needed to reach the new instances")
        return ref.resolve(self.inventory.base)

    def forget(self, name: str) -> None:
        """Close every session to `name` (after it restarted, none of them is usable)."""
        with self._lock:
            gone = [self._open.pop(k) for k in list(self._open) if k[1] == name]
        for srv in gone:
            srv.close()

    def close(self) -> None:
        for name in {k[1] for k in list(self._open)}:
            self.forget(name)


@dataclass
class ConsolidateResources:
    inventory: Any
    plan: ConsolidationPlan
    routes: Optional[Path]  # the DSN file; None when every shard routes through a relay of its own
    repl: Credentials
    app: Optional[Credentials]
    servers: Servers
    relays: dict[str, Any] = field(default_factory=dict)  # shard -> its RelayRouterSpec (inventory shard_routers)

    def close(self) -> None:
        self.servers.close()


def load_plan(path: Path) -> ConsolidationPlan:
    try:
        return plan_from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise UsageError(f"plan file {path} does not exist",
                         hint="write it with: dbmigrate consolidate plan --inventory F --from-inventory --out PLAN") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"plan file {path} is not JSON (line {e.lineno}: {e.msg})") from None


def plan_path(playbook: PlaybookView, params: Any) -> Path:
    p = Path(params.plan).expanduser()
    return p if p.is_absolute() else (playbook.base_dir / p).resolve()


def routes_path(inventory: Any, cluster: str, playbook: PlaybookView, params: Any,
                every_shard_relayed: bool = False) -> Path | None:
    if params.routes:
        p = Path(params.routes).expanduser()
        return p if p.is_absolute() else (playbook.base_dir / p).resolve()
    router = inventory.cluster(cluster).router
    if router is None or router.kind != "dsn-file":
        if every_shard_relayed:
            return None  # each shard's route is its relay (shard_routers): no DSN file to read
        raise UsageError(f"cluster {cluster} has no dsn-file router and the playbook names no `routes:` file",
                         hint="shards are routed one by one through a DSN file (set params.routes), or each "
                              "through a relay of its own (the cluster's shard_routers)")
    p = Path(router.path).expanduser()
    return p if p.is_absolute() else inventory.base / p


def prepare(playbook: PlaybookView, store: RunState, *, old_gone: bool = False) -> Prepared:
    params = playbook.params
    inv = inventory_of(playbook)
    plan = load_plan(plan_path(playbook, params))
    sources = sorted({s.source for s in plan.shards})
    for src in sources:
        inv.find_server(src)  # every old server of the plan is in the inventory
    servers = Servers(inv, plan, lambda: ConsolidateState.load(store).instances)
    relays = dict(inv.cluster(playbook.cluster).shard_routers)
    routes = routes_path(inv, playbook.cluster, playbook, params, all(s.name in relays for s in plan.shards))
    resources = ConsolidateResources(inventory=inv, plan=plan, routes=routes,
                                     repl=inv.replication_credentials(playbook.cluster),
                                     app=inv.app_credentials(playbook.cluster), servers=servers, relays=relays)
    # One run at a time for these old servers: the lock lives on the first one.
    return handed_over(resources, inv.open(sources[0]).dedicated())
