"""Inventory: clusters, servers, logical shards, router and orchestrator (YAML + pydantic).

Credentials are *references* (an option file and group, or environment
variables), never secrets in the inventory itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from dbmigrate.db import credentials as creds_mod
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.exceptions import ConfigError, UsageError
from dbmigrate.hostname import check_host
from dbmigrate.yamlload import LineOf, format_validation_error, load_yaml_with_lines


SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CredentialsRef(Strict):
    """Where to find a user and password: an option file group, or environment variables."""

    defaults_file: Optional[str] = None
    group: Optional[str] = None
    user: Optional[str] = None
    user_env: Optional[str] = None
    password_env: Optional[str] = None

    @model_validator(mode="after")
    def _one_source(self) -> CredentialsRef:
        if self.password_env and (self.defaults_file or self.group):
            raise ValueError("use either defaults_file/group or password_env, not both")
        if not (self.password_env or self.defaults_file or self.group):
            raise ValueError("needs defaults_file (and group) or password_env")
        if self.password_env and not (self.user or self.user_env):
            raise ValueError("password_env needs user or user_env")
        return self

    def resolve(self, base: Path) -> Credentials:
        if self.password_env:
            return creds_mod.from_environment(self.user_env or "", self.password_env, self.user)
        path = Path(self.defaults_file).expanduser() if self.defaults_file else None
        if path is not None and not path.is_absolute():
            path = base / path
        c = creds_mod.from_option_file(path, self.group)
        if self.user:
            c = Credentials(self.user, c.password, c.ssl_ca, c.ssl_cert, c.ssl_key, c.ssl_mode, c.source)
        return c


class LocalAccess(Strict):
    """dbmigrate runs on the server's host and reads its files directly."""

    kind: Literal["local"]


class NoAccess(Strict):
    """The tool may not enter this host (a managed service): file-based features refuse clearly."""

    kind: Literal["none"]
    slow_log: Optional[Literal["table"]] = Field(
        None, description="`table`: slow-log windows (digest capture, the latency guard) are written to "
                          "mysql.slow_log (log_output=TABLE) and read over SQL")


class SshAccess(Strict):
    """Through the system OpenSSH client. Unset fields are left to ~/.ssh/config and the agent."""

    kind: Literal["ssh"]
    address: Optional[str] = Field(None, description="where to ssh to; default: the server's host_name, else host")
    user: Optional[str] = None
    port: Optional[int] = Field(None, ge=1, le=65535)
    identity_file: Optional[str] = None
    jump_host: Optional[str] = Field(None, description="ssh -J: [user@]host[:port][,...]")
    known_hosts_file: Optional[str] = None
    strict_host_key_checking: Optional[Literal["yes", "accept-new"]] = Field(
        None, description="unset: as ssh_config says; host keys are never left unchecked")
    connect_timeout: float = Field(10, gt=0, le=120)
    control_persist: int = Field(60, ge=0, le=3600, description="seconds the shared connection outlives its last use")
    options: dict[str, str] = Field(default_factory=dict, description="extra ssh -o KEY=VALUE")

    @model_validator(mode="after")
    def _host_keys_checked(self) -> SshAccess:
        from dbmigrate.hosts.ssh import check_ssh_options

        check_ssh_options(self.strict_host_key_checking, self.options)
        return self


class DockerAccess(Strict):
    """The server runs in a container: its files and programs through `docker exec` into it."""

    kind: Literal["docker"]
    container: str = Field(description="the container's name or id")
    engine: Optional[str] = Field(None, description="the Docker Engine's address (unix:///path/docker.sock, "
                                                    "tcp://...); default: DOCKER_HOST, else the system's socket")

    @field_validator("container")
    @classmethod
    def _container(cls, v: str) -> str:
        from dbmigrate.hosts.docker import check_container_name

        return check_container_name(v)

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: Optional[str]) -> Optional[str]:
        from dbmigrate.hosts.docker import check_engine

        return check_engine(v)


def _access_shorthand(v: object) -> object:
    return {"kind": v} if isinstance(v, str) else v


Access = Annotated[Union[LocalAccess, SshAccess, NoAccess, DockerAccess], Field(discriminator="kind"),
                   BeforeValidator(_access_shorthand)]


class ServerSpec(Strict):
    host: str
    port: int = Field(3306, ge=1, le=65535)
    socket: Optional[str] = None
    role: Optional[Literal["primary", "replica", "candidate", "standby"]] = None
    credentials: Optional[CredentialsRef] = None
    host_name: Optional[str] = Field(None, description="physical/virtual host that runs this instance")
    instance: Optional[str] = Field(None, description="instance name on a multi-instance host")
    shards: list[str] = Field(default_factory=list, description="logical shards (schemas) held here")

    @field_validator("shards")
    @classmethod
    def _user_schemas(cls, v: list[str]) -> list[str]:
        # Moving a server's own schemas would move its accounts, privileges and statistics.
        system = [s for s in v if s.strip().lower() in SYSTEM_SCHEMAS]
        if system:
            raise ValueError(f"{', '.join(system)} is a system schema, not a shard; list application schemas only")
        empty = [s for s in v if not s.strip()]
        if empty:
            raise ValueError("a shard name is empty")
        return v
    replication_host: Optional[str] = Field(None, description="how other servers reach this one for replication "
                                                              "(containers, NAT); default: host")
    replication_port: Optional[int] = Field(None, ge=1, le=65535, description="default: port")
    datadir: Optional[str] = None
    access: Optional[Access] = Field(None, description="how the tool reaches this server's host (files, programs)")

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        return check_host(v)

    @field_validator("replication_host")
    @classmethod
    def _replication_host(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None else check_host(v)


class HAProxyRouterSpec(Strict):
    kind: Literal["haproxy"]
    admin_socket: str
    writer_backend: str = "writer"
    reader_backend: Optional[str] = "readers"
    # Strict: a port written as "3306", 3306.0 or true is a typo, not a port.
    writer_port: Optional[int] = Field(None, ge=1, le=65535, strict=True)
    reader_port: Optional[int] = Field(None, ge=1, le=65535, strict=True)
    address: str = Field("127.0.0.1", description="where applications reach the writer and reader ports")
    state_file: Optional[str] = Field(None, description="HAProxy's server-state-file: dumped after every route change")


class DsnFileRouterSpec(Strict):
    kind: Literal["dsn-file"]
    path: str


class NoRouterSpec(Strict):
    kind: Literal["none"]


class RelayRouterSpec(Strict):
    """The relay (relay/, docs/internals/relay.md): writes only, sessions moved with their state."""

    kind: Literal["relay"]
    address: str = Field(description="HOST:PORT where the applications connect to the relay")
    control_socket: str = Field(description="the relay's control socket (its -control)")


RouterSpec = Union[HAProxyRouterSpec, DsnFileRouterSpec, NoRouterSpec, RelayRouterSpec]


class ClusterSpec(Strict):
    servers: dict[str, ServerSpec]
    orchestrator_url: Optional[str] = None
    orchestrator_cluster: Optional[str] = None
    replication_credentials: Optional[CredentialsRef] = None
    app_credentials: Optional[CredentialsRef] = None
    router: Optional[RouterSpec] = Field(None, discriminator="kind")
    # Consolidation moves shards one by one: a shard whose applications write through a relay of
    # its own names it here (its backend is the shard's server); the others route by the DSN file.
    shard_routers: dict[str, RelayRouterSpec] = Field(
        default_factory=dict, description="per shard, the relay its applications write through (kind: relay); "
                                          "a shard not named routes through the cluster's DSN file")

    @field_validator("servers")
    @classmethod
    def _not_empty(cls, v: dict[str, ServerSpec]) -> dict[str, ServerSpec]:
        if not v:
            raise ValueError("a cluster needs at least one server")
        return v

    def primary_hint(self) -> str | None:
        return next((n for n, s in self.servers.items() if s.role == "primary"), None)

    def write_address(self) -> tuple[str, int] | None:
        """Where the applications write: the relay's address, or HAProxy's writer port (None for
        a router with no address of its own: a DSN file, none)."""
        r = self.router
        if r is not None and r.kind == "relay":
            host, _, port = r.address.rpartition(":")
            return host, int(port)
        if r is not None and r.kind == "haproxy" and r.writer_port:
            return r.address, r.writer_port
        return None

    def read_address(self) -> tuple[str, int] | None:
        """Where the applications read: HAProxy's reader port; through a relay (writes only) or
        without a reader port, where they write."""
        r = self.router
        if r is not None and r.kind == "haproxy" and r.reader_port:
            return r.address, r.reader_port
        return self.write_address()


class HostSpec(Strict):
    """A target host for consolidation: what it offers and where its instances live."""

    cores: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    disk_gb: float = Field(gt=0)
    max_instances: int = Field(1, ge=1, le=64)
    address: str = Field("127.0.0.1", description="host name or IP the instances listen on")
    base_port: int = Field(3306, ge=1, le=65535, description="first instance's port; the next ones count up")
    datadir_root: str = Field("/var/lib/mysql-instances", description="one datadir per instance under here")
    run_dir: str = Field("/run/mysqld", description="each instance's socket and pid file go here")
    sandbox: Optional[str] = Field(None, description="rehearsal: create the instances in this local sandbox")
    access: Optional[Access] = Field(None, description="how the tool reaches this host")


class PlanningSpec(Strict):
    """How much of each host the consolidation plan may use."""

    headroom_pct: float = Field(20, ge=0, lt=100, description="kept free on every host, per resource")
    growth_pct: float = Field(30, ge=0, description="disk growth allowed per shard on top of today's size")
    reserved_memory_gb: float = Field(1, ge=0, description="per host, for the OS and page cache")
    instance_overhead_mb: int = Field(256, ge=0, description="per mysqld beyond its buffer pool")
    qps_per_core: float = Field(2000, gt=0, description="queries per second one core serves")
    working_set_fraction: float = Field(0.25, gt=0, le=1, description="working set estimate when not measured")
    min_buffer_pool_mb: int = Field(64, ge=8)
    server_id_base: int = Field(100000, ge=1, le=4_000_000_000,
                                description="planned instances get server_id base+1, base+2, ... (must not "
                                            "collide with the old servers' ids)")


class HostsFile(Strict):
    """A file describing target hosts (`--hosts FILE`), same shape as the inventory's sections."""

    hosts: dict[str, HostSpec]
    planning: PlanningSpec = Field(default_factory=PlanningSpec)


class Defaults(Strict):
    credentials: Optional[CredentialsRef] = None
    connect_timeout: float = Field(3.0, gt=0, le=60)
    # seconds a statement may take to answer; bounded so that a typo (1e20) is refused,
    # long enough for an ALTER TABLE of a schema swap
    read_timeout: int = Field(60, gt=0, le=7 * 86400)
    access: Optional[Access] = Field(None, description="host access for servers that declare none")


class Inventory(Strict):
    version: Literal[1] = 1
    defaults: Defaults = Field(default_factory=Defaults)
    clusters: dict[str, ClusterSpec]
    hosts: dict[str, HostSpec] = Field(default_factory=dict, description="target hosts for consolidation")
    planning: PlanningSpec = Field(default_factory=PlanningSpec)
    host_access: dict[str, Access] = Field(default_factory=dict,
                                           description="access per host (a server's host_name or host)")

    # set after loading
    _path: Path = Path("inventory.yaml")

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base(self) -> Path:
        return self._path.parent

    def cluster(self, name: str) -> ClusterSpec:
        if name not in self.clusters:
            raise UsageError(f"cluster '{name}' is not in {self._path}",
                             hint=f"clusters there: {', '.join(self.clusters) or 'none'}")
        return self.clusters[name]

    def find_server(self, name: str) -> tuple[str, ServerSpec]:
        """(cluster, spec) of a server given as its name or as host:port."""
        for cname, c in self.clusters.items():
            for sname, s in c.servers.items():
                if sname == name or f"{s.host}:{s.port}" == name:
                    return cname, s
        known = [n for c in self.clusters.values() for n in c.servers]
        raise UsageError(f"unknown server '{name}' in {self._path}",
                         hint=f"servers there: {', '.join(known)} (or give host:port of one of them)")

    def server_name(self, spec: ServerSpec) -> str:
        for c in self.clusters.values():
            for n, s in c.servers.items():
                if s is spec:
                    return n
        return f"{spec.host}:{spec.port}"

    def credentials_for(self, spec: ServerSpec) -> Credentials:
        ref = spec.credentials or self.defaults.credentials
        if ref is None:
            raise ConfigError(f"{self._path}: server '{self.server_name(spec)}' has no credentials",
                              hint="set defaults.credentials or the server's credentials (defaults_file + group, or password_env)")
        return ref.resolve(self.base)

    def replication_address(self, name: str) -> tuple[str, int]:
        """Where replicas connect to reach `name` (may differ from where this tool connects)."""
        _, spec = self.find_server(name)
        return spec.replication_host or spec.host, spec.replication_port or spec.port

    def replication_credentials(self, cluster: str) -> Credentials:
        ref = self.cluster(cluster).replication_credentials
        if ref is None:
            raise ConfigError(f"{self._path}: cluster '{cluster}' has no replication_credentials",
                              hint="add replication_credentials (defaults_file + group) to the cluster")
        return ref.resolve(self.base)

    def app_credentials(self, cluster: str) -> Credentials | None:
        ref = self.cluster(cluster).app_credentials
        return ref.resolve(self.base) if ref else None

    def open(self, name: str) -> Server:
        _, spec = self.find_server(name)
        sname = self.server_name(spec)
        return Server(sname, spec.host, spec.port, self.credentials_for(spec),
                      connect_timeout=self.defaults.connect_timeout, read_timeout=self.defaults.read_timeout,
                      unix_socket=spec.socket)


def _check_unique_addresses(inv: Inventory, path: Path, locate: LineOf) -> None:
    seen: dict[tuple[str, int], tuple[str, str]] = {}
    for cname, c in inv.clusters.items():
        for sname, s in c.servers.items():
            key = (s.host, s.port)
            if key in seen:
                oc, on = seen[key]
                line = locate(["clusters", cname, "servers", sname, "port"])
                raise ConfigError(f"{path}:{line}: clusters.{cname}.servers.{sname}.port: duplicate port: "
                                  f"{s.host}:{s.port} is also server '{on}' (cluster {oc})",
                                  hint="each server needs its own host:port")
            seen[key] = (cname, sname)
    names: dict[str, str] = {}
    for cname, c in inv.clusters.items():
        for sname in c.servers:
            if sname in names:
                line = locate(["clusters", cname, "servers", sname])
                raise ConfigError(f"{path}:{line}: clusters.{cname}.servers.{sname}: server name also used in "
                                  f"cluster '{names[sname]}'", hint="server names must be unique in an inventory")
            names[sname] = cname


def _check_credentials_present(inv: Inventory, path: Path, locate: LineOf) -> None:
    if inv.defaults.credentials is not None:
        return
    for cname, c in inv.clusters.items():
        for sname, s in c.servers.items():
            if s.credentials is None:
                line = locate(["clusters", cname, "servers", sname])
                raise ConfigError(f"{path}:{line}: clusters.{cname}.servers.{sname}: missing credentials",
                                  hint="add defaults.credentials or credentials: {defaults_file: ..., group: ...} to the server")


def load_inventory(path: str | Path, text: str | None = None) -> Inventory:
    path = Path(path)
    data, locate = load_yaml_with_lines(path, text)
    if data is None:
        raise ConfigError(f"{path}: file is empty", hint="an inventory needs 'clusters:'")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: an inventory is a mapping with 'clusters:'", hint="see playbooks/ and the README for an example")
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(path, e, locate, data=data, model=Inventory) from None
    inv._path = path.resolve() if text is None else path
    _check_unique_addresses(inv, path, locate)
    _check_credentials_present(inv, path, locate)
    return inv


def load_hosts(path: str | Path) -> HostsFile:
    """Target hosts and planning settings from a YAML file; errors name file, line and field."""
    path = Path(path)
    data, locate = load_yaml_with_lines(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: a hosts file is a mapping with 'hosts:' (and optionally 'planning:')")
    try:
        return HostsFile.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(path, e, locate, data=data, model=HostsFile) from None
