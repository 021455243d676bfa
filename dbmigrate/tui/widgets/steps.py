"""The left column: phases, their gates and steps, each with a live status icon."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from dbmigrate.tui.board import GateRow, RunBoard, StepRow

STATUS_STYLE = {
    "pending": "dim",
    "running": "bold cyan",
    "undoing": "bold yellow",
    "done": "green",
    "skipped": "dim",
    "failed": "bold red",
    "undone": "yellow",
    "dry-run": "cyan",
    "interrupted": "bold red",
}
GATE_MARK = {"pending": ("◇", "dim"), "waiting": ("◆", "bold yellow"), "passed": ("◆", "green"),
             "refused": ("◆", "bold red")}


def duration(ms: float | None) -> str:
    if ms is None:
        return ""
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


class StepList(Static):
    """Rendered from a RunBoard; call `show(board)` after the board changed."""

    def __init__(self, board: RunBoard, **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = Text()
        self.show(board)

    def show(self, board: RunBoard) -> None:
        text = Text()
        header = f"{board.procedure_name}"
        if board.run_id:
            header += f"  run {board.run_id}"
        text.append(header + "\n", style="bold")
        status = board.status + (" (dry run)" if board.dry_run else "")
        text.append(f"{status}", style="bold green" if board.status == "done" else "bold")
        if board.summary:
            text.append(f": {board.summary}")
        text.append("\n")
        for phase, gates, steps in board.phase_rows():
            text.append(f"\n── {phase}\n", style="bold blue")
            for gate in gates:
                self._gate_line(text, gate)
            for row in steps:
                self._step_line(text, row)
            if not steps:
                text.append("     (no steps)\n", style="dim")
        extra = [g for g in board.gates if g.phase not in board.phases]
        for gate in extra:  # e.g. the rollback confirmation
            self._gate_line(text, gate)
        self.text = text
        self.update(text)

    @staticmethod
    def _gate_line(text: Text, gate: GateRow) -> None:
        mark, style = GATE_MARK.get(gate.status, ("◇", "dim"))
        text.append(f"  {mark} ", style=style)
        text.append(f"{gate.kind} gate {gate.name}")
        if gate.reason:
            text.append(f": {gate.reason}", style="dim" if gate.status == "passed" else style)
        text.append("\n")

    @staticmethod
    def _step_line(text: Text, row: StepRow) -> None:
        style = STATUS_STYLE.get(row.status, "")
        text.append(f"  {row.icon} ", style=style)
        text.append(f"{row.index + 1:>2}. {row.name}", style="bold" if row.status in ("running", "undoing") else "")
        if row.duration_ms is not None and row.status not in ("running", "undoing", "pending"):
            text.append(f"  {duration(row.duration_ms)}", style="dim")
        text.append("\n")
        if row.sentence:
            text.append(f"       {row.sentence}\n", style="dim")
        if row.error:
            text.append(f"       {row.error}\n", style="red")

    @property
    def plain(self) -> str:
        """What the list shows, without styles (what an operator reads)."""
        return self.text.plain
