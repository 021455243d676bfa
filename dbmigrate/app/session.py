"""What an interactive session adds to a run's journal itself (the run's own events are
journaled by the run): why the session stopped it, e.g. the terminal was lost."""

from __future__ import annotations

from pathlib import Path

from dbmigrate.app.runs import resolve_journal_path
from dbmigrate.engine.events import Log
from dbmigrate.engine.journal import Journal


def journal_note(run_ref: str, message: str, *, level: str = "warning", journal_path: Path | None = None) -> None:
    """One line in a run's journal (shown by `dbmigrate runs show RUN`)."""
    with Journal(resolve_journal_path(journal_path)) as journal:
        run_id = journal.resolve_run_id(run_ref)
        journal.record(Log(run_id=run_id, level=level, message=message))
