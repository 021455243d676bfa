"""go-tpc's JSON summary and the scaling table's rows."""

from __future__ import annotations

import json

import pytest

from dbmigrate.rehearsal.tpcc import TpccError, TpccResult, find_go_tpc, parse_output, scaling_row


def _row(op: str, prefix: str, count: int, avg: float, p999: float, tpm: float) -> dict:
    return {"50th(ms)": "10.0", "90th(ms)": "24.1", "95th(ms)": "31.5", "99.9th(ms)": str(p999), "99th(ms)": "50.3",
            "Avg(ms)": str(avg), "Count": str(count), "Max(ms)": "79.7", "Operation": op, "Prefix": prefix,
            "Sum(ms)": "1.0", "TPM": str(tpm), "Takes(s)": "15.0"}


OUTPUT = "\n".join([
    "Finished",
    json.dumps([_row("NEW_ORDER", "[Current] ", 10, 99.0, 99.0, 1.0)]),
    json.dumps([_row("NEW_ORDER", "[Summary] ", 1376, 12.1, 75.5, 5513.9),
                _row("PAYMENT", "[Summary] ", 1283, 5.4, 37.7, 5141.7),
                _row("STOCK_LEVEL_ERR", "[Summary] ", 1, 9.7, 10.0, 4.0)]),
    json.dumps([{"efficiency": "42875.5%", "tpmC": "5513.8", "tpmTotal": "12251.8"}]),
])


def test_parse_takes_the_summary_not_the_intervals():
    r = parse_output(OUTPUT)
    assert r.tpmc == 5513.8 and r.tpm_total == 12251.8 and r.seconds == 15.0
    assert r.new_order["count"] == 1376 and r.new_order["avg_ms"] == 12.1 and r.new_order["p999_ms"] == 75.5


def test_parse_without_summary_fails_clearly():
    with pytest.raises(TpccError, match="no summary"):
        parse_output("Finished\n")


def _result(tpmc: float, count: float, avg: float, p999: float) -> TpccResult:
    return TpccResult(tpmc, tpmc * 2, 30.0, {"NEW_ORDER": {"count": count, "avg_ms": avg, "p999_ms": p999,
                                                          "p99_ms": p999 / 2},
                                            "PAYMENT_ERR": {"count": 2.0}})


def test_scaling_row_sums_tpm_weights_avg_and_takes_the_worst_tail():
    row = scaling_row(2, [_result(3000, 300, 10.0, 50.0), _result(1000, 100, 20.0, 90.0)], base_tpm=4000)
    assert row["tpm"] == 4000 and row["tpm_per_instance"] == 2000
    assert row["avg_ms"] == 12.5  # (300*10 + 100*20) / 400
    assert row["p999_ms"] == 90.0 and row["errors"] == 4.0
    assert row["efficiency"] == 0.5
    assert scaling_row(1, [_result(4000, 400, 5.0, 40.0)], None)["efficiency"] == 1.0


def test_missing_binary_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("DBMIGRATE_GO_TPC", str(tmp_path / "nope"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.prefix", str(tmp_path))
    with pytest.raises(TpccError, match="not installed") as e:
        find_go_tpc()
    assert "scripts/setup" in (e.value.hint or "")
