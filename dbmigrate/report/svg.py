"""Charts as inline SVG text: line charts with step bands and limit lines, grouped bars.

No JavaScript and no fonts or files to fetch: a report opens from a mail attachment
on an air-gapped laptop. Every drawn series carries `data-series` and `data-points`
(and every band `data-step`), so a test or a script can read back what was drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Callable, Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
BAND_FILL = ("#e8eef7", "#f7efe2")
FAILED_FILL = "#f8d7da"

Point = tuple[float, "float | None"]


@dataclass
class Line:
    name: str
    points: Sequence[Point]  # (x, y); y None breaks the line
    color: str | None = None
    dashed: bool = False


@dataclass
class Band:
    """A span of the x axis (a step of the run), drawn behind the lines."""

    label: str
    start: float
    end: float
    failed: bool = False


@dataclass
class Limit:
    """A horizontal line: a policy's limit."""

    label: str
    y: float


@dataclass
class Frame:
    width: int = 920
    height: int = 260
    left: int = 64
    right: int = 16
    top: int = 44
    bottom: int = 40
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    if ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def fmt_tick(v: float, ticks: Sequence[float]) -> str:
    """A tick's label with as many decimals as the ticks' spacing needs: 18, 18.2, 18.4 (never 18 18 18)."""
    if len(ticks) < 2:
        return fmt_num(v)
    step = min(abs(b - a) for a, b in zip(ticks, ticks[1:]) if b != a) if len(set(ticks)) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if decimals == 0:
        return fmt_num(v)
    return f"{v:,.{decimals}f}"


def fmt_num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def _attrs(extra: dict[str, str]) -> str:
    return "".join(f' {k}="{escape(str(v))}"' for k, v in extra.items())


def _open(frame: Frame, title: str, chart_id: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{escape(chart_id)}" '
            f'data-chart="{escape(chart_id)}" width="{frame.width}" height="{frame.height}" '
            f'viewBox="0 0 {frame.width} {frame.height}" role="img" aria-label="{escape(title)}"{_attrs(frame.extra)}>',
            f'<title>{escape(title)}</title>',
            f'<text x="{frame.left}" y="18" class="chart-title" font-size="13" font-weight="bold">{escape(title)}</text>']


def empty_chart(title: str, chart_id: str, why: str, frame: Frame | None = None) -> str:
    """A placeholder that says why there is nothing to draw (never an empty-looking plot)."""
    f = frame or Frame(height=70)
    out = _open(f, title, chart_id)
    out.append(f'<text x="{f.left}" y="48" class="no-data" font-size="12" fill="#777">{escape(why)}</text></svg>')
    return "\n".join(out)


def line_chart(title: str, chart_id: str, lines: Sequence[Line], *, x_label: str, y_label: str,
               bands: Sequence[Band] = (), limits: Sequence[Limit] = (), frame: Frame | None = None,
               y_min: float | None = 0.0, x_range: tuple[float, float] | None = None, step: bool = False) -> str:
    """Lines over a shared x axis (seconds, usually), with bands behind and limit lines on top."""
    f = frame or Frame()
    drawn = [ln for ln in lines if any(y is not None for _, y in ln.points)]
    if not drawn:
        return empty_chart(title, chart_id, "no samples were recorded for this chart")
    xs = [x for ln in drawn for x, y in ln.points if y is not None] + [b.start for b in bands] + [b.end for b in bands]
    ys = [y for ln in drawn for _, y in ln.points if y is not None] + [lim.y for lim in limits]
    x0, x1 = x_range if x_range else (min(xs), max(xs))
    if x1 <= x0:
        x1 = x0 + 1.0
    lo = min(ys) if y_min is None else min(y_min, min(ys))
    yt = nice_ticks(lo, max(ys))
    y0, y1 = yt[0], yt[-1]

    def px(x: float) -> float:
        return f.left + (x - x0) / (x1 - x0) * f.plot_w

    def py(y: float) -> float:
        return f.top + f.plot_h - (y - y0) / (y1 - y0) * f.plot_h

    out = _open(f, title, chart_id)
    label_rows: list[float] = [-1e9, -1e9, -1e9]  # x of the last label in each of three rows
    for i, b in enumerate(bands):
        bx0, bx1 = max(px(b.start), f.left), min(px(b.end), f.left + f.plot_w)
        if bx1 < bx0:
            continue
        fill = FAILED_FILL if b.failed else BAND_FILL[i % 2]
        out.append(f'<rect class="band" data-step="{escape(b.label)}" data-start="{b.start:.3f}" '
                   f'data-end="{b.end:.3f}" x="{bx0:.1f}" y="{f.top}" width="{max(bx1 - bx0, 1.0):.1f}" '
                   f'height="{f.plot_h:.1f}" fill="{fill}"><title>{escape(b.label)} '
                   f'({b.start:.2f} s to {b.end:.2f} s)</title></rect>')
        # Short steps side by side (the cutover's) would print their numbers on top of each other:
        # each number goes to the first of three rows with room for it, else only in the band's title.
        row = next((r for r, last in enumerate(label_rows) if bx0 + 2 - last >= 6 + 5 * len(str(i + 1))), None)
        if row is not None:
            label_rows[row] = bx0 + 2
            out.append(f'<text class="band-label" x="{bx0 + 2:.1f}" y="{f.top + 10 + 10 * row}" font-size="9" '
                       f'fill="#555">{i + 1}</text>')
    # axes and grid
    for t in yt:
        y = py(t)
        out.append(f'<line x1="{f.left}" x2="{f.left + f.plot_w:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{f.left - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{fmt_tick(t, yt)}</text>')
    xt = nice_ticks(x0, x1, 8)
    for t in xt:
        if t < x0 - 1e-9 or t > x1 + 1e-9:
            continue
        x = px(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.top + f.plot_h:.1f}" y2="{f.top + f.plot_h + 4:.1f}" '
                   f'stroke="#444"/>')
        out.append(f'<text x="{x:.1f}" y="{f.top + f.plot_h + 15:.1f}" font-size="10" text-anchor="middle">'
                   f'{fmt_tick(t, xt)}</text>')
    out.append(f'<rect x="{f.left}" y="{f.top}" width="{f.plot_w:.1f}" height="{f.plot_h:.1f}" fill="none" '
               f'stroke="#444"/>')
    out.append(f'<text x="{f.left + f.plot_w / 2:.1f}" y="{f.height - 6}" font-size="11" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    out.append(f'<text x="14" y="{f.top + f.plot_h / 2:.1f}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 14 {f.top + f.plot_h / 2:.1f})">{escape(y_label)}</text>')
    # series
    for i, ln in enumerate(drawn):
        color = ln.color or PALETTE[i % len(PALETTE)]
        d = _path(ln.points, px, py, step)
        n = sum(1 for _, y in ln.points if y is not None)
        ymax = max(y for _, y in ln.points if y is not None)
        dash = ' stroke-dasharray="5 3"' if ln.dashed else ""
        out.append(f'<path class="series" data-series="{escape(ln.name)}" data-points="{n}" '
                   f'data-max="{ymax:.6g}" d="{d}" fill="none" stroke="{color}" stroke-width="1.4"{dash}>'
                   f'<title>{escape(ln.name)}</title></path>')
        if n <= 40:  # few points (guard windows, a short curve): mark each one
            out.extend(f'<circle class="point" data-series="{escape(ln.name)}" cx="{px(x):.1f}" cy="{py(y):.1f}" '
                       f'r="2.5" fill="{color}"/>' for x, y in ln.points if y is not None)
    for lim in limits:
        y = py(lim.y)
        out.append(f'<line class="limit" data-limit="{escape(lim.label)}" data-value="{lim.y:.6g}" x1="{f.left}" '
                   f'x2="{f.left + f.plot_w:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d62728" stroke-dasharray="6 3"/>')
        out.append(f'<text x="{f.left + f.plot_w - 4:.1f}" y="{y - 4:.1f}" font-size="10" text-anchor="end" '
                   f'fill="#d62728">{escape(lim.label)}</text>')
    out.append(_legend(f, [(ln.name, ln.color or PALETTE[i % len(PALETTE)]) for i, ln in enumerate(drawn)]))
    out.append("</svg>")
    return "\n".join(out)


def _path(points: Sequence[Point], px: Callable[[float], float], py: Callable[[float], float], step: bool) -> str:
    parts: list[str] = []
    pen_up = True
    last_y: float | None = None
    for x, y in points:
        if y is None:
            pen_up = True
            continue
        if pen_up:
            parts.append(f"M{px(x):.1f},{py(y):.1f}")
            pen_up = False
        else:
            if step and last_y is not None:
                parts.append(f"L{px(x):.1f},{py(last_y):.1f}")
            parts.append(f"L{px(x):.1f},{py(y):.1f}")
        last_y = y
    return " ".join(parts)


def _legend(f: Frame, items: list[tuple[str, str]]) -> str:
    """One row under the title."""
    out = []
    x: float = f.left
    for name, color in items:
        out.append(f'<rect x="{x}" y="24" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="33" font-size="11">{escape(name)}</text>')
        x += 24 + 6.5 * len(name)
    return "".join(out)


@dataclass
class BarGroup:
    label: str
    values: Sequence[tuple[str, "float | None"]]  # (series name, value)


def bar_chart(title: str, chart_id: str, groups: Sequence[BarGroup], *, unit: str, label_width: int = 300,
              bar_h: int = 9, width: int = 920) -> str:
    """Horizontal grouped bars, one group per row (a query class), one bar per series (before, after)."""
    groups = [g for g in groups if any(v is not None for _, v in g.values)]
    if not groups:
        return empty_chart(title, chart_id, "no values were recorded for this chart")
    names = list(dict.fromkeys(n for g in groups for n, _ in g.values))
    per_group = bar_h * len(names) + 10
    f = Frame(width=width, height=60 + per_group * len(groups) + 10, left=label_width, top=56, bottom=10)
    vmax = max(v for g in groups for _, v in g.values if v is not None)
    ticks = nice_ticks(0.0, vmax)
    top_v = ticks[-1]

    def px(v: float) -> float:
        return f.left + v / top_v * f.plot_w

    out = _open(f, title, chart_id)
    for t in ticks:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.top}" y2="{f.top + f.plot_h:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x:.1f}" y="{f.top - 4}" font-size="10" text-anchor="middle">{fmt_tick(t, ticks)}</text>')
    out.append(f'<text x="{f.left + f.plot_w:.1f}" y="{f.top - 16}" font-size="10" text-anchor="end">'
               f'{escape(unit)}</text>')
    y = f.top + 4
    for g in groups:
        label = g.label if len(g.label) <= 48 else g.label[:47] + "…"
        out.append(f'<text x="{f.left - 6}" y="{y + per_group / 2:.1f}" font-size="10" text-anchor="end">'
                   f'<title>{escape(g.label)}</title>{escape(label)}</text>')
        for k, name in enumerate(names):
            value = dict(g.values).get(name)
            if value is None:
                continue
            color = PALETTE[k % len(PALETTE)]
            out.append(f'<rect class="bar" data-group="{escape(g.label)}" data-series="{escape(name)}" '
                       f'data-value="{value:.6g}" x="{f.left}" y="{y + k * bar_h}" '
                       f'width="{max(px(value) - f.left, 0.5):.1f}" height="{bar_h - 1}" fill="{color}">'
                       f'<title>{escape(name)}: {fmt_num(value)} {escape(unit)}</title></rect>')
        y += per_group
    out.append(_legend(Frame(width=f.width, left=8), [(n, PALETTE[k % len(PALETTE)]) for k, n in enumerate(names)]))
    out.append("</svg>")
    return "\n".join(out)
