"""The `dbmigrate` command. Every DbmigrateError becomes one clear line and an exit code."""

from __future__ import annotations

import logging
import os
import sys

import typer
from rich.markup import escape

from dbmigrate.cli import common, inventory, sandbox
from dbmigrate.exceptions import DbmigrateError

app = typer.Typer(
    name="dbmigrate",
    help="Live MySQL/MariaDB migration and cutover: switchover, shard consolidation, lag gates, "
         "warm-up, digest comparison and guarded rollback.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks and every SQL statement (redacted).")):
    common.state["debug"] = debug or bool(os.environ.get("DBMIGRATE_DEBUG"))
    if common.state["debug"]:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")


# Every command group adds its commands with register(app); a missing module is an error.
from dbmigrate.cli import (  # noqa: E402
    check, checksum, consolidate, digest, lag, rehearse, runs, topology, tui, warm,
)

for _module in (sandbox, inventory, topology, lag, check, checksum, runs, rehearse, digest, warm, consolidate, tui):
    _module.register(app)


def main() -> None:
    try:
        app()
    except DbmigrateError as e:
        if common.state["debug"]:
            raise
        common.err_console.print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
        if e.hint:
            common.err_console.print(f"[yellow]hint:[/] {escape(e.hint)}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        common.err_console.print("[bold red]interrupted[/]")
        sys.exit(130)
