"""Old shard servers for consolidation's fault rows, reused across rows.

Two old servers hold two shards each; applications find each shard's writer in a DSN file,
and one writer per shard follows it and records every acknowledged id. Each row plans fresh
instances (names and ports of their own) on the same old servers, runs the consolidate
playbook as a child process, and ends rolled back, so that the next row starts from the
old servers again.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from dbmigrate.config import HostSpec, load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate.plan import measure_shards, plan
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.rehearsal.sandbox.ports import free_port_range
from dbmigrate.rehearsal.verify.shard_writer import ShardWriter, create_shard, ids_on
from dbmigrate.rehearsal.writable_monitor import WritableMonitor
from dbmigrate.routing.dsn_file import DsnFileRouter

Say = Callable[[str], None]


def legacy_shards(boxes: Sandboxes, name: str, old: dict[str, list[str]], rows: int, **doc_extra: Any):
    """Start the old servers (the first is the sandbox's primary, the others standalone), fill
    each shard (as the consolidation tests' shard kit does), and write legacy.yaml; returns (sandbox state, inventory, routes file).
    `doc_extra` goes into the inventory document (its `defaults` are merged)."""
    first, *others = old
    boxes.up(name, 0)
    for server in others:
        boxes.add_instance(name, server, cluster=name)
    state = boxes.find(name)
    base = load_inventory(state.inventory_file)
    app = base.app_credentials(name)
    for server, shards in old.items():
        with base.open(server) as s:
            for sh in shards:
                create_shard(s, sh, rows, app.user if app else "dbm_app")
    doc = yaml.safe_load(state.inventory_file.read_text())
    cluster = doc["clusters"][name]
    for server, shards in old.items():
        cluster["servers"][server]["shards"] = shards
    cluster["router"] = {"kind": "dsn-file", "path": "shards.json"}
    doc["planning"] = {"reserved_memory_gb": 0.25, "instance_overhead_mb": 64, "min_buffer_pool_mb": 32}
    extra = dict(doc_extra)
    if "defaults" in extra:
        doc["defaults"] = {**(doc.get("defaults") or {}), **extra.pop("defaults")}
    doc.update(extra)
    inv_path = state.path / "legacy.yaml"
    inv_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    inv = load_inventory(inv_path)
    routes = state.path / "shards.json"
    for server, shards in old.items():
        spec = inv.cluster(name).servers[server]
        for sh in shards:
            DsnFileRouter(sh, routes).switch_writer(f"{spec.host}:{spec.port}")
    return state, inv, routes


class ShardCluster:
    """The old servers, built once (`ensure`), rebuilt when a row leaves them unhealthy."""

    def __init__(self, boxes: Sandboxes, name: str, say: Say = lambda m: None, read_timeout_s: int | None = None):
        self.boxes, self.name, self.say = boxes, name, say
        self.read_timeout_s = read_timeout_s
        self.old = {f"{name}-1": ["shard_1", "shard_2"], f"{name}-old2": ["shard_3", "shard_4"]}
        self.first = f"{name}-1"  # old servers are cut over in name order: this one first
        self.up_and_healthy = False
        self.planned = 0
        self.state = self.inv = self.routes = None
        self.measured: list = []

    @property
    def shards(self) -> list[str]:
        return [s for shards in self.old.values() for s in shards]

    def ensure(self) -> None:
        if self.up_and_healthy:
            return
        if any(s.name == self.name for s in self.boxes.list()):
            self.say(f"rebuilding the old servers of {self.name}")
            self.boxes.down(self.name)
        extra = {"defaults": {"read_timeout": self.read_timeout_s}} if self.read_timeout_s else {}
        self.state, self.inv, self.routes = legacy_shards(self.boxes, self.name, self.old, rows=100, **extra)
        self.measured = measure_shards(self.inv, sample_s=0.2)
        self.up_and_healthy = True

    def down(self) -> None:
        if any(s.name == self.name for s in self.boxes.list()):
            self.boxes.down(self.name)
        self.up_and_healthy = False

    def address(self, server: str) -> str:
        spec = self.inv.cluster(self.name).servers[server]
        return f"{spec.host}:{spec.port}"

    def source_of(self, shard: str) -> str:
        return next(s for s, shards in self.old.items() if shard in shards)

    def admin(self):
        return self.inv.credentials_for(self.inv.cluster(self.name).servers[self.first])

    def open_address(self, addr: str, unix_socket: str | None = None) -> Server:
        host, _, port = addr.rpartition(":")
        return Server(addr, host, int(port), self.admin(), connect_timeout=3, read_timeout=5, retries=0,
                      unix_socket=unix_socket)

    def new_run(self, label: str, params: dict[str, Any], work_root: Path | None = None) -> "ConsolidationRun":
        """A plan of its own (fresh instance names and ports) and a playbook that runs it."""
        self.planned += 1
        host = f"f{self.planned}"
        made = plan(self.measured, {host: HostSpec(cores=2, memory_gb=1, disk_gb=5, max_instances=2,
                                                   sandbox=self.name, base_port=free_port_range(2))},
                    self.inv.planning, "instance-per-group")
        if [i.sources for i in made.instances] != [[s] for s in self.old]:
            raise DbmigrateError(f"the plan does not give each old server an instance of its own: {made.to_dict()}")
        work = (work_root or self.state.path / "faults") / label
        work.mkdir(parents=True, exist_ok=True)
        plan_file = work / "plan.json"
        plan_file.write_text(json.dumps(made.to_dict()))
        pb = work / "consolidate.yaml"
        pb.write_text(yaml.safe_dump({
            "procedure": "consolidate", "inventory": str(self.inv.path), "cluster": self.name,
            "params": {"plan": str(plan_file), "strategy": "instance-per-group", "seed": {"method": "logical"},
                       **params}}))
        instances = {i.name: f"127.0.0.1:{i.port}" for i in made.instances}
        target = {sh: instances[i.name] for i in made.instances for sh in i.shards}
        new_of = {i.sources[0]: i.name for i in made.instances}
        return ConsolidationRun(self, work, pb, work / "journal.sqlite", instances, target, new_of)


@dataclass
class ConsolidationRun:
    """One run of the consolidate playbook on fresh instances, with its writers and pollers."""

    cluster: ShardCluster
    work: Path
    playbook: Path
    journal: Path
    instances: dict[str, str]  # instance -> host:port
    target: dict[str, str]  # shard -> its instance's host:port
    new_of: dict[str, str]  # old server -> its instance
    writers: dict[str, ShardWriter] = field(default_factory=dict)
    monitors: dict[str, WritableMonitor] = field(default_factory=dict)  # old server -> its pair's poller

    def start_writers(self, timeout_s: float = 30) -> None:
        """One writer per shard, following the DSN file as an application must."""
        c = self.cluster
        creds = c.inv.app_credentials(c.name)
        self.writers = {sh: ShardWriter(c.routes, sh, creds, interval_s=0.004) for sh in c.shards}
        for w in self.writers.values():
            w.start()
        for sh, w in self.writers.items():
            if not w.wait_acks_on(w.writer(), 20, timeout_s=timeout_s):
                raise DbmigrateError(f"{sh}: no writes acknowledged before the run (errors {w.errors})")

    def socket_of(self, server: str) -> str | None:
        try:
            sock = str(self.cluster.boxes.find(self.cluster.name).instance(server).spec.socket)
        except DbmigrateError:
            return None
        return sock if len(sock.encode()) < 100 else None  # the limit of a unix socket's path

    def _provisioned(self) -> set[str]:
        """The instances provisioned and read-only (the journal of the running run): each one is
        journaled as it is ready, and all of them once the provision step is done or skipped."""
        if not self.journal.exists():
            return set()
        try:
            with Journal(self.journal) as j:
                runs = j.list_runs(limit=1)
                steps = j.step_rows(runs[0]["id"]) if runs else []
                ready = j.metric_rows(runs[0]["id"], "instance_provisioned_s") if runs else []
        except Exception:  # the run is creating its journal
            return set()
        if any(st["phase"] == "provision" and st["action"] == "run" and st["status"] in ("done", "skipped")
               for st in steps):
            return set(self.instances)
        return {m["labels"].get("instance") for m in ready} & set(self.instances)

    def start_pollers_when_fenceable(self, alive: Callable[[], bool], timeout_s: float = 300) -> bool:
        """Once each new instance is provisioned and read-only (it is writable for a moment while
        it is created, before any route can name it), poll read_only on it and its old server every
        10 ms over their unix sockets (a partitioned port does not blind the poller)."""
        c = self.cluster
        # The tool's account: the application's may not exist on an instance before its seed.
        admin = c.admin()
        deadline = time.monotonic() + timeout_s
        waiting = dict(self.new_of)
        while waiting and time.monotonic() < deadline and alive():
            provisioned = self._provisioned()
            for old, inst in list(waiting.items()):
                sock = self.socket_of(inst)
                if sock is None or inst not in provisioned:
                    continue
                try:
                    with c.open_address(self.instances[inst], unix_socket=sock) as srv:
                        if not Inspector(srv).read_only():
                            continue
                except DbmigrateError:
                    continue
                host, _, port = self.instances[inst].rpartition(":")
                ohost, _, oport = c.address(old).rpartition(":")
                servers = {old: (ohost, int(oport), admin), inst: (host, int(port), admin)}
                sockets = {n: s for n in servers if (s := self.socket_of(n))}
                self.monitors[old] = WritableMonitor(servers, interval_s=0.01, sockets=sockets).start()
                del waiting[old]
            time.sleep(0.02)
        return not waiting

    def stop(self) -> dict[str, Any]:
        """Stop the pollers and the writers; per old server: the poller's report."""
        reports = {old: m.stop() for old, m in self.monitors.items()}
        self.monitors = {}
        for w in self.writers.values():
            w.stop_flag.set()
        for w in self.writers.values():
            w.join(10)
        return reports

    def routed(self, shard: str) -> str:
        return DsnFileRouter(shard, self.cluster.routes).current().writer

    def other_side(self, shard: str, serving: str) -> str:
        old = self.cluster.address(self.cluster.source_of(shard))
        return self.target[shard] if serving == old else old

    def lost(self) -> tuple[dict[str, int], int, list[str]]:
        """Per shard, acknowledged ids missing on the server its route names; the acknowledged
        total; problems (a server that cannot be read)."""
        lost, acked_total, problems = {}, 0, []
        for sh, w in self.writers.items():
            addr = self.routed(sh)
            acked = {i for i, *_ in list(w.acks)}
            acked_total += len(acked)
            try:
                with self.cluster.open_address(addr) as srv:
                    missing = acked - ids_on(srv, sh)
            except DbmigrateError as e:
                problems.append(f"{sh}: {addr} cannot be read: {e.message}")
                continue
            if missing:
                lost[sh] = len(missing)
        return lost, acked_total, problems

    def health(self, status: str | None) -> list[str]:
        """Every shard routes to a writable server that takes its writes again, the other side
        of the shard is read-only; after a rollback the old servers replicate from nobody,
        after a completed run each old server replicates its instances' writes back."""
        c, problems = self.cluster, []
        for sh in c.shards:
            serving = self.routed(sh)
            try:
                with c.open_address(serving) as srv:
                    if Inspector(srv).read_only():
                        problems.append(f"{sh} routes to {serving}, which is read-only")
            except DbmigrateError as e:
                problems.append(f"{sh} routes to {serving}, which does not answer: {e.message}")
            other = self.other_side(sh, serving)
            try:
                with c.open_address(other) as srv:
                    if not Inspector(srv).read_only():
                        problems.append(f"{sh}: {other} is writable too (the route names {serving})")
            except DbmigrateError:
                pass  # a server that does not answer takes no writes
        for sh, w in self.writers.items():
            serving = self.routed(sh)
            if not w.wait_acks_on(serving, w.acked_on(serving) + 20, timeout_s=20):
                problems.append(f"{sh}: writes through the DSN file do not flow to {serving} (errors {w.errors})")
        for old in c.old:
            try:
                with c.inv.open(old) as srv:
                    names = Inspector(srv).connection_names()
            except DbmigrateError as e:
                problems.append(f"{old} does not answer: {e.message}")
                continue
            moved = any(self.routed(sh) != c.address(old) for sh in c.old[old])
            if status == "rolled_back" and names:
                problems.append(f"{old} still replicates ({', '.join(names)}) after the rollback")
            if moved and not names:
                problems.append(f"{old}'s shards moved but it replicates nothing back")
        return problems

    def remove_instances(self) -> None:
        """The next row plans instances of its own."""
        boxes, sandbox = self.cluster.boxes, self.cluster.name
        for name in self.instances:
            try:
                boxes.stop_instance(sandbox, name)
                shutil.rmtree(boxes.find(sandbox).spec(name).datadir, ignore_errors=True)
            except Exception:
                pass
