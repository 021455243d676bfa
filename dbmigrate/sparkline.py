"""A line of block characters for a series of numbers, for terminal panels and tables."""

from __future__ import annotations

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
