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
    """Rendered from a RunBoard; call `show(board)` after the board changed.

    A line longer than the pane wraps under its own text (after the status icon and the step's
    number), so the icons stay a column and nothing is cut."""

    def __init__(self, board: RunBoard, **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = Text()
        self.rows: list[tuple[Text, Text]] = []  # (prefix, body) per line
        self.show(board)

    def show(self, board: RunBoard) -> None:
        self.rows = []
        header = f"{board.procedure_name}"
        if board.run_id:
            header += f"  run {board.run_id}"
        self._line("", Text(header, style="bold"))
        status = Text(board.status + (" (dry run)" if board.dry_run else ""),
                      style="bold green" if board.status == "done" else "bold")
        if board.summary:
            status.append(f": {board.summary}")
        self._line("", status)
        for phase, gates, steps in board.phase_rows():
            self._line("", Text(""))
            self._line("", Text(f"── {phase}", style="bold blue"))
            for gate in gates:
                self._gate_line(gate)
            for row in steps:
                self._step_line(row)
            if not steps:
                self._line("     ", Text("(no steps)", style="dim"))
        extra = [g for g in board.gates if g.phase not in board.phases]
        for gate in extra:  # e.g. the rollback confirmation
            self._gate_line(gate)
        self.text = Text("\n").join(prefix + body for prefix, body in self.rows)
        self.text.append("\n")
        self._render_rows()

    def _line(self, prefix: str | Text, body: Text) -> None:
        self.rows.append((prefix if isinstance(prefix, Text) else Text(prefix), body))

    def _render_rows(self) -> None:
        width = self.content_region.width if self.is_mounted else 0
        if width <= 0:
            self.update(self.text)
            return
        out = Text()
        for prefix, body in self.rows:
            room = max(8, width - prefix.cell_len)
            indent = Text(" " * prefix.cell_len)
            lines = body.wrap(self.app.console, room, overflow="fold") if body.plain else [body]
            for i, line in enumerate(lines):
                out.append_text((prefix if i == 0 else indent) + line)
                out.append("\n")
        self.update(out)

    def on_resize(self, event) -> None:
        self._render_rows()

    def _gate_line(self, gate: GateRow) -> None:
        mark, style = GATE_MARK.get(gate.status, ("◇", "dim"))
        body = Text(f"{gate.kind} gate {gate.name}")
        if gate.reason:
            body.append(f": {gate.reason}", style="dim" if gate.status == "passed" else style)
        self._line(Text(f"  {mark} ", style=style), body)

    def _step_line(self, row: StepRow) -> None:
        style = STATUS_STYLE.get(row.status, "")
        prefix = Text(f"  {row.icon} ", style=style) + Text(f"{row.index + 1:>2}. ")
        body = Text(row.name, style="bold" if row.status in ("running", "undoing") else "")
        if row.duration_ms is not None and row.status not in ("running", "undoing", "pending"):
            body.append(f"  {duration(row.duration_ms)}", style="dim")
        self._line(prefix, body)
        if row.sentence:
            self._line("       ", Text(row.sentence, style="dim"))
        if row.error:
            self._line("       ", Text(row.error, style="red"))

    @property
    def plain(self) -> str:
        """What the list shows, without styles (what an operator reads)."""
        return self.text.plain
