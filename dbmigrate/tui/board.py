"""What the session shows about a run, as plain data: steps, gates, run status.

Built from the planned procedure, then updated by the engine's events. Rows
are keyed by the step's global index: a plan built without servers names
steps with placeholders ("fence <old primary>") and the real run renames
them ("fence db-1"), but the order and count of steps are the same.
No Textual here, so the state machine is tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dbmigrate.engine.events import (
    Event,
    GateDecided,
    GateWaiting,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from dbmigrate.app.runs import Procedure

ICONS = {
    "pending": "·",
    "running": "▶",
    "undoing": "↺",
    "done": "✓",
    "skipped": "↷",
    "failed": "✗",
    "undone": "↶",
    "dry-run": "≈",
    "interrupted": "!",
}

@dataclass
class StepRow:
    index: int
    phase: str
    name: str
    mutating: bool = True
    undoable: bool = False
    status: str = "pending"
    sentence: str = ""
    error: str | None = None
    duration_ms: float | None = None

    @property
    def icon(self) -> str:
        return ICONS.get(self.status, "?")


@dataclass
class GateRow:
    phase: str
    name: str
    kind: str
    status: str = "pending"  # pending, waiting, passed, refused
    reason: str = ""
    by: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class RunBoard:
    """The plan plus everything the run has reported so far."""

    def __init__(self, procedure: Procedure) -> None:
        self.procedure_name = procedure.name
        self.phases = [p.name for p in procedure.phases]
        self._planned_steps = [StepRow(i, phase.name, step.name, step.mutating, step.undo is not None)
                               for i, phase, step in procedure.steps()]
        self._planned_gates = [GateRow(phase.name, g.name, g.kind) for phase in procedure.phases
                               for g in phase.gates]
        self.rollback_on_failure = procedure.rollback_on_failure
        self.reset()

    def reset(self) -> None:
        """Back to the plan (a new run of the same playbook)."""
        self.steps = [StepRow(r.index, r.phase, r.name, r.mutating, r.undoable) for r in self._planned_steps]
        self.gates = [GateRow(g.phase, g.name, g.kind) for g in self._planned_gates]
        self.run_id = ""
        self.status = "idle"
        self.summary = ""
        self.rollback = False
        self.dry_run = False

    # ------------------------------------------------------------------ events

    def apply(self, event: Event) -> bool:
        """Fold one engine event in; True when something shown changed."""
        if isinstance(event, RunStarted):
            self.run_id = event.run_id or self.run_id
            self.status = "rolling back" if event.rollback else "running"
            self.rollback = event.rollback
            self.dry_run = event.dry_run
            return True
        if isinstance(event, (StepStarted, StepFinished)) and event.parent:
            return False  # a fleet's per-server step: its server's row on the fleet board shows it
        if isinstance(event, StepStarted):
            row = self._row(event.index, event.phase, event.name)
            row.status = "undoing" if event.action == "undo" else "running"
            row.error = None
            return True
        if isinstance(event, StepFinished):
            row = self._row(event.index, event.phase, event.name)
            if event.action == "undo" and event.status == "skipped":
                return False  # nothing to undo: the forward result stays what happened
            row.status = event.status
            row.sentence = event.sentence
            row.error = event.error
            row.duration_ms = event.duration_ms
            return True
        if isinstance(event, GateWaiting):
            gate = self._gate(event.phase, event.gate, event.kind)
            gate.status = "waiting"
            return True
        if isinstance(event, GateDecided):
            gate = self._gate(event.phase, event.gate, event.kind)
            gate.status = "passed" if event.ok else "refused"
            gate.reason, gate.by, gate.details = event.reason, event.by, dict(event.details)
            return True
        if isinstance(event, RunFinished):
            self.status = event.status
            self.summary = event.summary
            return True
        return False

    def _row(self, index: int, phase: str, name: str) -> StepRow:
        for row in self.steps:
            if row.index == index:
                if (row.phase, row.name) != (phase, name):
                    row.phase, row.name = phase, name  # the run knows the real server names
                return row
        row = StepRow(index, phase, name)  # not in the plan: show it rather than lose it
        self.steps.append(row)
        self.steps.sort(key=lambda r: r.index)
        return row

    def _gate(self, phase: str, name: str, kind: str) -> GateRow:
        for gate in self.gates:
            if (gate.phase, gate.name) == (phase, name):
                return gate
        gate = GateRow(phase, name, kind)  # e.g. the rollback confirmation
        self.gates.append(gate)
        return gate

    # ------------------------------------------------------------------ questions

    @property
    def active(self) -> bool:
        return self.status in ("running", "rolling back")

    def running_step(self) -> StepRow | None:
        return next((r for r in self.steps if r.status in ("running", "undoing")), None)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.steps:
            out[row.status] = out.get(row.status, 0) + 1
        return out

    def automatic_verdicts(self, up_to_phase: str) -> list[GateRow]:
        """Decided automatic gates of the phases up to and including `up_to_phase`, in order.

        Shown next to a manual gate, so the operator approves knowing what the checks said.
        """
        limit = self.phases.index(up_to_phase) if up_to_phase in self.phases else len(self.phases)
        allowed = set(self.phases[: limit + 1])
        return [g for g in self.gates if g.kind == "auto" and g.status in ("passed", "refused")
                and g.phase in allowed]

    def phase_rows(self) -> list[tuple[str, list[GateRow], list[StepRow]]]:
        """(phase, gates, steps) in plan order, for display."""
        return [(phase, [g for g in self.gates if g.phase == phase], [s for s in self.steps if s.phase == phase])
                for phase in self.phases]
