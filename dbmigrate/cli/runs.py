"""Commands that drive runs: run, plan, resume, rollback, runs ls, runs show.

They only parse, pick a renderer and turn the outcome into an exit code:
0 ok, 1 run failed or a gate refused, 2 usage or configuration error,
130 interrupted. The runs themselves are use cases in dbmigrate.app.runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from dbmigrate.app.errors import run_failed
from dbmigrate.app.runs import (
    RunOutcome,
    SignalStop,
    list_runs,
    plan_playbook,
    resolve_run,
    resume_run,
    rollback_run,
    run_detail,
    start_run,
)
from dbmigrate.cli.common import console, err_console, guarded, print_json
from dbmigrate.cli.render import (
    ConsoleRenderer,
    JsonLinesRenderer,
    console_approver,
    console_chooser,
    plan_to_dict,
    render_plan,
    render_run_detail,
    render_runs_table,
)
from dbmigrate.engine.events import Subscriber



def _subscribers(json_lines: bool, stop: SignalStop | None = None) -> list[Subscriber]:
    shown: list[Subscriber] = [JsonLinesRenderer(sys.stdout)] if json_lines else \
        [ConsoleRenderer(Console(highlight=False, soft_wrap=True))]
    return shown + ([stop.subscriber] if stop is not None else [])


def _signals(rollback: bool = False) -> SignalStop:
    """SIGINT/SIGTERM: the first finishes the step and stops (rolling a cutover back), the second interrupts."""
    return SignalStop(lambda line: err_console.print(line, markup=False), rollback=rollback)


def _finish(outcome: RunOutcome) -> None:
    if not outcome.ok:
        raise run_failed(outcome)


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Approve manual gates (scripted runs).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Emit one JSON object per event/record.")]
ReportOpt = Annotated[Optional[Path], typer.Option("--report", help="Write an HTML report of the run (timeline, "
                                                  "digest, guard) to this file and its numbers as JSON beside it.")]
ClusterOpt = Annotated[Optional[str], typer.Option(
    "--cluster", help="With 'last': the newest run of this cluster (default: the only cluster the journal has "
                      "runs of; with several, you are asked). Rehearsal runs are named by their id.")]
JournalOpt = Annotated[Optional[Path], typer.Option("--journal", help="Journal file (default: $DBMIGRATE_JOURNAL "
                                                                        "or $DBMIGRATE_HOME/journal.sqlite).")]


@guarded
def run_command(
    playbook: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
    yes: YesOpt = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Read, check and describe; change nothing.")] = False,
    json_lines: JsonOpt = False,
    journal: JournalOpt = None,
    report: ReportOpt = None,
) -> None:
    """Run a playbook."""
    with _signals() as stop:
        if report is None:
            outcome = start_run(playbook, subscribers=_subscribers(json_lines, stop), approver=console_approver(),
                                assume_yes=yes, dry_run=dry_run, journal_path=journal, cancel=stop.cancel)
        else:
            from dbmigrate.app.reports import run_with_report  # the report's modules only when asked for

            outcome, written = run_with_report(playbook, report, subscribers=_subscribers(json_lines, stop),
                                               approver=console_approver(), assume_yes=yes, dry_run=dry_run,
                                               journal_path=journal, cancel=stop.cancel)
            _say_report(written, json_lines)
    _finish(outcome)


@guarded
def plan_command(
    playbook: Annotated[Path, typer.Argument(help="Playbook YAML file.")],
    json_out: JsonOpt = False,
) -> None:
    """Show the phases, steps and gates a playbook would run, without connecting."""
    procedure = plan_playbook(playbook)
    if json_out:
        print_json(plan_to_dict(procedure))
    else:
        render_plan(procedure, Console(highlight=False, soft_wrap=True))


@guarded
def resume_command(
    run: Annotated[str, typer.Argument(help="Run id (a unique prefix, or 'last': the cluster's newest run).")],
    yes: YesOpt = False,
    json_lines: JsonOpt = False,
    journal: JournalOpt = None,
    cluster: ClusterOpt = None,
    without_old_primary: Annotated[bool, typer.Option(
        "--without-old-primary", help="The old primary died after the fence: promote the candidate without it, "
                                      "once the facts show it holds the old primary's final position.")] = False,
) -> None:
    """Continue an interrupted or failed run from the first step not already done."""
    with _signals() as stop:
        outcome = resume_run(run, subscribers=_subscribers(json_lines, stop), approver=console_approver(),
                             assume_yes=yes, journal_path=journal, cancel=stop.cancel,
                             without_old_primary=without_old_primary, cluster=cluster, choose=console_chooser())
    _finish(outcome)


@guarded
def rollback_command(
    run: Annotated[str, typer.Argument(help="Run id (a unique prefix, or 'last': the cluster's newest run).")],
    yes: YesOpt = False,
    json_lines: JsonOpt = False,
    journal: JournalOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Undo the completed steps of a run, newest first."""
    with _signals(rollback=True) as stop:
        outcome = rollback_run(run, subscribers=_subscribers(json_lines, stop), approver=console_approver(),
                               assume_yes=yes, journal_path=journal, cluster=cluster, choose=console_chooser())
    _finish(outcome)


@guarded
def runs_ls_command(
    json_out: JsonOpt = False,
    journal: JournalOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many recent runs.")] = 20,
) -> None:
    """List recent runs, newest first."""
    runs = list_runs(journal, limit)
    if json_out:
        print_json(runs)
    else:
        render_runs_table(runs, console)


@guarded
def runs_show_command(
    run: Annotated[str, typer.Argument(help="Run id (a unique prefix or 'last' works).")],
    json_out: JsonOpt = False,
    journal: JournalOpt = None,
) -> None:
    """Show one run: steps, gates, hooks and statements sent."""
    detail = run_detail(run, journal)
    if json_out:
        print_json(detail)
    else:
        render_run_detail(detail, console)


@guarded
def runs_report_command(
    run: Annotated[str, typer.Argument(help="Run id (a unique prefix or 'last' works).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="HTML file (default: report-RUN.html); "
                                                "the JSON goes beside it.")] = None,
    json_out: JsonOpt = False,
    journal: JournalOpt = None,
) -> None:
    """Write the evidence report of a run: charts and before/after tables from what it journaled."""
    run_id = resolve_run(run, journal)
    from dbmigrate.app.reports import write_run_report

    written = write_run_report(run_id, out or Path(f"report-{run_id}.html"), journal)
    _say_report(written, json_out)


def _say_report(written, json_out: bool) -> None:
    """Where the report went, and its tables; on stderr with --json so stdout stays machine-readable."""
    from dbmigrate.app.reports import rich_table

    html_path, json_path, tables = written
    out = Console(stderr=True, highlight=False, soft_wrap=True) if json_out else Console(highlight=False,
                                                                                           soft_wrap=True)
    for t in tables:
        out.print(rich_table(t))
    out.print(f"report: {html_path} (numbers: {json_path})", markup=False)


def register(app: typer.Typer) -> None:
    """Add run, plan, resume, rollback and the `runs` group to the application."""
    app.command("run")(run_command)
    app.command("plan")(plan_command)
    app.command("resume")(resume_command)
    app.command("rollback")(rollback_command)
    runs_app = typer.Typer(help="Inspect the run journal.", no_args_is_help=True)
    runs_app.command("ls")(runs_ls_command)
    runs_app.command("show")(runs_show_command)
    runs_app.command("report")(runs_report_command)
    app.add_typer(runs_app, name="runs")
