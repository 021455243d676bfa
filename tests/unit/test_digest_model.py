"""Parsing pt-query-digest JSON (string-valued metrics) into the Digest model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dbmigrate.digest.model import Digest, DigestFormatError, format_latency, nearest_rank

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "digest"


def test_string_metrics_become_numbers():
    d = Digest.load(FIX / "before.json")
    orders = next(c for c in d.classes if c.distillate == "SELECT orders")
    assert orders.count == 1000
    assert orders.avg == pytest.approx(0.0002)
    assert orders.p95 == pytest.approx(0.0004)
    assert orders.total_time == pytest.approx(0.2)
    assert orders.rows_examined_avg == 40
    assert orders.p99 is None  # pt-query-digest JSON has no p99
    assert orders.tables == ("`app`.`orders`",)
    assert d.query_count == 3600
    assert d.total_time == pytest.approx(0.46)
    assert d.avg == pytest.approx(0.46 / 3600)
    assert d.p95 == pytest.approx(0.00042)
    assert d.p99 is None
    assert d.percentiles == "pt-query-digest buckets"


def test_real_capture_fixture_parses_every_class():
    raw = json.loads((FIX / "pt_sandbox_rw.json").read_text())
    d = Digest.load(FIX / "pt_sandbox_rw.json")
    assert len(d.classes) == len(raw["classes"]) == 5
    assert d.query_count == int(raw["global"]["query_count"])
    assert sum(c.count for c in d.classes) == d.query_count
    assert {c.distillate for c in d.classes} >= {"UPDATE app.t", "SELECT app.t"}
    # pt's checksum is the uppercase md5 of the fingerprint
    import hashlib
    for c in d.classes:
        assert c.checksum == hashlib.md5(c.fingerprint.encode()).hexdigest().upper()


def test_samples_give_exact_percentiles_per_class_and_overall():
    raw = json.loads((FIX / "before.json").read_text())
    items = next(c for c in raw["classes"] if c["distillate"] == "SELECT items")["checksum"]
    samples = {items: [i / 1e6 for i in range(1, 101)]}  # 1..100 µs
    d = Digest.from_pt_json(raw, samples=samples, duration_s=10)
    c = d.by_checksum()[items]
    assert c.p95 == pytest.approx(95e-6)
    assert c.p99 == pytest.approx(99e-6)
    assert d.p99 == pytest.approx(99e-6)
    assert d.percentiles == "exact"
    assert d.qps == pytest.approx(360.0)


def test_empty_capture_is_an_empty_digest_but_an_empty_file_is_refused(tmp_path):
    d = Digest.from_pt_json({}, samples={}, duration_s=5)  # pt-query-digest's output for a log without queries
    assert d.classes == [] and d.query_count == 0 and d.p95 is None and d.percentiles == "exact"
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(DigestFormatError, match="is empty"):  # a 0-byte file compared as "−100% queries"
        Digest.load(empty)


def test_round_trip_through_our_file_format(tmp_path):
    d = Digest.load(FIX / "after.json")
    d.duration_s = 12.5
    back = Digest.load(d.save(tmp_path / "x.digest.json"))
    assert back.to_dict() == d.to_dict()
    assert back.classes[0].tables == d.classes[0].tables


def test_bad_metric_value_names_the_field(tmp_path):
    raw = json.loads((FIX / "before.json").read_text())
    raw["classes"][1]["metrics"]["Query_time"]["pct_95"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(DigestFormatError, match=r"classes\[1\]\.metrics\.Query_time\.pct_95.*'fast'"):
        Digest.load(bad)


def test_not_a_digest(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"rows": []}')
    with pytest.raises(DigestFormatError, match="no 'global' or 'classes'"):
        Digest.load(f)
    f.write_text("{not json")
    with pytest.raises(DigestFormatError, match=":1: not JSON"):
        Digest.load(f)
    with pytest.raises(DigestFormatError, match="does not exist"):
        Digest.load(tmp_path / "missing.json")


def test_example_queries_are_redacted():
    raw = json.loads((FIX / "before.json").read_text())
    raw["classes"][0]["example"]["query"] = "CREATE USER x IDENTIFIED BY 'hunter22'"
    d = Digest.from_pt_json(raw)
    assert "hunter22" not in d.classes[0].example


def test_nearest_rank():
    assert nearest_rank([], 0.99) is None
    assert nearest_rank([5.0], 0.95) == 5.0
    vals = [float(i) for i in range(1, 21)]  # 20 values
    assert nearest_rank(vals, 0.95) == 19.0
    assert nearest_rank(vals, 0.99) == 20.0
    assert nearest_rank(vals, 0.5) == 10.0


def test_format_latency():
    assert format_latency(0.000707) == "707 µs"
    assert format_latency(0.00123) == "1.23 ms"
    assert format_latency(0.0123) == "12.3 ms"
    assert format_latency(0.5) == "500 ms"
    assert format_latency(1.5) == "1.50 s"
    assert format_latency(None) == "n/a"
