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

console = Console()
# soft_wrap: an error stays one greppable line whatever the terminal width.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

state = {"debug": False}


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def show_failure(failure: Failure) -> None:
    err_console.print(f"[bold red]error:[/] {escape(failure.message)}")
    if failure.hint:
        err_console.print(f"[yellow]hint:[/] {escape(failure.hint)}")


def guarded(command: Callable[..., None]) -> Callable[..., None]:
    """Run a command inside the error boundary: a failure is one line, a hint and its exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except (Exception, KeyboardInterrupt) as exc:
            failure = failure_of(exc)
            if failure is None or state["debug"]:
                raise
            show_failure(failure)
            raise typer.Exit(failure.exit_code)

    return wrapper
