"""The `dbmigrate` application: its commands, registered as needed, inside one error boundary.
Every DbmigrateError becomes one clear line and an exit code."""

from __future__ import annotations

import importlib
import logging
import os

import typer

from dbmigrate.app.paths import check_home_if_set
from dbmigrate.app.provisioning import provision_sandbox_hosts_with
from dbmigrate import version_line
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.cli import common, jsonout
from dbmigrate.cli.examples import add_examples
from dbmigrate.console_table import fit_to_output

# The module of dbmigrate.cli that registers each top-level command. A command imports only its
# own module (and what that needs): starting `dbmigrate run` does not pay for Textual, the
# sandbox, the digest or the warm-up. The order is the order of `--help`.
COMMAND_MODULES = {
    "sandbox": "sandbox", "inventory": "inventory", "topology": "topology", "lag": "lag", "check": "check",
    "checksum": "checksum", "run": "runs", "plan": "runs", "resume": "runs", "rollback": "runs", "runs": "runs",
    "rehearse": "rehearse", "digest": "digest", "shape": "shape", "warm": "warm", "consolidate": "consolidate", "tui": "tui",
}


def _version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks and every SQL statement (redacted)."),
          _show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                             help="Print the version and exit.")):
    common.state["debug"] = debug or bool(os.environ.get("DBMIGRATE_DEBUG"))
    fit_to_output(common.console)
    common.state["pending_error"] = None
    try:
        check_home_if_set()
    except DbmigrateError as exc:  # raised inside the command's boundary, so --json reports it as a record
        common.state["pending_error"] = exc
    if common.state["debug"]:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")


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


def _sandbox_provisioner():
    from dbmigrate.cli.sandbox import sandbox_provisioner

    return sandbox_provisioner()


def build(commands: list[str] | None = None) -> typer.Typer:
    """The application with the modules of these top-level commands registered (all by default).
    Every command group adds its commands with register(app); a missing module is an error."""
    wanted = list(COMMAND_MODULES) if commands is None else commands
    modules = list(dict.fromkeys(COMMAND_MODULES[c] for c in wanted))
    built = typer.Typer(
        name="dbmigrate",
        help="Live MySQL/MariaDB migration and cutover: switchover, shard consolidation, lag gates, "
             "warm-up, digest comparison and guarded rollback.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    )
    built.callback()(_root)
    # A consolidation run from this command line creates the instances its plan puts on a
    # sandbox host in that sandbox; loaded only when such a run starts.
    provision_sandbox_hosts_with(_sandbox_provisioner)
    for module in modules:
        importlib.import_module(f"dbmigrate.cli.{module}").register(built)
    _guard_all(built)
    add_examples(built)
    return built


def command_of(argv: list[str]) -> str | None:
    """The top-level command named on the command line (the first word that is not a root option)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMAND_MODULES else None


def run_under_json(app: typer.Typer) -> int:
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
