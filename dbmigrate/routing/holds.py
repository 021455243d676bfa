"""Which hold of the application's connections a router offers a switchover, if any.

Two routers can hold: HAProxy (routing/haproxy_hold.py: new connections wait in its queue, the
old writer's sessions are ended when idle) and the relay (routing/relay_hold.py: every session
waits at a statement boundary and is moved with its state). Both modules offer the functions of
`ConnectionHold`; the switchover (kit/switchover/fence.py) calls them through it.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from dbmigrate.clock import Clock
from dbmigrate.routing import haproxy_hold, relay_hold
from dbmigrate.routing.base import ServerLike


class HeldRoute(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class ConnectionHold(Protocol):
    def can_hold(self, router: Any) -> bool: ...
    def current_hold(self, router: Any) -> HeldRoute | None: ...
    def hold_new_connections(self, router: Any, old: ServerLike,
                             journal: Callable[[Any], None] | None = None) -> HeldRoute: ...
    def quiesce(self, router: Any, timeout_s: float, clock: Clock) -> str | None:
        """After the hold: wait until no session is on its way to the old writer and say so
        (the relay); None when the caller must end the old writer's sessions itself (HAProxy)."""
    def release(self, router: Any, new: ServerLike | None = None, old: ServerLike | None = None) -> str: ...
    def release_leftover(self, router: Any, saved: dict[str, Any] | None) -> str: ...


def hold_of(router: Any) -> ConnectionHold | None:
    """The hold `router` (or the router it wraps) offers; None for routers without one."""
    if relay_hold.relay_of(router) is not None:
        return relay_hold
    if haproxy_hold.haproxy_of(router) is not None:
        return haproxy_hold
    return None
