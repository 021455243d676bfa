"""`dbmigrate rehearse consolidate`: the whole consolidation on a throwaway sandbox, under load.

Four old servers (2-3 shards each, a writer per shard following the DSN file) are
planned onto two hosts of two instances each, at free ports. `consolidate provision`
creates the instances through its generated Ansible playbook (`connection=local`, or
ssh with `--remote`; mariadbd started directly, as where no systemd runs); the
consolidate playbook seeds them physically (mariadb-backup streamed host to host
through the throttle, each instance stopped and started through the host layer),
cuts the old servers over as a fleet, routes every shard, and one old server is then
rolled back alone. The report says, per shard, who serves it (and what `consolidate
status` says) and whether every acknowledged write is there, compares checksums old
vs new, checks that each moved old server replicates back, and that every instance
listens at its planned port.

With `router="relay"`, each shard's applications write through a relay of its own (the
legacy inventory's `shard_routers`, its backend the shard's old server): the shard writers,
the three application pools and the shape's replay connect to the relay, the cutover and the
rollback hold the relays' sessions and move them, and the report reads where each relay sends
its writes (its control socket) instead of the DSN file.

With `remote`, each old server and each target host is a host of its own behind a
real sshd: files and programs are reached only over ssh. With `compose`, the old
servers are containers of docker-compose.yml and the target hosts empty containers
(its profile `consolidate`): the instances are provisioned into those containers
(Ansible through `docker exec`) and everything of a server's files goes through the
`docker` access kind.
"""

from __future__ import annotations

import json
import pwd
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from dbmigrate.rehearsal.playbook_defaults import REHEARSAL_FENCE
from dbmigrate.config import load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError, SandboxError
from dbmigrate.procedures.consolidate.plan import connection_name, measure_shards, plan
from dbmigrate.procedures.consolidate.provision import pid_file
from dbmigrate.procedures.consolidate.resources import ConsolidateState
from dbmigrate.rehearsal.clients import ClientProcess, DsnAddress, FixedAddress, create_table
from dbmigrate.rehearsal.evidence import record_client_evidence
from dbmigrate.rehearsal.driver import DirectDriver, Driver
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.rehearsal.sandbox.ports import free_port_range
from dbmigrate.rehearsal.sandbox import shard_relays
from dbmigrate.rehearsal.verify.shard_writer import RelayShardWriter, ShardWriter, create_shard, ids_on
from dbmigrate.routing.base import RouterError, same_address
from dbmigrate.routing.dsn_file import DsnFileRouter
from dbmigrate.routing.relay import RelayRouter

Progress = Callable[[str], None]
SHARDS_PER_OLD = (2, 3, 2, 3)  # 10 shards on 4 old servers
HOSTS = ("h1", "h2")
ROUTERS = ("dsn-file", "relay")  # where each shard's applications write: the DSN file, or a relay per shard
RELAY_FENCE_DRAIN_S = 2  # through relays: how long the held sessions may take to finish what they do


def old_names(name: str) -> list[str]:
    """The old servers, named alike: NAME-1 (the sandbox's first instance) to NAME-4."""
    return [f"{name}-{i}" for i in range(1, len(SHARDS_PER_OLD) + 1)]


def _shards(name: str) -> dict[str, list[str]]:
    return {old: [f"shard_{k}{chr(ord('a') + j)}" for j in range(n)]
            for k, (old, n) in enumerate(zip(old_names(name), SHARDS_PER_OLD), 1)}


def rehearse_consolidate(*, progress: Progress | None = None, remote: bool = False, rows: int = 2000,
                         throttle_mb_s: float = 0, keep: bool = False, subscribers=(),
                         name: str | None = None, driver: Driver | None = None,
                         compose: bool = False, shape: Path | None = None, scale: float = 0.01,
                         router: str = "dsn-file") -> dict[str, Any]:
    from dbmigrate.app.consolidate.provision import ProvisionRequest, provision
    from dbmigrate.app.consolidate.status import consolidation_status
    from dbmigrate.app.runs import resolve_journal_path
    from dbmigrate.engine.journal import Journal
    from dbmigrate.rehearsal.provision import install

    from dbmigrate.rehearsal.rehearse import check_router, check_shape_options

    shape_files = check_shape_options(shape, scale) if shape is not None else None
    check_router(router, compose, ROUTERS, compose_routes="the DSN file")
    install()  # the planned instances are created in this rehearsal's sandbox
    say = progress or (lambda m: None)
    driver = driver or DirectDriver(subscribers)
    boxes = Sandboxes(progress=say)
    name = name or f"consol-{secrets.token_hex(2)}"
    t0 = time.monotonic()
    host_sshd: list[Any] = []
    writers: dict[str, ShardWriter] = {}
    relays: dict[str, dict[str, Any]] = {}  # shard -> its relay, with router="relay"
    replay = clients = None
    shaped: dict[str, Any] = {}
    placed = None
    topo = None
    olds = old_names(name)
    if compose:
        from dbmigrate.rehearsal.compose.run import ComposeRun
        from dbmigrate.rehearsal.compose.topology import SERVICES

        state = topo = ComposeRun(name, dict(zip(olds, SERVICES)), progress=say, keep=keep, hosts=HOSTS,
                                  standalone=True, router=False).up()
    try:
        if not compose:
            boxes.up(name, replicas=0)
            for old in olds[1:]:
                boxes.add_instance(name, old, cluster=name)
            state = boxes.find(name)
        base = load_inventory(state.inventory_file)
        app = base.app_credentials(name)
        shards = _shards(name)
        for old, names in shards.items():
            with base.open(old) as s:
                for sh in names:
                    create_shard(s, sh, rows, app.user)
        # The application's pools write one shard of the server rolled back at the end: they see
        # its cutover and its rollback. Their table is there before the plan copies the shard.
        client_shard = shards[olds[-1]][0]
        with base.open(olds[-1]) as s:
            create_table(s, client_shard)
        if shape_files is not None:
            # The shape's schemas are shards of the first old server, with a writer of their own too.
            for schema in shape_files.schemas:
                if any(schema in names for names in shards.values()):
                    raise SandboxError(f"the shape's schema {schema} is named like a shard of the rehearsal")
                with base.open(olds[0]) as s:
                    create_shard(s, schema, 0, app.user)
                shards[olds[0]].append(schema)
        say(f"{'compose topology' if compose else 'sandbox'} {name}: {len(olds)} old servers, {sum(map(len, shards.values()))} shards of {rows} rows "
            f"({time.monotonic() - t0:.1f}s)")
        if remote:
            from dbmigrate.rehearsal.sandbox import sshd

            sshd.start_for_sandbox(boxes, name)
            for h in HOSTS:
                daemon = sshd.Sshd(sshd.sandbox_ssh_dir(name) / f"host-{h}")
                daemon.start()
                host_sshd.append(daemon)
                boxes.adopt_sshd(name, f"host-{h}", {"pid": daemon.proc.pid, "config": str(daemon.dir / "sshd_config"),
                                                    "dir": str(daemon.dir)})
            say("every old server and target host reached over its own sshd")
            state = boxes.find(name)
        inv_path, routes = _legacy_inventory(state, name, shards, host_sshd, topo)
        if router == "relay":
            relays = _start_relays(boxes, name, shards, inv_path)
            say(f"{len(relays)} relays, one per shard, each in front of its shard's old server (shard_routers)")
        inv = load_inventory(inv_path)

        plan_file = state.path / "plan.json"
        measured = measure_shards(inv, sample_s=0.3)
        placed = plan(measured, inv.hosts, inv.planning, "instance-per-group")
        plan_file.write_text(json.dumps(placed.to_dict(), indent=2))
        if not compose:  # from now on the sandbox owns the instances Ansible creates: `sandbox down` stops them
            boxes.adopt(name, {i.name: {"pid_file": pid_file(i), "port": i.port, "datadir": i.datadir}
                               for i in placed.instances})
        say("plan: " + "; ".join(f"{i.name} <- {', '.join(i.shards)} at port {i.port}" for i in placed.instances))
        t1 = time.monotonic()
        if compose:  # in the host containers: their own /etc, and the image's mysql user
            request = ProvisionRequest(plan=plan_file, inventory=inv_path, cluster=name, start="direct",
                                       install_packages=False)
        else:
            request = ProvisionRequest(plan=plan_file, inventory=inv_path, cluster=name, start="direct",
                                       conf_dir=str(state.path / "etc"), mariadbd_user=pwd.getpwuid(os.getuid()).pw_name,
                                       install_packages=False)
        provisioned = provision(request, progress=say)
        how = "docker exec into the host containers" if compose else "ssh" if remote else "connection=local"
        say(f"provisioned {len(provisioned.instances)} instances through ansible-playbook "
            f"({how}, mariadbd started directly) in {time.monotonic() - t1:.1f}s")

        through = "their relays" if relays else "the DSN file"
        for sh in [s for names in shards.values() for s in names]:
            writers[sh] = (RelayShardWriter(relays[sh]["address"], relays[sh]["control_socket"], sh, app)
                           if relays else ShardWriter(routes, sh, app))
            writers[sh].start()
        for sh, w in writers.items():
            if not w.wait_acks_on(w.writer(), 10, timeout_s=30):
                raise RuntimeError(f"the writer of {sh} could not write to {w.writer()}: {w.errors}")
        say(f"{len(writers)} shard writers running through {through}")
        if relays:
            pools_at: Callable[[], tuple[str, int]] = FixedAddress.of(relays[client_shard]["address"])
        else:
            pools_at = DsnAddress(str(routes), client_shard)
        clients = ClientProcess(pools_at, app, client_shard).start()
        if not clients.wait_for_calls(3, timeout_s=15):
            raise RuntimeError(f"the application pools could not write {client_shard} through {through}")
        if shape_files is not None:
            from dbmigrate.rehearsal.rehearse import start_shape

            first = next(iter(shape_files.schemas))

            def route() -> tuple[str, int]:
                host, _, port = DsnFileRouter(first, routes).current().writer.rpartition(":")
                return host, int(port)

            shape_at: Callable[[], tuple[str, int]] = route
            learn = None
            if relays:  # the shape's accounts are created by its load: their relays learn them before they log in
                schemas = list(shape_files.schemas)

                def learn() -> None:
                    shard_relays.reload_users(boxes, name, {s: olds[0] for s in schemas})

                shape_at = FixedAddress.of(relays[first]["address"])
            replay = start_shape(boxes, name, inv, shape_files, scale, say, shaped, server=olds[0],
                                 address=shape_at, compose=topo, loaded=learn)
            time.sleep(2)  # the classes' "before"

        playbook = _playbook(state.path, name, plan_file, throttle_mb_s,
                             fence_drain_s=RELAY_FENCE_DRAIN_S if relays else None)
        shaped["cutover_began"] = time.time()
        outcome = driver.run(playbook)
        if replay is not None:
            from dbmigrate.rehearsal.rehearse import finish_shape

            finish_shape(replay, shaped, time.time(), 2)
            replay = None
        say(f"run {outcome.run_id}: {outcome.status}: {outcome.summary}")
        with Journal(resolve_journal_path()) as j:
            st = ConsolidateState.load(j.all_state(outcome.run_id))
            steps = j.run_detail(outcome.run_id)["steps"]
        new_addr = {i.name: st.instances.get(i.name, f"{i.address}:{i.port}") for i in placed.instances}
        target = {sh: new_addr[i.name] for i in placed.instances for sh in i.shards}
        if outcome.status == "done":
            for sh, w in writers.items():  # the instances really take writes before anything else happens
                w.wait_acks_on(target[sh], 20, timeout_s=30)

        rolled = olds[-1]
        rollback_sentence = None
        if outcome.status == "done":
            rollback_sentence = driver.roll_back(outcome.run_id, rolled)
            say(rollback_sentence)
            for sh in shards[rolled]:
                w = writers[sh]
                w.wait_acks_on(_address(inv, rolled), w.acked_on(_address(inv, rolled)) + 20, timeout_s=30)
        time.sleep(0.3)
        for w in writers.values():
            w.stop()
        seen: dict[str, Any] = {}
        if clients is not None:
            clients.stop()
            seen = clients.summary()
            clients = None
        with Journal(resolve_journal_path()) as j:  # again: the rollback journaled that server's new stage
            st = ConsolidateState.load(j.all_state(outcome.run_id))
        report = _check(inv, name, placed, new_addr, shards, writers, rolled if rollback_sentence else None, routes,
                        cut=set(st.cut), relays=relays)
        from dbmigrate.rehearsal.evidence import record_consolidation_evidence

        record_consolidation_evidence(outcome.run_id, writers, report["lost_writes"],  # for --report / runs report
                                      through=through)
        report["status"] = consolidation_status(plan_file, inv_path, routes).to_dict()
        report["provision"] = {"by": "ansible-playbook", "files": sorted(provisioned.files),
                               "recap": provisioned.recap.hosts if provisioned.recap else None,
                               "instances": provisioned.instances}
        report["ports_not_as_planned"] = _ports_not_as_planned(inv, placed)
        if topo is not None:
            report["compose"] = topo.facts()
        if shape_files is not None:
            report.update(shape=shaped["summary"], classes=shaped["classes"])
        report.update({
            "sandbox": name, "router": router, "remove_with": removal_command(name, compose) if keep else None,
            "remote": remote, "run_id": outcome.run_id, "run_status": outcome.status,
            "summary": outcome.summary, "rolled_back_server": rolled if rollback_sentence else None,
            "rollback": rollback_sentence, "seeds": st.seeds, "fleet": st.servers,
            "fenced_checksums_equal": all(v["old"] == v["new"] for v in st.checksums.values()),
            "steps": [{"name": s["name"], "status": s["status"], "sentence": s["sentence"]} for s in steps],
            "elapsed_s": round(time.monotonic() - t0, 1), **seen,
        })
        record_client_evidence(outcome.run_id, seen)
        report["ok"] = bool(outcome.status == "done" and rollback_sentence and report["lost_writes"] == 0
                            and report["checksum_differences"] == 0 and report["misrouted_shards"] == 0
                            and report["old_servers_not_replicating_back"] == 0
                            and not report["ports_not_as_planned"] and not report["status"]["problems"])
        return report
    finally:
        if replay is not None:
            replay.stop()
        if clients is not None:
            clients.stop()
        for w in writers.values():
            w.stop_flag.set()
        for w in writers.values():
            w.join(10)
        if not keep and topo is not None:  # the instances go with their host containers
            left = topo.down()
            if left and sys.exc_info()[0] is None:  # never hide the error that ended the run
                raise SandboxError(f"the compose rehearsal left {', '.join(left)} behind",
                                   hint="remove them with docker rm -f / docker network rm")
        elif not keep:
            for d in host_sshd:  # stopped (and reaped) by this process, which started them
                d.stop()
            boxes.down(name)  # its old servers, the provisioned instances it adopted, their sshd


def removal_command(name: str, compose: bool = False) -> str:
    """What removes a kept rehearsal whole."""
    return f"dbmigrate rehearse down {name}" if compose else f"dbmigrate sandbox down {name}"


def _ports_not_as_planned(inv, placed) -> list[str]:
    """Each instance answers at the plan's port, and says so itself (@@port)."""
    creds = inv.defaults.credentials.resolve(inv.base)
    wrong = []
    for i in placed.instances:
        try:
            with Server(i.name, i.address, i.port, creds) as srv:
                port = int(Inspector(srv).variable("port"))
        except DbmigrateError as e:
            wrong.append(f"{i.name}: no answer at {i.address}:{i.port}: {e.message}")
            continue
        if port != i.port:
            wrong.append(f"{i.name}: listens at {port}, planned {i.port}")
    return wrong


def _address(inv, server: str) -> str:
    spec = inv.find_server(server)[1]
    return f"{spec.host}:{spec.port}"


def _legacy_inventory(state, name: str, shards: dict[str, list[str]], host_sshd: list,
                      topo=None) -> tuple[Path, Path]:
    doc = yaml.safe_load(state.inventory_file.read_text())
    cluster = doc["clusters"][name]
    for old, names in shards.items():
        cluster["servers"][old]["shards"] = names
    cluster["router"] = {"kind": "dsn-file", "path": "shards.json"}
    base = free_port_range(2 * len(HOSTS))  # the plan's ports (base_port + slot - 1), free on this machine
    doc["hosts"] = {h: {"cores": 2, "memory_gb": 1, "disk_gb": 5, "max_instances": 2, "address": "127.0.0.1",
                        "base_port": base + 2 * k, "datadir_root": str(state.path / "hosts" / h / "data"),
                        "run_dir": str(state.path / "hosts" / h / "run")}
                    for k, h in enumerate(HOSTS)}
    for h, daemon in zip(HOSTS, host_sshd):
        doc["hosts"][h]["access"] = daemon.endpoint.access()
    if topo is not None:  # each host a container on its own address; datadirs and sockets where a host keeps them
        from dbmigrate.rehearsal.compose.topology import HOST_PORTS

        for h in HOSTS:
            address, container = topo.host(h)
            doc["hosts"][h] = {"cores": 2, "memory_gb": 1, "disk_gb": 5, "max_instances": 2, "address": address,
                               "base_port": HOST_PORTS[0], "datadir_root": "/var/lib/mysql-instances",
                               "run_dir": "/run/mysqld",
                               "access": {"kind": "docker", "container": container,
                                          "engine": topo.state.engine_address}}
    doc["planning"] = {"reserved_memory_gb": 0.25, "instance_overhead_mb": 64, "min_buffer_pool_mb": 32}
    path = state.path / "legacy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    routes = state.path / "shards.json"
    inv = load_inventory(path)
    for old, names in shards.items():
        for sh in names:
            DsnFileRouter(sh, routes).switch_writer(_address(inv, old))
    return path, routes


def _start_relays(boxes: Sandboxes, name: str, shards: dict[str, list[str]], inv_path: Path) -> dict[str, dict[str, Any]]:
    """A relay per shard, its backend the shard's old server, named in the legacy inventory's
    `shard_routers`: the cutover and the rollback hold and move them (relay_edges.py)."""
    relays = shard_relays.start(boxes, name, {sh: old for old, names in shards.items() for sh in names},
                                max_hold_s=15, drain_s=5)
    doc = yaml.safe_load(inv_path.read_text())
    doc["clusters"][name]["shard_routers"] = shard_relays.inventory_entries(relays)
    inv_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return relays


def _playbook(base: Path, cluster: str, plan_file: Path, throttle_mb_s: float,
              fence_drain_s: float | None = None) -> Path:
    """`fence_drain_s`: through relays, the time their held sessions have to become idle before
    the fence (none is ended: they move); through the DSN file, a short drain."""
    path = base / "consolidate.yaml"
    path.write_text(yaml.safe_dump({
        "procedure": "consolidate", "inventory": "legacy.yaml", "cluster": cluster,
        "params": {"plan": plan_file.name, "strategy": "instance-per-group", "catchup_timeout_s": 10,
                   "fence_drain_timeout_s": 0.3 if fence_drain_s is None else fence_drain_s, "gate_timeout_s": 60,
                   **REHEARSAL_FENCE,
                   "seed": {"method": "physical", "throttle_mb_s": throttle_mb_s, "max_source_p999_ms": 250,
                            "progress_every_s": 2},
                   "fleet": {"concurrency": 2, "on_failure": "continue"}}}, sort_keys=False))
    return path


def _served_by(shard: str, routes: Path, relay: dict[str, Any] | None) -> str:
    """Where the shard's writes go now: its relay's backend (read on its control socket), or
    the DSN file's writer. A relay that does not answer serves nothing known."""
    if relay is None:
        return str(DsnFileRouter(shard, routes).current().writer)
    try:
        return str(RelayRouter(shard, relay["control_socket"], relay["address"]).current().writer)
    except RouterError as e:
        return f"unknown (the relay does not answer: {e.message})"


def _check(inv, name: str, placed, new_addr: dict[str, str], shards: dict[str, list[str]],
           writers: dict[str, ShardWriter], rolled: str | None, routes: Path,
           cut: set[str] | None = None, relays: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """`cut`: the old servers the run cut over (journaled); one it left unmoved (its cutover
    failed, or the run stopped first) still serves its shards, and its instance, perhaps
    never seeded, is not read. None: every old server was cut over. `relays`: shard -> its
    relay; such a shard is served where its relay sends writes now (its backend), not where
    the DSN file says."""
    relays = relays or {}
    creds = inv.defaults.credentials.resolve(inv.base)
    per_shard, lost, diffs, misrouted = {}, 0, 0, 0
    instance_of = {sh: i.name for i in placed.instances for sh in i.shards}
    replicating_back: dict[str, dict[str, Any]] = {}
    with_servers: dict[str, Server] = {}

    def server(addr: str) -> Server:
        if addr not in with_servers:
            host, _, port = addr.rpartition(":")
            with_servers[addr] = Server(addr, host, int(port), creds)
        return with_servers[addr]

    try:
        for old, names in shards.items():
            old_srv = server(_address(inv, old))
            moved = old != rolled and (cut is None or old in cut)
            insts = sorted({instance_of[sh] for sh in names})
            if moved:
                # The old server replicates its shards back from each instance (the rollback path): running,
                # and once it has applied everything, its tables are the instances' tables.
                back = {}
                for inst in insts:
                    st = Inspector(old_srv).named_replica_status(connection_name(inst))
                    f, pos = Inspector(server(new_addr[inst])).binlog_coordinates()
                    caught = Inspector(old_srv).wait_for_position(connection_name(inst), f, pos, 30)
                    back[inst] = {"running": bool(st and st.running), "caught_up": caught}
                replicating_back[old] = {"read_only": Inspector(old_srv).read_only(), "from": back}
            for sh in names:
                expected = _address(inv, old) if not moved else new_addr[instance_of[sh]]
                route = _served_by(sh, routes, relays.get(sh))
                on = server(expected)
                acked = {i for i, _, _ in writers[sh].acks}
                missing = acked - ids_on(on, sh)
                differ: list[str] = []
                if moved:  # a rolled-back shard's instance stops following it: only its old server counts
                    a = Inspector(on).table_checksums(sh)
                    b = Inspector(server(_address(inv, old))).table_checksums(sh)
                    differ = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
                lost += len(missing)
                diffs += len(differ)
                misrouted += route.startswith("unknown") or not same_address(route, expected)
                per_shard[sh] = {"old_server": old, "instance": instance_of[sh], "served_by": route,
                                 "through": relays[sh]["address"] if sh in relays else "DSN file",
                                 "expected": expected, "acknowledged": len(acked),
                                 "moved": moved,
                                 "acked_on_new": writers[sh].acked_on(new_addr[instance_of[sh]]),
                                 "lost": len(missing), "checksum_differences": differ,
                                 "longest_gap_ms": round(writers[sh].longest_gap_ms(), 1),
                                 "writer_errors": dict(writers[sh].errors)}
    finally:
        for s in with_servers.values():
            s.close()
    not_back = sum(1 for r in replicating_back.values()
                   if not r["read_only"] or not all(v["running"] and v["caught_up"] for v in r["from"].values()))
    return {"shards": per_shard, "lost_writes": lost, "acknowledged_writes": sum(len(w.acks) for w in writers.values()),
            "checksum_differences": diffs, "misrouted_shards": misrouted, "old_servers_replicating_back": replicating_back,
            "old_servers_not_replicating_back": not_back,
            "instances": {i.name: {"host": i.host, "address": new_addr.get(i.name), "planned_port": i.port,
                                   "shards": i.shards}
                          for i in placed.instances}}
