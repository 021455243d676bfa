"""A rehearsal topology from docker-compose.yml: every server a container of its own.

`ComposeTopology.up` picks free loopback addresses (one per server, each on port
3306, HAProxy on one of its own), starts the compose project with those
addresses and the rehearsal's images, waits for every server to be healthy,
creates the accounts and the replication links, puts HAProxy's writer on the
primary and writes an inventory in which every server is reached through the
`docker` access kind. `down` removes every container, volume and file of it.

The directory of a topology (under DBMIGRATE_HOME/compose/NAME) holds
`topology.json`, `credentials.cnf` (0600), `inventory.yaml` and `run/`
(HAProxy's admin socket and server-state file, bind-mounted).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError, SandboxError, UsageError, WaitTimeout
from dbmigrate.procedures.kit.fence import hold_read_only
from dbmigrate.home import home
from dbmigrate.rehearsal.compose.cli import ComposeCli
from dbmigrate.rehearsal.compose.engine import Engine
from dbmigrate.rehearsal.compose.images import Images, project_root
from dbmigrate.rehearsal.sandbox import accounts as acc
from dbmigrate.topology.wire import create_account, wait_replicating

SERVER_PORT = 3306
READER_PORT = 3307
HEALTHY_TIMEOUT_S = 180
SERVICES = ("db1", "db2", "db3", "db4")
HOSTS = ("h1", "h2")  # empty target hosts of a consolidation (profile `consolidate`)
HOST_PORTS = (3306, 3307)  # the instances a target host gets: its base_port and the next
PROFILE = "consolidate"
PREFIX_ENV = "DBMIGRATE_COMPOSE_ADDRESSES"  # e.g. 127.61.7: servers at .11-.14, HAProxy at .10

Progress = Callable[[str], None]


def topologies_dir() -> Path:
    return home() / "compose"


@dataclass
class TopologyState:
    name: str
    project: str
    dir: str
    engine_address: str
    engine_owned: bool
    compose: list[str]
    addresses: dict[str, str]  # service -> loopback address
    servers: dict[str, str]  # inventory server name -> service
    primary: str
    containers: dict[str, str] = field(default_factory=dict)  # service -> container name
    keep: bool = False
    hosts: list[str] = field(default_factory=list)  # target host services (consolidation)
    standalone: bool = False  # every server a primary of its own (consolidation's old servers)
    router: bool = True  # HAProxy in front
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def inventory_file(self) -> Path:
        return self.path / "inventory.yaml"

    @property
    def credentials_file(self) -> Path:
        return self.path / "credentials.cnf"

    def save(self) -> None:
        tmp = self.path / "topology.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.path / "topology.json")

    @classmethod
    def load(cls, path: Path) -> "TopologyState":
        return cls(**json.loads((path / "topology.json").read_text()))


def project_name(name: str) -> str:
    """Compose project names are lower case."""
    return f"dbm-{name.lower()}"


def kept_topologies() -> list[TopologyState]:
    """Topologies an earlier run left up with --keep."""
    out = []
    for d in sorted(topologies_dir().glob("*/topology.json")):
        try:
            out.append(TopologyState.load(d.parent))
        except (OSError, ValueError, TypeError):
            continue
    return out


def refuse_kept() -> None:
    kept = kept_topologies()
    if kept:
        names = ", ".join(k.name for k in kept)
        raise UsageError(f"compose topologies left from an earlier run are still there: {names}",
                         hint="remove them first: " + "; ".join(f"dbmigrate rehearse down {k.name}" for k in kept))


# -- addresses ---------------------------------------------------------------------

def bindable(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, port))
            return True
        except OSError:
            return False


def pick_addresses(services: tuple[str, ...]) -> dict[str, str]:
    """service -> a free loopback address (port 3306 free on it); "haproxy" -> one for HAProxy.

    A prefix in DBMIGRATE_COMPOSE_ADDRESSES (127.X.Y) is used as given and refused when taken;
    otherwise a random 127.X.Y is tried until every address is free."""
    forced = os.environ.get(PREFIX_ENV, "").strip()
    if forced:
        parts = forced.split(".")
        if len(parts) != 3 or parts[0] != "127" or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
            raise UsageError(f"{PREFIX_ENV}={forced!r} is not a loopback prefix like 127.61.7")
        addresses = _layout(forced, services)
        taken = _taken(addresses)
        if taken:
            raise SandboxError(f"{taken[0]} is already taken by another process",
                               hint=f"free it, or set {PREFIX_ENV} to another 127.X.Y (or unset it to pick free ones)")
        return addresses
    rng = random.Random()
    for _ in range(50):
        prefix = f"127.{rng.randint(64, 254)}.{rng.randint(1, 254)}"
        addresses = _layout(prefix, services)
        if not _taken(addresses):
            return addresses
    raise SandboxError("found no free loopback addresses for the topology (port 3306 taken everywhere tried)",
                       hint=f"set {PREFIX_ENV}=127.X.Y to a prefix whose addresses are free")


def _layout(prefix: str, services: tuple[str, ...]) -> dict[str, str]:
    out = {svc: f"{prefix}.{11 + i}" for i, svc in enumerate(services)}
    out.update({h: f"{prefix}.{21 + i}" for i, h in enumerate(HOSTS)})
    out["haproxy"] = f"{prefix}.10"
    return out


def _taken(addresses: dict[str, str]) -> list[str]:
    taken = []
    for svc, addr in addresses.items():
        ports = (SERVER_PORT, READER_PORT) if svc == "haproxy" else HOST_PORTS if svc in HOSTS else (SERVER_PORT,)
        taken += [f"{addr}:{p}" for p in ports if not bindable(addr, p)]
    return taken


# -- the topology --------------------------------------------------------------------

OVERRIDE_FILE = "compose.rehearsal.yml"
HEALTHCHECK_OFF_INTERVAL = "24h"


def write_rehearsal_override(path: Path, services: tuple[str, ...]) -> Path:
    """The rehearsal's compose override: the servers' Docker healthchecks off (their first
    check a day after start).

    A healthcheck is a program the engine runs in the container (`runc exec`) at every interval:
    measured here, the four servers' checks at `interval: 1s` took about a quarter of a core for
    the whole rehearsal, nice 0, in bursts, on the cores the fenced window needs
    (docs/operations/compose.md, "The fenced window in containers"). The rehearsal waits for the
    servers itself instead (`server_answers`), during start-up only; docker-compose.yml keeps
    its healthcheck for `docker compose up` run by hand."""
    # Pushed a day away rather than `disable: true`: Debian's docker-compose 1.29 (the fallback
    # when Compose v2 does not build) refuses `disable` merged over a healthcheck with other
    # options; an interval is merged alike by both, and the first check runs an interval after start.
    f = path / OVERRIDE_FILE
    f.write_text("# written by dbmigrate: the servers' healthchecks pushed past the rehearsal\n"
                 + yaml.safe_dump({"services": {svc: {"healthcheck": {"interval": HEALTHCHECK_OFF_INTERVAL}}
                                                for svc in services}}, sort_keys=True))
    return f


def server_answers(address: str, port: int, timeout: float = 1.0) -> bool:
    """The server on address:port sends its first packet (a handshake, or an error such as a
    refused host: either way it is up, as `healthcheck.sh --connect` counts it). The images'
    servers listen only once InnoDB has started, and the initialisation server listens on no
    port, so an answer here is the server the rehearsal runs against."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            head = s.recv(5)
    except OSError:
        return False
    return len(head) == 5 and head[4] in (0x0A, 0xFF)  # protocol 10 handshake, or an error packet


def _answering_as_another(identities: dict[str, int]) -> list[str]:
    """Services whose address answered with the server_id another service's address also answered
    with (0: not known, never a clash). Each of them is waited for again, so that the one whose
    container exits is seen exiting."""
    by_id: dict[int, list[str]] = {}
    for svc, sid in identities.items():
        if sid:
            by_id.setdefault(sid, []).append(svc)
    return sorted(svc for group in by_id.values() if len(group) > 1 for svc in group)


class ComposeTopology:
    """Up, reach and remove one compose topology on `engine`."""

    def __init__(self, engine: Engine, images: Images, progress: Progress | None = None):
        self.engine = engine
        self.images = images
        self.say = progress or (lambda m: None)
        self.cli = ComposeCli.find(engine)

    def env(self, state: TopologyState, root_password: str) -> dict[str, str]:
        e = self.engine.env()
        e.update({
            "DBMIGRATE_MARIADB_IMAGE": self.images.mariadb,
            "DBMIGRATE_HAPROXY_IMAGE": self.images.haproxy,
            "DBMIGRATE_ROOT_PASSWORD": root_password,
            "DBMIGRATE_PORT": str(SERVER_PORT),
            "DBMIGRATE_HAPROXY_ADDRESS": state.addresses.get("haproxy", "127.0.0.1"),
            "DBMIGRATE_HAPROXY_RUN": str(state.path / "run"),
        })
        for svc in SERVICES:
            e[f"DBMIGRATE_{svc.upper()}_ADDRESS"] = state.addresses.get(svc, "127.0.0.1")
        return e

    def up(self, name: str, servers: dict[str, str], *, keep: bool = False,
           addresses: dict[str, str] | None = None, hosts: tuple[str, ...] = (), standalone: bool = False,
           router: bool = True) -> TopologyState:
        """Start `servers` (inventory name -> compose service; the first is the primary, the
        others replicate from it, or with `standalone` each is a primary of its own), the
        empty target `hosts` and HAProxy (unless not `router`); returns the recorded state.
        `addresses`: as picked by pick_addresses (picked now when not given)."""
        refuse_kept()
        services = tuple(servers.values())
        started = (*services, *hosts, *(("haproxy",) if router else ()))
        base = topologies_dir() / name
        if base.exists():
            raise UsageError(f"a compose topology named {name} exists at {base}",
                             hint=f"choose another --name, or remove it: dbmigrate rehearse down {name}")
        addresses = addresses or pick_addresses(SERVICES)
        taken = _taken(addresses)  # picked free, but time passed (an image build) since
        if taken:
            raise SandboxError(f"{taken[0]} was taken by another process since it was picked",
                               hint="run the rehearsal again: free addresses are picked afresh")
        addresses = {k: v for k, v in addresses.items() if k in started}
        base.mkdir(parents=True)
        (base / "run").mkdir()
        os.chmod(base, 0o700)
        primary = next(iter(servers))
        state = TopologyState(name=name, project=project_name(name), dir=str(base),
                              engine_address=self.engine.address, engine_owned=self.engine.owned,
                              compose=self.cli.argv, addresses=addresses, servers=dict(servers), primary=primary,
                              keep=keep, hosts=list(hosts), standalone=standalone, router=router)
        accounts = acc.new_accounts()
        acc.write_option_file(state.credentials_file, accounts)
        root_password = _new_password()
        _append_root(state.credentials_file, root_password)
        state.save()
        t0 = time.monotonic()
        try:
            self.say(f"compose up {state.project} with {self.cli.describe()}: "
                     + ", ".join(f"{n} ({servers[n]}) on {addresses[servers[n]]}:{SERVER_PORT}" for n in servers)
                     + "".join(f", host {h} on {addresses[h]}" for h in hosts)
                     + (f", HAProxy on {addresses['haproxy']}" if router else ""))
            self.cli.run(state.project, ["--profile", PROFILE, "up", "-d", "--no-build", *started],
                         self.env(state, root_password), what="compose up",
                         overrides=(write_rehearsal_override(state.path, services),))
            state.containers = self._containers(state, started)
            state.save()
            root = Credentials("root", root_password)
            self._wait_healthy(state, services, hosts, router, root)
            state.timings["up_healthy_s"] = round(time.monotonic() - t0, 1)
            self.say(f"every server healthy {state.timings['up_healthy_s']:.1f}s after compose up")
            if standalone:
                self._standalone(state, accounts, root)
            else:
                self._wire(state, accounts, root)
            if router:
                self._route(state)
            self.write_inventory(state)
            state.timings["ready_s"] = round(time.monotonic() - t0, 1)
            state.save()
        except BaseException:
            self.down(state)
            raise
        return state

    # -- start-up ------------------------------------------------------------------
    def _containers(self, state: TopologyState, services: tuple[str, ...]) -> dict[str, str]:
        out = {}
        for svc in services:
            names = self.engine.text("ps", "-a", "--filter", f"label=com.docker.compose.project={state.project}",
                                     "--filter", f"label=com.docker.compose.service={svc}",
                                     "--format", "{{.Names}}").split()
            if len(names) != 1:
                raise SandboxError(f"compose project {state.project} has {len(names)} containers for {svc}")
            out[svc] = names[0]
        return out

    def _wait_healthy(self, state: TopologyState, services: tuple[str, ...], hosts: tuple[str, ...] = (),
                      router: bool = True, root: Credentials | None = None) -> None:
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        pending = list(services)
        identities: dict[str, int] = {}
        while pending:
            for svc in list(pending):
                container = state.containers[svc]
                status = self.engine.text("inspect", "--format",
                                          "{{.State.Status}} {{.State.ExitCode}} "
                                          "{{if .State.Health}}{{.State.Health.Status}}{{end}}", container).split()
                if status and status[0] in ("exited", "dead"):
                    raise SandboxError(f"container {container} exited during start-up (exit {status[1]}): "
                                       f"{self.last_log_lines(container)}",
                                       hint=f"the whole log: docker logs {container} (the topology was removed)")
                if status and status[0] == "running" and server_answers(state.addresses[svc], SERVER_PORT):
                    identities[svc] = self._server_id(state, svc, root)
                    pending.remove(svc)
            # An address can answer for another container's server (one taken twice: the second
            # server is still in its initialisation, which listens on no port, and exits on bind):
            # each service must answer as a server of its own, or it is waited for again.
            for svc in _answering_as_another(identities):
                identities.pop(svc)
                pending.append(svc)
            if pending and time.monotonic() > deadline:
                c = state.containers[pending[0]]
                raise SandboxError(f"{c} was not healthy within {HEALTHY_TIMEOUT_S} s: {self.last_log_lines(c)}")
            if pending:
                time.sleep(0.25)
        # HAProxy and the empty hosts have no healthcheck either: running is up (HAProxy's admin socket
        # is waited for in _route).
        for svc in (*hosts, *(("haproxy",) if router else ())):
            c = state.containers[svc]
            status = self.engine.text("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", c).split()
            if status and status[0] != "running":
                raise SandboxError(f"container {c} exited during start-up (exit {status[1]}): "
                                   f"{self.last_log_lines(c)}",
                                   hint=f"the whole log: docker logs {c} (the topology was removed)")

    def _server_id(self, state: TopologyState, svc: str, root: Credentials | None) -> int:
        """The server_id of the server answering at svc's address (0 without root credentials,
        where identity is not checked)."""
        if root is None:
            return 0
        try:
            with Server(svc, state.addresses[svc], SERVER_PORT, root, connect_timeout=5) as s:
                return int(s.scalar("SELECT @@GLOBAL.server_id"))
        except DbmigrateError:
            return 0  # answered but not yet accepting root: its own server, still starting

    def last_log_lines(self, container: str, lines: int = 3) -> str:
        res = self.engine.run("logs", "--tail", "20", container, check=False)
        text = (res.stdout + res.stderr).decode(errors="replace").strip().splitlines()
        text = [t.strip() for t in text if t.strip()][-lines:]
        return " | ".join(text) or "(no log lines)"

    def root_server(self, state: TopologyState, name: str, root: Credentials | None = None) -> Server:
        """The compose root login of a server (from the topology's credentials file unless given):
        root@'%' with every privilege and PROXY's grant option, as the official image makes it."""
        if root is None:
            from dbmigrate.db.credentials import parse_option_file

            g = parse_option_file(state.credentials_file).get("client-root") or {}
            root = Credentials(g.get("user", "root"), g.get("password", ""))
        return Server(name, state.addresses[state.servers[name]], SERVER_PORT, root, connect_timeout=5)

    def _wire(self, state: TopologyState, accounts: dict, root: Credentials) -> None:
        """Accounts on the primary (replicas receive them), then every other server replicates from it."""
        with self.root_server(state, state.primary, root) as p:
            applier = Applier(p)
            for schema in acc.APP_SCHEMAS:
                applier.create_schema(schema)
            for account in acc.bootstrap_accounts(accounts):
                create_account(applier, account)
            applier.set_read_only(False)
            pos = Inspector(p).gtid_binlog_pos()
        repl = accounts["repl"]
        source = state.addresses[state.servers[state.primary]]
        for name in state.servers:
            if name == state.primary:
                continue
            with self.root_server(state, name, root) as r:
                applier = Applier(r)
                hold_read_only(applier)  # a new replica: it takes no writes
                applier.change_source(source, SERVER_PORT, Credentials(repl.user, repl.password))
                applier.start_replica()
                try:
                    wait_replicating(r, state.primary, pos, 60, interval=0.05)
                except WaitTimeout:
                    raise SandboxError(f"{name} did not catch up with {state.primary} within 60 s") from None
                except DbmigrateError as e:
                    raise SandboxError(e.message) from None
        self.say(f"accounts on {state.primary}; {', '.join(n for n in state.servers if n != state.primary)} "
                 f"replicate from it")

    def _standalone(self, state: TopologyState, accounts: dict, root: Credentials) -> None:
        """Every server a writable primary of its own, the accounts created on each without a
        GTID (so that any of them can later replicate from another without errant ones)."""
        for name in state.servers:
            with self.root_server(state, name, root) as s:
                applier = Applier(s)
                applier.binlog_session(False)
                for schema in acc.APP_SCHEMAS:
                    applier.create_schema(schema)
                for account in acc.bootstrap_accounts(accounts):
                    create_account(applier, account)
                applier.set_read_only(False)
        self.say(f"accounts on {', '.join(state.servers)}: each a primary of its own")

    def _route(self, state: TopologyState) -> None:
        """HAProxy's writer is the primary, readers the replicas (runtime API, then the state file)."""
        from dbmigrate.routing.base import RouterError
        from dbmigrate.routing.haproxy import HAProxyRouter, wait_for_socket

        sock = str(state.path / "run" / "admin.sock")
        hap = state.containers["haproxy"]
        try:
            wait_for_socket(sock, timeout=30, alive=lambda: self._running(hap))
        except RouterError as e:
            raise SandboxError(f"HAProxy ({hap}) did not start: {e.message} {self.last_log_lines(hap)}") from None
        router = HAProxyRouter(state.name, sock, "writer", "readers", str(state.path / "run" / "server-state"))
        primary = state.servers[state.primary]
        started = set(state.servers.values())
        cmds = [f"set server writer/{svc} state maint" for svc in SERVICES if svc != primary]
        cmds += [f"set server readers/{svc} state maint" for svc in SERVICES if svc == primary or svc not in started]
        router.admin.run(cmds)
        router.save_state()

    def _running(self, container: str) -> bool:
        res = self.engine.run("inspect", "--format", "{{.State.Running}}", container, check=False)
        return res.returncode == 0 and res.stdout.decode().strip() == "true"

    # -- inventory ------------------------------------------------------------------
    def write_inventory(self, state: TopologyState) -> Path:
        """Servers by their own addresses; HAProxy's servers are named after the compose services,
        which is how the router finds them by address, not by name."""
        servers: dict[str, Any] = {}
        for name, svc in state.servers.items():
            servers[name] = {
                "host": state.addresses[svc], "port": SERVER_PORT,
                **({"role": "primary"} if name == state.primary else {} if state.standalone else {"role": "replica"}),
                "host_name": state.containers[svc], "datadir": "/var/lib/mysql",
                "access": {"kind": "docker", "container": state.containers[svc], "engine": state.engine_address},
            }
        run = state.path / "run"
        cluster: dict[str, Any] = {
            "replication_credentials": {"defaults_file": "credentials.cnf", "group": "client-repl"},
            "app_credentials": {"defaults_file": "credentials.cnf", "group": "client-app"},
            "servers": servers,
        }
        if state.router:
            cluster["router"] = {"kind": "haproxy", "admin_socket": str(run / "admin.sock"), "writer_backend": "writer",
                                 "reader_backend": "readers", "writer_port": SERVER_PORT, "reader_port": READER_PORT,
                                 "address": state.addresses["haproxy"], "state_file": str(run / "server-state")}
        doc = {"version": 1,
               "defaults": {"credentials": {"defaults_file": "credentials.cnf", "group": "client-admin"}},
               "clusters": {state.name: cluster}}
        text = ("# written by dbmigrate rehearse --compose: every server is a container, its files reached "
                "through `docker exec`\n" + yaml.safe_dump(doc, sort_keys=False))
        tmp = state.inventory_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(state.inventory_file)
        return state.inventory_file

    # -- facts ------------------------------------------------------------------------
    def pid(self, state: TopologyState, name: str) -> int | None:
        """The server's process id on this machine (a container's processes are the host's)."""
        res = self.engine.run("inspect", "--format", "{{.State.Pid}}", state.containers[state.servers[name]],
                              check=False)
        text = res.stdout.decode().strip()
        return int(text) if res.returncode == 0 and text.isdigit() and int(text) > 0 else None

    # -- down -------------------------------------------------------------------------
    def down(self, state: TopologyState) -> list[str]:
        """Remove the project's containers, volumes and files; returns what could not be removed."""
        env = self.env(state, "unused")
        res = self.cli.run(state.project, ["--profile", PROFILE, "down", "-v", "--remove-orphans", "--timeout", "10"], env,
                           what="compose down", check=False)
        left = self.leftovers(state.project)
        if left:  # compose could not: remove by label
            ids = self.engine.text("ps", "-aq", "--filter", f"label=com.docker.compose.project={state.project}").split()
            if ids:
                self.engine.run("rm", "-f", "-v", *ids, check=False, timeout=120)
            left = self.leftovers(state.project)
        if res.returncode != 0 and left:
            self.say(f"compose down failed: {res.stderr.strip()[-300:]}")
        shutil.rmtree(state.path, ignore_errors=True)
        return left

    def leftovers(self, project: str) -> list[str]:
        """Containers, networks and volumes of the compose project that still exist."""
        label = f"label=com.docker.compose.project={project}"
        found = [f"container {c}" for c in self.engine.text("ps", "-a", "--filter", label,
                                                             "--format", "{{.Names}}").split()]
        found += [f"network {n}" for n in self.engine.text("network", "ls", "--filter", label,
                                                           "--format", "{{.Name}}").split()]
        found += [f"volume {v}" for v in self.engine.text("volume", "ls", "--filter", label,
                                                          "--format", "{{.Name}}").split()]
        return found


def _new_password() -> str:
    import secrets

    return secrets.token_urlsafe(18)


def _append_root(path: Path, password: str) -> None:
    from dbmigrate.db.credentials import quote_option_value

    with open(path, "a") as f:
        f.write(f"\n[client-root]\nuser=root\npassword={quote_option_value(password)}\n")
