"""The before/after tables operators already know from published migrations, filled from a run.

- before_after (the shape of Let's Encrypt's database upgrade write-up): median query
  latency seen by the application, average query time measured by the server
  (pt-query-digest), primary CPU, before and after;
- per_class (Etsy's): average and p95 per query class, before and after;
- background_copy (STH's): p99.9 beside a background copy and without one;
- scaling (Micron's): TPM, average and p99.9 latency per instance count, with
  the per-instance efficiency.

A table is built only from what was measured; a missing figure shows as "–" and
a table with nothing measured is not built at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from dbmigrate.report import model as m

DASH = "–"


@dataclass
class SeedTable:
    key: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    values: list[dict[str, Any]] = field(default_factory=list)  # the numbers behind the rows
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "columns": self.columns, "rows": self.rows,
                "values": self.values, "note": self.note}


def ms(v: float | None) -> str:
    if v is None:
        return DASH
    if v >= 100:
        return f"{v:,.0f} ms"
    if v >= 10:
        return f"{v:.1f} ms"
    return f"{v:.2f} ms"


def ms_pair(before: float | None, after: float | None) -> str:
    """'0.15 → 0.12 ms': one unit for both sides keeps the column narrow (and it may wrap at the arrow)."""
    if before is None or after is None:
        return f"{ms(before)} → {ms(after)}"
    return f"{ms(before).removesuffix(' ms')} → {ms(after)}"


def change(before: float | None, after: float | None) -> str:
    if before is None or after is None or before == 0:
        return DASH
    return f"{(after - before) / before * 100:+.0f}%"


def _pct(v: float | None) -> str:
    return DASH if v is None else f"{v:.0f}%"


def _sec_to_ms(v: Any) -> float | None:
    return None if v is None else float(v) * 1000.0


def before_after(model: m.ReportModel) -> SeedTable | None:
    ev = model.evidence
    client = ev.get(m.CLIENT_LATENCY) or {}
    cpu = ev.get(m.CPU) or {}
    overall = ((model.digest or {}).get("overall") or {}).get("avg") or {}
    rows_raw = [
        ("median query latency (application side)", (client.get("before") or {}).get("p50_ms"),
         (client.get("after") or {}).get("p50_ms"), ms),
        ("average query time (server, pt-query-digest)", _sec_to_ms(overall.get("before")),
         _sec_to_ms(overall.get("after")), ms),
        ("primary CPU (% of one core)", (cpu.get("before") or {}).get("pct"), (cpu.get("after") or {}).get("pct"),
         _pct),
    ]
    if all(b is None and a is None for _, b, a, _ in rows_raw):
        return None
    rows = [[label, fmt(b), fmt(a), change(b, a)] for label, b, a, fmt in rows_raw]
    values = [{"metric": label, "before": b, "after": a} for label, b, a, _ in rows_raw]
    notes = []
    if client.get("source"):
        notes.append(f"application side: {client['source']}")
    if cpu.get("before") or cpu.get("after"):
        where = ", ".join(f"{k} on {v['server']} over {v['seconds']:.0f} s" for k, v in cpu.items()
                          if isinstance(v, dict) and v.get("server"))
        notes.append(f"CPU: {where}")
    return SeedTable("before_after", "Before and after the move", ["", "before", "after", "change"], rows, values,
                     "; ".join(notes))


def per_class(model: m.ReportModel, limit: int = 10) -> SeedTable | None:
    classes = [c for c in (model.digest or {}).get("classes") or [] if c.get("status") == "matched"]
    if not classes:
        return None
    classes.sort(key=lambda c: -(c.get("share_before") or 0.0))
    rows, values = [], []
    for c in classes[:limit]:
        b, a = c["before"], c["after"]
        ab, aa, pb, pa = (_sec_to_ms(b.get("avg")), _sec_to_ms(a.get("avg")), _sec_to_ms(b.get("p95")),
                          _sec_to_ms(a.get("p95")))
        label = c["label"] if len(c["label"]) <= 60 else c["label"][:59] + "…"
        rows.append([label, f"{b['count']:,} → {a['count']:,}", ms_pair(ab, aa), change(ab, aa), ms_pair(pb, pa),
                     change(pb, pa)])
        values.append({"class": c["label"], "checksum": c.get("key"), "count_before": b["count"],
                       "count_after": a["count"], "avg_ms_before": ab, "avg_ms_after": aa, "p95_ms_before": pb,
                       "p95_ms_after": pa})
    note = f"{len(classes)} matched class(es), largest share of query time first"
    if len(classes) > limit:
        note += f"; top {limit} shown"
    return SeedTable("per_class", "Per query class, before → after (pt-query-digest)",
                     ["query class", "queries", "avg", "Δ avg", "p95", "Δ p95"],
                     rows, values, note)


def background_copy(model: m.ReportModel) -> SeedTable | None:
    bc = model.evidence.get(m.BACKGROUND_COPY)
    if not bc:
        return None
    without, with_ = bc.get("without") or {}, bc.get("with") or {}
    rows = [[label, ms(s.get("p999_ms")), ms(s.get("p99_ms")), ms(s.get("avg_ms")), f"{s.get('count', 0):,}"]
            for label, s in (("without a background copy", without), ("during the background copy", with_))]
    rows.append(["change", change(without.get("p999_ms"), with_.get("p999_ms")),
                 change(without.get("p99_ms"), with_.get("p99_ms")),
                 change(without.get("avg_ms"), with_.get("avg_ms")), ""])
    return SeedTable("background_copy", "Query latency beside a background copy",
                     ["", "p99.9", "p99", "avg", "queries"], rows,
                     [{"case": "without", **without}, {"case": "with", **with_}], bc.get("copy", ""))


def scaling(model: m.ReportModel) -> SeedTable | None:
    sc = model.evidence.get(m.SCALING)
    if not sc or not sc.get("rows"):
        return None
    rows = []
    for r in sc["rows"]:
        rows.append([str(r["instances"]), f"{r['tpm']:,.0f}", f"{r['tpm_per_instance']:,.0f}", ms(r.get("avg_ms")),
                     ms(r.get("p999_ms")), DASH if r.get("efficiency") is None else f"{r['efficiency']:.2f}"])
    return SeedTable("scaling", "Instances per host: throughput and latency",
                     ["instances", "TPM (total)", "TPM per instance", "avg", "p99.9", "efficiency"],
                     rows, list(sc["rows"]),
                     "efficiency: TPM per instance over TPM of one instance alone; " + sc.get("workload", ""))


def all_tables(model: m.ReportModel) -> list[SeedTable]:
    return [t for t in (before_after(model), per_class(model), background_copy(model), scaling(model))
            if t is not None]


def rich_table(t: SeedTable) -> Table:
    out = Table(title=t.title, caption=t.note or None, title_justify="left", caption_justify="left")
    for i, c in enumerate(t.columns):
        if i == 0:  # the label column folds (a long query class), never vanishes
            widest = max([len(c)] + [len(r[0]) for r in t.rows])
            out.add_column(c, justify="left", overflow="fold", min_width=min(widest, 16))
        else:
            out.add_column(c, justify="right")
    for row in t.rows:
        out.add_row(*row)
    return out
