"""Holding the application's new connections in HAProxy's queue while the writer moves.

Refused connections are errors the application sees; queued ones are only a wait. HAProxy
queues a new connection when every usable server of the backend is full (`maxconn`), for at
most `timeout queue` (`timeout connect` when unset), and hands the queue to a server the
moment one becomes usable. So, measured on HAProxy 2.6.12 (see docs/operations/
what-the-application-sees.md):

- hold: one placeholder connection through the writer frontend takes a slot on the old
  writer, then `set maxconn server writer/OLD 1`: the old writer stays 'ready' but full, every
  new connection waits in the backend's queue, the connections already made keep working;
- release: the usual flip (NEW ready, OLD maint, its sessions shut), which hands the queue to
  NEW at once, then OLD's maxconn back to what it was, then the placeholder closes. Without a
  flip (the switchover stopped before the candidate opened) the release only restores OLD's
  maxconn and the queue goes to OLD again.

Not used: `set maxconn frontend writer 0` refused new connections outright, and raising it
again crashed HAProxy 2.6.12 (its watchdog, in dequeue_proxy_listeners).

If the tool dies while holding, the placeholder closes with it: the old writer's slot frees,
and held connections go on to it (each waits at most `timeout queue`); its maxconn stays 1
until `release_leftover` (rollback and resume call it) puts the journaled value back.

Every change the hold sends (the maxconn set and put back, the flip at the release) goes
through the router it is given: the run's journaled router (kit/switchover/router.py)
journals it before it is sent and settles a change in doubt before any other, like the flip.

`show sess all` also tells which of a server's sessions came through the writer backend (their
HAProxy-side address is what the server shows as the client's host:port), so that ending a
demoted writer's sessions leaves the readers' sessions on the same server alone.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

from dbmigrate.routing.base import RouterError, ServerLike, as_ref, same_address, split_address
from dbmigrate.routing.haproxy import HAProxyRouter

PLACEHOLDER_WAIT_S = 1.0  # for the server's greeting through the writer frontend

_SESS_BACKEND = re.compile(r"^\s+backend=(\S+) \(.*\) addr=(\S+)")
_SESS_SERVER = re.compile(r"^\s+server=(\S+) \(.*\) addr=(\S+)")


def route_sessions(text: str, backend: str) -> dict[str, str]:
    """From `show sess all`: HAProxy's own address toward the server (what the server shows as
    the client's host:port) -> the server's address, for every session of `backend`."""
    out: dict[str, str] = {}
    current_backend: tuple[str, str] | None = None
    for line in text.splitlines():
        b = _SESS_BACKEND.match(line)
        if b:
            current_backend = (b.group(1), b.group(2))
            continue
        s = _SESS_SERVER.match(line)
        if s and current_backend is not None:
            name, local = current_backend
            if name == backend and ":" in local and ":" in s.group(2):
                out[local] = s.group(2)
            current_backend = None
    return out


def haproxy_of(router: Any) -> HAProxyRouter | None:
    """The HAProxy router itself, also when the run wraps it (its journaled router); None for
    any other kind of router."""
    for _ in range(3):
        if router is None or isinstance(router, HAProxyRouter):
            return router
        router = getattr(router, "router", None)  # a wrapper keeps the router it wraps here
    return None


def _settle(router: Any) -> None:
    """A change in doubt settled before anything is read from the router (journaled router only)."""
    settle = getattr(router, "settle", None)
    if callable(settle) and not isinstance(router, HAProxyRouter):
        settle()


def _change(router: Any, cmds: list[str], back: list[str], what: str) -> None:
    """A change sent the way the flip is: through the run's journaled router when there is one."""
    if isinstance(router, HAProxyRouter):
        router.send_change(cmds, back)
    else:
        router.send_change(cmds, back, what=what)


def writer_route_hosts(router: Any, server: ServerLike) -> set[str]:
    """The client addresses (host:port) `server` sees for the sessions that came through the
    writer backend: the application's writers there, not its readers."""
    target = as_ref(server).address
    _settle(router)
    sessions = route_sessions(router.admin.request(["show sess all"]), router.writer_backend)
    return {local for local, srv in sessions.items() if same_address(srv, target)}


def server_limit(router: Any, backend: str, name: str) -> int:
    """The server's maxconn from `show stat` (slim); 0 when it has none."""
    lines = router.admin.request(["show stat"]).splitlines()
    if not lines or not lines[0].startswith("# "):
        raise RouterError(f"HAProxy answered 'show stat' with: {' / '.join(lines[:2])[:200]}")
    cols = lines[0][2:].split(",")
    for line in lines[1:]:
        f = line.split(",")
        if len(f) >= len(cols) and f[cols.index("pxname")] == backend and f[cols.index("svname")] == name:
            limit = f[cols.index("slim")]
            return int(limit) if limit.isdigit() else 0
    raise RouterError(f"HAProxy's 'show stat' has no server {backend}/{name}")


@dataclass
class Hold:
    """A hold in place: which server is kept full, its maxconn before, and the placeholder."""

    backend: str
    server: str  # HAProxy's name of the old writer
    address: str
    maxconn_before: int
    placeholder: socket.socket | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "server": self.server, "address": self.address,
                "maxconn_before": self.maxconn_before}


_HOLDS: dict[tuple[str, str], Hold] = {}  # (admin socket, backend) -> the hold this process keeps


def reader_route_hosts(router: Any, server: ServerLike) -> set[str]:
    """The client addresses `server` sees for the sessions that came through the reader
    backend (none without one): reads that stay on a server that stays a reader."""
    base = haproxy_of(router)
    if base is None or not base.reader_backend:
        return set()
    target = as_ref(server).address
    _settle(router)
    sessions = route_sessions(base.admin.request(["show sess all"]), base.reader_backend)
    return {local for local, srv in sessions.items() if same_address(srv, target)}


def can_hold(router: Any) -> bool:
    base = haproxy_of(router)
    return base is not None and bool(base.writer_address)


def current_hold(router: Any) -> Hold | None:
    base = haproxy_of(router)
    return _HOLDS.get((base.admin.path, base.writer_backend)) if base is not None else None


def hold_new_connections(router: Any, old: ServerLike,
                         journal: Callable[[Hold], None] | None = None) -> Hold:
    """New connections through the writer frontend wait in HAProxy's queue from now on; the
    connections already made keep working. Idempotent. `journal` records the hold before the
    limit is sent, so that a process that dies at any point after leaves what puts it back."""
    held = current_hold(router)
    if held is not None:
        return held
    _settle(router)
    if not can_hold(router):
        raise RouterError("the HAProxy router has no writer address: new connections cannot be held",
                          hint="set writer_port (and address) in the inventory's router section")
    rows = router.servers(router.writer_backend)
    old_ref = as_ref(old)
    name = next((r.name for r in rows if same_address(r.address, old_ref.address)), None)
    if name is None:
        raise RouterError(f"{old_ref} is not a server of HAProxy backend '{router.writer_backend}'")
    before = server_limit(router, router.writer_backend, name)
    placeholder = _placeholder(router.writer_address)
    held = Hold(router.writer_backend, name, old_ref.address, before, placeholder)
    try:
        if journal is not None:
            journal(held)
        _change(router, [f"set maxconn server {router.writer_backend}/{name} 1"],
                restore_commands(held.backend, held.server, held.maxconn_before),
                what=f"to hold new connections (maxconn of {router.writer_backend}/{name} to 1)")
    except RouterError:
        # Also when in doubt: the journal keeps the change, and the caller's undo settles it.
        _close(placeholder)
        raise
    _HOLDS[(router.admin.path, router.writer_backend)] = held
    return held


def quiesce(router: Any, timeout_s: float, clock: Any) -> str | None:
    """Nothing to wait for here: the switchover ends the old writer's sessions when idle itself
    (routing/holds.py; the relay waits instead, routing/relay_hold.py)."""
    return None


def release(router: Any, new: ServerLike | None = None, old: ServerLike | None = None) -> str:
    """End the hold: with `new`, the writer flip first (the queue goes to `new` at once); then
    the old writer's maxconn as it was, then the placeholder closes. A no-op without a hold."""
    held = _HOLDS.pop((router.admin.path, router.writer_backend), None)
    if held is None:
        return ""
    try:
        if new is not None:
            router.switch_writer(new, old, persist=False)
    finally:
        # Also when the flip failed: the old writer must not stay full (the undo routes back to it).
        try:
            restore = restore_commands(held.backend, held.server, held.maxconn_before)
            _change(router, restore, restore, what=f"to release the held connections (maxconn of "
                                                   f"{held.backend}/{held.server} back to {held.maxconn_before})")
        finally:
            _close(held.placeholder)
    return (f"new connections held by HAProxy released to {as_ref(new) if new is not None else held.address}")


def release_leftover(router: Any, saved: dict[str, Any] | None) -> str:
    """After the process that held died: put the old writer's maxconn back (from the journal)."""
    if current_hold(router) is not None:
        return release(router)
    if not saved:
        return ""
    restore = restore_commands(saved["backend"], saved["server"], int(saved["maxconn_before"]))
    _change(router, restore, restore, what=f"to release a hold left by a stopped run (maxconn of "
                                           f"{saved['backend']}/{saved['server']} back to {saved['maxconn_before']})")
    return f"HAProxy {saved['backend']}/{saved['server']} maxconn back to {saved['maxconn_before'] or 'unlimited'}"


# Measured on 2.6.12: `set maxconn server S 0` (no limit) leaves connections already queued
# in the backend's queue there until `timeout queue` (its dequeue loop runs while served <
# maxconn, and 0 stops it at once): a big limit first hands them to S, then 0 again.
DEQUEUE_ALL = 1_000_000


def restore_commands(backend: str, server: str, maxconn_before: int) -> list[str]:
    """The server's maxconn as it was, with every connection held in the queue handed to it."""
    if maxconn_before:
        return [f"set maxconn server {backend}/{server} {maxconn_before}"]
    return [f"set maxconn server {backend}/{server} {DEQUEUE_ALL}", f"set maxconn server {backend}/{server} 0"]


def _placeholder(address: str) -> socket.socket:
    """A connection through the writer frontend that keeps the old writer's one slot taken.
    It waits for the server's greeting, so the slot is taken before the limit applies."""
    host, port = split_address(address)
    try:
        sock = socket.create_connection((host, port), timeout=PLACEHOLDER_WAIT_S)
        sock.settimeout(PLACEHOLDER_WAIT_S)
        if not sock.recv(1, socket.MSG_PEEK):
            raise OSError("closed before the server's greeting")
    except OSError as e:
        raise RouterError(f"cannot hold new connections: the writer frontend {address} did not answer ({e})",
                          hint="check the inventory's router address and writer_port") from None
    return sock


def _close(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.close()
        except OSError:
            pass
