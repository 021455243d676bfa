"""What a traffic router must do for a switchover, whatever sends the traffic.

A router answers "where do writes and reads of this cluster go now?" and moves
them. The switchover procedure only talks to this interface, so HAProxy, a DSN
file read by the applications, or no router at all are interchangeable.

Addresses are always "host:port" strings, as in the inventory.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, Union

from dbmigrate.exceptions import DbmigrateError

Gate = tuple[bool, str, dict[str, Any]]


class RouterError(DbmigrateError):
    """The router refused or failed a change, or could not be read. A procedure
    that gets this during a switchover must roll back (the old writer is still
    fenced by read_only, so nothing is written twice)."""


class RouterNoAnswer(RouterError):
    """A change was sent and the router did not answer: it may still run it later (HAProxy
    keeps the request in its socket buffer while frozen). The change is in doubt until the
    router shows it ran or can no longer run (`Router.settled`): never "not changed"."""


class RouterGone(RouterError):
    """Nothing listens where the router's process was (its socket refuses, or is gone): a change
    sent to that process can no longer run; a restarted router loads its saved route."""


@dataclass(frozen=True)
class RouteIntent:
    """A change about to be sent to the router, journaled before it is sent.

    `seq` orders the changes of one router (a later decision's is larger); `request` is what
    is sent, `back` the request that sends writes back to the writer the change leaves, and
    `by_hand` how an operator sends a request of this router by hand (`{request}` in it)."""

    seq: int
    request: str
    back: str = ""
    by_hand: str = "{request}"

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "request": self.request, "back": self.back, "by_hand": self.by_hand}

    def finish_by_hand(self, request: str | None = None) -> str:
        return self.by_hand.replace("{request}", request if request is not None else self.request)


class RouteLog(Protocol):
    """Where a caller journals a change: `sent` before it is sent, `answered` once the router
    answered it (with success or an error: either way it is no longer in doubt)."""

    def sent(self, intent: RouteIntent) -> None: ...
    def answered(self, intent: RouteIntent) -> None: ...


@dataclass(frozen=True)
class ServerRef:
    """One server as the router knows it: a name for messages and its address."""

    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return self.name if self.name == self.address else f"{self.name} ({self.address})"


ServerLike = Union[ServerRef, str, Any]


def as_ref(server: ServerLike) -> ServerRef:
    """A ServerRef from a ServerRef, a "host:port" string or anything with name/host/port
    (such as dbmigrate.db.connection.Server or an inventory ServerSpec)."""
    if isinstance(server, ServerRef):
        return server
    if isinstance(server, str):
        host, port = split_address(server)
        return ServerRef(server, host, port)
    host_attr, port_attr = getattr(server, "host", None), getattr(server, "port", None)
    if host_attr is None or port_attr is None:
        raise TypeError(f"not a server: {server!r}")
    return ServerRef(str(getattr(server, "name", None) or f"{host_attr}:{port_attr}"), str(host_attr), int(port_attr))


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RouterError(f"'{address}' is not a host:port address", hint="write servers as HOST:PORT, e.g. 10.0.0.5:3306")
    return host, int(port)


def same_address(a: str, b: str) -> bool:
    """host:port equality that also accepts a host name against its IP address."""
    if a == b:
        return True
    (ha, pa), (hb, pb) = split_address(a), split_address(b)
    if pa != pb:
        return False
    return _resolve(ha) == _resolve(hb)


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


@dataclass
class RouteState:
    """Where traffic goes now. `writer` is None when no server takes writes (all
    fenced); `writers` lists every server that would get new write connections,
    so that a misconfigured router with two writers is visible."""

    writer: str | None
    readers: list[str] = field(default_factory=list)
    writers: list[str] = field(default_factory=list)
    reader_weights: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"writer": self.writer, "writers": self.writers, "readers": self.readers,
                "reader_weights": self.reader_weights, **({"details": self.details} if self.details else {})}


class Router(ABC):
    """Routes one cluster's traffic. Implementations must make switch_writer atomic
    from the application's point of view: at no moment do two servers get writes."""

    kind = "abstract"

    def __init__(self, cluster: str):
        self.cluster = cluster

    @abstractmethod
    def current(self) -> RouteState:
        """Read the router's live state (never a cached copy)."""

    @abstractmethod
    def switch_writer(self, new: ServerLike, old: ServerLike | None = None, *, persist: bool = True,
                      log: RouteLog | None = None, seq: int | None = None) -> RouteState:
        """Send new writes to `new` only. When `old` is given it must be the current
        writer (or `new` already is: the switch is then a no-op), otherwise RouterError
        and nothing changes. Returns the state read back afterwards.
        `log.sent(RouteIntent)` is called right before the change is sent (never for a no-op), so
        that the caller journals it first, and `log.answered` once the router answered it; `seq`
        orders it after every earlier change. A change sent and not answered raises
        RouterNoAnswer: it is in doubt (see `settled`).
        `persist=False` (inside a fenced window, which must not wait on a disk or a second
        request) may leave the read-back and a copy kept apart from the live route (HAProxy's
        server-state-file) to the next `switch_writer(new, old)`, which is then a no-op flip
        that reads back and saves (and flips again if the router lost the route meanwhile)."""

    @abstractmethod
    def set_reader_weights(self, weights: Mapping[str, int]) -> RouteState:
        """Set relative read weights by address; weight 0 takes no new reads."""

    @abstractmethod
    def set_readers(self, readers: Sequence[str]) -> RouteState:
        """Send reads to exactly these addresses."""

    def settled(self, seq: int) -> bool:
        """Has the change numbered `seq` run, or can it no longer run? False while the router
        answers but has not run it yet; RouterError while the router does not answer. A router
        whose changes are atomic when they return (a file renamed into place) is settled as soon
        as it can be read."""
        self.current()
        return True

    can_fence_off = False  # see fence_off

    def fence_off(self, seq: int) -> bool:
        """Where `can_fence_off`: make sure the change numbered `seq`, in doubt, can never run
        from now on, and say whether it ran before it. Other routers cannot (a frozen HAProxy
        keeps its requests): the caller waits for `settled`."""
        raise RouterError(f"the {self.kind} router cannot fence off a change in doubt")

    def prepare_switch(self, new: ServerLike, old: ServerLike | None = None) -> None:
        """Work out the writer switch ahead of time (before a fence), so that
        switch_writer does only the flip. Routers with nothing to prepare ignore it."""

    @abstractmethod
    def describe_switch(self, new: ServerLike, old: ServerLike | None = None) -> list[str]:
        """What switch_writer would do, one line per action, without doing it (dry-run)."""

    def verify(self, expected_writer: ServerLike) -> Gate:
        """Gate: the router sends writes to `expected_writer` and to nothing else."""
        expected = as_ref(expected_writer)
        try:
            st = self.current()
        except RouterError as e:
            return False, f"cannot read the {self.kind} router: {e.message}", {"error": e.message}
        details = {"expected": expected.address, **st.to_dict()}
        if len(st.writers) > 1:
            return False, f"{len(st.writers)} servers take writes: {', '.join(st.writers)}", details
        if st.writer is None:
            return False, f"no server takes writes (expected {expected})", details
        if not same_address(st.writer, expected.address):
            return False, f"writes go to {st.writer}, not to {expected}", details
        return True, f"writes go to {expected} only", details

    def describe(self) -> str:
        return f"{self.kind} router of cluster {self.cluster}"


class NoRouting(Router):
    """`router: {kind: none}` (or no router section): applications find the primary
    by other means (a VIP, service discovery, orchestrator hooks). Switching is a
    no-op that says so; nothing can be verified."""

    kind = "none"

    def current(self) -> RouteState:
        return RouteState(writer=None, details={"note": "no router configured"})

    def switch_writer(self, new: ServerLike, old: ServerLike | None = None, *, persist: bool = True,
                      log: RouteLog | None = None, seq: int | None = None) -> RouteState:
        return self.current()

    def set_reader_weights(self, weights: Mapping[str, int]) -> RouteState:
        return self.current()

    def set_readers(self, readers: Sequence[str]) -> RouteState:
        return self.current()

    def describe_switch(self, new: ServerLike, old: ServerLike | None = None) -> list[str]:
        return [f"no router for cluster {self.cluster}: applications must find {as_ref(new)} "
                "as the new primary by themselves (VIP, DNS or service discovery)"]

    def verify(self, expected_writer: ServerLike) -> Gate:
        return True, "no router configured: nothing to verify", {"kind": self.kind}
