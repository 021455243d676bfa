"""The contract between a run and its procedure, typed: what a procedure reads of its
playbook (`PlaybookView`), how it opens what its steps need (`Preparer`) and what it
hands back to the run (`Prepared`).

Procedures see their playbook through `PlaybookView` (engine/playbook_view.py), so the
registry needs no import of the playbook module, which imports the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Protocol

from dbmigrate.engine.playbook_view import PlaybookView
from dbmigrate.engine.step import RunState

if TYPE_CHECKING:
    from dbmigrate.db.connection import Server


@dataclass(frozen=True)
class LeaseServers:
    """Where the cluster lease row is kept: every server of the cluster, and which one is primary."""

    servers: "dict[str, Server]"
    primary: str


@dataclass
class Prepared:
    """What a procedure's preparer hands to the run.

    `resources`: the procedure's own typed resources (its steps find them in ctx.resources);
    `lock_session`: a dedicated session on which the run takes the cluster lock;
    `lease_servers`: for a procedure on one cluster, where the cluster lease is kept.
    The run closes the session and the resources when it ends."""

    resources: Any = None
    lock_session: "Optional[Server]" = None
    lease_servers: Optional[LeaseServers] = None

    def close(self) -> list[tuple[object, Exception]]:
        """Close the lock session (the lock is released by then), then the resources; returns
        what failed to close (never raises: closing must not mask the run's outcome)."""
        failed: list[tuple[object, Exception]] = []
        for value in (self.lock_session, self.resources):
            close = getattr(value, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:  # noqa: BLE001 - reported by the caller
                    failed.append((value, exc))
        return failed


class Preparer(Protocol):
    """Opens what a procedure's steps need (servers, router, lock session); may connect.

    `state` is the run's journaled state, so that a resumed run uses facts decided before
    a crash (e.g. which server was primary). `old_gone` asks to complete a cutover whose
    old primary died after the fence; only procedures registered with `takeover=True`
    are asked that."""

    def __call__(self, playbook: PlaybookView, state: RunState, /, *, old_gone: bool = False) -> Prepared: ...


def no_resources(playbook: PlaybookView, state: RunState, *, old_gone: bool = False) -> Prepared:
    return Prepared()


__all__ = ["LeaseServers", "PlaybookView", "Prepared", "Preparer", "no_resources"]
