"""Renderers for digests and comparisons: rich tables (terminal), markdown (to paste
into a change ticket or chat), JSON (machines). Pure: they return objects or text."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from dbmigrate.console_table import PIPE_WIDTH, Col, build, fits
from dbmigrate.digest.compare import Comparison, Delta
from dbmigrate.digest.model import Digest, format_latency
from dbmigrate.digest.policy import Decision

WORSE, BETTER, SAME = "▲", "▼", "·"


def mark(delta: Delta) -> str:
    return {"worse": WORSE, "better": BETTER, "up": "↑", "down": "↓", "same": SAME}.get(delta.direction, "")


def change_text(delta: Delta, *, latency: bool = True) -> str:
    """'▲ +45% (+310 µs)', '▼ −49% (−348 µs)', '· +3%' (noise), '' (a side missing)."""
    if delta.abs is None:
        return ""
    pct = f"{_signed(delta.pct)}%" if delta.pct is not None else "new"
    if latency and delta.significant:
        sign = "+" if delta.abs >= 0 else "−"
        return f"{mark(delta)} {pct} ({sign}{format_latency(abs(delta.abs))})"
    return f"{mark(delta)} {pct}"


def _signed(pct: float | None) -> str:
    if pct is None:
        return ""
    return f"+{pct:.0f}" if pct >= 0 else f"−{abs(pct):.0f}"


def _rate(value: float | None, per_second: bool) -> str:
    if value is None:
        return "–"
    return f"{value:,.1f}/s" if per_second else f"{value:,.0f}"


def _styled(delta: Delta, text: str) -> Text:
    style = {"worse": "bold red", "better": "bold green", "same": "dim"}.get(delta.direction, "")
    return Text(text, style=style)


# -- one digest ---------------------------------------------------------------------
def digest_table(digest: Digest, limit: int = 20, width: int | None = None) -> RenderableType:
    """Classes by share of query time for a terminal of `width` columns (None: no limit).
    Ids and numbers are never cut: when they do not fit, each class becomes a record."""
    src = digest.source
    title = f"digest of {src.get('server') or src.get('slow_log') or src.get('file') or 'capture'}"
    cols = [Col("query class"), Col("id", keep=True)] + [Col(h, keep=True, right=True) for h in
                                                          ("share", "count", "avg", "p95", "p99", "max", "rows exam.")]
    total = digest.total_time or 1
    rows = [[c.label, c.checksum[:8], f"{c.total_time / total:.0%}", f"{c.count:,}", format_latency(c.avg),
             format_latency(c.p95), format_latency(c.p99), format_latency(c.max),
             "–" if c.rows_examined_avg is None else f"{c.rows_examined_avg:,.0f}"]
            for c in sorted(digest.classes, key=lambda c: (-c.total_time, c.checksum))[:limit]]
    return build(width or PIPE_WIDTH, cols, rows, title=title, caption=_digest_caption(digest))


def _digest_caption(d: Digest) -> str:
    dur = f" in {d.duration_s:.1f} s ({d.qps:,.0f} q/s)" if d.duration_s else ""
    return (f"{d.query_count:,} queries{dur}, {len(d.classes)} classes; "
            f"avg {format_latency(d.avg if d.query_count else None)}, "
            f"p95 {format_latency(d.p95)}, p99 {format_latency(d.p99)} (percentiles: {d.percentiles})")


# -- comparison ---------------------------------------------------------------------
def comparison_renderable(cmp: Comparison, limit: int = 30, width: int | None = None) -> Group:
    """Tables for a terminal of `width` columns (None: no limit). When the full table does
    not fit, the Δ columns drop their absolute part; when that does not fit either, each
    class is a record. Ids and numbers are never cut."""
    width = width or PIPE_WIDTH
    cols, rows = _class_rows(cmp, limit, compact=False)
    if not fits(width, cols, rows):
        cols, rows = _class_rows(cmp, limit, compact=True)
    caption = (f"{WORSE} worse  {BETTER} better  {SAME} within noise "
               f"(< {cmp.noise.pct:g}% or < {cmp.noise.abs_us:g} µs)")
    if len(cmp.rows) > limit:
        caption = f"… {len(cmp.rows) - limit} more classes (see --json); " + caption
    table = build(width, cols, rows, title="query classes, before → after", caption=caption)
    return Group(table, *_overall_parts(cmp, width))


def _class_rows(cmp: Comparison, limit: int, compact: bool) -> tuple[list[Col], list[list[Any]]]:
    per_s = cmp.per_second
    metrics = ["avg", "p95"] + (["p99"] if _has_p99(cmp) else [])
    rows: list[list[Any]] = []
    for r in cmp.rows[:limit]:
        cells: list[Any] = [
            r.label, r.key[:8], r.status,
            f"{r.share_before:.0%}" if r.share_before is not None else "–",
            f"{_rate(r.volume.before, per_s)} → {_rate(r.volume.after, per_s)}"]
        for m in metrics:
            d = r.latency[m]
            cells.append(f"{format_latency(d.before) if r.before else '–'} → {format_latency(d.after) if r.after else '–'}")
            cells.append(_styled(d, change_text(d, latency=not compact)))
        rows.append(cells)
    cols = [Col("query class"), Col("id", keep=True), Col("status", keep=True), Col("share", keep=True, right=True),
            Col("rate" if per_s else "count", keep=True, right=True)]
    cols += [Col(h, keep=True, right=True) for m in metrics for h in (m, f"Δ {m}")]
    return cols, rows


def _overall_parts(cmp: Comparison, width: int) -> list[Any]:
    per_s = cmp.per_second
    rows = []
    for m, name in (("avg", "average latency"), ("p95", "p95 latency"), ("p99", "p99 latency")):
        d = cmp.overall[m]
        rows.append([name, format_latency(d.before), format_latency(d.after), _styled(d, change_text(d))])
    v = cmp.overall["volume"]
    rows.append(["queries" + (" per second" if per_s else ""), _rate(v.before, per_s), _rate(v.after, per_s),
                 change_text(v, latency=False)])
    cols = [Col("metric", keep=True)] + [Col(h, keep=True, right=True) for h in ("before", "after", "change")]
    notes = Text("\n".join(f"note: {n}" for n in cmp.notes), style="dim")
    return [build(width, cols, rows, title="overall"), notes]


def _has_p99(cmp: Comparison) -> bool:
    return any(c.p99 is not None for d in (cmp.before, cmp.after) for c in d.classes)


def overall_sentence(cmp: Comparison, metric: str = "avg") -> str:
    """Etsy style: 'average query latency 707 µs → 359 µs (−49%)'."""
    d = cmp.overall[metric]
    name = {"avg": "average query latency", "p95": "p95 query latency", "p99": "p99 query latency"}[metric]
    change = f" ({_signed(d.pct)}%)" if d.pct is not None else ""
    return f"{name} {format_latency(d.before)} → {format_latency(d.after)}{change}"


def comparison_markdown(cmp: Comparison, limit: int = 30) -> str:
    b, a = cmp.before, cmp.after
    lines = ["## Query latency before and after", ""]
    for m in ("avg", "p95", "p99"):
        if cmp.overall[m].before is not None and cmp.overall[m].after is not None:
            lines.append(f"- {overall_sentence(cmp, m)}")
    v = cmp.overall["volume"]
    unit = " queries/s" if cmp.per_second else " queries"
    lines.append(f"- traffic {_rate(v.before, cmp.per_second)} → {_rate(v.after, cmp.per_second)}"
                 f"{'' if cmp.per_second else unit}; {b.query_count:,} and {a.query_count:,} queries captured")
    if cmp.regressions:
        lines.append(f"- **{len(cmp.regressions)} class(es) slower**: "
                     + ", ".join(f"`{r.label}` ({'/'.join(r.worse)})" for r in cmp.regressions[:5]))
    lines.append("")
    for m, title in (("avg", "Average latency"), ("p95", "p95 latency")):
        lines += [f"### {title}", "", "| query class | before | after | change |", "|---|---:|---:|---:|"]
        for r in cmp.rows[:limit]:
            d = r.latency[m]
            before = format_latency(d.before) if r.before else "–"
            after = format_latency(d.after) if r.after else "–"
            change = {"new": "new", "gone": "gone"}.get(r.status) or change_text(d)
            if d.direction == "worse":
                change = f"**{change}**"
            lines.append(f"| `{_md(r.label)}` {r.key[:8]} | {before} | {after} | {change} |")
        lines.append("")
    lines.append(f"{WORSE} slower, {BETTER} faster, {SAME} within noise "
                 f"(changes under {cmp.noise.pct:g}% or {cmp.noise.abs_us:g} µs).")
    lines += [f"Note: {n}." for n in cmp.notes]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    return cmp.to_dict()


# -- guard decision -----------------------------------------------------------------
def decision_text(decision: Decision) -> Text:
    head = ("ROLL BACK" if decision.rollback else
            "no decision (insufficient samples)" if decision.insufficient else "keep")
    style = "bold red" if decision.rollback else "yellow" if decision.insufficient else "bold green"
    out = Text(head + "\n", style=style)
    for r in decision.reasons:
        out.append(f"  - {r}\n")
    return out
