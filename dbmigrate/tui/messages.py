"""Messages from worker threads to the session's UI.

Workers never touch widgets: they post one of these (thread-safe) and the
app's handlers update the screen on the UI thread.
"""

from __future__ import annotations

from textual.message import Message

from dbmigrate.engine.events import Event, GateWaiting
from dbmigrate.app.runs import RunOutcome
from dbmigrate.app.monitor import ClusterSample


class EngineEvent(Message):
    """One event of the run's bus, in emission order."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class GateAsked(Message):
    """The runner waits at a manual gate for the operator."""

    def __init__(self, waiting: GateWaiting) -> None:
        super().__init__()
        self.waiting = waiting


class RunEnded(Message):
    """The run (or rollback) worker returned: an outcome, or an error before the runner started."""

    def __init__(self, mode: str, outcome: RunOutcome | None, error: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__()
        self.mode = mode  # "run" or "rollback"
        self.outcome = outcome
        self.error = error
        self.hint = hint


class ClusterSampled(Message):
    """One sample of the cluster panels (lag, writer latency)."""

    def __init__(self, sample: ClusterSample | None, error: str | None = None) -> None:
        super().__init__()
        self.sample = sample
        self.error = error


class ServerRolledBack(Message):
    """One old server of a consolidation was put back (its sentence), or could not be (error)."""

    def __init__(self, server: str, sentence: str | None, error: str | None) -> None:
        super().__init__()
        self.server = server
        self.sentence = sentence
        self.error = error
