"""Create, inspect and remove sandboxes of real MariaDB instances.

A sandbox is a directory: one sub-directory per instance, `sandbox.json` (the
state: ports, server ids, roles), `credentials.cnf` (0600) and
`inventory.yaml`. An index under $DBMIGRATE_HOME maps names to directories.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from dbmigrate.home import home
from dbmigrate.db.applier import Applier
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError, SandboxError, UsageError, WaitTimeout
from dbmigrate.procedures.kit.fence import hold_read_only
from dbmigrate.rehearsal.sandbox import accounts as acc
from dbmigrate.rehearsal.sandbox.instance import Instance, InstanceSpec, PortConflict, pid_alive, rewrite_config
from dbmigrate.rehearsal.sandbox.ports import free_port, port_in_use
from dbmigrate.topology.wire import create_account, wait_replicating

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,30}$")


def check_name(name: str) -> str:
    """A sandbox name is also its cluster's name and its instances' prefix."""
    if not NAME_RE.match(name):
        raise UsageError(f"invalid sandbox name '{name}'", hint="use letters, digits, - and _ (max 31), starting with a letter")
    return name




def _adopted_pid(name: str, rec: dict[str, Any]) -> int | None:
    """The live mariadbd of an adopted instance: its pid file's pid, if that process is a mariadbd
    started with this instance's option group (never another process that reused the pid)."""
    try:
        pid = int(Path(rec["pid_file"]).read_text().split()[0])
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError, KeyError):
        return None
    args = [a.decode(errors="replace") for a in argv if a]
    ours = any(a.endswith(f"--defaults-group-suffix=.{name}") for a in args) or \
        any(rec.get("datadir") and a == f"--datadir={rec['datadir']}" for a in args)
    return pid if args and args[0].rsplit("/", 1)[-1] in ("mariadbd", "mysqld") and ours else None


def _index_path() -> Path:
    return home() / "sandboxes.json"


def _read_index() -> dict[str, str]:
    try:
        return json.loads(_index_path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _write_index(index: dict[str, str]) -> None:
    p = _index_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(index, indent=2, sort_keys=True))
    tmp.replace(p)


@dataclass
class InstanceState:
    name: str
    port: int
    server_id: int
    cluster: str
    role: str  # primary / replica / standalone (at creation; discovery tells the truth later)
    replica_of: str | None = None
    buffer_pool_mb: int = 64
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class SandboxState:
    name: str
    dir: str
    created: float
    instances: dict[str, InstanceState] = field(default_factory=dict)
    haproxy: dict[str, Any] | None = None
    relay: dict[str, Any] | None = None  # the relay in front of the cluster (sandbox/relay.py): its router
    shard_relays: dict[str, dict[str, Any]] = field(default_factory=dict)  # shard -> its relay (shard_relays.py)
    timings: dict[str, float] = field(default_factory=dict)
    ssh: dict[str, Any] | None = None  # instance -> its sshd (pid, config, access block)
    # mariadbd processes created for this sandbox by other means (a consolidation rehearsal's
    # instances, provisioned by Ansible): name -> pid_file, port, datadir. `down` stops them too.
    adopted: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def save(self) -> None:
        data = asdict(self)
        # A name of its own: two savers must never rename one another's half-written file.
        tmp = self.path / f"sandbox.json.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.path / "sandbox.json")

    @classmethod
    def load(cls, path: Path) -> "SandboxState":
        data = json.loads((path / "sandbox.json").read_text())
        data["instances"] = {k: InstanceState(**v) for k, v in data["instances"].items()}
        return cls(**data)

    def spec(self, name: str) -> InstanceSpec:
        i = self.instances[name]
        return InstanceSpec(i.name, i.port, i.server_id, self.path / i.name, i.buffer_pool_mb, dict(i.extra))

    def instance(self, name: str) -> Instance:
        if name not in self.instances:
            raise UsageError(f"sandbox '{self.name}' has no instance '{name}'",
                             hint=f"instances: {', '.join(self.instances)}")
        return Instance(self.spec(name))

    @property
    def credentials_file(self) -> Path:
        return self.path / "credentials.cnf"

    @property
    def inventory_file(self) -> Path:
        return self.path / "inventory.yaml"


Progress = Callable[[str], None]


class Sandboxes:
    """Operations on sandboxes. Keeps the Instance objects it started, so that a
    long-lived caller (pytest) reaps its own children."""

    def __init__(self, progress: Progress | None = None):
        self.progress = progress or (lambda msg: None)
        self._live: dict[tuple[str, str], Instance] = {}

    # -- lookup --------------------------------------------------------------
    def find(self, name: str) -> SandboxState:
        index = _read_index()
        if name not in index or not (Path(index[name]) / "sandbox.json").exists():
            raise UsageError(f"no sandbox named '{name}'",
                             hint=f"known sandboxes: {', '.join(sorted(index)) or 'none'} (dbmigrate sandbox ls)")
        return SandboxState.load(Path(index[name]))

    def list(self) -> list[SandboxState]:
        out = []
        for name, path in sorted(_read_index().items()):
            if (Path(path) / "sandbox.json").exists():
                out.append(SandboxState.load(Path(path)))
        return out

    def _instance(self, state: SandboxState, name: str) -> Instance:
        return self._live.get((state.name, name)) or state.instance(name)

    # -- create --------------------------------------------------------------
    def up(self, name: str, replicas: int = 2, base_dir: Path | None = None, buffer_pool_mb: int = 64,
           candidate_buffer_pool_mb: int | None = None, extra: dict[str, str] | None = None) -> SandboxState:
        """`extra`: my.cnf settings for every instance (e.g. performance_schema=ON, set at start)."""
        check_name(name)
        if replicas < 0 or replicas > 8:
            raise UsageError("--replicas must be between 0 and 8")
        index = _read_index()
        if name in index and (Path(index[name]) / "sandbox.json").exists():
            raise UsageError(f"a sandbox named '{name}' already exists at {index[name]}",
                             hint=f"choose another --name, or remove it first: dbmigrate sandbox down {name}")
        root = (base_dir or home() / "sandboxes").expanduser().resolve() / name
        if root.exists() and any(root.iterdir()):
            raise UsageError(f"directory {root} exists and is not empty", hint="choose another --dir or --name")
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        state = SandboxState(name=name, dir=str(root), created=time.time())
        taken: set[int] = set()
        for i in range(1 + replicas):
            port = free_port(taken)
            taken.add(port)
            iname = f"{name}-{i + 1}"
            state.instances[iname] = InstanceState(
                iname, port, server_id=i + 1, cluster=name, role="primary" if i == 0 else "replica",
                replica_of=None if i == 0 else f"{name}-1", buffer_pool_mb=buffer_pool_mb, extra=dict(extra or {}))
        accounts = acc.new_accounts()
        acc.write_option_file(state.credentials_file, accounts)
        state.save()
        index[name] = str(root)
        _write_index(index)
        try:
            self._install_and_start(state, list(state.instances))
            state.timings["start_s"] = round(time.monotonic() - t0, 2)
            primary = f"{name}-1"
            self._bootstrap_primary(state, primary, accounts)
            for iname, ist in state.instances.items():
                if ist.replica_of:
                    self._attach_replica(state, iname, ist.replica_of, accounts)
            for iname, ist in state.instances.items():
                if ist.replica_of:
                    self._wait_caught_up(state, iname, ist.replica_of)
            state.timings["total_s"] = round(time.monotonic() - t0, 2)
            state.save()
            self.write_inventory(state)
        except BaseException:
            self.down(name)
            raise
        return state

    @contextmanager
    def _edit(self, sandbox: str) -> Iterator[SandboxState]:
        """The sandbox's state read afresh and saved back under a lock on its directory:
        instances are added to one sandbox from several threads at once (a consolidation
        creates its planned instances concurrently) or processes, and each change of the
        state (names, ports, server ids) must see the others'."""
        path = self.find(sandbox).path
        with open(path / "sandbox.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            state = SandboxState.load(path)
            yield state
            state.save()

    def add_instance(self, sandbox: str, instance: str | None = None, replica_of: str | None = None,
                     buffer_pool_mb: int = 64, cluster: str | None = None,
                     extra: dict[str, str] | None = None, port: int | None = None) -> InstanceState:
        """`port`: the instance listens there or is not created (a consolidation plan's port);
        without it a free port is picked. Safe to call for several instances of one sandbox at
        once: names, ports and server ids are taken under the sandbox's lock, the datadirs
        (and tmpdirs) are the instances' own, and the slow part (install, start) runs outside it."""
        with self._edit(sandbox) as state:
            iname = instance or f"{sandbox}-{len(state.instances) + 1}"
            if not NAME_RE.match(iname):
                raise UsageError(f"invalid instance name '{iname}'")
            if iname in state.instances:
                raise UsageError(f"sandbox '{sandbox}' already has an instance '{iname}'", hint="choose another name")
            if replica_of and replica_of not in state.instances:
                raise UsageError(f"--replica-of {replica_of}: no such instance in sandbox '{sandbox}'",
                                 hint=f"instances: {', '.join(state.instances)}")
            taken = {i.port for i in state.instances.values()}
            server_id = max([i.server_id for i in state.instances.values()] + [0]) + 1
            if port is not None and (port in taken or port_in_use(port)):
                raise SandboxError(f"port {port} planned for {iname} is already in use",
                                   hint="plan again with another base_port for this host (hosts: NAME: base_port:)")
            ist = InstanceState(iname, port or free_port(taken), server_id,
                                cluster=cluster or (state.instances[replica_of].cluster if replica_of else iname),
                                role="replica" if replica_of else "standalone", replica_of=replica_of,
                                buffer_pool_mb=buffer_pool_mb, extra=dict(extra or {}))
            state.instances[iname] = ist  # reserved (saved) before it is created
        t0 = time.monotonic()
        try:
            self._install_and_start(state, [iname], fixed_port=port is not None)
            accounts = acc.read_option_file(state.credentials_file)
            if replica_of:
                self._attach_replica(state, iname, replica_of, accounts)
                self._wait_caught_up(state, iname, replica_of)
            else:
                self._bootstrap_primary(state, iname, accounts, log_bin=False)
        except BaseException:
            self._stop_instance(state, iname)
            with self._edit(sandbox) as fresh:
                fresh.instances.pop(iname, None)
            raise
        with self._edit(sandbox) as state:
            state.timings[f"add_{iname}_s"] = round(time.monotonic() - t0, 2)
            ist = state.instances[iname]
            if state.haproxy and ist.cluster == state.name:
                from dbmigrate.rehearsal.sandbox import haproxy

                haproxy.add_server(state, iname)  # else a promote to it fails at the router switch
            self.write_inventory(state)
        return ist

    def _install_and_start(self, state: SandboxState, names: list[str], fixed_port: bool = False) -> None:
        insts = {n: Instance(state.spec(n)) for n in names}
        for n in names:
            if port_in_use(state.instances[n].port):
                raise SandboxError(f"port {state.instances[n].port} for {n} is already in use", hint="retry; ports are picked afresh")
        t = time.monotonic()
        procs = {n: i.install() for n, i in insts.items()}  # in parallel: ~0.6 s each
        for n, p in procs.items():
            insts[n].finish_install(p)
        self.progress(f"initialised {len(names)} datadir(s) in {time.monotonic() - t:.2f}s")
        t = time.monotonic()
        for n, i in insts.items():
            i.start()
            self._live[(state.name, n)] = i
        for n, i in insts.items():
            self._ready_or_move_port(state, n, i, attempts=1 if fixed_port else 3)
        self.progress(f"started {', '.join(names)} in {time.monotonic() - t:.2f}s")

    def _ready_or_move_port(self, state: SandboxState, name: str, inst: Instance, attempts: int = 3) -> None:
        """Ports are picked free but can be taken before mariadbd binds: move and retry."""
        for attempt in range(attempts):
            try:
                inst.wait_ready()
                return
            except PortConflict:
                if attempt == attempts - 1:
                    raise
                with self._edit(state.name) as fresh:  # other instances may be added beside this one
                    fresh.instances[name].port = free_port({i.port for i in fresh.instances.values()})
                state.instances[name].port = fresh.instances[name].port
                inst.spec.port = state.instances[name].port
                rewrite_config(inst.spec)
                inst.start()

    def _bootstrap_primary(self, state: SandboxState, name: str, accounts: dict, log_bin: bool = True) -> None:
        with self._instance(state, name).root_server() as root:
            applier = Applier(root)
            if not log_bin:
                # A standalone instance keeps its binlog free of local GTIDs, so it can
                # later replicate from any primary without errant transactions.
                applier.binlog_session(False)
            for schema in acc.APP_SCHEMAS:
                applier.create_schema(schema)
            for account in acc.bootstrap_accounts(accounts):
                create_account(applier, account)
            applier.set_read_only(False)  # the primary (or a standalone) takes writes

    def _attach_replica(self, state: SandboxState, name: str, source: str, accounts: dict) -> None:
        src = state.instances[source]
        repl = accounts["repl"]
        with self._instance(state, name).root_server() as root:
            applier = Applier(root)
            hold_read_only(applier)  # a new replica: it takes no writes
            applier.change_source("127.0.0.1", src.port, Credentials(repl.user, repl.password))
            applier.start_replica()

    def _wait_caught_up(self, state: SandboxState, name: str, source: str, timeout: float = 60) -> None:
        with self._instance(state, source).root_server() as src, self._instance(state, name).root_server() as rep:
            try:
                wait_replicating(rep, source, Inspector(src).gtid_binlog_pos(), timeout, interval=0.05)
            except WaitTimeout:
                raise SandboxError(f"{name} did not catch up with {source} within {timeout:g}s") from None
            except DbmigrateError as e:
                raise SandboxError(e.message) from None

    # -- inventory -----------------------------------------------------------
    def write_inventory(self, state: SandboxState) -> Path:
        clusters: dict[str, Any] = {}
        for iname, ist in state.instances.items():
            c = clusters.setdefault(ist.cluster, {
                "replication_credentials": {"defaults_file": "credentials.cnf", "group": "client-repl"},
                "app_credentials": {"defaults_file": "credentials.cnf", "group": "client-app"},
                "servers": {},
            })
            role = {"primary": "primary", "replica": "replica"}.get(ist.role)
            entry: dict[str, Any] = {"host": "127.0.0.1", "port": ist.port}
            if role:
                entry["role"] = role
            entry.update(host_name="sandbox", instance=iname, datadir=str(state.path / iname / "data"))
            if state.ssh and iname in state.ssh:
                entry["access"] = state.ssh[iname]["access"]  # the instance's files only through its sshd
            c["servers"][iname] = entry
        if state.haproxy:
            hc = clusters.get(state.name)
            if hc is not None:
                hc["router"] = {"kind": "haproxy", "admin_socket": state.haproxy["admin_socket"],
                                "writer_backend": "writer", "reader_backend": "readers",
                                "writer_port": state.haproxy["writer_port"], "reader_port": state.haproxy["reader_port"]}
                if state.haproxy.get("state_file"):
                    hc["router"]["state_file"] = state.haproxy["state_file"]
        if state.relay:
            rc = clusters.get(state.name)
            if rc is not None:  # where the applications write: the cluster's router, HAProxy or not
                rc["router"] = {"kind": "relay", "address": f"127.0.0.1:{state.relay['port']}",
                                "control_socket": state.relay["control_socket"]}
        doc = {"version": 1,
               "defaults": {"credentials": {"defaults_file": "credentials.cnf", "group": "client-admin"}},
               "clusters": clusters}
        text = "# written by dbmigrate sandbox; credentials live in credentials.cnf (0600)\n" + \
            yaml.safe_dump(doc, sort_keys=False)
        tmp = state.inventory_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(state.inventory_file)
        return state.inventory_file

    # -- status / stop -------------------------------------------------------
    def status(self, name: str) -> list[dict[str, Any]]:
        state = self.find(name)
        out = []
        for iname, ist in state.instances.items():
            inst = self._instance(state, iname)
            pid = inst.pid()
            out.append({"name": iname, "port": ist.port, "server_id": ist.server_id, "cluster": ist.cluster,
                        "role": ist.role, "pid": pid, "running": bool(pid and pid_alive(pid)),
                        "datadir": str(inst.spec.datadir)})
        return out

    def pids(self, name: str) -> list[int]:
        return [s["pid"] for s in self.status(name) if s["pid"] and s["running"]]

    def adopt(self, sandbox: str, processes: dict[str, dict[str, Any]]) -> None:
        """Record mariadbd processes this sandbox did not start but owns from now on (each with
        `pid_file`, `port`, `datadir`): `down` stops them with its own instances."""
        with self._edit(sandbox) as state:
            state.adopted.update(processes)

    def adopt_sshd(self, sandbox: str, key: str, record: dict[str, Any]) -> None:
        """An sshd started for the sandbox beside its instances' (a target host's): `down` stops it."""
        with self._edit(sandbox) as state:
            state.ssh = {**(state.ssh or {}), key: record}

    def _stop_adopted(self, state: SandboxState, timeout_s: float = 120) -> list[str]:
        stopped = []
        for name, rec in state.adopted.items():
            pid = _adopted_pid(name, rec)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + timeout_s
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            stopped.append(name)
        return stopped

    def stop_instance(self, sandbox: str, instance: str) -> None:
        self._stop_instance(self.find(sandbox), instance)

    def _stop_instance(self, state: SandboxState, iname: str) -> None:
        self._instance(state, iname).stop()

    def start_instance(self, sandbox: str, instance: str) -> None:
        state = self.find(sandbox)
        inst = Instance(state.spec(instance))
        if inst.is_running():
            return
        inst.start()
        self._live[(state.name, instance)] = inst
        inst.wait_ready()

    def kill_instance(self, sandbox: str, instance: str) -> None:
        state = self.find(sandbox)
        self._instance(state, instance).kill()

    def down(self, name: str, keep_data: bool = False) -> list[str]:
        """Stop this sandbox's processes (by pid, waiting for exit); remove its files unless keep_data."""
        state = self.find(name)
        stopped = []
        if state.haproxy:
            from dbmigrate.rehearsal.sandbox import haproxy as hap  # optional component

            hap.stop(state)
        if state.relay:
            from dbmigrate.rehearsal.sandbox import relay  # optional component

            relay.stop(state)
        if state.shard_relays:
            from dbmigrate.rehearsal.sandbox import shard_relays  # optional component

            shard_relays.stop(state)
        if state.ssh:
            from dbmigrate.rehearsal.sandbox import sshd  # optional component

            sshd.stop_for_sandbox(state)
        stopped += self._stop_adopted(state)
        for iname in state.instances:
            inst = self._instance(state, iname)
            if inst.is_running():
                stopped.append(iname)
            inst.stop()
            self._live.pop((state.name, iname), None)
        index = _read_index()
        if not keep_data:
            shutil.rmtree(state.path, ignore_errors=True)
            index.pop(name, None)
            _write_index(index)
        return stopped
