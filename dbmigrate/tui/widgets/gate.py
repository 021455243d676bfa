"""The manual gate dialog: the gate's prompt, what the automatic gates said, approve or decline."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from dbmigrate.engine.events import GateWaiting
from dbmigrate.tui.board import GateRow


class GateModal(ModalScreen[tuple[bool, str]]):
    """Dismisses with (approved, reason). Enter lands on decline: approving takes a deliberate `y`."""

    AUTO_FOCUS = "#decline"
    BINDINGS = [
        Binding("y", "approve", "approve"),
        Binding("n", "decline", "decline"),
        Binding("escape", "decline", "decline", show=False),
        Binding("a", "abort", "abort run"),
        Binding("q", "app.quit", "quit"),
        Binding("question_mark", "app.keys", "keys"),
    ]

    def __init__(self, waiting: GateWaiting, verdicts: list[GateRow]) -> None:
        super().__init__()
        self.waiting = waiting
        self.verdicts = verdicts

    def compose(self) -> ComposeResult:
        where = f"before phase '{self.waiting.phase}'" if self.waiting.phase != "rollback" else "rollback"
        body = Text()
        body.append(f"gate {self.waiting.gate} ({where})\n\n", style="bold")
        body.append(self.waiting.prompt + "\n", style="bold yellow")
        if self.verdicts:
            body.append("\nautomatic gates so far:\n", style="bold")
            for gate in self.verdicts:
                ok = gate.status == "passed"
                body.append(f"  {'✓' if ok else '✗'} {gate.name}: ", style="green" if ok else "bold red")
                body.append(gate.reason + "\n")
                for check, verdict in gate.details.items():
                    if isinstance(verdict, dict) and "reason" in verdict:
                        mark = "✓" if verdict.get("ok") else "✗"
                        body.append(f"      {mark} {check}: {verdict['reason']}\n", style="dim")
        # The buttons are docked at the dialog's bottom and the text scrolls above them, so on a
        # small terminal (80x24) a long list of verdicts never pushes them off the screen.
        with Vertical(id="gate-dialog"):
            with Horizontal(id="gate-buttons"):
                yield Button("approve (y)", id="approve", variant="success")
                yield Button("decline (n)", id="decline", variant="error")
            with VerticalScroll(id="gate-scroll"):
                yield Static(body, id="gate-text")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "approve":
            self.action_approve()
        else:
            self.action_decline()

    def action_approve(self) -> None:
        self.dismiss((True, "approved by operator"))

    def action_decline(self) -> None:
        self.dismiss((False, "declined by operator"))

    def action_abort(self) -> None:
        # The app declines this gate and stops the run (no later gate or step).
        abort = getattr(self.app, "action_abort", None)
        if abort is None:
            self.action_decline()
        else:
            abort()
