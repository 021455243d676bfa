"""One base error, a few kinds. Each carries a message and what to do next.

The CLI catches DbmigrateError at the command boundary and prints one clear line
(plus the hint), with the exit code of the kind; tracebacks only with --debug.
"""

from __future__ import annotations


class DbmigrateError(Exception):
    """Base of every error the tool reports to an operator."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class UsageError(DbmigrateError):
    """Bad arguments or bad input files: nothing was attempted."""

    exit_code = 2


class ConfigError(UsageError):
    """An inventory or playbook file is invalid (names file, line and field)."""


class ConnectionFailed(DbmigrateError):
    """A server could not be reached or did not speak the MySQL protocol."""


class AuthFailed(ConnectionFailed):
    """The server refused the credentials."""


class CredentialsError(UsageError):
    """Credentials could not be found (option file, section or environment)."""


class SandboxError(DbmigrateError):
    """A local sandbox could not be created, started or stopped."""


class WaitTimeout(DbmigrateError):
    """A bounded wait ran out; the message names what was awaited and the bound."""


class GateFailed(DbmigrateError):
    """A preflight or phase gate refused to let the run continue."""


class SafetyError(DbmigrateError):
    """An action was refused because it would break a safety invariant."""


class LockHeld(DbmigrateError):
    """Another run holds the cluster lock."""


class Refused(DbmigrateError):
    """A step declined to act and changed nothing (a candidate that never came close enough
    to fence, a fence that gave up): the run ends `refused`, not `rolled_back`."""


class RefusedWait(WaitTimeout, Refused):
    """A bounded wait before any change ran out: nothing was changed."""


class NotUndone(DbmigrateError):
    """An undo that leaves its step's change in place (e.g. DDL without undo statements): the
    rollback goes on, and the run names the step, its server and statements as not undone."""


class CommandFailed(DbmigrateError):
    """A command that ran and ends with a non-zero exit code for a reason it states (a check that
    found a problem, a run that failed or was refused): the same error line and record as any error."""

    def __init__(self, exit_code: int, message: str, hint: str | None = None):
        super().__init__(message, hint)
        self.exit_code = exit_code
