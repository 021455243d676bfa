"""Tables that operators copy values from.

Columns marked `keep` (run ids, addresses and ports, GTIDs, counts and times)
are printed whole: never wrapped, never cut with an ellipsis. Other columns are
sentences; they wrap at word boundaries. When the kept columns do not fit the
terminal, rows are printed as records (one `header: value` line each) instead of
a table that would have to cut them. Every cell is plain text: a `[/]` in a
server or cluster name is printed, never parsed as markup.

Cells may hold a sparkline: one block character per value of a series.

Output that is not a terminal (a pipe, a file) gets `PIPE_WIDTH` columns unless
COLUMNS says otherwise (`fit_to_output`), so nothing is ever cut for width there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 1000
MIN_TEXT = 12  # a sentence column narrower than this is not worth a table


@dataclass(frozen=True)
class Col:
    header: str
    keep: bool = False  # an id, address, port or number: shown whole
    right: bool = False


def fit_to_output(console: Console) -> None:
    """COLUMNS when set; otherwise the terminal's width, or PIPE_WIDTH for a pipe or a file."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        console.width = int(columns)
    elif not console.is_terminal:
        console.width = PIPE_WIDTH


def styled(value: Any, style: str = "") -> Text:
    """A cell with a style (plain text: markup in `value` is shown as is)."""
    return Text("" if value is None else str(value), style=style)


def fits(width: int, cols: Sequence[Col], rows: Iterable[Sequence[Any]]) -> bool:
    """Whether build() would give a table (not records) at `width`."""
    body = [[_text(c) for c in row] for row in rows]
    return _need(cols, [_width((row[i] for row in body), col.header) for i, col in enumerate(cols)]) <= width


def _need(cols: Sequence[Col], widths: Sequence[int]) -> int:
    """Kept columns whole, sentences at least MIN_TEXT, plus borders and padding."""
    return sum(w if col.keep else min(w, MIN_TEXT) for col, w in zip(cols, widths)) + 3 * len(cols) + 1


def _text(value: Any) -> Text:
    return value if isinstance(value, Text) else styled(value)


def _width(cells: Iterable[Text], header: str) -> int:
    return max([len(header)] + [max((len(line) for line in c.plain.split("\n")), default=0) for c in cells])


def show(console: Console, cols: Sequence[Col], rows: Iterable[Sequence[Any]], *, title: str | None = None,
         caption: str | None = None) -> None:
    """Print a table on `console`, or records when its kept columns cannot fit."""
    emit(console, build(console.width, cols, rows, title=title, caption=caption))


def emit(console: Console, built: RenderableType) -> None:
    """Print what build() returned: records and legends are never cropped to the width."""
    if isinstance(built, Group):
        for part in built.renderables:
            emit(console, part)
        return
    console.print(built, soft_wrap=isinstance(built, _Unwrapped))


def build(width: int, cols: Sequence[Col], rows: Iterable[Sequence[Any]], *, title: str | None = None,
          caption: str | None = None) -> RenderableType:
    """A table for `width` columns, or records when its kept columns cannot fit."""
    body = [[_text(c) for c in row] for row in rows]
    widths = [_width((row[i] for row in body), col.header) for i, col in enumerate(cols)]
    if _need(cols, widths) > width:
        kept = [i for i, col in enumerate(cols) if col.keep]
        if not kept or len(kept) == len(cols) or _need([cols[i] for i in kept], [widths[i] for i in kept]) > width:
            return _records(cols, body, title, caption)
        return _with_legend(cols, widths, body, kept, title, caption)
    return _table(cols, widths, body, title, caption)


def _table(cols: Sequence[Col], widths: Sequence[int], body: list[list[Text]], title: str | None,
           caption: str | None) -> Table:
    table = Table(title=Text(title) if title else None, caption=Text(caption) if caption else None,
                  title_justify="left")
    for col, w in zip(cols, widths):
        if col.keep:
            table.add_column(Text(col.header), no_wrap=True, min_width=w, justify="right" if col.right else "left")
        else:
            # wraps between words; only a word longer than the column is shortened
            table.add_column(Text(col.header), justify="right" if col.right else "left")
    for row in body:
        table.add_row(*row)
    return table


class _Unwrapped:
    """Lines printed as they are: a terminal may fold them visually, but no newline
    is inserted into a value, so what is copied is whole."""

    def __init__(self, lines: list[Text]):
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines:
            yield from line.render(console)
            yield Segment.line()


def _with_legend(cols: Sequence[Col], widths: Sequence[int], body: list[list[Text]], kept: list[int],
                 title: str | None, caption: str | None) -> RenderableType:
    """The kept columns as a table, the sentence columns as lines under it, keyed by
    the first kept column (an id, a name)."""
    table = _table([cols[i] for i in kept], [widths[i] for i in kept], [[row[i] for i in kept] for row in body],
                   title, caption)
    key = kept[0]
    lines = [Text.assemble(row[key], Text(f"  {cols[i].header}: ", style="dim"), row[i])
             for row in body for i, col in enumerate(cols) if not col.keep and row[i].plain]
    return Group(table, _Unwrapped(lines))


def _records(cols: Sequence[Col], body: list[list[Text]], title: str | None, caption: str | None) -> RenderableType:
    """One block per row: the first column as its heading, then `header  value` lines."""
    lines = [Text(title, style="bold")] if title else []
    pad = max(len(c.header) for c in cols[1:]) if len(cols) > 1 else 0
    for row in body:
        lines.append(Text.assemble(Text("● "), row[0]))
        for col, value in zip(cols[1:], row[1:]):
            lines.append(Text.assemble(Text(f"  {col.header.ljust(pad)}  ", style="dim"), value))
    if caption:
        lines.append(Text(caption, style="dim"))
    return _Unwrapped(lines)


# -- sparklines -------------------------------------------------------------------------

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], top: float) -> str:
    """One character per value, scaled to `top`; '·' for an unknown value."""
    out = []
    for v in values:
        if v is None:
            out.append("·")
        else:
            out.append(BARS[min(len(BARS) - 1, int(len(BARS) * max(0.0, v) / top)) if top > 0 else 0])
    return "".join(out)
