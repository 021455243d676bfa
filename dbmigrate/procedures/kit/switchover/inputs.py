"""What every step of a switchover is built from, and the reads of the servers they all use."""

from __future__ import annotations

from dataclasses import dataclass

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.in_doubt import SETTLE_GONE_S
from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit.switchover.servers import Notify, Record, SwitchoverServers
from dbmigrate.procedures.kit.switchover.settings import SwitchoverParams


@dataclass(frozen=True)
class StepInputs:
    """The servers, the switchover's two ends, its params as the procedure has them (promote's,
    the schema swap's), and the run's mode, log and clock. Fixed for the switchover's life: what
    its steps learn as it runs is in SwitchoverState."""

    topo: SwitchoverServers
    old: str
    new: str
    params: SwitchoverParams
    dry_run: bool
    log: Notify
    record: Record | None
    clock: Clock

    def server(self, name: str) -> Server:
        return self.topo.servers[name]

    def insp(self, name: str) -> Inspector:
        return self.topo.inspector(name)

    def apply(self, name: str) -> Applier:
        return self.topo.applier(name, dry_run=self.dry_run, on_planned=self.record)

    def repl_addr(self, name: str) -> tuple[str, int]:
        return self.topo.repl_addresses.get(name) or self.addr(name)

    def addr(self, name: str) -> tuple[str, int]:
        return self.topo.address(name)

    def replicates_from(self, name: str, source: str) -> bool:
        st = self.insp(name).replica_status()
        host, port = self.repl_addr(source)
        return st is not None and st.source_port == port and st.source_host in (host, "localhost" if host == "127.0.0.1" else host)

    def replicating_from(self, name: str, source: str) -> bool:
        """Pointed at `source` AND both threads running: the effect a repoint must leave.
        A repoint killed between STOP SLAVE and START SLAVE leaves the right source configured
        but nothing applied, so the configuration alone proves nothing."""
        st = self.insp(name).replica_status()
        return st is not None and st.running and self.replicates_from(name, source)

    def drop_fence_expiry(self, name: str) -> None:
        """Drop a fence expiry scheduled on `name` (a no-op where none is): a server that ends as a
        replica must never be made writable later by the expiry of a fence a stopped run set there."""
        if self.params.fence_expiry != "off":
            self.apply(name).cancel_fence_expiry()

    def writable(self, name: str) -> bool:
        return not self.insp(name).read_only()

    def writable_or_none(self, name: str) -> bool | None:
        """Is `name` writable? None when it does not answer within probe_timeout_s (frozen, dead).
        A statement in doubt there is ended first, within a bound of its own: after a partition
        heals, ending it takes a new connection, and the read must not find its bound spent."""
        try:
            with self.topo.bounded(self.params.probe_timeout_s + SETTLE_GONE_S, name):
                self.topo.settle(name)
            with self.topo.bounded(self.params.probe_timeout_s, name):
                return self.writable(name)
        except DbmigrateError:
            return None
