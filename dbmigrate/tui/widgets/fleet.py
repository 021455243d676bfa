"""The consolidation board's widgets: the old servers (a table that scrolls, what needs the
operator on top), the selected server's whole story, the throttle line and the target hosts."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

from dbmigrate.tui.fleet import FleetBoard
from dbmigrate.tui.widgets.panels import fit

STAGE_STYLE = {"failed": "bold red", "stalled": "bold red", "paused": "bold yellow", "seeding": "cyan",
               "catching up": "cyan", "cutting over": "bold cyan", "rolling back": "bold yellow",
               "seeded": "green", "waiting": "dim", "rolled back": "yellow", "seed undone": "yellow",
               "cut over": "bold green"}


class FleetTable(DataTable):
    """One row per old server; ↑↓ select it (the line below tells its whole story). Narrower than
    WIDE (80 columns), the shards are left to that line and the targets are cropped to what is left:
    no column scrolls off to the right and no row is lost to a scrollbar."""

    COLUMNS = ("old server", "stage", "figures", "to instance@host", "shards")
    WIDE = 110
    BINDINGS = [Binding("home", "scroll_top", "first server", show=False),
                Binding("end", "scroll_bottom", "last server", show=False)]
    narrow: bool | None = None
    board: FleetBoard | None = None

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True

    def _columns(self) -> None:
        narrow = self.size.width < self.WIDE
        if narrow != self.narrow:
            self.narrow = narrow
            self.clear(columns=True)
            for label in self.COLUMNS[:4] if narrow else self.COLUMNS:
                self.add_column(label, key=label)

    def on_resize(self, event) -> None:
        if self.board is not None:
            self.show(self.board)

    def show(self, board: FleetBoard) -> None:
        self.board = board
        selected = self.selected
        self._columns()
        self.clear()
        rows = board.ordered()
        used = sum(max(len(label), *(len(x) for x in values), 1) + 2 for label, values in
                   (("old server", [r.name for r in rows]), ("stage", [r.stage for r in rows]),
                    ("figures", [r.figures() for r in rows])))
        room = max(12, self.size.width - 2 - used)
        for row in rows:
            style = STAGE_STYLE.get(row.stage, "")
            cells = [Text(row.name, style="bold"), Text(row.stage, style=style),
                     Text(row.figures(), style=style if row.stage in ("failed", "stalled") else ""),
                     fit(Text(row.target_text()), room) if self.narrow else row.target_text()]
            if not self.narrow:
                cells.append(f"{len(row.shards)}: {', '.join(row.shards)}")
            self.add_row(*cells, key=row.name)
        if selected is not None and selected in board.rows:
            self.move_cursor(row=self.get_row_index(selected), animate=False)

    @property
    def selected(self) -> str | None:
        if self.row_count == 0:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:
            return None
        return key.value if key is not None else None


class FleetInfo(Static):
    """A few lines of text cropped to the width (never wrapping into the next widget)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = Text()

    def set(self, text: Text) -> None:
        self.text = text
        self.update(fit(text.copy(), max(10, self.content_region.width or 80)))

    def on_resize(self, event) -> None:
        self.set(self.text)

    @property
    def plain(self) -> str:
        return self.text.plain


class FleetDetail(Static):
    """The selected server's whole story, wrapped (it is the place to read it all)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = Text()

    def set(self, text: Text) -> None:
        self.text = text
        self.update(text)

    @property
    def plain(self) -> str:
        return self.text.plain


def fleet_widgets() -> ComposeResult:
    table = FleetTable(id="fleet")
    table.border_title = "old servers (↑↓ select · b roll back · +/- throttle · p pause)"
    yield table
    yield FleetDetail(id="fleet-detail")
    yield FleetInfo(id="fleet-throttle")
    yield FleetInfo(id="fleet-hosts")


class ConfirmModal(ModalScreen[bool]):
    """A yes/no question naming what will happen; Enter lands on no."""

    AUTO_FOCUS = "#confirm-no"
    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
                Binding("escape", "answer(False)", "no", show=False)]

    def __init__(self, title: str, body: str) -> None:
        super().__init__()
        self.title_text, self.body = title, body

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            yield Static(Text(self.title_text, style="bold"), id="confirm-title")
            yield Static(self.body, id="confirm-text")
            with Horizontal(id="gate-buttons"):
                yield Button("yes (y)", id="confirm-yes", variant="warning")
                yield Button("no (n)", id="confirm-no", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class SwapTable(DataTable):
    """Schema swap: one row per side, its stage (in pool, drained, altered, verified, warmed with hit
    ratio, back in pool) and its last step. Narrower than WIDE columns (80x24: half the screen), the
    role is a `*` after the primary's name and the last step is the line under the table (the
    session's): every column shown is whole, none scrolls off to the right."""

    COLUMNS = ("side", "role", "stage", "last step")
    NARROW_COLUMNS = ("side (* primary)", "stage")
    WIDE = 60
    narrow: bool | None = None
    swap = None

    def on_mount(self) -> None:
        self.cursor_type = "row"

    def _columns(self) -> None:
        narrow = self.size.width < self.WIDE
        if narrow != self.narrow:
            self.narrow = narrow
            self.clear(columns=True)
            for label in (self.NARROW_COLUMNS if narrow else self.COLUMNS):
                self.add_column(label, key=label)

    def on_resize(self, event) -> None:
        if self.swap is not None:
            self.show(self.swap)

    def show(self, swap) -> None:
        self.swap = swap
        self._columns()
        self.clear()
        rows = swap.rows()
        # What is left for the last step once the other columns took theirs (2 cells of padding each).
        room = self.size.width - 2 - sum(max(len(label), *(len(x) for x in values)) + 2 for label, values in
                                         (("side", [r.name for r in rows]), ("role", ["primary", "replica"]),
                                          ("stage", [r.stage for r in rows])))
        for row in rows:
            style = "bold red" if row.stage == "failed" else "green" if row.stage.startswith(("back", "warmed")) \
                else "yellow" if row.stage == "undone" else "cyan" if row.stage.endswith("…") else ""
            stage = Text(row.stage, style=style)
            if self.narrow:
                self.add_row(Text(row.name + (" *" if row.primary else ""), style="bold"), stage, key=row.name)
            else:
                last = fit(Text(row.last), max(9, room)) if row.last else ""
                self.add_row(Text(row.name, style="bold"), "primary" if row.primary else "replica", stage, last,
                             key=row.name)
