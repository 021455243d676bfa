"""One self-contained HTML page per report: inline CSS and SVG, no script, nothing fetched."""

from __future__ import annotations

import re
from html import escape
from typing import Any

from dbmigrate.redact import redact
from dbmigrate.report import model as m
from dbmigrate.report.series import iso_to_epoch
from dbmigrate.report.svg import Band, BarGroup, Frame, Limit, Line, bar_chart, empty_chart, line_chart
from dbmigrate.report.tables import SeedTable, all_tables

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;max-width:980px}
h1{font-size:20px;margin-bottom:4px} h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 0;font-size:12px} td,th{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
.meta{color:#555;font-size:12px} .note{color:#555;font-size:12px;margin:2px 0}
.ok{color:#1a7f37;font-weight:bold} .bad{color:#c62828;font-weight:bold} svg.chart{display:block;margin:6px 0}
"""

NOT_RECORDED = "not recorded in this run"


def render(model: m.ReportModel) -> str:
    tables = all_tables(model)
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(model.title)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>{_e(model.title)}</h1>", _header(model)]
    if tables:
        parts.append("<h2>Tables</h2>")
        parts.extend(_table_html(t) for t in tables)
    for section in (_timeline(model), _digest(model), _warmup(model), _guard(model)):
        if model.show_empty or NOT_RECORDED not in section:
            parts.append(section)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _e(text: Any) -> str:
    return escape(redact(str(text)))


def _header(model: m.ReportModel) -> str:
    out = ['<div class="meta">']
    if model.run:
        r = model.run
        cls = "ok" if r.get("status") == "done" else "bad"
        out.append(f'run <b>{_e(r["id"])}</b> ({_e(r["procedure"])} on {_e(r["cluster"])}): '
                   f'<span class="{cls}" data-status="{_e(r.get("status"))}">{_e(r.get("status"))}</span>, '
                   f'{_e(r.get("started_at"))} to {_e(r.get("finished_at") or "…")}<br>{_e(r.get("summary") or "")}')
    v = model.evidence.get(m.VERIFIER)
    gaps = model.evidence.get(m.WRITE_GAPS)
    if gaps:
        out.append("<br>" + headline(gaps))
    if v:
        lost = v.get("lost_total", 0)
        out.append(f'<br>acknowledged writes: {v.get("acknowledged", 0):,}, lost: '
                   f'<span class="{"ok" if not lost else "bad"}" data-lost="{lost}">{lost}</span>'
                   + ("" if gaps else f'; longest gap between acknowledged writes: {v.get("max_gap_ms")} ms'))
    sampler = model.evidence.get(m.SAMPLER)
    if sampler and sampler.get("failed"):
        out.append(f'<br>the lag sampler failed {sampler["failed"]} of {sampler["failed"] + sampler["samples"]} '
                   "samples (servers unreachable or fenced at that moment): its charts have gaps there")
    out.append(f"<br>report generated {_e(model.generated_at)}</div>")
    out.extend(f'<p class="note">{_e(n)}</p>' for n in model.notes)
    return "\n".join(out)


def headline(gaps: dict[str, Any]) -> str:
    """The outage the cutover caused first (the fenced window), then the longest other gap of the
    application's writes with the step it fell in: a figure never blames the fence for a stall elsewhere."""
    fenced = gaps.get("fenced_ms")
    out = (f'<b>fenced window: <span data-fenced-ms="{fenced}">{fenced} ms</span></b>' if fenced is not None
           else "<b>fenced window: not measured</b> (no fence in this run, or no write acknowledged across it)")
    others = gaps.get("other_write_gaps") or []
    if others:
        o = others[0]
        out += (f'; longest other gap between acknowledged writes: <span data-other-gap-ms="{o["ms"]}">{o["ms"]} ms'
                f'</span> during {_e(", ".join(o.get("steps") or ["between steps"]))}')
    else:
        out += "; no other gap of the writes of 100 ms or more"
    return out


def _table_html(t: SeedTable) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f'<td{"" if i == 0 else " class=num"}>{_e(c)}</td>' for i, c in enumerate(row))
                   + "</tr>" for row in t.rows)
    note = f'<p class="note">{_e(t.note)}</p>' if t.note else ""
    return (f'<h3>{_e(t.title)}</h3><table class="seed" data-table="{_e(t.key)}"><tr>{head}</tr>{body}</table>'
            f"{note}")


# -- cutover timeline -------------------------------------------------------------------

def bands_of(model: m.ReportModel, origin: float) -> list[Band]:
    return [Band(f"{'undo: ' if s['action'] == 'undo' else ''}{s['name']}", s["start"] - origin, s["end"] - origin,
                 failed=s["status"] in ("failed", "interrupted"))
            for s in model.steps]


def timeline_lines(model: m.ReportModel, origin: float) -> dict[str, list[Line]]:
    ev = model.evidence
    out: dict[str, list[Line]] = {"acks": [], "lag": [], "latency": []}
    acks = ev.get(m.ACKS) or {}
    if acks.get("counts"):
        width = acks["bin_ms"] / 1000.0
        out["acks"].append(Line("acknowledged writes per 10 ms",
                                [(acks["start"] + i * width - origin, float(c)) for i, c in enumerate(acks["counts"])]))
    by_replica: dict[str, list[tuple[float, float | None]]] = {}
    for t, replica, ms in (ev.get(m.LAG) or {}).get("points") or []:
        by_replica.setdefault(replica, []).append((t - origin, ms))
    out["lag"] = [Line(f"lag of {name}", pts) for name, pts in sorted(by_replica.items())]
    lat = (ev.get(m.LATENCY) or {}).get("points") or []
    if lat:
        out["latency"] = [Line("p50", [(s + 0.5 - origin, p50) for s, p50, _, _ in lat]),
                          Line("p99", [(s + 0.5 - origin, p99) for s, _, p99, _ in lat])]
    return out


def cutover_range(model: m.ReportModel, origin: float, margin_s: float = 0.5) -> tuple[float, float] | None:
    """The forward steps of the cutover phase, with half a second either side."""
    spans = [(s["start"], s["end"]) for s in model.steps if s["phase"] == "cutover" and s["action"] == "run"]
    if not spans:
        return None
    return (min(a for a, _ in spans) - origin - margin_s, max(b for _, b in spans) - origin + margin_s)


def _timeline(model: m.ReportModel) -> str:
    cutover = any(s["phase"] == "cutover" for s in model.steps)
    out = [f"<h2>{'Cutover timeline' if cutover else 'Timeline'}</h2>"]
    origin = model.origin()
    if origin is None:
        out.append(empty_chart("cutover timeline", "timeline-acks", NOT_RECORDED))
        return "\n".join(out)
    bands = bands_of(model, origin)
    lines = timeline_lines(model, origin)
    xs = [x for group in lines.values() for ln in group for x, _ in ln.points] + [b.end for b in bands] + [0.0]
    x_range = (min(xs), max(xs))
    first_step = min((st["start"] for st in model.steps), default=None)
    x_label = ("seconds since the run started" if first_step is not None and first_step <= origin + 1e-3
               else "seconds since the first sample")
    ev = model.evidence
    out.append(line_chart("Acknowledged writes per 10 ms (zero-loss verifier through the router)", "timeline-acks",
                          lines["acks"], x_label=x_label, y_label="writes", bands=bands, x_range=x_range)
               if lines["acks"] else empty_chart("Acknowledged writes per 10 ms", "timeline-acks", NOT_RECORDED))
    zoom = cutover_range(model, origin)
    if lines["acks"] and zoom is not None:
        near = [Line(ln.name, [(x, y) for x, y in ln.points if zoom[0] <= x <= zoom[1]]) for ln in lines["acks"]]
        out.append(line_chart("The cutover phase close up: acknowledged writes per 10 ms", "timeline-acks-zoom",
                              near, x_label=x_label, y_label="writes", bands=bands, x_range=zoom, step=True))
    out.append(line_chart("Replica lag (heartbeat, against the writable server)", "timeline-lag", lines["lag"],
                          x_label=x_label, y_label="ms", bands=bands, x_range=x_range)
               if lines["lag"] else empty_chart("Replica lag", "timeline-lag", NOT_RECORDED))
    source = (ev.get(m.LATENCY) or {}).get("source", "")
    out.append(line_chart("Query latency per second, p50 and p99", "timeline-latency",
                          lines["latency"], x_label=x_label, y_label="ms", bands=bands, x_range=x_range)
               if lines["latency"] else empty_chart("Query latency per second", "timeline-latency", NOT_RECORDED))
    if lines["latency"] and source:
        out.append(f'<p class="note">latency: {_e(source)}</p>')
    if not model.show_empty:
        out = [c for c in out if NOT_RECORDED not in c]
    if model.steps:
        rows = "".join(
            f'<tr data-step="{_e(b.label)}"><td class=num>{i + 1}</td><td>{_e(s["phase"])}</td><td>{_e(b.label)}</td>'
            f'<td>{_e(s["status"])}</td><td class=num>{b.start:.3f}</td>'
            f'<td class=num>{(s.get("duration_ms") or 0):.1f}</td><td>{_e(s["sentence"])}</td></tr>'
            for i, (b, s) in enumerate(zip(bands, model.steps)))
        out.append('<table class="steps"><tr><th>band</th><th>phase</th><th>step</th><th>status</th>'
                   f"<th>start s</th><th>ms</th><th>what it did</th></tr>{rows}</table>")
    return "\n".join(out)


# -- digest ---------------------------------------------------------------------------

# What the tool itself and replication send (session set-up, probes, locks, waits, replica
# control, binlog dumps): never the application's, so never in its before/after charts.
NOT_THE_APPLICATIONS = re.compile(
    r"^(administrator command|binlog dump|set (names|autocommit|session|global|sql_log_bin|statement|@@)|"
    r"select @@|show |select (connection_id|master_gtid_wait|get_lock|release_lock|is_used_lock|"
    r"is_free_lock|gtid_|timestampdiff)|change master|(start|stop|reset) (slave|replica)|flush |kill |"
    r"do |begin not atomic|commit$|rollback$|use )", re.I)


def application_class(c: dict[str, Any]) -> bool:
    text = (c.get("fingerprint") or c.get("label") or "").strip()
    return not NOT_THE_APPLICATIONS.match(text) and "dbmigrate" not in text.lower()


def _digest(model: m.ReportModel) -> str:
    out = ["<h2>pt-query-digest before and after, per query class</h2>"]
    d = model.digest or {}
    every = [c for c in d.get("classes") or [] if c.get("before") or c.get("after")]
    classes = [c for c in every if application_class(c)]
    left_out = len(every) - len(classes)
    if left_out:
        out.append(f'<p class="note" data-left-out="{left_out}">{left_out} class(es) of the tool\'s own and '
                   f"replication's statements (session set-up, probes, locks, replica control) left out of the "
                   f"charts: they are not the application's</p>")
    if not classes:
        out.append(empty_chart("pt-query-digest before/after", "digest-avg", NOT_RECORDED))
        return "\n".join(out)
    classes.sort(key=lambda c: -((c.get("share_before") or 0.0) + (c.get("share_after") or 0.0)))
    top = classes[:12]
    for metric, chart_id in (("avg", "digest-avg"), ("p95", "digest-p95")):
        groups = [BarGroup(c["label"], [(side, _ms((c.get(side) or {}).get(metric))) for side in ("before", "after")])
                  for c in top]
        out.append(bar_chart(f"{metric} query time per class (ms)", chart_id, groups, unit="ms"))
    for note in d.get("notes") or []:
        out.append(f'<p class="note">{_e(note)}</p>')
    return "\n".join(out)


def _ms(seconds: Any) -> float | None:
    return None if seconds is None else float(seconds) * 1000.0


# -- warm-up --------------------------------------------------------------------------

def _warmup(model: m.ReportModel) -> str:
    out = ["<h2>Warm-up: cold beside warmed</h2>"]
    w = model.evidence.get(m.WARMUP) or {}
    cases = w.get("cases") or {}
    if not cases:
        progress = warm_progress_lines(model)
        if progress:
            out.append(line_chart("Warm-up progress of the run's warm step", "warmup-progress", progress,
                                  x_label="seconds since the run started", y_label="% done",
                                  bands=bands_of(model, model.origin() or 0.0)))
            out.append(_warm_ratios(model))
        out.append(empty_chart("warm-up curve", "warmup-qps", "QPS and hit ratio per second, cold beside warmed: "
                               + NOT_RECORDED + " (bench/warmup.py --report measures them)"))
        return "\n".join(out)
    qps = [Line(case, [(s, q) for s, q, _ in pts]) for case, pts in cases.items()]
    hit = [Line(case, [(s, None if h is None else h * 100.0) for s, _, h in pts]) for case, pts in cases.items()]
    out.append(line_chart("Queries per second after traffic moves", "warmup-qps", qps,
                          x_label="seconds after the move", y_label="qps"))
    out.append(line_chart("Buffer pool hit ratio per second", "warmup-hit", hit, x_label="seconds after the move",
                          y_label="%", y_min=None))
    if w.get("source"):
        out.append(f'<p class="note">{_e(w["source"])}</p>')
    return "\n".join(out)


def warm_progress_lines(model: m.ReportModel) -> list[Line]:
    """The warm step's journaled progress (metric warm_progress, 0..1) per target server."""
    origin = model.origin() or 0.0
    by_server: dict[str, list[tuple[float, float | None]]] = {}
    for row in model.metrics:
        at = iso_to_epoch(row.get("at"))
        if row.get("name") == "warm_progress" and at is not None and row.get("value") is not None:
            by_server.setdefault((row.get("labels") or {}).get("server", "target"), []).append(
                (at - origin, float(row["value"]) * 100.0))
    return [Line(f"warm-up of {name}", pts) for name, pts in sorted(by_server.items())]


def _warm_ratios(model: m.ReportModel) -> str:
    rows = [(r["name"], (r.get("labels") or {}).get("server", ""), r.get("value")) for r in model.metrics
            if str(r.get("name", "")).startswith(("hit_ratio_", "resident_pages_"))]
    if not rows:
        return ""
    body = "".join(f"<tr><td>{_e(n)}</td><td>{_e(s)}</td><td class=num>{_e(v)}</td></tr>" for n, s, v in rows)
    return f'<table class="warm"><tr><th>measure</th><th>server</th><th>value</th></tr>{body}</table>'


# -- guard ----------------------------------------------------------------------------

def guard_lines(windows: list[dict[str, Any]]) -> tuple[list[Line], list[Limit]]:
    per_rule: dict[int, list[tuple[float, float | None]]] = {}
    names: dict[int, str] = {}
    limits: dict[float, str] = {}
    for w in windows:
        if not isinstance(w.get("window"), (int, float)):
            continue  # the whole window's verdict (a table row), not a point of the per-sample chart
        for i, rule in enumerate((w.get("numbers") or {}).get("rules") or []):
            names.setdefault(i, f"rule {i + 1}: {rule.get('metric')} {rule.get('scope', '')}".strip())
            per_rule.setdefault(i, []).append((float(w["window"]), rule.get("change_pct")))
            if rule.get("limit_pct") is not None:
                limits.setdefault(float(rule["limit_pct"]), f"limit +{rule['limit_pct']:g}%")
    return ([Line(names[i], pts) for i, pts in sorted(per_rule.items())],
            [Limit(label, y) for y, label in sorted(limits.items())])


def _guard(model: m.ReportModel) -> str:
    out = ["<h2>Latency guard windows against the policy</h2>"]
    windows = model.guard_windows
    if not windows:
        out.append(empty_chart("guard windows", "guard-windows", NOT_RECORDED))
        return "\n".join(out)
    lines, limits = guard_lines(windows)
    if lines:
        out.append(line_chart("Change against the baseline per guard window (%)", "guard-windows", lines,
                              x_label="guard window", y_label="% vs baseline", limits=limits, y_min=None,
                              frame=Frame(height=240)))
    else:
        out.append(empty_chart("guard windows", "guard-windows", "no window had enough samples to judge"))
    rows = "".join(
        f'<tr data-window="{w["window"]}"><td class=num>{w["window"]}</td><td class=num>{w.get("queries", 0):,}</td>'
        f'<td class="{"bad" if w.get("rollback") else "ok"}">'
        f'{"roll back" if w.get("rollback") else "insufficient" if w.get("insufficient") else "keep"}</td>'
        f'<td>{_e("; ".join(w.get("reasons") or []))}</td></tr>' for w in windows)
    out.append(f'<table class="guard"><tr><th>window</th><th>queries</th><th>verdict</th><th>why</th></tr>{rows}'
               "</table>")
    return "\n".join(out)
