"""`?`: every key of the session, in one scrollable list."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

QUIT_CONFIRM_S = 5.0  # the second `q` must come within this many seconds

SESSION_KEYS = [
    ("g", "start the run (again after a run that changed nothing)"),
    ("y", "at a gate: approve"),
    ("n, Enter, Esc", "at a gate: decline (the run stops before the gated phase)"),
    ("a", "abort: decline the gate, or stop after the running step (completed steps are undone)"),
    ("r", "roll a finished run back (asks first)"),
    ("q", f"quit; while a run is in progress press q twice within {QUIT_CONFIRM_S:g} s: the run stops at "
          "the next step boundary (undoing what it must), then the session closes"),
    ("?", "this list (Esc or ? closes it)"),
]
MOVE_KEYS = [
    ("Tab / Shift+Tab", "move between panels (plan, log, board); the focused one has a bright border"),
    ("↑ ↓", "scroll the focused panel by a line (on a board: select a row)"),
    ("PgUp PgDn", "scroll the focused panel by a page"),
    ("Home End", "go to the top / bottom of the focused panel"),
    ("in a gate dialog", "↑ ↓ PgUp PgDn Home End scroll its checks, whatever has the focus"),
]
FLEET_KEYS = [
    ("+ / -", "raise / lower the copies' throttle (MB/s), as `dbmigrate consolidate throttle RUN --mb-s N`"),
    ("p", "pause the copies, or resume them (`consolidate throttle RUN --pause / --resume`)"),
    ("b", "roll the selected old server back (asks first, naming what it does), as `consolidate rollback`"),
]


def keys_text(fleet: bool = False) -> Text:
    text = Text()
    groups = [("session", SESSION_KEYS), ("moving around", MOVE_KEYS)]
    if fleet:
        groups.append(("consolidation board", FLEET_KEYS))
    for title, keys in groups:
        text.append(f"{title}\n", style="bold underline")
        for key, what in keys:
            text.append(f"  {key:<16}", style="bold cyan")
            text.append(f"{what}\n")
        text.append("\n")
    return text


def keys_line(fleet: bool = False) -> str:
    """The same list as one line, for the log."""
    keys = SESSION_KEYS + MOVE_KEYS + (FLEET_KEYS if fleet else [])
    return "keys: " + " · ".join(f"{k} {w}" for k, w in keys)


class KeysScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "close"),
        Binding("question_mark", "dismiss", "close"),
        Binding("q", "dismiss", "close", show=False),
        Binding("up", "scroll('up')", show=False, priority=True),
        Binding("down", "scroll('down')", show=False, priority=True),
        Binding("pageup", "scroll('page_up')", show=False, priority=True),
        Binding("pagedown", "scroll('page_down')", show=False, priority=True),
        Binding("home", "scroll('home')", show=False, priority=True),
        Binding("end", "scroll('end')", show=False, priority=True),
    ]

    def __init__(self, fleet: bool = False) -> None:
        super().__init__()
        self.text = keys_text(fleet)

    def compose(self) -> ComposeResult:
        with Vertical(id="keys-dialog"):
            yield Static(Text("keys · Esc or ? closes · ↑↓ PgUp PgDn Home End scroll", style="bold"),
                         id="keys-title")
            with VerticalScroll(id="keys-scroll"):
                yield Static(self.text, id="keys-text")

    def action_scroll(self, how: str) -> None:
        scroll = self.query_one("#keys-scroll", VerticalScroll)
        {"up": scroll.scroll_up, "down": scroll.scroll_down, "page_up": scroll.scroll_page_up,
         "page_down": scroll.scroll_page_down, "home": scroll.scroll_home,
         "end": scroll.scroll_end}[how](animate=False)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)

    @property
    def plain(self) -> str:
        return self.text.plain
