"""What the schema swap board shows, as plain data: each side (a server the DDL runs on, one at
a time) with its stage, and the switchover of the primary's side. Derived from the run's steps
(their names carry the side) and the warm-up's hit ratios; no Textual here."""

from __future__ import annotations

from dataclasses import dataclass

from dbmigrate.engine.events import Event, Metric
from dbmigrate.tui.board import RunBoard, StepRow

# Step name prefix -> the side's stage once that step is done (in the order a side goes through).
STAGES = [("take ", "out of pool"), ("end client sessions", "drained"), ("apply DDL", "altered"),
          ("verify the change", "verified"), ("warm ", "warmed"), ("put ", "back in pool")]
DOING = {"out of pool": "leaving pool", "drained": "draining", "altered": "altering", "verified": "verifying",
         "warmed": "warming", "back in pool": "returning"}


def stage_of(step: StepRow) -> str | None:
    for prefix, stage in STAGES:
        if step.name.startswith(prefix):
            return stage
    return None


@dataclass
class SideRow:
    name: str
    primary: bool
    stage: str
    last: str  # the last step's name and status, or why it failed
    hit_ratio: float | None


class SwapBoard:
    def __init__(self, board: RunBoard) -> None:
        self.board = board
        self.sides = [p.removeprefix("alter ").split(" ")[0] for p in board.phases if p.startswith("alter ")]
        self.primary = next((p.removeprefix("alter ").split(" ")[0] for p in board.phases
                             if p.startswith("alter ") and "(old primary)" in p), None)
        self.ratios: dict[str, float] = {}

    def apply(self, event: Event) -> bool:
        if isinstance(event, Metric) and event.name.startswith("hit_ratio") and event.labels.get("server"):
            self.ratios[event.labels["server"]] = event.value
            return True
        return False

    def _steps_of(self, side: str) -> list[StepRow]:
        return [s for s in self.board.steps if s.phase.startswith("alter ") and s.phase.split(" ")[1] == side
                or s.phase.startswith("return ") and s.phase.split(" ")[1] == side
                or s.phase == "finish" and s.name.startswith("put ") and f" {side} " in f" {s.name} "]

    def rows(self) -> list[SideRow]:
        out = []
        for side in self.sides:
            stage, last = "in pool", ""
            for step in self._steps_of(side):
                st = stage_of(step)
                if step.status in ("done", "skipped", "dry-run") and st:
                    stage, last = st, f"{step.name}: {step.status}"
                elif step.status in ("running", "undoing") and st:
                    stage, last = (DOING.get(st, st) + "…" if step.status == "running" else f"undoing {st}…"), step.name
                    break
                elif step.status == "failed":
                    stage, last = "failed", f"{step.name}: {step.error or 'failed'}"
                    break
                elif step.status == "undone" and st:
                    stage, last = "undone", f"{step.name}: undone"
            if stage == "warmed" and side in self.ratios:
                stage = f"warmed, hit {self.ratios[side]:.3f}"  # short: the stage column is never cut at 80x24
            out.append(SideRow(side, side == self.primary, stage, last, self.ratios.get(side)))
        return out

    def current(self) -> SideRow | None:
        """The side the swap is at: the one in progress or failed, else the last that moved."""
        rows = self.rows()
        busy = next((r for r in rows if r.stage.endswith("…") or r.stage == "failed"), None)
        return busy or next((r for r in reversed(rows) if r.last), None)

    def last_step_line(self) -> str:
        row = self.current()
        return f"last step: {row.last}" if row is not None else "last step: none yet"  # its name names the side

    def switchover(self) -> str:
        """One line: the switchover of the primary's side, where it is."""
        steps = [s for s in self.board.steps if s.phase == "switchover"]
        back = [s for s in self.board.steps if s.phase == "finish" and s.name.startswith("switch back")]
        if not steps:
            return "switchover: none in this swap"
        running = next((s for s in steps + back if s.status in ("running", "undoing")), None)
        failed = next((s for s in steps + back if s.status == "failed"), None)
        if failed:
            return f"switchover: failed at '{failed.name}': {failed.error or ''}"
        if running:
            return f"switchover: {'undoing' if running.status == 'undoing' else 'running'} '{running.name}'"
        if any(s.status == "undone" for s in steps):
            return "switchover: undone (the old primary is the primary again)"
        if back and all(s.status in ("done", "skipped") for s in back):
            return f"switchover: done and switched back to {self.primary or 'the old primary'}"
        if all(s.status in ("done", "skipped", "dry-run") for s in steps):
            return f"switchover: done ({self.primary or 'the old primary'} is a replica while its DDL runs)"
        done = sum(1 for s in steps if s.status in ("done", "skipped", "dry-run"))
        if done:
            return f"switchover: in progress, {done} of {len(steps)} steps done"
        return f"switchover: pending ({len(steps)} steps)"  # after the replicas' sides: the plan shows where
