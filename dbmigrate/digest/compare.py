"""Before/after comparison of two digests, class by class and overall.

Classes are matched by checksum, then (for the ones left) by fingerprint, so that
digests from pt-query-digest versions with different checksum lengths still pair.

Two captures rarely last exactly as long: when both durations are known, counts
and total time are compared per second (rate, load); latencies never depend on
the duration. A noise threshold hides latency deltas that are too small to act
on: a delta counts only when it is both at least `pct` percent AND at least
`abs_us` microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dbmigrate.digest.model import Digest, QueryClass

LATENCY_METRICS = ("avg", "p95", "p99")


@dataclass(frozen=True)
class Noise:
    pct: float = 10.0     # relative change below this is noise
    abs_us: float = 50.0  # absolute change below this is noise (microseconds)


@dataclass(frozen=True)
class Delta:
    before: float | None
    after: float | None
    abs: float | None          # after - before (seconds for latencies)
    pct: float | None          # relative change in percent (None when before is 0 or missing)
    significant: bool          # beyond the noise threshold
    kind: str = "latency"      # latency: up is worse; volume (counts, rates): up is just more

    @property
    def direction(self) -> str:
        """latency: 'worse'/'better'; volume: 'up'/'down'; 'same' within noise; 'n/a' when a side is missing."""
        if self.abs is None:
            return "n/a"
        if not self.significant or self.abs == 0:
            return "same"
        if self.kind == "volume":
            return "up" if self.abs > 0 else "down"
        return "worse" if self.abs > 0 else "better"

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "abs": self.abs, "pct": self.pct,
                "significant": self.significant, "direction": self.direction}


def latency_delta(before: float | None, after: float | None, noise: Noise) -> Delta:
    if before is None or after is None:
        return Delta(before, after, None, None, False)
    diff = after - before
    pct = (diff / before * 100.0) if before > 0 else None
    # With no baseline latency the relative test cannot apply: the absolute one decides.
    significant = abs(diff) * 1e6 >= noise.abs_us and (pct is None or abs(pct) >= noise.pct)
    return Delta(before, after, diff, pct, significant)


def volume_delta(before: float | None, after: float | None, noise: Noise) -> Delta:
    """Counts, rates, load: more is neither good nor bad, only the relative test applies."""
    if before is None or after is None:
        return Delta(before, after, None, None, False, kind="volume")
    diff = after - before
    pct = (diff / before * 100.0) if before > 0 else None
    return Delta(before, after, diff, pct, pct is None and diff != 0 or pct is not None and abs(pct) >= noise.pct,
                 kind="volume")


@dataclass
class ClassRow:
    key: str
    fingerprint: str
    label: str
    status: str                      # matched, new, gone
    before: QueryClass | None
    after: QueryClass | None
    share_before: float | None       # share of the baseline's total query time
    share_after: float | None
    volume: Delta                    # queries per second if both durations are known, else raw count
    load: Delta                      # query time per second (or raw total time)
    latency: dict[str, Delta]

    @property
    def worse(self) -> list[str]:
        return [m for m, d in self.latency.items() if d.direction == "worse"]

    @property
    def better(self) -> list[str]:
        return [m for m, d in self.latency.items() if d.direction == "better"]

    def to_dict(self) -> dict[str, Any]:
        def side(c: QueryClass | None) -> dict[str, Any] | None:
            return None if c is None else {
                "checksum": c.checksum, "count": c.count, "total_time": c.total_time, "avg": c.avg, "p95": c.p95,
                "p99": c.p99, "max": c.max, "rows_examined_avg": c.rows_examined_avg}

        return {"key": self.key, "fingerprint": self.fingerprint, "label": self.label, "status": self.status,
                "share_before": self.share_before, "share_after": self.share_after,
                "before": side(self.before), "after": side(self.after),
                "volume": self.volume.to_dict(), "load": self.load.to_dict(),
                "latency": {m: d.to_dict() for m, d in self.latency.items()}}


@dataclass
class Comparison:
    before: Digest
    after: Digest
    rows: list[ClassRow]
    overall: dict[str, Delta]        # avg, p95, p99 (latency), volume, load
    noise: Noise
    per_second: bool                 # volumes compared as rates
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[ClassRow]:
        return [r for r in self.rows if r.worse]

    @property
    def improvements(self) -> list[ClassRow]:
        return [r for r in self.rows if r.better and not r.worse]

    def to_dict(self) -> dict[str, Any]:
        def meta(d: Digest) -> dict[str, Any]:
            return {"query_count": d.query_count, "classes": len(d.classes), "duration_s": d.duration_s,
                    "percentiles": d.percentiles, "source": d.source}

        return {"before": meta(self.before), "after": meta(self.after),
                "noise": {"pct": self.noise.pct, "abs_us": self.noise.abs_us},
                "per_second": self.per_second, "notes": self.notes,
                "overall": {k: d.to_dict() for k, d in self.overall.items()},
                "classes": [r.to_dict() for r in self.rows]}


def match_classes(before: Digest, after: Digest) -> tuple[list[tuple[QueryClass, QueryClass]], list[QueryClass], list[QueryClass]]:
    """(matched pairs, gone: only before, new: only after), by checksum then fingerprint."""
    after_by_sum = after.by_checksum()
    pairs: list[tuple[QueryClass, QueryClass]] = []
    used: set[str] = set()
    unmatched: list[QueryClass] = []
    for b in before.classes:
        a = after_by_sum.get(b.checksum)
        if a is not None and a.checksum not in used:
            pairs.append((b, a))
            used.add(a.checksum)
        else:
            unmatched.append(b)
    by_fp: dict[str, QueryClass] = {}
    for a in after.classes:
        if a.checksum not in used and a.fingerprint:
            by_fp.setdefault(a.fingerprint, a)
    gone = []
    for b in unmatched:
        a = by_fp.pop(b.fingerprint, None) if b.fingerprint else None
        if a is not None:
            pairs.append((b, a))
            used.add(a.checksum)
        else:
            gone.append(b)
    new = [a for a in after.classes if a.checksum not in used]
    return pairs, gone, new


def time_rank_key(c: QueryClass) -> tuple[float, int, str]:
    """Deterministic order by weight: total time, then count, then checksum."""
    return (-c.total_time, -c.count, c.checksum)


def compare(before: Digest, after: Digest, noise: Noise | None = None) -> Comparison:
    noise = noise or Noise()
    per_second = bool(before.duration_s and after.duration_s)
    notes: list[str] = []
    if per_second:
        if abs((before.duration_s or 0) - (after.duration_s or 0)) > 0.05 * max(before.duration_s or 0, after.duration_s or 0):
            notes.append(f"captures last {before.duration_s:.1f} s and {after.duration_s:.1f} s: "
                         "counts and total time are compared per second")
        else:
            notes.append("counts and total time are compared per second")
    else:
        notes.append("a capture has no known duration: raw counts and total time are compared")
    if before.percentiles != after.percentiles:
        notes.append(f"percentiles are {before.percentiles} before and {after.percentiles} after: "
                     "p95 is approximate on the bucketed side, p99 missing there")
    elif before.percentiles != "exact":
        notes.append("p95 comes from pt-query-digest's buckets (about 5% wide); p99 is unavailable "
                     "(capture with dbmigrate digest capture for exact p95/p99)")

    def vol(d: Digest, value: float) -> float:
        return value / d.duration_s if per_second and d.duration_s else value

    tb = before.total_time or sum(c.total_time for c in before.classes)
    ta = after.total_time or sum(c.total_time for c in after.classes)

    def row(b: QueryClass | None, a: QueryClass | None, status: str) -> ClassRow:
        ref = b or a
        assert ref is not None
        return ClassRow(
            key=ref.checksum, fingerprint=ref.fingerprint, label=ref.label, status=status, before=b, after=a,
            share_before=(b.total_time / tb) if b and tb else (0.0 if b else None),
            share_after=(a.total_time / ta) if a and ta else (0.0 if a else None),
            volume=volume_delta(vol(before, b.count) if b else None, vol(after, a.count) if a else None, noise),
            load=volume_delta(vol(before, b.total_time) if b else None, vol(after, a.total_time) if a else None, noise),
            latency={m: latency_delta(getattr(b, m) if b else None, getattr(a, m) if a else None, noise)
                     for m in LATENCY_METRICS})

    pairs, gone, new = match_classes(before, after)
    rows = [row(b, a, "matched") for b, a in pairs] + [row(b, None, "gone") for b in gone]
    rows.sort(key=lambda r: time_rank_key(r.before))  # type: ignore[arg-type]
    rows += [row(None, a, "new") for a in sorted(new, key=time_rank_key)]
    overall = {m: latency_delta(getattr(before, m) if before.query_count else None,
                                getattr(after, m) if after.query_count else None, noise) for m in LATENCY_METRICS}
    overall["volume"] = volume_delta(vol(before, before.query_count), vol(after, after.query_count), noise)
    overall["load"] = volume_delta(vol(before, tb), vol(after, ta), noise)
    if gone:
        notes.append(f"{len(gone)} class(es) only before (gone), {len(new)} only after (new)")
    elif new:
        notes.append(f"{len(new)} class(es) only after (new)")
    return Comparison(before, after, rows, overall, noise, per_second, notes)
