"""The one error boundary: what any failure means to the operator.

Every user interface (the command line, the terminal UI) turns an exception
into the same three things through `failure_of`: an exit code, one line, and
what to do next, with secrets masked. Exit codes: 0 success, 1 the operation
failed or was rolled back, 2 bad input, 4 paused at a gate, 5 refused before any
change, 130 interrupted (Ctrl-C), 128+N stopped by signal N (143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from dbmigrate.exceptions import CommandFailed, DbmigrateError
from dbmigrate.redact import redact  # front ends show server messages through it

INTERRUPTED = 130
PAUSED = 4  # a run stopped at a gate that pauses: nothing undone, resume or roll back by decision
REFUSED = 5  # a run refused before any change: every server as it was (not the same as rolled back)


def exit_code_of_run(status: str) -> int:
    """A finished run's exit code: scripts tell a refusal (nothing happened) from a
    rollback (something happened and was undone) without parsing words."""
    return {"done": 0, "paused": PAUSED, "refused": REFUSED}.get(status, 1)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP asked the process to stop. A KeyboardInterrupt, so that
    the same `finally` blocks and run-stopping paths as Ctrl-C apply."""

    def __init__(self, signum: int, name: str):
        super().__init__(name)
        self.signum, self.name = signum, name


@dataclass(frozen=True)
class Failure:
    exit_code: int
    message: str
    hint: str | None = None


def run_failed(outcome: Any) -> CommandFailed:
    """A run that did not succeed, as the command's error: its summary (why it ended so and what it
    left) and its hint, with the run's exit code."""
    hint = outcome.error.hint if outcome.error is not None else None
    return CommandFailed(exit_code_of_run(outcome.status), outcome.summary, hint)


def failure_of(exc: BaseException) -> Failure | None:
    """The operator's view of an exception; None for a bug (let it show its traceback)."""
    if isinstance(exc, DbmigrateError):
        return Failure(exc.exit_code, redact(exc.message) or "", redact(exc.hint) if exc.hint else None)
    if isinstance(exc, Terminated):
        return Failure(128 + exc.signum, f"stopped by {exc.name}: the journal records where the run stopped",
                       "see: dbmigrate runs show last")
    if isinstance(exc, KeyboardInterrupt):
        return Failure(INTERRUPTED, "interrupted: the journal records where the run stopped",
                       "see: dbmigrate runs show last")
    return None
