"""The `dbmigrate` command. Every DbmigrateError becomes one clear line and an exit code."""

from __future__ import annotations

import logging
import os
import signal
import sys

import typer

from dbmigrate.app.paths import check_home
from dbmigrate.app.errors import Terminated, failure_of
from dbmigrate.db.credentials import remove_private_files
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.home import home
from dbmigrate.cli import common, inventory, jsonout, sandbox
from dbmigrate.cli.examples import add_examples
from dbmigrate.console_table import fit_to_output

app = typer.Typer(
    name="dbmigrate",
    help="Live MySQL/MariaDB migration and cutover: switchover, shard consolidation, lag gates, "
         "warm-up, digest comparison and guarded rollback.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"dbmigrate {version('dbmigrate')}")
        except PackageNotFoundError:
            typer.echo("dbmigrate (not installed as a package)")
        raise typer.Exit(0)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks and every SQL statement (redacted)."),
          _show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                             help="Print the version and exit.")):
    common.state["debug"] = debug or bool(os.environ.get("DBMIGRATE_DEBUG"))
    fit_to_output(common.console)
    common.state["pending_error"] = None
    if os.environ.get("DBMIGRATE_HOME"):
        try:
            check_home(home())
        except DbmigrateError as exc:  # raised inside the command's boundary, so --json reports it as a record
            common.state["pending_error"] = exc
    if common.state["debug"]:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")


# Every command group adds its commands with register(app); a missing module is an error.
from dbmigrate.cli import (  # noqa: E402
    check, checksum, consolidate, digest, lag, rehearse, runs, topology, tui, warm,
)

for _module in (sandbox, inventory, topology, lag, check, checksum, runs, rehearse, digest, warm, consolidate, tui):
    _module.register(app)


def _guard_all(group: typer.Typer, prefix: str = "") -> None:
    """Every command runs inside the one error boundary, however it is invoked."""
    for info in group.registered_commands:
        if info.callback is None:
            continue
        name = prefix + (info.name or info.callback.__name__.replace("_", "-"))
        if getattr(info.callback, "guarded", False):  # guarded where it is defined: name it here
            info.callback = common.guarded(info.callback.__wrapped__, name)
        elif not getattr(info.callback, "__wrapped__", None):
            info.callback = common.guarded(info.callback, name)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _guard_all(sub.typer_instance, prefix + sub.name + " ")


_guard_all(app)
add_examples(app)


def _run_under_json() -> int:
    """Under --json an error the argument parser finds (an unknown option, a missing argument)
    is an error record and a summary as well, not only text."""
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as e:  # the parser's usage errors; commands' own errors never get here
        ctx, path = getattr(e, "ctx", None), []
        while ctx is not None and ctx.parent is not None:  # the root's name is the program's, not a command
            path.insert(0, ctx.info_name)
            ctx = ctx.parent
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        exit_code = int(getattr(e, "exit_code", 2))
        jsonout.parser_error(" ".join(path) or "dbmigrate", message, exit_code)
        common.err_console.print(f"error: {message}", markup=False)
        return exit_code
    return code if isinstance(code, int) else 0


def _stop_on(signum: int, _frame) -> None:
    """SIGTERM/SIGHUP: remove the private defaults files (they hold passwords) at once,
    then unwind like Ctrl-C so that children are killed and `finally` blocks run."""
    remove_private_files()
    raise Terminated(signum, signal.Signals(signum).name)


def main() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on)
    try:
        if "--json" in sys.argv[1:]:
            sys.exit(_run_under_json())
        app()
    except (Exception, KeyboardInterrupt) as exc:
        # Errors raised outside a command (option callbacks, registration) meet the same boundary.
        failure = failure_of(exc)
        if failure is None or common.state["debug"]:
            raise
        common.show_failure(failure)
        sys.exit(failure.exit_code)
