"""Verifier and sysbench report logic on synthetic input (no server)."""

from __future__ import annotations

import pytest

from dbmigrate.rehearsal.sysbench import Sysbench, parse_intervals, parse_report
from dbmigrate.db.credentials import Credentials
from dbmigrate.exceptions import UsageError
from dbmigrate.rehearsal.verify import Ack, VerifyReport, longest_gap, zero_loss_gate


def acks_at(ms: list[float]) -> list[Ack]:
    return [Ack(i + 1, t / 1000.0, 1_700_000_000 + t / 1000.0, 1) for i, t in enumerate(ms)]


def test_longest_gap_finds_the_fenced_window():
    gap = longest_gap(acks_at([0, 3, 6, 9, 21.5, 24, 27]))
    assert gap.ms == pytest.approx(12.5)
    assert (gap.after_id, gap.before_id) == (4, 5)
    assert gap.start == "2023-11-14T22:13:20.009000Z" and gap.end == "2023-11-14T22:13:20.021500Z"


def test_longest_gap_needs_two_acks():
    assert longest_gap([]) is None
    assert longest_gap(acks_at([5])) is None
    assert longest_gap(acks_at([5, 5])).ms == 0


def _report(lost, acknowledged=10):
    return VerifyReport(acknowledged=acknowledged, first_id=1, last_id=acknowledged, lost=lost,
                        caught_up={k: not v for k, v in lost.items()}, errors={"read_only": 2},
                        gap=longest_gap(acks_at([0, 3, 10])), duration_s=1.0)


def test_report_and_gate_on_losses():
    good = _report({"db2": [], "db3": []})
    assert good.ok and good.lost_total == 0 and good.max_gap_ms == pytest.approx(7)
    ok, reason, details = zero_loss_gate(good)
    assert ok and "all 10 acknowledged writes present on 2 server(s)" in reason
    assert details["gap_after_id"] == 2

    bad = _report({"db2": [], "db3": [7, 8]})
    assert not bad.ok and bad.lost_total == 2
    ok, reason, details = zero_loss_gate(bad)
    assert not ok and reason == "acknowledged writes are missing: 2 on db3"
    assert details["lost"] == {"db2": [], "db3": [7, 8]}
    assert "lost: db3: 2" in bad.summary()

    ok, reason, _ = zero_loss_gate(_report({"db2": []}, acknowledged=0))
    assert not ok and "proves nothing" in reason


SYSBENCH_OUT = """sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Threads started!

[ 1s ] thds: 2 tps: 1430.52 qps: 8673.05 (r/w/o: 0.00/5773.04/2900.01) lat (ms,95%): 2.18 err/s: 36.96 reconn/s: 0.00
[ 2s ] thds: 2 tps: 1568.81 qps: 9539.94 (r/w/o: 0.00/6348.29/3191.65) lat (ms,95%): 1.89 err/s: 54.03 reconn/s: 1.00
SQL statistics:
    queries performed:
        read:                            0
        write:                           12125
        other:                           6095
        total:                           18220
    transactions:                        3002   (1499.22 per sec.)
    queries:                             18220  (9099.18 per sec.)
    ignored errors:                      91     (45.45 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          2.0020s
    total number of events:              3002

Latency (ms):
         min:                                    0.62
         avg:                                    1.33
         max:                                    8.10
         95th percentile:                        2.03
         sum:                                 3995.32
"""


def test_parse_sysbench_report():
    r = parse_report(SYSBENCH_OUT, "oltp_write_only")
    assert r.complete
    assert (r.tps, r.qps, r.transactions, r.queries) == (1499.22, 9099.18, 3002, 18220)
    assert (r.errors, r.reconnects) == (91, 0)
    assert (r.latency_avg_ms, r.latency_p95_ms, r.latency_max_ms, r.total_time_s) == (1.33, 2.03, 8.10, 2.002)
    assert [(s.t_s, s.tps, s.latency_p95_ms, s.errors_per_s, s.reconnects_per_s) for s in r.intervals] == [
        (1.0, 1430.52, 2.18, 36.96, 0.0), (2.0, 1568.81, 1.89, 54.03, 1.0)]


def test_parse_interrupted_sysbench_keeps_intervals_only():
    text = SYSBENCH_OUT.split("SQL statistics")[0]
    r = parse_report(text)
    assert not r.complete and r.tps is None and r.latency_p95_ms is None
    assert len(parse_intervals(text)) == 2


def test_sysbench_command_has_no_password_and_env_carries_it():
    sb = Sysbench("127.0.0.1", 3306, Credentials("app", "s3cret-pw"), workload="oltp_read_write", threads=8)
    argv = sb.command("run", time_s=30, rate=500, report_interval=1, ignore_errors="1290,2013")
    assert not any("s3cret-pw" in a for a in argv)
    assert argv[1] == "oltp_read_write" and argv[-1] == "run"
    for expected in ("--mysql-user=app", "--mysql-db=sbtest", "--threads=8", "--time=30", "--rate=500",
                     "--report-interval=1", "--percentile=95", "--mysql-ignore-errors=1290,2013"):
        assert expected in argv
    assert sb.env()["MYSQL_PWD"] == "s3cret-pw"
    with pytest.raises(UsageError, match="unknown sysbench workload"):
        Sysbench("h", 1, Credentials("a"), workload="oltp_insert_everything")
    with pytest.raises(UsageError, match="must not carry a password"):
        Sysbench("h", 1, Credentials("a"), extra_args=["--mysql-password=x"])
