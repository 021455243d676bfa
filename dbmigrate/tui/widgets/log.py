"""The session's log pane: every line wrapped to the pane's width, never cut.

Textual's RichLog renders a line at `min_width` (78 columns) when the pane is
narrower and then crops it: on an 80-column terminal the pane is half that, and
the end of every long line was lost. Here each line is wrapped at the pane's
own width, and re-wrapped when the pane changes size, so no text is ever dropped.
"""

from __future__ import annotations

from rich.text import Text
from textual.events import Resize
from textual.widgets import RichLog


class EventLog(RichLog):
    def __init__(self, **kwargs) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, min_width=1, **kwargs)
        self.entries: list[Text] = []  # every line written, as written (re-wrapped on resize)
        self._wrapped_at = 0

    def add(self, line: Text) -> None:
        self.entries.append(line)
        if self._wrapped_at:
            self.write(line, width=self._wrapped_at, scroll_end=True)

    def on_resize(self, event: Resize) -> None:
        width = self.scrollable_content_region.width
        if width <= 0 or width == self._wrapped_at:
            return
        self._wrapped_at = width
        at_end = self.is_vertical_scroll_end
        self.clear()
        for line in self.entries:
            self.write(line, width=width, scroll_end=False)
        if at_end:
            self.scroll_end(animate=False)

    def shown_lines(self) -> list[str]:
        """What the pane holds, one string per screen row (for tests: nothing cut)."""
        return [strip.text.rstrip() for strip in self.lines]
