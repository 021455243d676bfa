"""The state every step of a switchover shares, and the reads they all use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.in_doubt import SETTLE_GONE_S
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.db.inspector import Inspector, Session
from dbmigrate.db.readers.replication import ReplicationReader
from dbmigrate.clock import Clock
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit.fence import Fence, FencedServer
from dbmigrate.procedures.kit.switchover.servers import Notify, Record, SwitchoverServers
from dbmigrate.procedures.kit.switchover.settings import SwitchoverParams


class WriterRouter(Protocol):
    """What a switchover needs of a router (see dbmigrate.routing.base.Router)."""

    def current(self) -> Any: ...  # RouteState with .writer "host:port"
    def switch_writer(self, new: Server, old: Server | None = None, *, persist: bool = True) -> Any: ...
    def describe_switch(self, new: Server, old: Server | None = None) -> list[str]: ...


class SwitchoverBase:
    """What every step of a switchover shares: the servers, the fence of the old primary,
    the router, and the helpers that read them."""

    def __init__(self, topo: SwitchoverServers, old: str, new: str, params: SwitchoverParams,
                 router: WriterRouter | None = None, *, dry_run: bool = False,
                 log: Notify | None = None, record: Record | None = None, clock: Clock | None = None):
        self.topo = topo
        self.old, self.new = old, new
        self.s = params  # the procedure's params as they are (promote's, the schema swap's)
        self.router = router
        self.dry_run = dry_run
        self.log = log or (lambda message, level="info": None)
        self.record = record
        self.clock = clock or Clock()
        self._window_ready = False  # prepare_window ran: the checks before the fence are done
        # The final position the candidate was seen to apply within the fenced catch-up budget:
        # the catch-up step need not ask again inside the window.
        self.applied_at_fence: str | None = None
        # The kit's fence of the old primary (its expiry, watchdog, attempts and budget).
        self.old_fence: Fence[str] = Fence(
            old, FencedServer(inspector=lambda: self.insp(self.old), applier=lambda: self.apply(self.old),
                              bounded=lambda seconds: self.topo.bounded(seconds, self.old),
                              side_session=lambda timeout_s: self.topo.side_session(self.old, timeout_s)),
            params, final_position=lambda insp, read: read if read is not None else insp.gtid_binlog_pos(),
            catchup_timeout_s=params.catchup_timeout_s, targets=new, log=self.log, clock=self.clock,
            dry_run=dry_run)
        # Sessions of accounts that bypass read_only that seal_old ended: who may have written after the fence.
        self.sealed_sessions: list[Session] = []

    if TYPE_CHECKING:
        # Defined by one step's file and called from another's: declared here so that each file is
        # checked on its own (only the composed Switchover holds them all).
        def bypass_users(self) -> set[str]: ...  # fence.py
        def _require_gtid_mode(self) -> None: ...  # fence.py
        def _require_applying(self, insp: ReplicationReader) -> ReplicaStatus: ...  # converge.py
        def wait_replica_running(self, name: str, timeout: float = 10) -> None: ...  # reverse.py
        def stopped_with_error(self, name: str) -> ReplicaStatus | None: ...  # reverse.py

    @property
    def fence_expires_at(self) -> float | None:
        """Wall clock by which the last fence this instance set expires on the server (None: no expiry)."""
        return self.old_fence.expires_at

    # -- helpers -------------------------------------------------------------
    def server(self, name: str) -> Server:
        return self.topo.servers[name]

    def insp(self, name: str) -> Inspector:
        return self.topo.inspector(name)

    def apply(self, name: str) -> Applier:
        return self.topo.applier(name, dry_run=self.dry_run, on_planned=self.record)

    def _repl_addr(self, name: str) -> tuple[str, int]:
        return self.topo.repl_addresses.get(name) or self._addr(name)

    def _addr(self, name: str) -> tuple[str, int]:
        return self.topo.address(name)

    def replicates_from(self, name: str, source: str) -> bool:
        st = self.insp(name).replica_status()
        host, port = self._repl_addr(source)
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
        if self.s.fence_expiry != "off":
            self.apply(name).cancel_fence_expiry()

    def writable(self, name: str) -> bool:
        return not self.insp(name).read_only()

    def writable_or_none(self, name: str) -> bool | None:
        """Is `name` writable? None when it does not answer within probe_timeout_s (frozen, dead).
        A statement in doubt there is ended first, within a bound of its own: after a partition
        heals, ending it takes a new connection, and the read must not find its bound spent."""
        try:
            with self.topo.bounded(self.s.probe_timeout_s + SETTLE_GONE_S, name):
                self.topo.settle(name)
            with self.topo.bounded(self.s.probe_timeout_s, name):
                return self.writable(name)
        except DbmigrateError:
            return None
