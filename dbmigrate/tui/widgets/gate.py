"""The manual gate dialog: the gate's prompt, what the automatic gates said, approve or decline.

On a small terminal the verdicts do not fit: the checks that failed or warned come
first, the text scrolls with the keys people try (arrows, PageUp/PageDown, Home/End)
whatever has the focus, and the dialog says so on a line that never scrolls away.
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from dbmigrate.engine.events import GateWaiting
from dbmigrate.tui.board import GateRow

SCROLL_HINT = "scroll: ↑↓ PgUp/PgDn Home/End · y approve · n/Enter decline · ? keys"


# A passed check may carry warnings inside its sentence ("...; warning: 'root' bypasses read_only").
WARNING = re.compile(r"(?:^|[;:.]\s+)warning:", re.IGNORECASE)


def warns(reason: str) -> bool:
    return bool(WARNING.search(reason))


def verdict_rank(verdict: dict[str, Any]) -> int:
    """0 failed, 1 warned, 2 passed: what needs the operator's eyes comes first."""
    if not verdict.get("ok", True):
        return 0
    warned = verdict.get("warn") or verdict.get("level") == "warning" or warns(str(verdict.get("reason", "")))
    return 1 if warned else 2


def gate_rank(gate: GateRow) -> int:
    """A gate without checks of its own counts as one: its verdict and its sentence."""
    return verdict_rank({"ok": gate.status == "passed", "reason": gate.reason})


MARKS = {0: ("✗", "bold red"), 1: ("!", "bold yellow"), 2: ("✓", "green")}


def gate_text(waiting: GateWaiting, verdicts: list[GateRow]) -> Text:
    """The dialog's body: prompt, then each automatic gate with its checks, failed and warned first."""
    where = f"before phase '{waiting.phase}'" if waiting.phase != "rollback" else "rollback"
    body = Text()
    body.append(f"gate {waiting.gate} ({where})\n", style="bold")
    body.append(waiting.prompt + "\n", style="bold yellow")
    if not verdicts:
        return body
    checks = [(gate, name, v) for gate in verdicts for name, v in gate.details.items()
              if isinstance(v, dict) and "reason" in v]
    bare = [gate for gate in verdicts if not any(g is gate for g, *_ in checks)]
    ranks = [verdict_rank(v) for *_, v in checks] + [gate_rank(g) for g in bare]
    counts = [ranks.count(r) for r in (0, 1, 2)]
    what = f"{len(verdicts)} gate(s)"
    if checks:
        what += f", {len(checks)} check(s)" + (f" and {len(bare)} gate(s) without checks of their own"
                                                 if bare else "")
    body.append(f"\nautomatic gates so far: {what}: {counts[0]} failed, {counts[1]} warned, {counts[2]} passed\n",
                style="bold")
    ordered = sorted(verdicts, key=lambda g: 0 if g.status != "passed" else 1)
    for gate in ordered:
        mark, style = MARKS[gate_rank(gate)]
        body.append(f"{mark} gate {gate.name}: ", style=style)
        body.append(gate.reason + "\n")
        mine = sorted(((name, v) for g, name, v in checks if g is gate), key=lambda nv: verdict_rank(nv[1]))
        for name, verdict in mine:
            mark, style = MARKS[verdict_rank(verdict)]
            body.append(f"  {mark} ", style=style)
            body.append(f"{name}: ", style="bold" if verdict_rank(verdict) < 2 else "")
            body.append(f"{verdict['reason']}\n", style="" if verdict_rank(verdict) < 2 else "dim")
    return body


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
        # Whatever has the focus (a button), these scroll the verdicts.
        Binding("up", "scroll('up')", show=False, priority=True),
        Binding("down", "scroll('down')", show=False, priority=True),
        Binding("pageup", "scroll('page_up')", show=False, priority=True),
        Binding("pagedown", "scroll('page_down')", show=False, priority=True),
        Binding("home", "scroll('home')", show=False, priority=True),
        Binding("end", "scroll('end')", show=False, priority=True),
    ]

    def __init__(self, waiting: GateWaiting, verdicts: list[GateRow]) -> None:
        super().__init__()
        self.waiting = waiting
        self.verdicts = verdicts
        self.body = gate_text(waiting, verdicts)

    def compose(self) -> ComposeResult:
        # The buttons and the key line are docked at the dialog's bottom and the text scrolls
        # above them, so on a small terminal (80x24) a long list never pushes them off screen.
        with Vertical(id="gate-dialog"):
            with Vertical(id="gate-foot"):
                yield Static(Text(SCROLL_HINT, style="bold"), id="gate-keys")
                with Horizontal(id="gate-buttons"):
                    yield Button("approve (y)", id="approve", variant="success")
                    yield Button("decline (n)", id="decline", variant="error")
            with VerticalScroll(id="gate-scroll"):
                yield Static(self.body, id="gate-text")

    def action_scroll(self, how: str) -> None:
        scroll = self.query_one("#gate-scroll", VerticalScroll)
        {"up": scroll.scroll_up, "down": scroll.scroll_down, "page_up": scroll.scroll_page_up,
         "page_down": scroll.scroll_page_down, "home": scroll.scroll_home,
         "end": scroll.scroll_end}[how](animate=False)

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
