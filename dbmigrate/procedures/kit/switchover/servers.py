"""The servers a switchover involves, by name, with what its steps need of them."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from dbmigrate.db.applier import Applier
from dbmigrate.db.binlog import BinlogReader
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.inspector import Inspector


Notify = Callable[..., None]  # (message, level="info")
Record = Callable[[str, str], None]  # (server, statement) planned in dry-run


@dataclass
class SwitchoverServers:
    """The servers involved, by name, with what the steps need."""

    servers: dict[str, Server]
    repl: Credentials
    replicas: list[str] = field(default_factory=list)  # other replicas to repoint (not old/new)
    # How servers reach each other for replication, when it differs from how this
    # tool reaches them (containers, NAT): name -> (host, port).
    repl_addresses: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Other sessions of this tool on the servers (the cluster lock's, on the primary): the seal spares them.
    tool_sessions: list[Server] = field(default_factory=list)

    # The switchover reads and writes servers only through these two, so that its
    # decisions can be tested on a fake topology (tests/unit/fake_topology.py).
    def inspector(self, name: str) -> Inspector:
        return Inspector(self.servers[name])

    def applier(self, name: str, *, dry_run: bool = False, on_planned: "Record | None" = None) -> Applier:
        return Applier(self.servers[name], dry_run=dry_run, on_planned=on_planned)

    def address(self, name: str) -> tuple[str, int]:
        """How this tool reaches `name` (the router names servers the same way)."""
        s = self.servers[name]
        return s.host, s.port

    @contextmanager
    def bounded(self, seconds: float, *names: str) -> Iterator[None]:
        """Every statement to these servers inside the block answers within `seconds` from now
        (a frozen server costs the bound, not the read timeout)."""
        with ExitStack() as stack:
            for name in names:
                stack.enter_context(self.servers[name].bounded(seconds))
            yield

    def own_sessions(self, name: str) -> set[int]:
        """This process's session ids on `name`: its handle's, the wait and watch sessions kept
        beside it, and the other sessions of the tool there (the cluster lock's). Only these
        are spared by the seal, whatever account other sessions log in as."""
        main = self.servers[name]
        handles = [*main.own_handles()[1:],
                   *(s for s in self.tool_sessions if (s.host, s.port) == (main.host, main.port))]
        ids = {main.session_id}
        for h in handles:
            if h.connected:
                ids.add(h.session_id)
        return ids

    def settle(self, name: str) -> None:
        """End the sessions of `name`'s statements in doubt (db/in_doubt.py); raises when it cannot."""
        self.servers[name].settle_doubts()

    def binlog(self, name: str, timeout_s: float) -> BinlogReader:
        """Transactions from `name`'s binlog (each read bounded by `timeout_s`)."""
        return BinlogReader(self.servers[name], timeout_s)

    def side_session(self, name: str, timeout_s: float) -> tuple[Inspector, Applier] | None:
        """Reads and writes on a session of its own to `name` (its watch session, opened before
        the fence), for a watchdog that acts while the main session is blocked."""
        watcher = self.servers[name].watcher(int(timeout_s) + 5)
        return Inspector(watcher), Applier(watcher)
