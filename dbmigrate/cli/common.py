"""Shared CLI pieces: consoles, JSON output, and the error boundary's rendering."""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape

from dbmigrate.app.errors import Failure, failure_of
from dbmigrate.cli import jsonout

console = Console()
# soft_wrap: an error stays one greppable line whatever the terminal width.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

state: dict[str, Any] = {"debug": False, "pending_error": None}


def print_json(obj: Any) -> None:
    """The command's result under --json: one `result` record (see jsonout for the contract)."""
    session = jsonout.current()
    if session is not None:
        session.result(obj)
    else:
        sys.stdout.write(json.dumps({"record": "result", "result": obj}, default=str) + "\n")


def show_failure(failure: Failure) -> None:
    err_console.print(f"[bold red]error:[/] {escape(failure.message)}")
    if failure.hint:
        err_console.print(f"[yellow]hint:[/] {escape(failure.hint)}")


def guarded(command: Callable[..., None], name: str | None = None) -> Callable[..., None]:
    """Run a command inside the error boundary: a failure is one line, a hint and its exit code.
    Under --json the command's stdout follows the one contract (jsonout): an error is also a
    record, and a summary record with the exit code always ends the output."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        session = jsonout.begin(name or command.__name__) if (jsonout.current() is None
                                                               and jsonout.requested(kwargs)) else None
        code = 0
        try:
            pending = state.get("pending_error")
            if pending is not None:  # found before the command ran (e.g. an unusable DBMIGRATE_HOME)
                state["pending_error"] = None
                raise pending
            command(*args, **kwargs)
        except typer.Exit as exc:
            code = exc.exit_code
            record = jsonout.current()
            if code and record is not None and not record.counts.get("error"):
                # Commands state their reason with CommandFailed; this is the safety net.
                record.error(Failure(code, f"{record.command} exited with code {code}",
                                     "see the records above for what it found"))
            raise
        except (Exception, KeyboardInterrupt) as exc:
            failure = failure_of(exc)
            code = failure.exit_code if failure is not None else 1
            record = jsonout.current()
            if record is not None:
                record.error(failure or Failure(1, f"internal error: {type(exc).__name__}: {exc}",
                                                "run again with --debug for the traceback"))
            if failure is None or state["debug"]:
                raise
            show_failure(failure)
            raise typer.Exit(failure.exit_code)
        finally:
            if session is not None:
                jsonout.end(session, code)

    wrapper.guarded = True  # type: ignore[attr-defined]
    return wrapper
