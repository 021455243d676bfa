"""Lag sampling as a use case: open a cluster's primary and replicas, sample once or watch."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.lag import HeartbeatTable, HeartbeatWriter, LagSample, heartbeat_age_ms, read_heartbeat, sample_lag
from dbmigrate.topology.find import discover_inventory

__all__ = ["LagSample", "LagTarget", "open_lag_target", "sample_once", "watch"]


@dataclass
class LagTarget:
    primary: Any  # Server
    replicas: list[Any]
    hb: HeartbeatTable
    title: str


@contextmanager
def open_lag_target(inventory: Path, cluster: str, pt_heartbeat: str | None = None) -> Iterator[LagTarget]:
    """The cluster's primary and replicas, found by discovery; closed on exit."""
    hb = HeartbeatTable.pt_heartbeat(pt_heartbeat) if pt_heartbeat else HeartbeatTable()
    with discover_inventory(load_inventory(inventory), cluster, use_orchestrator=False) as cl:
        primary = cl.primary
        if primary is None:
            raise DbmigrateError(f"cluster {cluster}: no single primary to measure lag against",
                                 hint="; ".join(cl.problems) or "see: dbmigrate topology show")
        replicas = [n.server for n in cl.replicas if n.server is not None]
        yield LagTarget(primary.server, replicas, hb, f"lag in {cluster} (primary {primary.address})")


def sample_once(target: LagTarget, limit_ms: float) -> list[LagSample]:
    """One sample; writes one heartbeat of our own unless pt-heartbeat's table is read."""
    return sample_lag(target.primary, target.replicas, limit_ms=limit_ms, write=target.hb.kind == "dbmigrate",
                      hb=target.hb)


def external_writer(target: LagTarget, watch_s: float = 0.3, clock: Clock | None = None) -> bool:
    """Is someone else writing the heartbeat? A recent row is not enough (a one-off write looks
    recent): the row must move while we look."""
    clock = clock or Clock()
    primary, hb = target.primary, target.hb
    origin = Inspector(primary).server_id()
    first = read_heartbeat(primary, origin, hb)
    if first is None or heartbeat_age_ms(primary, first, hb) > 1000:
        return False
    clock.sleep(watch_s)
    return (read_heartbeat(primary, origin, hb) or first) > first


def watch(target: LagTarget, interval: float, limit_ms: float, count: int = 0,
          clock: Clock | None = None) -> Iterator[tuple[list[LagSample], bool]]:
    """Samples every `interval` seconds (forever when count is 0), with whether our own heartbeat
    writer runs: when nobody else keeps the heartbeat fresh, one runs for as long as the watch."""
    clock = clock or Clock()
    writer = None
    if target.hb.kind == "dbmigrate" and not external_writer(target, clock=clock):
        writer = HeartbeatWriter(target.primary).start()
    try:
        n = 0
        while not count or n < count:
            started = clock.monotonic()
            yield sample_lag(target.primary, target.replicas, limit_ms=limit_ms, write=False, hb=target.hb), \
                writer is not None
            n += 1
            if not count or n < count:
                clock.sleep(max(0.0, interval - (clock.monotonic() - started)))
    finally:
        if writer is not None:
            writer.stop()
