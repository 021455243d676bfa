"""The latency guard's policy and its pure evaluation: should this cutover roll back?

A playbook embeds the policy, e.g.

    window_s: 20
    min_samples: 200
    rules:
      - {metric: p95, scope: top_time_share, share: 0.5, max_regression_pct: 30}
      - {metric: avg, scope: overall, max_regression_pct: 50}

and the guard calls `evaluate(policy, baseline, current)` with the digest taken
before the cutover and one taken in the guard window after it.

After a cutover the guard judges each second as it arrives (digest/sequential.py) and the
whole window at its end. A guard that cannot judge says so and acts by `blind`.

Rules never fire on thin evidence: below `min_samples` queries on either side the
decision is "insufficient samples", and a metric that a digest cannot provide
(p99 of a plain pt-query-digest file) is reported, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dbmigrate.digest.compare import match_classes, time_rank_key
from dbmigrate.digest.model import Digest, QueryClass, format_latency
from dbmigrate.yamlload import LineOf, format_validation_error, load_yaml_with_lines


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: Literal["avg", "p95", "p99"]
    scope: Literal["overall", "top_time_share", "each_top_class"] = Field(
        "overall", description="overall: all queries; top_time_share: the classes carrying `share` of baseline "
                               "time, weighted by their baseline counts; each_top_class: each of those classes alone")
    share: float = Field(0.5, gt=0, le=1, description="share of baseline query time for the top scopes")
    max_regression_pct: float = Field(..., gt=0, description="roll back above this increase, in percent")
    min_abs_us: float = Field(0, ge=0, description="ignore increases smaller than this, in microseconds")

    def describe(self) -> str:
        where = {"overall": "overall",
                 "top_time_share": f"top {self.share:.0%} of baseline time",
                 "each_top_class": f"each class in the top {self.share:.0%} of baseline time"}[self.scope]
        return f"{self.metric} {where}"


class GuardPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(20, gt=0, description="length of the capture window after the cutover")
    min_samples: int = Field(200, ge=1, description="fewer queries than this on either side: no decision")
    min_class_samples: int = Field(20, ge=1, description="a class needs this many queries on both sides to count")
    rules: list[Rule] = Field(..., min_length=1)
    false_rollback_rate: float = Field(
        0.001, gt=0, lt=0.5, description="the sequential test's evidence threshold is ln(1/rate): lower rolls back "
                                         "on more evidence only")
    window: Literal["slow_log", "wire"] = Field(
        "slow_log", description="how the baseline and the guard read the application: slow_log (a "
                                "long_query_time=0 window: not sessions that set their own, nor those connected "
                                "before it) or wire (tcpdump of the server's port on its host, dissected by "
                                "tshark: every statement, prepared ones too; root or CAP_NET_RAW there)")
    blind: Literal["rollback", "pause", "warn"] = Field(
        "pause", description="when the guard cannot judge (too few of the application's queries captured): "
                             "roll back, pause the run for a decision (resume keeps the cutover, rollback undoes "
                             "it), or warn and keep it")


@dataclass
class Decision:
    rollback: bool
    reasons: list[str]
    numbers: dict[str, Any] = field(default_factory=dict)
    insufficient: bool = False

    def as_gate(self) -> tuple[bool, str, dict[str, Any]]:
        """(ok, reason, details) for a gate: ok means keep the cutover."""
        return (not self.rollback, "; ".join(self.reasons), {"rollback": self.rollback, **self.numbers})


def top_time_classes(digest: Digest, share: float) -> list[QueryClass]:
    """Smallest prefix of classes (by total time, then count, then checksum) carrying >= share of the time."""
    total = sum(c.total_time for c in digest.classes)
    chosen: list[QueryClass] = []
    acc = 0.0
    for c in sorted(digest.classes, key=time_rank_key):
        if total > 0 and acc / total >= share - 1e-12:
            break
        chosen.append(c)
        acc += c.total_time
    return chosen


def evaluate(policy: GuardPolicy, baseline: Digest, current: Digest) -> Decision:
    numbers: dict[str, Any] = {"baseline_queries": baseline.query_count, "current_queries": current.query_count,
                               "min_samples": policy.min_samples, "rules": []}
    thin = [(side, n) for side, n in (("baseline", baseline.query_count), ("current", current.query_count))
            if n < policy.min_samples]
    if thin:
        reasons = [f"insufficient samples: {side} has {n} < {policy.min_samples} queries; no rollback on thin evidence"
                   for side, n in thin]
        return Decision(False, reasons, numbers, insufficient=True)

    fired: list[str] = []
    passed: list[str] = []
    for i, rule in enumerate(policy.rules):
        outcome = evaluate_rule(policy, rule, baseline, current)
        outcome["rule"] = i
        numbers["rules"].append(outcome)
        (fired if outcome["fired"] else passed).append(outcome["reason"])
    if fired:
        return Decision(True, fired, numbers)
    return Decision(False, passed, numbers)


def evaluate_rule(policy: GuardPolicy, rule: Rule, baseline: Digest, current: Digest) -> dict[str, Any]:
    """One rule on two digests: its numbers, whether it fired, and why."""
    what = rule.describe()
    if rule.scope == "overall":
        b, a = getattr(baseline, rule.metric), getattr(current, rule.metric)
        if b is None or a is None:
            return _no_data(rule, f"{what}: {rule.metric} unavailable in the "
                                  f"{'baseline' if b is None else 'current'} digest (needs exact percentiles)")
        return _judge(rule, what, b, a, {"scope": "overall"})

    top = top_time_classes(baseline, rule.share)
    pairs, _, _ = match_classes(Digest(top, 0, 0, 0, None, None), current)
    used = [(b, a) for b, a in pairs
            if b.count >= policy.min_class_samples and a.count >= policy.min_class_samples
            and getattr(b, rule.metric) is not None and getattr(a, rule.metric) is not None]
    covered = sum(c.total_time for c in top) / (sum(c.total_time for c in baseline.classes) or 1)
    details = {"scope": rule.scope, "classes": [b.checksum for b in top], "share_covered": covered,
               "classes_judged": [b.checksum for b, _ in used]}
    if not used:
        return _no_data(rule, f"{what}: none of its {len(top)} class(es) has {policy.min_class_samples}+ queries "
                              f"with {rule.metric} on both sides", details)
    if rule.scope == "each_top_class":
        per_class = [_judge(rule, f"{rule.metric} of {b.label} [{b.checksum[:8]}]", getattr(b, rule.metric),
                            getattr(a, rule.metric), {"checksum": b.checksum}) for b, a in used]
        worst = max(per_class, key=lambda o: (o["fired"], o["change_pct"] if o["change_pct"] is not None else -1e9))
        return {**worst, **details, "per_class": per_class,
                "reason": worst["reason"] if worst["fired"] else
                f"{what}: within {rule.max_regression_pct:g}% ({len(used)} classes judged)"}
    # Baseline counts weight both sides, so that a change in the query mix is not
    # mistaken for a change in latency.
    weight = sum(b.count for b, _ in used)
    bval = sum(getattr(b, rule.metric) * b.count for b, _ in used) / weight
    aval = sum(getattr(a, rule.metric) * b.count for b, a in used) / weight
    return _judge(rule, f"{what} ({len(used)} class(es), {covered:.0%} of baseline time)", bval, aval, details)


def _judge(rule: Rule, what: str, before: float, after: float, details: dict[str, Any]) -> dict[str, Any]:
    pct = (after - before) / before * 100 if before > 0 else None
    big_enough = (after - before) * 1e6 >= rule.min_abs_us
    fired = big_enough and (pct > rule.max_regression_pct if pct is not None else after > before)
    change = f"{pct:+.0f}%" if pct is not None else "from zero"
    verdict = "regressed" if fired else "within limit"
    reason = (f"{what} {verdict}: {format_latency(before)} -> {format_latency(after)} ({change}, "
              f"limit +{rule.max_regression_pct:g}%)")
    return {**details, "metric": rule.metric, "baseline": before, "current": after, "change_pct": pct,
            "limit_pct": rule.max_regression_pct, "fired": fired, "reason": reason}


def _no_data(rule: Rule, reason: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**(details or {}), "metric": rule.metric, "baseline": None, "current": None, "change_pct": None,
            "limit_pct": rule.max_regression_pct, "fired": False, "reason": reason}


def load_policy(path: str | Path) -> GuardPolicy:
    """A policy from a YAML/JSON file (errors name file, line and field)."""
    path = Path(path)
    data, locate = load_yaml_with_lines(path)
    locate_inner: LineOf = locate
    if isinstance(data, dict) and "guard" in data and "rules" not in data:
        data = data["guard"]  # a playbook fragment: guard: {window_s: ..., rules: [...]}
        locate_inner = lambda loc: locate(("guard", *loc))  # noqa: E731
    try:
        return GuardPolicy.model_validate(data)
    except ValidationError as e:
        raise format_validation_error(path, e, locate_inner, data=data, model=GuardPolicy) from None
