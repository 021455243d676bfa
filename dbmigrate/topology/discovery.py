"""Discover a replication cluster from any one of its servers.

The crawl follows every edge it can see: a replica's source (replica status),
the replicas a server knows (SHOW SLAVE HOSTS, i.e. report_host/report_port),
and the servers an inventory names. Binlog dump threads cannot name their
replica's port, so they are only counted, to notice replicas that did not
register. Each server is probed once; the resulting `Cluster` is a plain
model that procedures reuse (primary, replicas, node(address), problems).

Problem detection (`assess`) is a pure function of the probed nodes, so that
the same rules apply to servers we probed and to instances orchestrator
reported, and can be unit-tested without a server.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.flavor import ReplicaStatus, detect
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import ConnectionFailed, DbmigrateError, UsageError
from dbmigrate.topology.probe import ServerFacts, probe

if TYPE_CHECKING:
    from dbmigrate.config import Inventory

LOOPBACK_NAMES = {"localhost": "127.0.0.1", "::1": "127.0.0.1"}


def normalize_address(host: str, port: int | str) -> str:
    host = LOOPBACK_NAMES.get(host.strip().lower(), host.strip())
    return f"{host}:{int(port)}"


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"'{address}' is not HOST:PORT", hint="give an address such as 10.0.0.5:3306")
    return host, int(port)


@dataclass
class Node:
    """One server of a cluster as discovered (facts) plus what discovery concluded (role, problems)."""

    address: str
    name: str
    facts: ServerFacts
    status: ReplicaStatus | None = None
    gtid_state: str = ""
    dump_threads: int = 0
    behind: dict[str, int] = field(default_factory=dict)  # transactions behind the primary, per domain
    replicas: list[str] = field(default_factory=list)  # addresses of servers replicating from this one
    role: str = "unknown"  # primary / intermediate / replica / orphan / unreachable
    problems: list[str] = field(default_factory=list)
    server: Server | None = field(default=None, repr=False)

    @property
    def live(self) -> Server:
        """The connection discovery opened to this node; only a reachable node has one."""
        if self.server is None:
            raise RuntimeError(f"{self.address} was not reached by discovery: no connection to use")
        return self.server

    @property
    def source(self) -> str | None:
        return self.facts.source

    @property
    def reachable(self) -> bool:
        return self.facts.error is None

    @property
    def writable(self) -> bool:
        return self.reachable and self.facts.read_only is False

    @property
    def replicating(self) -> bool:
        return self.facts.io_running == "Yes" and self.facts.sql_running == "Yes"

    @property
    def gtid_mode(self) -> str:
        if self.status is not None and self.status.using_gtid:
            return self.status.using_gtid  # Slave_Pos / Current_Pos / No / Auto_Position
        return "GTID" if self.facts.gtid_binlog_pos or self.facts.gtid_executed else "-"

    @property
    def filters(self) -> dict[str, str]:
        return dict(self.status.filters) if self.status else {}

    def to_dict(self) -> dict[str, Any]:
        f = self.facts
        return {
            "name": self.name, "address": self.address, "role": self.role, "source": f.source,
            "replicas": list(self.replicas), "version": f.version, "flavor": f.flavor, "server_id": f.server_id,
            "read_only": f.read_only, "gtid_mode": self.gtid_mode, "binlog_format": f.binlog_format,
            "log_bin": f.log_bin, "log_slave_updates": f.log_slave_updates,
            "io_running": f.io_running, "sql_running": f.sql_running, "seconds_behind_master": f.seconds_behind,
            "behind": dict(self.behind), "gtid_executed": f.gtid_executed, "last_error": f.last_error,
            "filters": self.filters, "problems": list(self.problems), "error": f.error,
        }


@dataclass
class Cluster:
    name: str
    nodes: dict[str, Node] = field(default_factory=dict)  # by address, in discovery order
    problems: list[str] = field(default_factory=list)  # every problem, each prefixed with its server
    source: str = "probe"  # probe / orchestrator
    # Servers that hold their own logical shards (inventory `shards:`): each is the primary
    # of its own replication tree, so several of them writable is the normal shape.
    shard_servers: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)  # facts worth showing that are not problems

    @property
    def primaries(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == "primary"]

    @property
    def primary(self) -> Node | None:
        p = self.primaries
        return p[0] if len(p) == 1 else None

    @property
    def replicas(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role in ("replica", "intermediate")]

    def node(self, key: str) -> Node:
        """A node by host:port or by inventory name."""
        if key in self.nodes:
            return self.nodes[key]
        for n in self.nodes.values():
            if n.name == key:
                return n
        try:
            addr = normalize_address(*split_address(key))
        except UsageError:
            addr = None
        if addr in self.nodes:
            return self.nodes[addr]
        raise UsageError(f"'{key}' is not a server of cluster {self.name}",
                         hint=f"servers: {', '.join(f'{n.name} ({a})' for a, n in self.nodes.items())}")

    def roots(self) -> list[Node]:
        """Nodes drawn at the top of the tree: those whose source is not a node of the cluster."""
        return [n for n in self.nodes.values() if not n.source or n.source not in self.nodes]

    def to_dict(self) -> dict[str, Any]:
        p = self.primary
        return {"cluster": self.name, "discovered_by": self.source, "primary": p.address if p else None,
                "nodes": [n.to_dict() for n in self.nodes.values()], "problems": list(self.problems),
                "notes": list(self.notes)}

    def close(self) -> None:
        for n in self.nodes.values():
            if n.server is not None:
                n.server.close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- problem rules (pure) ---------------------------------------------------

def assess(cluster: Cluster, lag_warn_s: int = 60) -> Cluster:
    """Set each node's role, replicas, GTID distance and problems; collect cluster problems."""
    nodes = cluster.nodes
    for n in nodes.values():
        n.replicas = []
        n.problems = []
    for n in nodes.values():
        if n.source and n.source in nodes and n.address not in nodes[n.source].replicas:
            nodes[n.source].replicas.append(n.address)
    for n in nodes.values():
        if not n.reachable:
            n.role = "unreachable"
        elif n.source:
            n.role = "intermediate" if n.replicas else "replica"
            if n.source not in nodes:
                n.role = "orphan"  # replicates from a server outside what we could see
        else:
            n.role = "primary" if n.writable or n.replicas else "standalone"

    primaries = [n for n in nodes.values() if n.role == "primary"]
    shard_roots = [n for n in primaries if n.writable and n.address in cluster.shard_servers]
    writable_roots = [n for n in primaries if n.writable and n.address not in cluster.shard_servers]
    cluster_problems: list[str] = []
    cluster.notes = []
    if shard_roots:
        cluster.notes.append(f"{len(shard_roots)} shard server(s), each the writable primary of its own "
                             f"replication tree: {', '.join(n.address for n in shard_roots)}")
    if len(writable_roots) > 1:
        # Each root heads its own tree: two of them in one cluster is two places taking writes.
        cluster_problems.append(f"{len(writable_roots)} separate replication trees each have a writable primary: "
                                f"{', '.join(n.address for n in writable_roots)} (if these are independent shard "
                                f"servers, list their schemas under `shards:` in the inventory)")
    elif not primaries and nodes:
        cluster_problems.append("no primary found")
    primary = primaries[0] if len(primaries) == 1 else None

    for n in nodes.values():
        if not n.reachable:
            n.problems.append(f"unreachable: {n.facts.error}")
            continue
        f = n.facts
        if n.source:
            if not n.replicating:
                why = f" ({f.last_error})" if f.last_error else ""
                n.problems.append(f"replication stopped: io={f.io_running} sql={f.sql_running}{why}")
            if f.read_only is False:
                n.problems.append("writable replica")
            if f.log_slave_updates is False:
                n.problems.append("log_slave_updates off")
            if n.status is not None and n.status.using_gtid in ("No", ""):
                n.problems.append("not replicating with GTID")
            if n.filters:
                n.problems.append("replication filters: " + ", ".join(f"{k}={v}" for k, v in n.filters.items()))
            if f.seconds_behind is not None and f.seconds_behind > lag_warn_s:
                n.problems.append(f"lagging: Seconds_Behind_Master={f.seconds_behind}")
            if n.role == "orphan":
                n.problems.append(f"source {n.source} is not part of the discovered cluster")
        if f.log_bin is False:
            n.problems.append("log_bin off")
        if f.binlog_format and f.binlog_format.upper() != "ROW":
            n.problems.append(f"binlog_format not ROW ({f.binlog_format})")
        if n.dump_threads > len(n.replicas):
            n.problems.append(f"{n.dump_threads - len(n.replicas)} unregistered replica(s) "
                              f"(binlog dump threads without report_host)")
        if primary is not None and n is not primary and f.flavor and primary.facts.flavor == f.flavor:
            flavor = detect(f.version)
            n.behind = {d: c for d, c in flavor.behind(primary.facts.gtid_binlog_pos, f.gtid_executed).items()}
            if n.gtid_state and primary.gtid_state:
                # The primary was read before some replicas: its own newer GTIDs are not errant.
                errant = [g for g in flavor.errant(n.gtid_state, primary.gtid_state)
                          if not flavor.written_by(g, primary.facts.server_id)]
                if errant:
                    n.problems.append("errant GTIDs: " + ", ".join(errant))
    cluster.problems = cluster_problems + [f"{n.address}: {p}" for n in nodes.values() for p in n.problems]
    return cluster


# ---- crawling real servers --------------------------------------------------

def _probe_node(server: Server, name: str) -> Node:
    address = normalize_address(server.host, server.port)
    try:
        facts = probe(server)
        insp = Inspector(server)
        status = insp.replica_status()
        node = Node(address, name, facts, status=status, gtid_state=insp.gtid_state(),
                    dump_threads=insp.binlog_dump_threads(), server=server)
        if facts.source:
            facts.source = normalize_address(*split_address(facts.source))
        facts.replicas = [normalize_address(*split_address(r)) for r in facts.replicas]
        return node
    except DbmigrateError as e:
        server.close()
        msg = e.message + (f" ({e.hint})" if e.hint and isinstance(e, ConnectionFailed) else "")
        return Node(address, name, ServerFacts(name, address, error=msg))


def discover(seed: Server, credentials: Credentials | None = None, *, names: dict[str, str] | None = None,
             also: Iterable[str] = (), cluster_name: str | None = None, max_nodes: int = 64,
             keep_connections: bool = True, shard_servers: Iterable[str] = ()) -> Cluster:
    """Crawl from `seed` to its primary and every replica; probe each server once.

    `credentials` (default: the seed's) are used for every discovered server.
    `names` maps host:port to a display name (inventory names); `also` adds
    addresses to probe even if no edge leads to them (inventory servers).
    """
    creds = credentials or seed.credentials
    names = dict(names or {})
    seed_addr = normalize_address(seed.host, seed.port)
    cluster = Cluster(cluster_name or seed_addr,
                      shard_servers={normalize_address(*split_address(a)) for a in shard_servers})
    queue: deque[str] = deque([seed_addr, *(normalize_address(*split_address(a)) for a in also)])
    handles = {seed_addr: seed}
    while queue and len(cluster.nodes) < max_nodes:
        addr = queue.popleft()
        if addr in cluster.nodes:
            continue
        server = handles.get(addr)
        if server is None:
            host, port = split_address(addr)
            server = Server(names.get(addr, addr), host, port, creds, connect_timeout=seed.connect_timeout,
                            read_timeout=seed.read_timeout, retries=0)
        node = _probe_node(server, names.get(addr, server.name if addr == seed_addr else addr))
        cluster.nodes[addr] = node
        if node.source:
            queue.append(node.source)
        queue.extend(node.facts.replicas)
        if not keep_connections and node.server is not None and node.server is not seed:
            node.server.close()
            node.server = None
    assess(cluster)
    if cluster_name is None and cluster.primary is not None:
        cluster.name = cluster.primary.address
    return cluster


def inventory_names(inventory: Inventory, cluster: str) -> dict[str, str]:
    return {normalize_address(s.host, s.port): n for n, s in inventory.cluster(cluster).servers.items()}
