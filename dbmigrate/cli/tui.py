"""`dbmigrate tui PLAYBOOK`: run a playbook in an interactive terminal session."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from dbmigrate.app.errors import exit_code_of_run
from dbmigrate.cli.common import console, guarded
from dbmigrate.exceptions import UsageError


def needs_terminal(stdin=None, stdout=None, *, what: str = "dbmigrate tui",
                   instead: str = "script the run with: dbmigrate run PLAYBOOK --yes") -> None:
    """Without a terminal the screen would write escape codes into a pipe or a file until killed."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    missing = [name for name, stream in (("stdin", stdin), ("stdout", stdout))
               if not (hasattr(stream, "isatty") and stream.isatty())]
    if missing:
        raise UsageError(f"{what} needs an interactive terminal, and its {' and '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not one",
                         hint=f"run it from a terminal (ssh -t, tmux), or {instead}")


class PlainUsage(TyperCommand):
    """The usage line names arguments as the manual does (`tui [OPTIONS] PLAYBOOK`), not as
    Typer's `{playbook}`, which reads like a template left unfilled."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = (param.metavar or param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


@guarded
def tui_command(
    playbook: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
    journal: Annotated[Optional[Path], typer.Option("--journal", help="Journal file (default: the playbook's "
                                                                      "`journal:`, else $DBMIGRATE_JOURNAL, else "
                                                                      "journal.sqlite in $DBMIGRATE_HOME).")] = None,
    start: Annotated[bool, typer.Option("--start", help="Start the run at once instead of waiting for `g`.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Read, check and describe; change nothing.")] = False,
    monitor: Annotated[bool, typer.Option("--monitor/--no-monitor",
                                          help="Sample lag and writer latency from the cluster.")] = True,
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between panel samples.")] = 1.0,
    lag_limit_ms: Annotated[float, typer.Option("--lag-limit-ms", min=1, help="Lag above this shows red.")] = 1000.0,
) -> None:
    """Open an interactive cutover session: g start, y/n at gates, a abort, r roll back, q quit."""
    needs_terminal()
    from dbmigrate.tui.session import CutoverApp  # Textual loads only for this command

    app = CutoverApp(playbook, journal_path=journal, autostart=start, dry_run=dry_run, monitor=monitor,
                     monitor_interval_s=interval, lag_limit_ms=lag_limit_ms, handle_signals=True)
    app.run()
    # The screen is gone: leave the outcome in the terminal's scrollback.
    outcome = app.outcome
    if outcome is not None:
        console.print(f"run {outcome.run_id}: {outcome.status}: {outcome.summary}", markup=False, highlight=False)
        if outcome.error is not None and outcome.error.hint:
            console.print(f"hint: {outcome.error.hint}", markup=False, highlight=False)
        if not outcome.ok:
            raise typer.Exit(exit_code_of_run(outcome.status))
    elif app.error:
        console.print(f"error: {app.error}", markup=False, highlight=False)
        raise typer.Exit(1)
    elif app.stopped_by:
        raise typer.Exit(128 + signal.Signals[app.stopped_by].value)


def rehearsal_session():
    """`rehearse ... --tui`: the terminal session that runs the rehearsal's playbook (a SessionDriver)."""
    needs_terminal(what="--tui", instead="rehearse without --tui")
    from dbmigrate.tui.rehearsal import SessionDriver  # Textual loads only for --tui

    return SessionDriver()


def register(app: typer.Typer) -> None:
    app.command("tui", cls=PlainUsage)(tui_command)
