"""Reading what a Textual screen shows, as text, for tests of the cutover session."""

from __future__ import annotations

import re
import time

from textual.containers import VerticalScroll


def screen_rows(app) -> list[str]:
    """The screen as the operator sees it, one string per row."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


async def until(pilot, predicate, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)


async def read_by_paging(pilot, scroll: VerticalScroll, key: str = "pagedown", limit: int = 200) -> str:
    """Every line of a scrolling pane as seen on screen while paging through it with `key`
    (from Home), joined in order: what an operator can read with the keys, nothing else."""
    app = pilot.app
    await pilot.press("home")
    await pilot.pause(0.05)
    seen: dict[int, str] = {}
    for _ in range(limit):
        region = scroll.scrollable_content_region  # without the scrollbar
        rows = screen_rows(app)
        top = round(scroll.scroll_y)
        for dy in range(region.height):
            seen[top + dy] = rows[region.y + dy][region.x:region.right]
        if scroll.scroll_y >= scroll.max_scroll_y:
            break
        await pilot.press(key)
        await pilot.pause(0.05)
    else:
        raise AssertionError(f"{key} never reached the end of the pane")
    return "\n".join(seen[i] for i in sorted(seen))


def compact(text: str) -> str:
    """Without any whitespace: a wrapped line reads the same whether the wrap fell on a space
    or inside a long word (a path)."""
    return re.sub(r"\s+", "", text)
