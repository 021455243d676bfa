"""A rehearsal's run in the terminal session (`dbmigrate rehearse promote|schema-swap|consolidate --tui`).

The rehearsal builds its throwaway sandbox, starts its load and its verifier, then hands its
playbook here: the session opens on it and starts the run at once, the operator approves its
gates (y) and watches its board (promote, swap or consolidation) as with `dbmigrate tui`, and
closes it (q) when done. The rehearsal then goes on with the run's outcome: the verifier's
check, the report, the teardown. The consolidation's one-server rollback is `b` on the board;
if the session did not do it, the rehearsal does it after the session, as without `--tui`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from dbmigrate.app.consolidate.control import rollback_server
from dbmigrate.app.runs import RunOutcome
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.tui.session import CutoverApp


class SessionDriver:
    """Runs a rehearsal's playbook in a CutoverApp. `open_session` shows the app (default: on this
    terminal, until the operator quits); a test passes one that drives it with Textual's pilot."""

    def __init__(self, open_session: Callable[[CutoverApp], None] | None = None, *,
                 lag_limit_ms: float = 1000.0) -> None:
        self.open_session = open_session or (lambda app: app.run())
        self.lag_limit_ms = lag_limit_ms
        self.app: CutoverApp | None = None

    def run(self, playbook: Path) -> RunOutcome:
        app = CutoverApp(playbook, autostart=True, handle_signals=True, lag_limit_ms=self.lag_limit_ms,
                         rehearsal=True)
        self.app = app
        self.open_session(app)
        if app.outcome is None:
            why = app.error or (f"the session was stopped by {app.stopped_by}" if app.stopped_by
                                else "the session was closed before the run started")
            raise DbmigrateError(f"the rehearsal's run did not take place in the terminal session: {why}",
                                 hint="rehearse again: the run starts with the session, and q closes it once "
                                      "the run has ended")
        return app.outcome

    def roll_back(self, run_id: str, server: str) -> str:
        """The consolidation's one-server rollback: what `b` did on the board, else done now."""
        fleet = self.app.fleet if self.app is not None else None
        row = fleet.rows.get(server) if fleet is not None else None
        if row is not None and row.stage == "rolled back" and row.reason:
            return row.reason
        return rollback_server(run_id, server)
