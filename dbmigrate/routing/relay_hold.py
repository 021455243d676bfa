"""Holding the application's sessions in the relay while the writer moves (docs/internals/relay.md).

The relay's `hold` makes each session's next command wait at a statement boundary (a session in
a transaction goes on until it ends), and new connections wait after their login to the relay.
Unlike HAProxy's hold, nothing is ended on the old writer: a held session is moved, with its
state, by the flip (`move NEW; release`, RelayRouter.switch_writer), so its waiting command runs
on the new writer. Before the fence the switchover waits (bounded) until no session is busy or in
a transaction (`quiesce`): nothing is then on its way to the old writer when it is fenced.

The same functions as routing/haproxy_hold.py (the switchover picks one by its router,
routing/holds.py); every change goes through the router it is given, the run's journaled router
(kit/switchover/router.py), which journals it before it is sent and settles a change in doubt
first. A hold a dead process left releases by itself after the relay's -max-hold-s; resume and
rollback release it at once (`release_leftover`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dbmigrate.clock import Clock
from dbmigrate.routing.base import RouterError, RouterGone, ServerLike, as_ref
from dbmigrate.routing.relay import RelayRouter

QUIET_POLL_S = 0.005


@dataclass
class Hold:
    """A hold in place: the relay's control socket and the writer its sessions were held on."""

    control: str
    address: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "relay", "control": self.control, "address": self.address}


_HOLDS: dict[str, Hold] = {}  # control socket -> the hold this process keeps


def relay_of(router: Any) -> RelayRouter | None:
    """The relay router itself, also when the run wraps it (its journaled router); None for any
    other kind of router."""
    for _ in range(3):
        if router is None or isinstance(router, RelayRouter):
            return router
        router = getattr(router, "router", None)
    return None


def _settle(router: Any) -> None:
    settle = getattr(router, "settle", None)
    if callable(settle) and not isinstance(router, RelayRouter):
        settle()


def _change(router: Any, cmds: list[str], back: list[str], what: str) -> None:
    if isinstance(router, RelayRouter):
        router.send_change(cmds, back)
    else:
        router.send_change(cmds, back, what=what)


def _release(router: Any, what: str) -> str:
    """`release`; a relay that is gone (nothing listens) holds nothing: its hold went with it, and
    a relay started again starts without one. Empty when released, else what happened."""
    try:
        _change(router, ["release"], ["release"], what=what)
    except RouterGone as e:
        return f"the relay is gone ({e.message}): its hold went with it"
    return ""


def can_hold(router: Any) -> bool:
    return relay_of(router) is not None


def current_hold(router: Any) -> Hold | None:
    base = relay_of(router)
    return _HOLDS.get(base.control.path) if base is not None else None


def hold_new_connections(router: Any, old: ServerLike, journal: Callable[[Hold], None] | None = None) -> Hold:
    """Every session's next command waits at its boundary from now on; new connections wait
    after their login. Idempotent. `journal` records the hold before it is sent."""
    held = current_hold(router)
    if held is not None:
        return held
    base = relay_of(router)
    if base is None:
        raise RouterError("not a relay router: its sessions cannot be held")
    _settle(router)
    held = Hold(base.control.path, as_ref(old).address)
    if journal is not None:
        journal(held)
    _change(router, ["hold"], ["release"], what="to hold the relay's sessions at their next statement boundary")
    _HOLDS[base.control.path] = held
    return held


def quiesce(router: Any, timeout_s: float, clock: Clock) -> str | None:
    """Wait, up to `timeout_s`, until no session of the relay is busy or in a transaction: every
    session is then idle or held, and nothing is on its way to the old writer."""
    base = relay_of(router)
    if base is None:
        return None
    t0 = clock.monotonic()
    deadline = t0 + timeout_s
    while True:
        st = base.status()
        busy, in_trx = int(st.get("busy") or 0), int(st.get("in_transaction") or 0)
        if (busy == 0 and in_trx == 0) or clock.monotonic() >= deadline:
            break
        clock.sleep(QUIET_POLL_S)
    ms = (clock.monotonic() - t0) * 1000
    held = f"{st.get('held', 0)} held, {st.get('idle', 0)} idle of {st.get('sessions', 0)} session(s)"
    if busy or in_trx:
        return (f"the relay holds its sessions ({held}); {busy} still busy and {in_trx} in a transaction at "
                f"{timeout_s:g}s: they meet the fence, and the move ends those still in a transaction after its drain")
    return f"the relay holds its sessions ({held}); none busy or in a transaction after {ms:.0f} ms"


def release(router: Any, new: ServerLike | None = None, old: ServerLike | None = None) -> str:
    """End the hold: with `new`, the move there first (held sessions go on there); then the
    release (idempotent: also when the move failed, held sessions go on to the writer that stays)."""
    base = relay_of(router)
    held = _HOLDS.pop(base.control.path, None) if base is not None else None
    if held is None:
        return ""
    try:
        if new is not None:
            router.switch_writer(new, old, persist=False)
    finally:
        gone = _release(router, "to release the relay's held sessions")
    return gone or f"sessions held by the relay released to {as_ref(new) if new is not None else held.address}"


def release_leftover(router: Any, saved: dict[str, Any] | None) -> str:
    """After the process that held died: the relay's hold released (it would end by itself
    after -max-hold-s), toward the writer the relay has now."""
    if current_hold(router) is not None:
        return release(router)
    if not saved:
        return ""
    gone = _release(router, "to release a hold of the relay left by a stopped run")
    return gone or "the relay's hold left by a stopped run released"
