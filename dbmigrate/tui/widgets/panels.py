"""The right column's live panels: replication lag, writer latency, warm-up.

Every figure says what it is, its unit and its window. Each line is built for the
panel's width (the sparkline takes what the words leave) and cropped, never wrapped:
a panel keeps its height and never pushes the log off the screen.
"""

from __future__ import annotations

import textwrap
from collections import deque

from rich.text import Text
from textual.events import Resize
from textual.widgets import Static

from dbmigrate.console_table import sparkline
from dbmigrate.engine.events import Metric
from dbmigrate.app.monitor import ClusterSample

HISTORY = 40  # samples kept per sparkline
WARM_METRICS = ("warm_progress", "hit_ratio", "resident_pages", "warm_")


def fit(text: Text, width: int) -> Text:
    """Each line cropped to `width` (an ellipsis marks the cut): a panel line never wraps."""
    if width <= 0:
        return text
    out = Text()
    for i, line in enumerate(text.split("\n", allow_blank=True)):
        if i:
            out.append("\n")
        if line.cell_len > width:
            line.truncate(width, overflow="ellipsis")
        out.append_text(line)
    return out


def parts_lines(parts: list[str], width: int) -> str:
    """Parts joined by ' · ', a new line where the next part would not fit: none is ever cut."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "\n".join(lines)


class Panel(Static):
    """A Static whose text is rebuilt for its width (on every change and on resize)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = Text()

    @property
    def avail(self) -> int:
        return max(10, self.content_region.width or 40)

    def build(self, width: int) -> Text:  # pragma: no cover - every panel has its own
        raise NotImplementedError

    def redraw(self) -> None:
        self.text = self.build(self.avail)
        if self.is_mounted:
            self.update(fit(self.text.copy(), self.avail))

    def on_resize(self, event: Resize) -> None:
        self.redraw()

    @property
    def plain(self) -> str:
        return self.text.plain


class LagPanel(Panel):
    """Lag per replica against the current writer, with its recent history."""

    def __init__(self, limit_ms: float = 1000.0, interval_s: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.limit_ms = limit_ms
        self.interval_s = interval_s
        self.history: dict[str, deque[float | None]] = {}
        self.sample: ClusterSample | None = None
        self.note: str | None = "waiting for the first sample"

    def on_mount(self) -> None:
        # The limit is in the title: a header line at 80 columns has no room left for it.
        self.border_title = f"replication lag (ms, red > {self.limit_ms:g})"
        self.redraw()

    def off(self, reason: str) -> None:
        self.note = reason
        self.redraw()

    def show_sample(self, sample: ClusterSample) -> None:
        self.sample, self.note = sample, None
        for lag in sample.lag:
            self.history.setdefault(lag.name, deque(maxlen=HISTORY)).append(lag.lag_ms)
        self.redraw()

    def build(self, width: int) -> Text:
        text = Text()
        if self.note is not None or self.sample is None:
            text.append("\n".join(textwrap.wrap(self.note or "", width)), style="dim")  # read whole
            return text
        sample = self.sample
        if sample.writer is None:
            text.append(f"writer: {sample.writer_note}\n", style="bold yellow")
        else:
            window_s = max((len(h) for h in self.history.values()), default=0) * self.interval_s
            text.append(parts_lines([f"behind {sample.writer}", f"last {window_s:.0f} s"], width) + "\n",
                        style="dim")
        name_w = max([len(lag.name) for lag in sample.lag] + [6]) + 1
        for lag in sample.lag:
            series = list(self.history.get(lag.name, []))
            figure = "-" if lag.lag_ms is None else f"{lag.lag_ms:.0f} ms"
            style = "green" if lag.ok else "bold red"
            text.append(f"{lag.name:<{name_w}}", style="bold")
            text.append(f"{figure:>9} ", style=style)
            room = max(0, width - name_w - 10)
            text.append(sparkline(series[-room:] if room else [], self.limit_ms), style="cyan")
            text.append("\n")
            if not lag.ok:
                text.append(f"  {lag.reason}\n", style="red")
        for name, problem in sample.unreachable.items():
            text.append(f"{name} unreachable: {problem}\n", style="bold red")
        return text


class LatencyPanel(Panel):
    """Round trip of a cheap query on the writer, plus the run's own metrics (last value each)."""

    def __init__(self, interval_s: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.interval_s = interval_s
        self.probes: deque[float | None] = deque(maxlen=HISTORY)
        self.metrics: dict[str, tuple[float, str, str]] = {}
        self.writer: str | None = None

    def on_mount(self) -> None:
        self.border_title = "round trip (ms, @@read_only)"
        self.redraw()

    def add_probe(self, writer: str | None, ms: float | None) -> None:
        self.writer = writer
        self.probes.append(ms)
        self.redraw()

    def add_metric(self, metric: Metric) -> None:
        where = metric.labels.get("server") or metric.labels.get("instance") or ""
        self.metrics[metric.name + (f" ({where})" if where else "")] = (metric.value, metric.unit, "")
        self.redraw()

    def build(self, width: int) -> Text:
        text = Text()
        known = [v for v in self.probes if v is not None]
        if self.probes:
            last = self.probes[-1]
            window_s = len(self.probes) * self.interval_s
            parts = [f"{self.writer or '(no writer)'}: last {'-' if last is None else f'{last:.1f} ms'}"]
            if known:
                parts.append(f"max {max(known):.1f} ms in {window_s:.0f} s")
            text.append(parts_lines(parts, width) + "\n")
            text.append(sparkline(list(self.probes)[-width:], max(known, default=1.0) or 1.0), style="cyan")
            text.append("\n")
        else:
            text.append("writer round trip: no sample yet\n", style="dim")
        for name, (value, unit, _) in self.metrics.items():
            text.append(f"{name}: {value:g} {unit} (last reported by the run)".rstrip() + "\n")
        return text


class WarmPanel(Panel):
    """Warm-up of one server at a time (the one the run warms now): progress of its warm step, its
    buffer pool hit ratio before and after, its resident pages. A run that warms several servers
    (a schema swap, side by side) shows the latest: another server's figures would be stale."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.server: str | None = None
        self.progress: float | None = None
        self.message = ""
        self.ratios: dict[str, float] = {}
        self.figures: dict[str, tuple[float, str]] = {}

    def on_mount(self) -> None:
        self._title()
        self.redraw()

    def _title(self) -> None:
        self.border_title = f"warm-up of {self.server}" if self.server else "warm-up (hit ratio 0-1)"

    @staticmethod
    def wants(metric: Metric) -> bool:
        return metric.name.startswith(WARM_METRICS)

    def add_metric(self, metric: Metric) -> None:
        server = metric.labels.get("server") or None
        if server is not None and server != self.server:
            if self.server is not None:  # another server's warm-up: the last one's figures are stale
                self.progress, self.message, self.ratios, self.figures = None, "", {}, {}
            self.server = server
            self._title()
        if metric.name == "warm_progress":
            self.progress = max(0.0, min(1.0, metric.value))
            self.message = metric.labels.get("message", "")
        elif metric.name.startswith("hit_ratio"):
            self.ratios[metric.name.removeprefix("hit_ratio").lstrip("_") or "now"] = metric.value
        else:
            self.figures[metric.name] = (metric.value, metric.unit)
        self.add_class("has-data")
        self.redraw()

    def build(self, width: int) -> Text:
        text = Text()
        if self.progress is None and not self.ratios and not self.figures:
            text.append("no warm-up in this run yet", style="dim")
        if self.progress is not None:
            bar = max(5, min(24, width // 3))
            filled = round(self.progress * bar)
            text.append("█" * filled, style="green")
            text.append("░" * (bar - filled), style="dim")
            text.append(f" {self.progress:.0%}")
            if self.message:
                text.append(f" · {self.message}", style="dim")
            text.append("\n")
        if self.ratios:
            text.append("hit ratio " + " · ".join(f"{label} {ratio:.3f}" for label, ratio in self.ratios.items())
                        + "\n")
        pages = {name.removeprefix("resident_pages").lstrip("_") or "now": value
                 for name, (value, _unit) in self.figures.items() if name.startswith("resident_pages")}
        if pages:
            text.append("resident pages " + " · ".join(f"{label} {value:,.0f}" for label, value in pages.items())
                        + "\n")
        for name, (value, unit) in self.figures.items():
            if not name.startswith("resident_pages"):
                text.append(f"{name.replace('_', ' ')}: {value:g} {unit}".rstrip() + "\n")
        return text
