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
        self.border_title = "replication lag (ms, heartbeat)"
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
            text.append(f"behind {sample.writer} · last {window_s:.0f} s · red > {self.limit_ms:g} ms\n",
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
        self.border_title = "writer round trip (ms)"
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
            text.append(f"SELECT @@read_only on {self.writer or '(no writer)'}\n", style="dim")
            text.append("last ", style="dim")
            text.append("-" if last is None else f"{last:.1f} ms", style="bold")
            if known:
                text.append(f" · max {max(known):.1f} ms in {window_s:.0f} s", style="dim")
            text.append("\n")
            text.append(sparkline(list(self.probes)[-width:], max(known, default=1.0) or 1.0), style="cyan")
            text.append("\n")
        else:
            text.append("writer round trip: no sample yet\n", style="dim")
        for name, (value, unit, _) in self.metrics.items():
            text.append(f"{name}: {value:g} {unit} (last reported by the run)".rstrip() + "\n")
        return text


class WarmPanel(Panel):
    """Warm-up of the candidate: progress of the warm step, buffer pool hit ratios, resident pages."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.progress: float | None = None
        self.message = ""
        self.ratios: dict[str, float] = {}
        self.figures: dict[str, tuple[float, str]] = {}

    def on_mount(self) -> None:
        self.border_title = "warm-up (buffer pool hit ratio 0-1)"
        self.redraw()

    @staticmethod
    def wants(metric: Metric) -> bool:
        return metric.name.startswith(WARM_METRICS)

    def add_metric(self, metric: Metric) -> None:
        server = metric.labels.get("server")
        if metric.name == "warm_progress":
            self.progress = max(0.0, min(1.0, metric.value))
            self.message = metric.labels.get("message", "")
        elif metric.name.startswith("hit_ratio"):
            label = metric.name.removeprefix("hit_ratio").lstrip("_") or "now"
            self.ratios[f"{label} ({server})" if server else label] = metric.value
        else:
            label = metric.name.replace("_", " ")
            self.figures[f"{label} ({server})" if server else label] = (metric.value, metric.unit)
        self.add_class("has-data")
        self.redraw()

    def build(self, width: int) -> Text:
        text = Text()
        if self.progress is None and not self.ratios and not self.figures:
            text.append("no warm-up in this run yet", style="dim")
        if self.progress is not None:
            bar = max(5, min(24, width - 6))
            filled = round(self.progress * bar)
            text.append("█" * filled, style="green")
            text.append("░" * (bar - filled), style="dim")
            text.append(f" {self.progress:.0%}\n")
            if self.message:
                text.append(f"{self.message}\n", style="dim")
        for label, ratio in self.ratios.items():
            text.append(f"hit ratio {label}: {ratio:.3f}\n")
        for label, (value, unit) in self.figures.items():
            text.append(f"{label}: {value:g} {unit or 'pages' if 'pages' in label else unit}".rstrip() + "\n")
        return text
