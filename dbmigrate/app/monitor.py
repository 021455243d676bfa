"""What the session's live panels show about the cluster, sampled from the servers.

Called from a worker thread only. The writer is whichever server is writable
right now (it changes during a cutover); replication lag is measured against
it with a heartbeat (`dbmigrate.lag.sample_lag`, which never writes where
read_only is ON, and not at all in a dry run), and the round trip of the read_only query on the writer is
the latency probe: a cheap statement the fenced window visibly stretches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.lag import LagSample, sample_lag


@dataclass
class ClusterSample:
    writer: str | None
    writer_note: str  # "" when exactly one writer was found, else what was found instead
    latency_ms: float | None
    lag: list[LagSample] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)


class ClusterMonitor:
    """Keeps one short-timeout session per server of the cluster; `sample()` reads them all once."""

    def __init__(self, inventory_path: Path, cluster: str, *, limit_ms: float = 1000.0,
                 settle_ms: float = 500.0, write_heartbeat: bool = True) -> None:
        inventory = load_inventory(inventory_path)
        self.cluster = cluster
        # Off for dry runs: then only an existing heartbeat writer's rows (or GTID distance) tell the lag.
        self.write_heartbeat = write_heartbeat
        self.limit_ms = limit_ms
        self.settle_ms = settle_ms
        self.servers: dict[str, Server] = {}
        for name in inventory.cluster(cluster).servers:
            server = inventory.open(name)
            # A dead server must cost a panel refresh one second, not a blocked worker.
            server.connect_timeout, server.read_timeout, server.retries = 1.0, 5, 0
            self.servers[name] = server

    def sample(self) -> ClusterSample:
        writable: list[str] = []
        probe_ms: dict[str, float] = {}
        reachable: dict[str, Server] = {}
        unreachable: dict[str, str] = {}
        for name, server in self.servers.items():
            started = time.perf_counter()
            try:
                read_only = Inspector(server).read_only()
            except DbmigrateError as exc:
                unreachable[name] = exc.message
                server.close()
                continue
            probe_ms[name] = (time.perf_counter() - started) * 1000.0
            reachable[name] = server
            if not read_only:
                writable.append(name)
        if len(writable) != 1:
            note = (f"{len(writable)} writable: {', '.join(writable)}" if writable
                    else "no writable server (fenced?)")
            return ClusterSample(None, note, None, unreachable=unreachable)
        writer = writable[0]
        replicas = [s for n, s in reachable.items() if n != writer]
        try:
            lag = sample_lag(self.servers[writer], replicas, limit_ms=self.limit_ms, settle_ms=self.settle_ms,
                             write=self.write_heartbeat)
        except DbmigrateError as exc:
            # The writer changed under us (a fence between two reads): the next tick sees the new shape.
            unreachable[writer] = exc.message
            lag = []
        return ClusterSample(writer, "", probe_ms[writer], lag, unreachable)

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
