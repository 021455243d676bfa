"""The guard's per-second judgement: the slow log parsed and fingerprinted, a gross regression
decided on its first second, clean seconds never tripping it, a regression below the policy's
limit never accumulating, the tool's own statements ignored, and a blind guard saying so."""

from __future__ import annotations

import random

from dbmigrate.digest.policy import GuardPolicy
from dbmigrate.digest.sequential import (
    Entry, SequentialGuard, applications, digest_of, fingerprint, parse_slow_log,
)

POLICY = GuardPolicy.model_validate({
    "window_s": 15, "min_samples": 100, "min_class_samples": 20,
    "rules": [{"metric": "p95", "scope": "top_time_share", "share": 0.5, "max_regression_pct": 100,
               "min_abs_us": 1000},
              {"metric": "avg", "scope": "overall", "max_regression_pct": 200, "min_abs_us": 1000}]})

MARIADB_LOG = """/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-log (Debian). started with:
Tcp port: 3306  Unix socket: /run/mysqld/mysqld.sock
Time\t\t    Id Command\tArgument
# Time: 261127  0:51:02
# User@Host: app[app] @ localhost [127.0.0.1]
# Thread_id: 12  Schema: app  QC_hit: No
# Query_time: 0.001500  Lock_time: 0.000020  Rows_sent: 1  Rows_examined: 1
# Rows_affected: 0  Bytes_sent: 90
use app;
SET timestamp=1764204662;
SELECT * FROM orders
  WHERE customer_id = 42 AND note = 'it''s';
# User@Host: admin[admin] @ localhost [127.0.0.1]
# Thread_id: 13  Schema:   QC_hit: No
# Query_time: 0.200000  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0
# Rows_affected: 0  Bytes_sent: 11
SET timestamp=1764204662;
/* dbmigrate */ SELECT MASTER_GTID_WAIT('0-1-5', 1);
# User@Host: monitor[monitor] @ localhost [127.0.0.1]
# Thread_id: 14  Schema:   QC_hit: No
# Query_time: 0.300000  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0
SET timestamp=1764204663;
SELECT SLEEP(0.3);
"""


def test_the_slow_log_is_parsed_with_its_accounts_and_times():
    entries = list(parse_slow_log(MARIADB_LOG.splitlines()))
    assert [(e.user, e.ts, e.query_time) for e in entries] == [
        ("app", 1764204662.0, 0.0015), ("admin", 1764204662.0, 0.2), ("monitor", 1764204663.0, 0.3)]
    assert entries[0].sql == "SELECT * FROM orders\n  WHERE customer_id = 42 AND note = 'it''s';"


def test_the_tools_statements_and_sessions_are_not_the_applications():
    entries = list(parse_slow_log(MARIADB_LOG.splitlines()))
    assert [e.user for e in applications(entries)] == ["app", "monitor"]  # the tagged one goes
    assert [e.user for e in applications(entries, ["monitor"])] == ["app"]  # and the tool's accounts


def test_fingerprints_abstract_values_not_names():
    a = fingerprint("SELECT c FROM sbtest1 WHERE id=42 AND k IN (1, 2,3) /* x */")
    b = fingerprint("select c  from sbtest1 where id = 7 and k in (9)")
    assert a == b == "select c from sbtest1 where id=? and k in(?+)"
    assert fingerprint("INSERT INTO t VALUES (1,'a'),(2,'b')") == "insert into t values(?+)"
    assert fingerprint("SELECT 1 FROM sbtest1") != fingerprint("SELECT 1 FROM sbtest2")


def second(t: int, rng: random.Random, read_ms: float = 0.4, write_ms: float = 0.8, n: int = 60) -> list[Entry]:
    """One second of an application: point reads and writes, log-normal latencies."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(Entry(t + i / n, write_ms / 1000 * rng.lognormvariate(0, 0.3),
                             f"UPDATE sbtest1 SET k=k+1 WHERE id={rng.randint(1, 1000)}", "app"))
        else:
            out.append(Entry(t + i / n, read_ms / 1000 * rng.lognormvariate(0, 0.3),
                             f"SELECT * FROM orders WHERE customer_id={rng.randint(1, 100)}", "app"))
    return out


def baseline(rng: random.Random, seconds: int = 8) -> list[Entry]:
    return [e for t in range(1000, 1000 + seconds) for e in second(t, rng)]


def test_a_gross_regression_is_decided_on_its_second_second():
    rng = random.Random(1)
    guard = SequentialGuard(POLICY, baseline(rng), 8)
    assert guard.blind is None
    first = guard.observe(second(2000, rng, read_ms=40))  # the index is gone: reads 100x slower
    assert not first.rollback and first.judged  # one second never decides alone
    verdict = guard.observe(second(2001, rng, read_ms=40))
    assert verdict.rollback and verdict.judged and verdict.index == 2
    assert "regressed past the policy" in verdict.reasons[0]


def test_one_slow_second_of_a_healthy_primary_does_not_roll_back():
    rng = random.Random(2)
    guard = SequentialGuard(POLICY, baseline(rng), 8)
    verdicts = [guard.observe(second(2000, rng, read_ms=8, write_ms=16))]  # a 20x stall, once
    verdicts += [guard.observe(second(2001 + t, rng)) for t in range(10)]
    assert not any(v.rollback for v in verdicts)


def test_clean_seconds_never_trip_it():
    for seed in range(20):  # twenty clean guards of 15 seconds each
        rng = random.Random(seed)
        guard = SequentialGuard(POLICY, baseline(rng), 8)
        verdicts = [guard.observe(second(2000 + t, rng)) for t in range(15)]
        assert not any(v.rollback for v in verdicts), seed
        assert guard.judged_seconds == 15


def test_a_regression_below_the_limit_never_accumulates():
    rng = random.Random(7)
    guard = SequentialGuard(POLICY, baseline(rng), 8)
    verdicts = [guard.observe(second(2000 + t, rng, read_ms=0.6, write_ms=1.2)) for t in range(30)]  # +50%
    assert not any(v.rollback for v in verdicts)


def test_a_regression_past_the_limit_but_not_gross_is_decided_within_seconds():
    rng = random.Random(3)
    guard = SequentialGuard(POLICY, baseline(rng), 8)
    verdicts = [guard.observe(second(2000 + t, rng, read_ms=1.6, write_ms=3.2)) for t in range(10)]  # 4x
    assert any(v.rollback for v in verdicts)
    assert next(v.index for v in verdicts if v.rollback) <= 4


def test_a_guard_without_a_baseline_is_blind_and_says_so():
    guard = SequentialGuard(POLICY, [], 8)
    assert guard.blind and "fewer than the policy's 100" in guard.blind
    verdict = guard.observe(second(2000, random.Random(1), read_ms=40))
    assert not verdict.rollback and not verdict.judged and verdict.reasons[0].startswith("cannot judge")


def test_a_thin_second_is_not_judged():
    rng = random.Random(1)
    guard = SequentialGuard(POLICY, baseline(rng), 8)
    verdict = guard.observe(second(2000, rng, read_ms=40, n=3))
    assert not verdict.judged and not verdict.rollback and "not judged" in verdict.reasons[0]


def test_digest_of_parsed_entries_has_exact_percentiles():
    d = digest_of([Entry(0, t / 1000, "SELECT 1", "app") for t in range(1, 101)], 1.0)
    assert d.query_count == 100 and len(d.classes) == 1
    assert abs(d.p95 - 0.095) < 1e-9 and abs(d.classes[0].p99 - 0.099) < 1e-9


def test_the_blind_policy_defaults_to_a_decision_not_a_pass():
    assert POLICY.blind == "pause"
    assert GuardPolicy.model_validate({**POLICY.model_dump(), "blind": "rollback"}).blind == "rollback"


def test_a_first_sample_covering_two_seconds_since_the_flip_weighs_as_two():
    rng = random.Random(4)
    guard = SequentialGuard(POLICY, baseline(rng), 8)
    two_seconds = second(2000, rng, read_ms=40) + second(2001, rng, read_ms=40)
    assert guard.observe(two_seconds, seconds=2.0).rollback
