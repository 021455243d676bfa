"""Latency guard policy: when does a cutover roll back?"""

from __future__ import annotations

from pathlib import Path

import pytest

from dbmigrate.digest.model import Digest, QueryClass
from dbmigrate.digest.policy import GuardPolicy, Rule, evaluate, load_policy, top_time_classes
from dbmigrate.exceptions import ConfigError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "digest"


def qc(checksum: str, count: int, avg: float, p95: float | None = None, p99: float | None = None) -> QueryClass:
    return QueryClass(checksum=checksum, fingerprint=f"select {checksum.lower()}", distillate=f"SELECT {checksum}",
                      count=count, total_time=count * avg, avg=avg, p95=p95 if p95 is not None else avg * 2,
                      p99=p99, max=avg * 5)


def digest(classes: list[QueryClass], p95: float | None = None, p99: float | None = None) -> Digest:
    n = sum(c.count for c in classes)
    total = sum(c.total_time for c in classes)
    return Digest(classes, n, total, total / n if n else 0.0, p95, p99, 20.0)


POLICY = GuardPolicy.model_validate({
    "window_s": 20, "min_samples": 200,
    "rules": [{"metric": "p95", "scope": "top_time_share", "share": 0.5, "max_regression_pct": 30},
              {"metric": "avg", "scope": "overall", "max_regression_pct": 50}]})

# A carries 60% of baseline time, B 30%, C 10%.
BASE = digest([qc("A", 600, 0.001), qc("B", 300, 0.001), qc("C", 100, 0.001)], p95=0.002)


def test_healthy_cutover_keeps():
    d = evaluate(POLICY, BASE, BASE)
    assert not d.rollback and not d.insufficient
    assert len(d.reasons) == 2 and all("within limit" in r for r in d.reasons)
    assert d.as_gate()[0] is True


def test_top_share_p95_regression_rolls_back():
    cur = digest([qc("A", 600, 0.001, p95=0.0028), qc("B", 300, 0.001), qc("C", 100, 0.001)], p95=0.002)
    d = evaluate(POLICY, BASE, cur)
    assert d.rollback
    assert len(d.reasons) == 1
    assert "p95 top 50% of baseline time (1 class(es), 60% of baseline time) regressed" in d.reasons[0]
    assert "2.00 ms -> 2.80 ms (+40%, limit +30%)" in d.reasons[0]
    rule0 = d.numbers["rules"][0]
    assert rule0["classes"] == ["A"] and rule0["fired"] and rule0["change_pct"] == pytest.approx(40.0)
    ok, reason, details = d.as_gate()
    assert not ok and "regressed" in reason and details["rollback"]


def test_regression_outside_the_top_share_does_not_fire_the_top_rule():
    cur = digest([qc("A", 600, 0.001), qc("B", 300, 0.001), qc("C", 100, 0.001, p95=0.02)], p95=0.002)
    assert not evaluate(POLICY, BASE, cur).rollback


def test_overall_avg_rule():
    cur = digest([qc("A", 600, 0.0016), qc("B", 300, 0.0016), qc("C", 100, 0.0016)], p95=0.002)
    d = evaluate(GuardPolicy(rules=[Rule(metric="avg", scope="overall", max_regression_pct=50)]), BASE, cur)
    assert d.rollback and "+60%" in d.reasons[0]
    cur = digest([qc("A", 600, 0.0014), qc("B", 300, 0.0014), qc("C", 100, 0.0014)], p95=0.002)
    assert not evaluate(GuardPolicy(rules=[Rule(metric="avg", max_regression_pct=50)]), BASE, cur).rollback


@pytest.mark.parametrize("base_n,cur_n,side", [(1000, 150, "current"), (120, 1000, "baseline")])
def test_quiet_window_never_rolls_back(base_n, cur_n, side):
    base = digest([qc("A", base_n, 0.001)], p95=0.002)
    cur = digest([qc("A", cur_n, 0.05, p95=0.5)], p95=0.5)  # terrible, but too few queries to judge
    d = evaluate(POLICY, base, cur)
    assert not d.rollback and d.insufficient
    n = cur_n if side == "current" else base_n
    assert d.reasons == [f"insufficient samples: {side} has {n} < 200 queries; no rollback on thin evidence"]
    assert d.as_gate()[0] is True


def test_thin_classes_are_not_judged():
    base = digest([qc("A", 900, 0.001), qc("B", 5, 0.1)], p95=0.002)  # B carries 36% of time on 5 queries
    cur = digest([qc("A", 900, 0.001), qc("B", 5, 1.0, p95=2.0)], p95=0.002)
    d = evaluate(GuardPolicy(min_samples=100, rules=[
        Rule(metric="p95", scope="each_top_class", share=0.9, max_regression_pct=30)]), base, cur)
    assert not d.rollback
    assert d.numbers["rules"][0]["classes_judged"] == ["A"]


def test_each_top_class_reports_the_worst():
    cur = digest([qc("A", 600, 0.001), qc("B", 300, 0.001, p95=0.004), qc("C", 100, 0.001)], p95=0.002)
    policy = GuardPolicy(rules=[Rule(metric="p95", scope="each_top_class", share=0.9, max_regression_pct=30)])
    d = evaluate(policy, BASE, cur)
    assert d.rollback and "select b [B]" in d.reasons[0] and "+100%" in d.reasons[0]
    # the weighted aggregate of the same set dilutes B's +100% to +33% (weights 600 and 300)
    agg = evaluate(GuardPolicy(rules=[Rule(metric="p95", scope="top_time_share", share=0.9, max_regression_pct=40)]),
                   BASE, cur)
    assert not agg.rollback and "+33%" in agg.reasons[0]


def test_ties_pick_deterministically():
    # equal time and count: checksum order decides which class makes up the top share
    tied = digest([qc("B", 100, 0.001), qc("A", 100, 0.001), qc("C", 50, 0.001)])
    assert [c.checksum for c in top_time_classes(tied, 0.4)] == ["A"]
    assert [c.checksum for c in top_time_classes(tied, 0.5)] == ["A", "B"]  # 40% is not enough
    reordered = digest(list(reversed(tied.classes)))
    assert [c.checksum for c in top_time_classes(reordered, 0.5)] == ["A", "B"]
    # equal time, different counts: more queries first
    mixed = digest([qc("Z", 10, 0.01), qc("Y", 100, 0.001)])
    assert [c.checksum for c in top_time_classes(mixed, 0.5)] == ["Y"]


def test_p99_unavailable_is_reported_not_guessed():
    base = Digest.load(FIX / "before.json")
    cur = Digest.load(FIX / "after.json")
    d = evaluate(GuardPolicy(rules=[Rule(metric="p99", scope="overall", max_regression_pct=10)]), base, cur)
    assert not d.rollback
    assert "p99 unavailable in the baseline digest" in d.reasons[0]


def test_fixture_regression_rolls_back_on_p95():
    base = Digest.load(FIX / "before.json")
    cur = Digest.load(FIX / "after.json")
    d = evaluate(POLICY, base, cur)
    assert d.rollback
    # SELECT orders alone carries 43% (< 50%), so UPDATE orders (33%) joins the top share
    assert d.numbers["rules"][0]["classes"] == [c.checksum for c in base.classes[:2]]


def test_class_gone_after_cutover_is_not_judged():
    cur = digest([qc("B", 300, 0.001), qc("C", 100, 0.001), qc("D", 600, 0.001)], p95=0.002)
    d = evaluate(GuardPolicy(rules=[Rule(metric="p95", scope="top_time_share", share=0.5, max_regression_pct=30)]),
                 BASE, cur)
    assert not d.rollback and "none of its 1 class(es)" in d.reasons[0]


def test_min_abs_ignores_tiny_absolute_increases():
    base = digest([qc("A", 1000, 0.00001)], p95=0.00002)
    cur = digest([qc("A", 1000, 0.00002)], p95=0.00002)  # +100% but 10 µs
    assert evaluate(GuardPolicy(rules=[Rule(metric="avg", max_regression_pct=50)]), base, cur).rollback
    assert not evaluate(GuardPolicy(rules=[Rule(metric="avg", max_regression_pct=50, min_abs_us=50)]), base, cur).rollback


def test_policy_validation_and_loading(tmp_path):
    with pytest.raises(Exception):
        GuardPolicy.model_validate({"rules": []})
    with pytest.raises(Exception):
        Rule.model_validate({"metric": "p50", "max_regression_pct": 10})
    f = tmp_path / "playbook.yaml"
    f.write_text("guard:\n  window_s: 30\n  rules:\n    - metric: p95\n      scope: top_time_share\n      max_regression_pct: 30\n")
    p = load_policy(f)
    assert p.window_s == 30 and p.rules[0].share == 0.5 and p.min_samples == 200
    f.write_text("window_s: 30\nrules:\n  - metric: p95\n    max_regresion_pct: 30\n")
    with pytest.raises(ConfigError, match=r"playbook.yaml:4: rules\[0\]\.max_regresion_pct: unknown key"):
        load_policy(f)
    f.write_text("guard:\n  rules:\n    - metric: p95\n      scope: everywhere\n      max_regression_pct: 30\n")
    with pytest.raises(ConfigError, match=r"playbook.yaml:4: rules\[0\]\.scope: 'everywhere' is not valid"):
        load_policy(f)
