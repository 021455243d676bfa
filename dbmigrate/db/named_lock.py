"""Named locks (GET_LOCK) on a dedicated session: the database half of the cluster lock.

The lock lives as long as the session: it vanishes when the holder's connection
dies, even after a SIGKILL of the tool.
"""

from __future__ import annotations

from typing import Any, Protocol


class SqlSession(Protocol):
    def query(self, sql: str, params: tuple[Any, ...] | None = None) -> list[dict[str, Any]]: ...


def _scalar(rows: list[dict[str, Any]]) -> Any:
    return next(iter(rows[0].values())) if rows else None


class SqlNamedLocks:
    """The engine's NamedLocks over one session (a dedicated connection to the primary)."""

    def __init__(self, session: SqlSession) -> None:
        self.session = session

    def try_lock(self, name: str) -> int | None:
        """1 when taken, 0 when someone holds it, None when the server could not create it."""
        got = _scalar(self.session.query("SELECT GET_LOCK(%s, 0) AS got", (name,)))
        return None if got is None else int(got)

    def release_lock(self, name: str) -> None:
        self.session.query("SELECT RELEASE_LOCK(%s) AS released", (name,))

    def lock_holder(self, name: str) -> Any:
        """The connection id holding the lock, or None."""
        return _scalar(self.session.query("SELECT IS_USED_LOCK(%s) AS conn", (name,)))

    def lock_is_free(self, name: str) -> bool:
        return bool(_scalar(self.session.query("SELECT IS_FREE_LOCK(%s) AS free", (name,))) == 1)

    def close(self) -> None:
        close = getattr(self.session, "close", None)
        if callable(close):
            close()

    def end_session(self, connection_id: int) -> None:
        """End another session (a dead process's, kept open by a partition) and the locks it holds."""
        self.session.query(f"KILL CONNECTION {int(connection_id)}")
