"""Who runs a rehearsal's playbook (and, in a consolidation, puts one old server back).

By default the command line's use cases, with the gates answered yes (a rehearsal asks
nothing). `rehearse ... --tui` hands the run to the terminal session instead: the sandbox,
the load and the verifier around it are the rehearsal's, the same either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class Driver(Protocol):
    def run(self, playbook: Path) -> Any: ...  # a RunOutcome: run_id, status, summary

    def roll_back(self, run_id: str, server: str) -> str: ...


class DirectDriver:
    def __init__(self, subscribers=()) -> None:
        self.subscribers = subscribers

    def run(self, playbook: Path) -> Any:
        from dbmigrate.app.runs import start_run

        return start_run(playbook, subscribers=self.subscribers, assume_yes=True, rehearsal=True)

    def roll_back(self, run_id: str, server: str) -> str:
        from dbmigrate.app.consolidate.control import rollback_server

        return rollback_server(run_id, server, subscribers=self.subscribers)
