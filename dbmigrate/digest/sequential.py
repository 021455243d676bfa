"""The latency guard's sequential judgement: each second of the new primary's traffic as it
arrives, against the baseline, until the evidence says "regressed past the policy" or the
window ends.

Why not one long window: a fixed window (5-20 s) decides only at its end, so a gross regression
(a dropped index) costs the application the whole window before the rollback even starts.
Here every rule of the policy (its metric, scope and limit) is computed on each one-second
sample and turned into z = ln(current / baseline); a CUSUM (Page's sequential test) adds
(2m / sigma^2) * (z - limit) per second, m = limit / 2, floored at 0, and rolls back when
the sum passes ln(1 / false_rollback_rate). sigma is the spread of the same rule over the
baseline's own seconds (floored: a short baseline understates it). So:
- a gross regression (z far above the limit) decides on its second second (one second adds
  at most MAX_STEP_SHARE of the threshold);
- a clean primary (z around 0) drifts down by about 2m * limit / sigma^2 per second and
  needs two seconds in a row far above the limit to trip;
- a regression below the policy's limit never accumulates.

The samples come from the slow log as text (the file the server writes, or the table's
rows written as such), parsed and fingerprinted here, not by pt-query-digest: a Perl start
per second would cost more than the second. Baseline and samples go through the same
parser and fingerprint, so their classes match. The tool's own statements (tagged) and the
sessions of the tool's own accounts never count as the application's.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from dbmigrate.db.connection import TAG
from dbmigrate.digest.model import Digest, QueryClass, nearest_rank
from dbmigrate.digest.policy import GuardPolicy, evaluate_rule

TOOL_TAG = TAG.strip()
# A baseline of a few seconds understates how much one second varies; below this spread
# (in ln units, about +/-25%) the test would trust it too much.
SIGMA_FLOOR = 0.25
# No single second decides alone: one second of samples adds at most this share of the
# threshold, so a rollback needs two seconds past the limit. One slow second is what a shared host, a
# checkpoint or a pool's reconnects cause on a healthy primary (seen: +965% p95 for one second
# of a clean cutover on a loaded 2-core machine); a lost index stays slow.
MAX_STEP_SHARE = 0.6


@dataclass(frozen=True)
class Entry:
    """One statement of the slow log: when it was logged (unix s), how long it took, its text, its account."""

    ts: float
    query_time: float
    sql: str
    user: str = ""


# -- the slow log as text -------------------------------------------------------------
_QUERY_TIME = re.compile(r"^# Query_time:\s*([0-9.]+)")
_USER = re.compile(r"^# User@Host:\s*([^\[\s@]*)")
_SET_TS = re.compile(r"^SET timestamp=(\d+)(?:\.\d+)?;\s*$", re.I)
_USE = re.compile(r"^use \S+;\s*$", re.I)


def parse_slow_log(lines: Iterable[str]) -> Iterator[Entry]:
    """The entries of a slow log (MariaDB's and MySQL's file format, and the table's rows as
    written by slowlog_text): header lines start with '#', then `use db;` / `SET timestamp=N;`,
    then the statement up to the next header."""
    user, qt, ts = "", None, 0.0
    sql: list[str] = []

    def done() -> Entry | None:
        if qt is None or not sql:
            return None
        return Entry(ts, qt, "\n".join(sql).strip(), user)

    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith("#"):
            if sql:  # the next entry's header
                e = done()
                if e is not None:
                    yield e
                user, qt, sql = "", None, []
            m = _USER.match(line)
            if m:
                user = m.group(1)
                continue
            m = _QUERY_TIME.match(line)
            if m:
                qt = float(m.group(1))
            continue
        if qt is None:
            continue  # the file's preamble (server version, "Time Id Command Argument")
        m = _SET_TS.match(line)
        if m and not sql:
            ts = float(m.group(1))
            continue
        if not sql and _USE.match(line):
            continue
        sql.append(line)
    e = done()
    if e is not None:
        yield e


def applications(entries: Iterable[Entry], tool_users: Iterable[str] = ()) -> list[Entry]:
    """Only the application's statements: not the tool's (tagged), not its accounts' sessions."""
    own = {u for u in tool_users if u}
    return [e for e in entries if TOOL_TAG not in e.sql and e.user not in own]


# -- fingerprints -----------------------------------------------------------------------
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"", re.S)
_NUMBER = re.compile(r"(?<![\w.])-?(?:0x[0-9a-f]+|\d+(?:\.\d+)?(?:e[+-]?\d+)?)(?![\w])", re.I)
_NULL = re.compile(r"\bnull\b")
_LIST = re.compile(r"\(\s*\?(?:\s*,\s*\?)*\s*\)")
_ROWS = re.compile(r"\(\?\+\)(?:\s*,\s*\(\?\+\))+")
_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(r"\s*([=<>!,()])\s*")


def fingerprint(sql: str) -> str:
    """The statement with its literals abstracted (pt-query-digest's idea, not its exact text):
    values become ?, lists of values one (?+), comments and spacing go, case folds."""
    text = _COMMENT.sub(" ", sql)
    text = _STRING.sub("?", text)
    text = _NUMBER.sub("?", text)
    text = _SPACE.sub(" ", text).strip().rstrip(";").strip().lower()  # spacing and case say nothing
    text = _NULL.sub("?", text)
    text = _PUNCT.sub(r"\1", text)
    text = _LIST.sub("(?+)", text)
    return _ROWS.sub("(?+)", text)


def digest_of(entries: list[Entry], duration_s: float | None = None) -> Digest:
    """A digest with exact percentiles from parsed entries (classes keyed by our fingerprint)."""
    by_fp: dict[str, list[float]] = {}
    for e in entries:
        by_fp.setdefault(fingerprint(e.sql), []).append(e.query_time)
    classes = []
    for fp, times in by_fp.items():
        times.sort()
        total = sum(times)
        classes.append(QueryClass(
            checksum=hashlib.md5(fp.encode()).hexdigest()[:16].upper(), fingerprint=fp, distillate="",
            count=len(times), total_time=total, avg=total / len(times), p95=nearest_rank(times, 0.95) or 0.0,
            p99=nearest_rank(times, 0.99), max=times[-1]))
    everything = sorted(e.query_time for e in entries)
    total = sum(everything)
    return Digest(classes=classes, query_count=len(everything), total_time=total,
                  avg=total / len(everything) if everything else 0.0,
                  p95=nearest_rank(everything, 0.95) if everything else None,
                  p99=nearest_rank(everything, 0.99) if everything else None,
                  duration_s=duration_s, percentiles="exact", source={"kind": "parsed slow log"})


# -- the sequential test ---------------------------------------------------------------
@dataclass
class Second:
    """The verdict after one sample."""

    index: int
    queries: int
    judged: bool
    rollback: bool
    reasons: list[str]
    numbers: dict[str, Any] = field(default_factory=dict)

    def record(self, at: float) -> dict[str, Any]:
        return {"window": self.index, "queries": self.queries, "rollback": self.rollback,
                "insufficient": not self.judged, "reasons": self.reasons, "numbers": self.numbers, "at": at}


class SequentialGuard:
    """observe(entries, seconds) per sample; .blind says why it cannot judge at all."""

    def __init__(self, policy: GuardPolicy, baseline: list[Entry], baseline_s: float):
        self.policy = policy
        self.baseline = digest_of(baseline, baseline_s)
        window = max(policy.window_s, 1.0)
        # Per-second thresholds: the policy's, scaled from its window to one second.
        self.min_queries = max(5, math.ceil(policy.min_samples / window))
        self.per_second = policy.model_copy(update={
            "min_samples": self.min_queries,
            "min_class_samples": max(3, math.ceil(policy.min_class_samples / window))})
        self.threshold = math.log(1 / policy.false_rollback_rate)
        self.sums = [0.0] * len(policy.rules)
        self.sigmas = self._baseline_spread(baseline)
        self.index = 0
        self.judged_seconds = 0
        self.judged_queries = 0
        self.blind = (f"the baseline holds {self.baseline.query_count} application queries, fewer than "
                      f"the policy's {policy.min_samples}") if self.baseline.query_count < policy.min_samples else None

    def _baseline_spread(self, baseline: list[Entry]) -> list[float]:
        """Each rule's spread of ln(second / whole) over the baseline's own full seconds."""
        by_second: dict[int, list[Entry]] = {}
        for e in baseline:
            by_second.setdefault(int(e.ts), []).append(e)
        seconds = sorted(by_second)[1:-1]  # the first and last are partial
        zs: list[list[float]] = [[] for _ in self.policy.rules]
        for s in seconds:
            sample = digest_of(by_second[s], 1.0)
            if sample.query_count < self.min_queries:
                continue
            for i, z in enumerate(self._zs(sample)):
                if z is not None:
                    zs[i].append(z)
        return [max(SIGMA_FLOOR, statistics.stdev(z)) if len(z) >= 3 else SIGMA_FLOOR for z in zs]

    def _zs(self, sample: Digest) -> list[float | None]:
        out: list[float | None] = []
        for rule in self.policy.rules:
            o = evaluate_rule(self.per_second, rule, self.baseline, sample)
            b, a = o.get("baseline"), o.get("current")
            if not b or a is None or b <= 0 or a <= 0:
                out.append(None)
            elif (a - b) * 1e6 < rule.min_abs_us:
                out.append(min(0.0, math.log(a / b)))  # too small an increase to count against the primary
            else:
                out.append(math.log(a / b))
        return out

    def observe(self, entries: list[Entry], seconds: float = 1.0) -> Second:
        self.index += 1
        sample = digest_of(entries, seconds)
        if self.blind:
            return Second(self.index, sample.query_count, False, False, [f"cannot judge: {self.blind}"])
        if sample.query_count < self.min_queries:
            return Second(self.index, sample.query_count, False, False,
                          [f"{sample.query_count} application queries in this sample, fewer than "
                           f"{self.min_queries}: not judged"])
        zs = self._zs(sample)
        reasons: list[str] = []
        tripped: list[str] = []
        rules: list[dict[str, Any]] = []
        for i, (rule, z) in enumerate(zip(self.policy.rules, zs)):
            limit = math.log(1 + rule.max_regression_pct / 100)
            if z is not None:
                m, sigma = limit / 2, self.sigmas[i]
                # The cap is per second observed: a first sample that covers the 2 s since the
                # flip weighs as two.
                step = min((2 * m / sigma ** 2) * (z - limit), MAX_STEP_SHARE * self.threshold * max(1.0, seconds))
                self.sums[i] = max(0.0, self.sums[i] + step)
            change = f"{(math.exp(z) - 1) * 100:+.0f}%" if z is not None else "no data"
            rules.append({"rule": i, "metric": rule.metric, "scope": rule.scope,
                          "change_pct": (math.exp(z) - 1) * 100 if z is not None else None,
                          "limit_pct": rule.max_regression_pct, "z": z, "sum": round(self.sums[i], 2),
                          "sigma": round(self.sigmas[i], 3), "threshold": round(self.threshold, 2)})
            line = (f"{rule.describe()} {change} (limit +{rule.max_regression_pct:g}%, evidence "
                    f"{self.sums[i]:.1f} of {self.threshold:.1f})")
            (tripped if self.sums[i] >= self.threshold else reasons).append(line)
        judged = any(z is not None for z in zs)
        if judged:
            self.judged_seconds += 1
            self.judged_queries += sample.query_count
        numbers = {"queries": sample.query_count, "rules": rules, "sequential": True}
        if tripped:
            return Second(self.index, sample.query_count, True, True,
                          [f"regressed past the policy: {r}" for r in tripped], numbers)
        if not judged:
            reasons = ["no rule had data in this sample (its classes are too thin on one side)"]
        return Second(self.index, sample.query_count, judged, False, reasons, numbers)
