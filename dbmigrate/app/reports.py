"""Reports as use cases: a run with a report at the end, and the report of a journaled run."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from dbmigrate.app.evidence import ClusterSampler
from dbmigrate.app.runs import resolve_journal_path, start_run
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.runner import RunOutcome
from dbmigrate.playbook import load_playbook
from dbmigrate.report.model import ReportModel, from_journal
from dbmigrate.report.tables import SeedTable, all_tables, rich_table
from dbmigrate.report.write import check_report_path, write_report

__all__ = ["all_tables", "check_report_path", "model_of_run", "rich_table", "run_with_report", "write_report",
           "write_run_report"]


def write_run_report(run_ref: str, path: Path, journal_path: Path | None = None
                     ) -> tuple[Path, Path, list[SeedTable]]:
    """`dbmigrate runs report RUN --out FILE`: HTML and JSON from what the run journaled."""
    path = check_report_path(path)
    with Journal(resolve_journal_path(journal_path)) as journal:
        model = from_journal(journal, run_ref)
    html_path, json_path = write_report(model, path)
    return html_path, json_path, all_tables(model)


def run_with_report(playbook_path: Path, report: Path, *, journal_path: Path | None = None, dry_run: bool = False,
                    **start_kwargs: Any) -> tuple[RunOutcome, tuple[Path, Path, list[SeedTable]]]:
    """`dbmigrate run PLAYBOOK --report FILE`: the run as usual, with lag and the writer's round trip
    sampled beside it; the report is written whatever the outcome (a rolled-back run is the one
    most worth reading)."""
    report = check_report_path(report)  # before anything connects
    playbook = load_playbook(playbook_path)
    journal = resolve_journal_path(journal_path, playbook)
    inventory = playbook.inventory_path
    sampler = (ClusterSampler(inventory, playbook.cluster) if inventory is not None and not dry_run
               and not playbook.spec.dry_run else None)
    with sampler if sampler is not None else nullcontext():
        outcome = start_run(playbook_path, journal_path=journal, dry_run=dry_run, **start_kwargs)
    if sampler is not None:
        sampler.save(journal, outcome.run_id)
    return outcome, write_run_report(outcome.run_id, report, journal)


def model_of_run(run_ref: str, journal_path: Path | None = None) -> ReportModel:
    with Journal(resolve_journal_path(journal_path)) as journal:
        return from_journal(journal, run_ref)

