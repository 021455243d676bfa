"""Before/after comparison: matching, new/gone classes, noise, rates, reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dbmigrate.digest.compare import Noise, compare, latency_delta
from dbmigrate.digest.model import Digest, QueryClass
from dbmigrate.digest import report

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "digest"


def qc(checksum: str, count: int, avg: float, p95: float | None = None, p99: float | None = None,
       fingerprint: str | None = None) -> QueryClass:
    return QueryClass(checksum=checksum, fingerprint=fingerprint or f"select {checksum.lower()}", distillate=f"SELECT {checksum}",
                      count=count, total_time=count * avg, avg=avg, p95=p95 if p95 is not None else avg * 2,
                      p99=p99, max=avg * 5)


def digest(classes: list[QueryClass], duration_s: float | None = None) -> Digest:
    n = sum(c.count for c in classes)
    total = sum(c.total_time for c in classes)
    return Digest(classes, n, total, total / n if n else 0.0, max((c.p95 for c in classes), default=None), None, duration_s)


@pytest.fixture
def fixtures():
    return Digest.load(FIX / "before.json"), Digest.load(FIX / "after.json")


def row(cmp, distillate):
    return next(r for r in cmp.rows if (r.before or r.after).distillate == distillate)


def test_regression_improvement_noise_new_and_gone(fixtures):
    cmp = compare(*fixtures)
    orders = row(cmp, "SELECT orders")
    assert orders.status == "matched"
    assert orders.latency["avg"].pct == pytest.approx(900.0)
    assert orders.latency["avg"].direction == "worse"
    assert orders.latency["p95"].abs == pytest.approx(0.0046)
    assert orders.worse == ["avg", "p95"]
    # matched by fingerprint although the checksum differs (16-hex from an older pt)
    update = row(cmp, "UPDATE orders")
    assert update.status == "matched" and update.before.checksum != update.after.checksum
    assert update.latency["avg"].direction == "better" and update.latency["avg"].pct == pytest.approx(-50.0)
    items = row(cmp, "SELECT items")
    assert items.latency["avg"].direction == "same" and not items.latency["avg"].significant
    assert row(cmp, "SELECT legacy_flags").status == "gone"
    assert row(cmp, "INSERT audit").status == "new"
    assert cmp.regressions == [orders]
    assert cmp.improvements == [update]
    assert any("1 class(es) only before (gone), 1 only after (new)" in n for n in cmp.notes)


def test_rows_ordered_by_baseline_share_then_new(fixtures):
    cmp = compare(*fixtures)
    assert [r.status for r in cmp.rows] == ["matched", "matched", "matched", "gone", "new"]
    shares = [r.share_before for r in cmp.rows if r.share_before is not None]
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) == pytest.approx(1.0)


def test_overall_is_query_weighted(fixtures):
    before, after = fixtures
    cmp = compare(before, after)
    assert cmp.overall["avg"].before == pytest.approx(0.46 / 3600)
    assert cmp.overall["avg"].after == pytest.approx(2.199 / 3550)
    assert cmp.overall["p95"].direction == "worse"
    assert cmp.overall["p99"].abs is None  # unavailable on both sides


def test_noise_threshold_needs_both_relative_and_absolute():
    n = Noise(pct=10, abs_us=50)
    assert not latency_delta(0.000020, 0.000040, n).significant      # +100% but only 20 µs
    assert not latency_delta(0.010, 0.0105, n).significant           # 500 µs but only +5%
    assert latency_delta(0.001, 0.0012, n).significant               # +20% and 200 µs
    assert latency_delta(0.001, 0.0012, Noise(pct=25, abs_us=50)).direction == "same"
    assert latency_delta(0.0, 0.0001, n).significant                 # from zero: absolute decides
    assert latency_delta(None, 0.001, n).direction == "n/a"


def test_noise_is_configurable_in_compare(fixtures):
    cmp = compare(*fixtures, noise=Noise(pct=1, abs_us=1))
    assert row(cmp, "SELECT items").latency["avg"].direction == "worse"


def test_rates_when_durations_differ():
    a = qc("A", 600, 0.001)
    before = digest([a], duration_s=60)
    after = digest([qc("A", 300, 0.001)], duration_s=30)  # same rate, half the window
    cmp = compare(before, after)
    assert cmp.per_second
    r = cmp.rows[0]
    assert r.volume.before == pytest.approx(10.0) and r.volume.after == pytest.approx(10.0)
    assert r.volume.direction == "same"
    assert any("60.0 s and 30.0 s" in n and "per second" in n for n in cmp.notes)
    raw = compare(digest([a]), digest([qc("A", 300, 0.001)]))
    assert not raw.per_second and raw.rows[0].volume.direction == "down"


def test_tiny_samples_and_empty_sides():
    empty = digest([], duration_s=10)
    cmp = compare(digest([qc("A", 1, 0.001)], 10), empty)
    assert cmp.rows[0].status == "gone"
    assert cmp.overall["avg"].abs is None
    assert compare(empty, empty).rows == []


def test_ties_in_share_are_ordered_by_count_then_checksum():
    before = digest([qc("B", 100, 0.001), qc("A", 100, 0.001), qc("C", 200, 0.0005)])
    cmp = compare(before, before)
    assert [r.key for r in cmp.rows] == ["C", "A", "B"]


def test_markdown_report(fixtures):
    md = report.comparison_markdown(compare(*fixtures))
    assert "| query class | before | after | change |" in md
    assert "average query latency 128 µs → 619 µs (+385%)" in md
    assert "| `select c from orders where customer_id = ?` 794F5440 | 200 µs | 2.00 ms | **▲ +900% (+1.80 ms)** |" in md
    assert "| `update orders set status = ? where id = ?` 102435CD | 300 µs | 150 µs | ▼ −50% (−150 µs) |" in md
    assert "| `insert into audit (who, what) values(?+)` 23DCA152 | – | 400 µs | new |" in md
    assert "| `select * from legacy_flags where id = ?` 996859AA | 100 µs | – | gone |" in md
    assert "**1 class(es) slower**" in md


def test_etsy_sentence():
    before = digest([qc("A", 1000, 0.000707)])
    after = digest([qc("A", 1000, 0.000359)])
    assert report.overall_sentence(compare(before, after)) == "average query latency 707 µs → 359 µs (−49%)"


def test_json_report_round_trips(fixtures):
    data = json.loads(json.dumps(report.comparison_json(compare(*fixtures))))
    assert data["overall"]["avg"]["direction"] == "worse"
    statuses = {c["label"]: c["status"] for c in data["classes"]}
    assert statuses["insert into audit (who, what) values(?+)"] == "new"
    assert statuses["select * from legacy_flags where id = ?"] == "gone"
    assert data["noise"] == {"pct": 10.0, "abs_us": 50.0}


def test_rich_report_marks(fixtures):
    from rich.console import Console

    con = Console(width=220, record=True, color_system=None)
    con.print(report.comparison_renderable(compare(*fixtures)))
    text = con.export_text()
    assert "▲ +900% (+1.80 ms)" in text
    assert "▼ −50% (−150 µs)" in text
    assert "p99" not in text.split("overall")[0]  # no p99 columns when no side has p99
