"""The one `--json` contract, the same for every command that has the option.

stdout carries JSON lines only: one object per line, each with a `record` key.

- `{"record": "event", "event": "StepFinished", ...}`: progress of a run, as it happens;
- `{"record": "result", "command": "check", "result": {...}}`: what the command found or did;
- `{"record": "error", "exit_code": 2, "message": "...", "hint": "..."}`: why it failed (also on stderr
  as one line);
- `{"record": "summary", "command": ..., "exit_code": N, "duration_s": S, "counts": {...}}`: always the
  last line, whatever happened. `counts` holds the number of records of each kind written before it and,
  for commands that run a procedure, `steps` by status (`undo_done` for undone ones) and `gates` by verdict (plus the run's
  `run_id` and `status`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO, Any

from dbmigrate.app.errors import Failure
from dbmigrate.engine.events import Event, GateDecided, RunFinished, RunStarted, StepFinished, event_to_dict

# The names the commands give their --json option's parameter.
JSON_PARAMS = ("json_out", "json_lines", "as_json")


class JsonSession:
    """The records of one command under --json, and its closing summary."""

    def __init__(self, command: str, stream: IO[str] | None = None) -> None:
        self.command = command
        self.stream = stream
        self.started = time.monotonic()
        self.counts: dict[str, int] = {}
        self.steps: dict[str, int] = {}
        self.gates: dict[str, int] = {}
        self.run: dict[str, str] = {}
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str)
        with self._lock:
            kind = str(record.get("record"))
            self.counts[kind] = self.counts.get(kind, 0) + 1
            out = self.stream or sys.stdout  # looked up late: test runners swap sys.stdout
            out.write(line + "\n")
            out.flush()

    def result(self, doc: Any) -> None:
        self.write({"record": "result", "command": self.command, "result": doc})

    def event(self, event: Event) -> None:
        if isinstance(event, StepFinished):
            key = event.status if event.action != "undo" else f"undo_{event.status}"
            self.steps[key] = self.steps.get(key, 0) + 1
        elif isinstance(event, GateDecided):
            verdict = "passed" if event.ok else "refused"
            self.gates[verdict] = self.gates.get(verdict, 0) + 1
        elif isinstance(event, RunStarted) and event.run_id:
            self.run["run_id"] = event.run_id
        elif isinstance(event, RunFinished):
            self.run["status"] = event.status
            self.run["reason"] = event.summary  # the run's own sentence: why it ended so, what it left
        self.write({"record": "event", **event_to_dict(event)})

    def error(self, failure: Failure) -> None:
        self.write({"record": "error", "command": self.command, "exit_code": failure.exit_code,
                    "message": failure.message, "hint": failure.hint})

    def summary(self, exit_code: int) -> None:
        counts: dict[str, Any] = {kind: self.counts.get(kind, 0) for kind in ("event", "result", "error")}
        if self.steps:
            counts["steps"] = dict(self.steps)
        if self.gates:
            counts["gates"] = dict(self.gates)
        self.write({"record": "summary", "command": self.command, "exit_code": exit_code,
                    "duration_s": round(time.monotonic() - self.started, 3), "counts": counts, **self.run})


_current: list[JsonSession] = []


def current() -> JsonSession | None:
    return _current[-1] if _current else None


def begin(command: str) -> JsonSession:
    session = JsonSession(command)
    _current.append(session)
    return session


def end(session: JsonSession, exit_code: int) -> None:
    try:
        session.summary(exit_code)
    finally:
        if session in _current:
            _current.remove(session)


def requested(kwargs: dict[str, Any]) -> bool:
    return any(kwargs.get(name) is True for name in JSON_PARAMS)


def parser_error(command: str, message: str, exit_code: int = 2) -> None:
    """An error the argument parser found before any command ran: a record and a summary too."""
    session = begin(command)
    try:
        session.error(Failure(exit_code, message, "see --help"))
    finally:
        end(session, exit_code)
