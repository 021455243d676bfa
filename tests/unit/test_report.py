"""Evidence reports: series, SVG charts, seed-shaped tables, HTML and JSON files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dbmigrate.exceptions import UsageError
from dbmigrate.report import html, svg
from dbmigrate.report import model as m
from dbmigrate.report.model import ReportModel, from_evidence
from dbmigrate.report.series import (bin_counts, cpu_percent, per_second_latency, percentile, split_at,
                                     summarize_ms)
from dbmigrate.report.tables import all_tables, before_after, per_class, scaling
from dbmigrate.report.write import check_report_path, json_path_for, report_json, write_report

T0 = 1_800_000_000.0


def test_percentile_is_nearest_rank():
    values = sorted(range(1, 1001))
    assert percentile(values, 50) == 500
    assert percentile(values, 99.9) == 999
    assert percentile(values, 100) == 1000
    assert percentile([], 50) is None


def test_summary_has_the_tail():
    s = summarize_ms([1.0] * 998 + [50.0, 100.0])
    assert s["count"] == 1000 and s["p50_ms"] == 1.0 and s["p999_ms"] == 50.0 and s["max_ms"] == 100.0
    assert summarize_ms([]) == {"count": 0}


def test_bins_show_a_fenced_window_as_zeros():
    acks = [T0 + i * 0.003 for i in range(200)]
    acks = [a for a in acks if not (T0 + 0.2 <= a < T0 + 0.3)]  # 100 ms without an acknowledgement
    b = bin_counts(acks, 10.0)
    assert b["bin_ms"] == 10.0 and sum(b["counts"]) == len(acks)
    zeros = max(len(run) for run in "".join("0" if c == 0 else "x" for c in b["counts"]).split("x"))
    assert zeros >= 9
    assert bin_counts([], 10.0)["counts"] == []


def test_per_second_latency_and_split():
    samples = [(T0 + i * 0.01, float(i % 10)) for i in range(300)]
    points = per_second_latency(samples)
    assert [p[0] for p in points] == [T0, T0 + 1, T0 + 2]
    assert all(p[3] == 100 and p[1] <= p[2] for p in points)
    before, after = split_at(samples, T0 + 1.0)
    assert len(before) == 100 and len(after) == 200
    assert split_at(samples, None) == ([v for _, v in samples], [])


def test_cpu_percent_of_one_core():
    assert cpu_percent(100, 150, 1.0, hz=100) == 50.0
    assert cpu_percent(0, 10, 0.0) is None


def test_nice_ticks_cover_the_range():
    ticks = svg.nice_ticks(0, 37)
    assert ticks[0] == 0 and ticks[-1] >= 37 and len(ticks) <= 8
    assert svg.nice_ticks(5, 5)[-1] > 5


def test_line_chart_draws_every_point_and_bands():
    lines = [svg.Line("p99", [(0.0, 1.0), (1.0, None), (2.0, 3.0), (3.0, 4.0)])]
    out = svg.line_chart("t", "c1", lines, x_label="s", y_label="ms", bands=[svg.Band("fence", 1.0, 1.5)],
                         limits=[svg.Limit("limit", 5.0)])
    path = re.search(r'<path class="series" data-series="p99" data-points="(\d+)"[^>]* d="([^"]+)"', out)
    assert path and path.group(1) == "3"
    assert path.group(2).count("M") == 2  # the None broke the line
    assert 'data-step="fence"' in out and 'data-limit="limit"' in out
    assert out.startswith("<svg") and out.endswith("</svg>")


def test_empty_chart_says_why():
    out = svg.line_chart("t", "c2", [svg.Line("x", [(0, None)])], x_label="", y_label="")
    assert "no samples" in out and 'class="series"' not in out


def test_bar_chart_holds_values():
    out = svg.bar_chart("avg", "b1", [svg.BarGroup("select ?", [("before", 1.5), ("after", 3.0)])], unit="ms")
    assert re.findall(r'data-series="(\w+)" data-value="([\d.]+)"', out) == [("before", "1.5"), ("after", "3")]


def _digest_dict() -> dict:
    cls = lambda n, avg, p95: {"checksum": "ab", "count": n, "total_time": n * avg, "avg": avg, "p95": p95,  # noqa: E731
                               "p99": None, "max": p95, "rows_examined_avg": 1}
    return {"overall": {"avg": {"before": 0.0002, "after": 0.0003}},
            "classes": [{"key": "ab", "label": "select * from t where id = ?", "status": "matched",
                         "share_before": 0.9, "share_after": 0.9, "before": cls(1000, 0.0002, 0.0004),
                         "after": cls(900, 0.0003, 0.0008)},
                        {"key": "cd", "label": "insert into t", "status": "new", "share_before": None,
                         "share_after": 0.1, "before": None, "after": cls(10, 0.001, 0.002)}],
            "notes": ["counts and total time are compared per second"]}


def _model() -> ReportModel:
    acks = [T0 + 1 + i * 0.003 for i in range(1000)]
    ev = {m.ACKS: bin_counts(acks), m.LATENCY: {"source": "reads", "points": per_second_latency(
              [(T0 + 1 + i * 0.01, 1.0 + i % 3) for i in range(300)])},
          m.LAG: {"points": [[T0 + 1 + i * 0.25, "db-2", float(i)] for i in range(12)]},
          m.CLIENT_LATENCY: {"before": summarize_ms([1, 2, 3]), "after": summarize_ms([2, 3, 4])},
          m.CPU: {"before": {"server": "db-1", "pct": 80.0, "seconds": 5}, "after": {"server": "db-3", "pct": 40.0,
                                                                                    "seconds": 5}},
          m.WARMUP: {"cases": {"cold": [[1, 100.0, 0.5], [2, 300.0, 0.9]], "replay": [[1, 900.0, 0.99],
                                                                                       [2, 950.0, 0.995]]}},
          m.SCALING: {"workload": "tpcc", "rows": [
              {"instances": 1, "tpm": 1000.0, "tpm_per_instance": 1000.0, "avg_ms": 5.0, "p999_ms": 40.0,
               "efficiency": 1.0},
              {"instances": 2, "tpm": 1600.0, "tpm_per_instance": 800.0, "avg_ms": 7.0, "p999_ms": 60.0,
               "efficiency": 0.8}]},
          m.BACKGROUND_COPY: {"copy": "dump", "without": summarize_ms([1.0] * 999 + [5.0]),
                              "with": summarize_ms([1.0] * 999 + [20.0])}}
    return ReportModel(title="promote <db>", run={"id": "r1", "procedure": "promote", "cluster": "c",
                                                  "status": "done", "summary": "ok"},
                       steps=[{"phase": "cutover", "name": "fence the old primary", "action": "run",
                               "status": "done", "start": T0 + 2, "end": T0 + 2.01, "duration_ms": 10.0,
                               "sentence": "fenced"}],
                       evidence=ev, digest=_digest_dict(),
                       guard_windows=[{"window": 1, "queries": 500, "rollback": False, "insufficient": False,
                                       "reasons": ["within"], "numbers": {"rules": [
                                           {"metric": "p95", "scope": "overall", "change_pct": 20.0,
                                            "limit_pct": 100}]}}])


def test_before_after_table_from_the_evidence():
    t = before_after(_model())
    assert t is not None
    assert t.rows[0] == ["median query latency (application side)", "2.00 ms", "3.00 ms", "+50%"]
    assert t.rows[1][1:] == ["0.20 ms", "0.30 ms", "+50%"]
    assert t.rows[2][1:] == ["80%", "40%", "-50%"]


def test_per_class_table_keeps_matched_classes():
    t = per_class(_model())
    assert t is not None and len(t.rows) == 1
    assert t.rows[0][1:] == ["1,000 → 900", "0.20 → 0.30 ms", "+50%", "0.40 → 0.80 ms", "+100%"]


def test_scaling_table_and_missing_tables():
    t = scaling(_model())
    assert t is not None and t.rows[1] == ["2", "1,600", "800", "7.00 ms", "60.0 ms", "0.80"]
    assert all_tables(from_evidence("empty", {})) == []


def test_html_has_every_chart_with_data_and_escapes_text():
    page = html.render(_model())
    for chart in ("timeline-acks", "timeline-acks-zoom", "timeline-lag", "timeline-latency", "digest-avg",
                  "digest-p95", "warmup-qps", "warmup-hit", "guard-windows"):
        assert f'data-chart="{chart}"' in page, chart
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "promote &lt;db&gt;" in page
    assert len(re.findall(r'data-table="(\w+)"', page)) == 4


def test_a_run_report_says_what_was_not_recorded():
    page = html.render(ReportModel(title="run"))
    assert page.count(html.NOT_RECORDED) == 4


def test_a_benchmark_report_shows_only_what_it_measured():
    ev = {m.LATENCY: {"source": "reads", "points": [[T0, 1.0, 2.0, 10], [T0 + 1, 1.0, 3.0, 10]]}}
    page = html.render(from_evidence("bench", ev))
    assert html.NOT_RECORDED not in page and 'data-chart="timeline-latency"' in page
    assert "<h2>Timeline</h2>" in page and "Warm-up" not in page


def test_write_report_refuses_bad_paths(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        check_report_path(tmp_path / "missing" / "r.html")
    with pytest.raises(UsageError, match="is a directory"):
        check_report_path(tmp_path)
    assert json_path_for(tmp_path / "r.html").name == "r.json"
    assert json_path_for(tmp_path / "r").name == "r.json"


def test_write_report_writes_html_and_the_same_numbers_as_json(tmp_path):
    model = _model()
    html_path, json_path = write_report(model, tmp_path / "r.html")
    data = json.loads(json_path.read_text())
    assert data["evidence"][m.SCALING]["rows"][1]["tpm"] == 1600.0
    assert [t["key"] for t in data["tables"]] == ["before_after", "per_class", "background_copy", "scaling"]
    assert data == json.loads(json.dumps(report_json(model), default=str))
    assert html_path.read_text().startswith("<!DOCTYPE html>")
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_runs_warm_step_progress_is_drawn_from_its_metrics():
    at = lambda s: f"2027-01-15T08:00:0{s}.000Z"  # noqa: E731
    model = ReportModel(title="run", metrics=[
        {"name": "warm_progress", "value": v, "labels": {"server": "db-3"}, "at": at(i)}
        for i, v in enumerate((0.0, 0.4, 1.0))] + [
        {"name": "hit_ratio_after", "value": 0.99, "labels": {"server": "db-3"}, "at": at(3)}])
    lines = html.warm_progress_lines(model)
    assert [ln.name for ln in lines] == ["warm-up of db-3"] and [y for _, y in lines[0].points] == [0.0, 40.0, 100.0]
    page = html.render(model)
    assert 'data-chart="warmup-progress"' in page and "hit_ratio_after" in page


def test_secrets_in_step_sentences_never_reach_the_report(tmp_path):
    from dbmigrate.redact import register_secret

    register_secret("s3cr3t-value")
    model = ReportModel(title="run", steps=[{"phase": "cutover", "name": "repoint", "action": "run", "status": "done",
                                             "start": T0, "end": T0 + 1, "duration_ms": 1000.0,
                                             "sentence": "CHANGE MASTER TO MASTER_PASSWORD='hunter2', s3cr3t-value"}],
                        evidence={m.LATENCY: {"source": "x", "points": [[T0, 1.0, 2.0, 3]]}})
    html_path, json_path = write_report(model, tmp_path / "r.html")
    for text in (html_path.read_text(), json_path.read_text()):
        assert "hunter2" not in text and "s3cr3t-value" not in text


def test_the_sampler_turns_cluster_samples_into_lag_and_latency_series():
    from dbmigrate.app.evidence import ClusterSampler
    from dbmigrate.app.monitor import ClusterSample
    from dbmigrate.lag import LagSample

    class Monitor:
        def __init__(self):
            self.samples = [ClusterSample("db-1", "", 0.5, [LagSample("db-2", "a", 3.0), LagSample("db-3", "b", None)]),
                            ClusterSample(None, "no writable server (fenced?)", None),
                            ClusterSample("db-3", "", 0.7, [LagSample("db-2", "a", 1.0)])]

        def sample(self):
            s = self.samples.pop(0)
            if s is None:
                raise RuntimeError("gone")
            return s

    sampler = ClusterSampler(Path("unused.yaml"), "c")
    monitor = Monitor()
    monitor.samples.insert(1, None)  # one sample fails: counted, never raised
    for _ in range(4):
        sampler.take(monitor)
    ev = sampler.evidence()
    assert [w for _, w in ev[m.LAG]["writers"]] == ["db-1", None, "db-3"]
    assert [(r, v) for _, r, v in ev[m.LAG]["points"]] == [("db-2", 3.0), ("db-3", None), ("db-2", 1.0)]
    assert sum(p[3] for p in ev[m.LATENCY]["points"]) == 2
    assert ev[m.SAMPLER] == {"interval_s": 0.25, "samples": 3, "failed": 1}


def test_the_headline_is_the_fenced_window_with_the_longest_other_gap_by_step():
    model = _model()
    model.evidence[m.WRITE_GAPS] = {"fenced_ms": 101.6, "other_write_gaps": [
        {"ms": 575.9, "steps": ["latency guard"]}, {"ms": 120.0, "steps": ["repoint replicas"]}]}
    model.evidence[m.VERIFIER] = {"acknowledged": 9128, "lost_total": 0, "max_gap_ms": 575.9}
    page = html.render(model)
    header = page[page.index('<div class="meta">'):page.index("report generated")]
    assert header.index("fenced window: ") < header.index("575.9 ms")
    assert 'data-fenced-ms="101.6"' in header and "longest other gap" in header and "during latency guard" in header
    assert "acknowledged writes: 9,128, lost:" in header and 'data-lost="0"' in header
    assert "longest gap between acknowledged writes: 575.9" not in header  # no longer the headline


def test_ticks_of_a_narrow_range_never_repeat_and_cutover_step_numbers_never_overlap():
    bands = [svg.Band(f"step {i}", 18.0 + i * 0.01, 18.0 + (i + 1) * 0.01) for i in range(8)]
    page = svg.line_chart("t", "t", [svg.Line("acks", [(17.8, 1.0), (18.5, 2.0), (20.1, 3.0)])], x_label="s",
                          y_label="n", bands=bands, x_range=(17.8, 20.1))
    labels = re.findall(r'text-anchor="middle">([^<]+)</text>', page)
    x_ticks = [t for t in labels if t not in ("s",)]
    assert len(x_ticks) == len(set(x_ticks)) > 3, x_ticks  # 17.8 18.0 18.2 ..., not 18 18 18 19
    placed = [(float(x), float(y)) for x, y in re.findall(r'class="band-label" x="([\d.]+)" y="([\d.]+)"', page)]
    for i, (x, y) in enumerate(placed):
        for x2, y2 in placed[i + 1:]:
            assert not (abs(x - x2) < 10 and y == y2), placed  # no two numbers on top of each other
    assert len(re.findall(r'class="band" data-step=', page)) == 8  # every step still drawn, named in its title


def test_digest_charts_leave_out_the_tools_own_and_replications_classes():
    model = _model()
    app_class = model.digest["classes"][0]
    noise = [{**app_class, "key": k, "fingerprint": fp, "label": fp}
             for k, fp in (("a", "select @@global.read_only"), ("b", "administrator command: binlog dump"),
                           ("c", "show slave status"), ("d", "select master_gtid_wait(?, ?)"),
                           ("e", "set names utf8mb4"), ("f", "select * from dbmigrate.cluster_lease where id=?"))]
    model.digest = {**model.digest, "classes": [*model.digest["classes"], *noise]}
    page = html.render(model)
    section = page[page.index("pt-query-digest before and after"):]
    for c in noise:
        assert c["fingerprint"] not in section, c["fingerprint"]
    assert app_class["label"] in section and 'data-left-out="6"' in section
