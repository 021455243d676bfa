"""The right column's live panels: replication lag, writer latency, warm-up."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.widgets import Static

from dbmigrate.sparkline import sparkline
from dbmigrate.engine.events import Metric
from dbmigrate.app.monitor import ClusterSample

HISTORY = 40  # samples kept per sparkline


class LagPanel(Static):
    """Lag per replica against the current writer, with its recent history."""

    def __init__(self, limit_ms: float = 1000.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.limit_ms = limit_ms
        self.history: dict[str, deque[float | None]] = {}
        self.text = Text("replication lag: waiting for the first sample", style="dim")

    def on_mount(self) -> None:
        self.border_title = "replication lag"
        self.update(self.text)

    def off(self, reason: str) -> None:
        self.text = Text(reason, style="dim")
        self.update(self.text)

    def show_sample(self, sample: ClusterSample) -> None:
        text = Text()
        if sample.writer is None:
            text.append(f"writer: {sample.writer_note}\n", style="bold yellow")
        else:
            text.append(f"writer: {sample.writer}\n", style="bold")
        for lag in sample.lag:
            series = self.history.setdefault(lag.name, deque(maxlen=HISTORY))
            series.append(lag.lag_ms)
            figure = "-" if lag.lag_ms is None else f"{lag.lag_ms:.0f} ms"
            style = "green" if lag.ok else "bold red"
            text.append(f"{lag.name:<14}", style="bold")
            text.append(f"{figure:>9} ", style=style)
            text.append(sparkline(list(series), self.limit_ms), style="cyan")
            if not lag.ok:
                text.append(f"  {lag.reason}", style="red")
            text.append("\n")
        for name, problem in sample.unreachable.items():
            text.append(f"{name:<14} unreachable: {problem}\n", style="bold red")
        self.text = text
        self.update(text)


class LatencyPanel(Static):
    """Round trip of a cheap query on the writer, plus the run's own metrics (last value each)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.probes: deque[float | None] = deque(maxlen=HISTORY)
        self.metrics: dict[str, tuple[float, str]] = {}
        self.writer: str | None = None
        self.text = Text()

    def on_mount(self) -> None:
        self.border_title = "latency"
        self._redraw()

    def add_probe(self, writer: str | None, ms: float | None) -> None:
        self.writer = writer
        self.probes.append(ms)
        self._redraw()

    def add_metric(self, metric: Metric) -> None:
        self.metrics[metric.name] = (metric.value, metric.unit)
        self._redraw()

    def _redraw(self) -> None:
        text = Text()
        known = [v for v in self.probes if v is not None]
        if self.probes:
            last = self.probes[-1]
            text.append(f"writer {self.writer or '(none)'}: ", style="bold")
            text.append("-" if last is None else f"{last:.1f} ms", style="bold")
            text.append("  ")
            text.append(sparkline(list(self.probes), max(known, default=1.0) or 1.0), style="cyan")
            if known:
                text.append(f"  max {max(known):.1f} ms", style="dim")
            text.append("\n")
        else:
            text.append("writer probe: no sample yet\n", style="dim")
        for name, (value, unit) in self.metrics.items():
            text.append(f"{name}: {value:g} {unit}".rstrip() + "\n")
        self.text = text
        self.update(text)


class WarmPanel(Static):
    """Warm-up of the candidate: progress of the warm step and buffer pool hit ratios."""

    BAR = 24

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.progress: float | None = None
        self.message = ""
        self.ratios: dict[str, float] = {}
        self.text = Text()

    def on_mount(self) -> None:
        self.border_title = "warm-up"
        self._redraw()

    @staticmethod
    def wants(metric: Metric) -> bool:
        return metric.name == "warm_progress" or metric.name.startswith("hit_ratio")

    def add_metric(self, metric: Metric) -> None:
        if metric.name == "warm_progress":
            self.progress = max(0.0, min(1.0, metric.value))
            self.message = metric.labels.get("message", "")
        else:
            label = metric.name.removeprefix("hit_ratio").lstrip("_") or "now"
            server = metric.labels.get("server")
            self.ratios[f"{label} ({server})" if server else label] = metric.value
        self._redraw()

    def _redraw(self) -> None:
        text = Text()
        if self.progress is None and not self.ratios:
            text.append("no warm-up in this run yet", style="dim")
        if self.progress is not None:
            filled = round(self.progress * self.BAR)
            text.append("█" * filled, style="green")
            text.append("░" * (self.BAR - filled), style="dim")
            text.append(f" {self.progress:.0%}")
            if self.message:
                text.append(f"  {self.message}", style="dim")
            text.append("\n")
        for label, ratio in self.ratios.items():
            text.append(f"hit ratio {label}: {ratio:.3f}\n")
        self.text = text
        self.update(text)
