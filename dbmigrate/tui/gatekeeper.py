"""The runner's approver for an interactive session.

The runner asks from its worker thread and must block until the operator
answers; the question travels to the UI as a message (`ask`), the answer
comes back through `answer()`. Aborting or closing the session declines the
pending question and every later one, so a worker never waits for a screen
that is gone.
"""

from __future__ import annotations

import threading
from typing import Callable

from dbmigrate.engine.events import GateWaiting


class GateKeeper:
    def __init__(self, ask: Callable[[GateWaiting], object]) -> None:
        self._ask = ask
        self._lock = threading.Lock()
        self._answered = threading.Event()
        self._answer: tuple[bool, str] = (False, "")
        self._pending: GateWaiting | None = None
        self._refusal: str | None = None  # set: every question is declined with this reason

    def __call__(self, waiting: GateWaiting) -> tuple[bool, str]:
        """Called by the runner (worker thread) for each manual gate; blocks until answered."""
        with self._lock:
            if self._refusal is not None:
                return False, self._refusal
            self._pending = waiting
            self._answered.clear()
        self._ask(waiting)
        # No timeout on purpose: a cutover waits for a human, never for a clock.
        self._answered.wait()
        with self._lock:
            self._pending = None
            return self._answer

    @property
    def pending(self) -> GateWaiting | None:
        return self._pending

    def answer(self, ok: bool, reason: str = "") -> bool:
        """The operator's answer to the pending question; False when nothing was asked."""
        with self._lock:
            if self._pending is None:
                return False
            self._answer = (ok, reason or ("approved by operator" if ok else "declined by operator"))
            self._answered.set()
            return True

    def refuse_all(self, reason: str) -> None:
        """Decline the pending question (if any) and every later one until `reopen()`."""
        with self._lock:
            self._refusal = reason
            if self._pending is not None:
                self._answer = (False, reason)
                self._answered.set()

    def reopen(self) -> None:
        """Ask the operator again (a new run or a rollback starts)."""
        with self._lock:
            self._refusal = None
