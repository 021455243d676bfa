"""A parsed pt-query-digest capture: query classes with count, avg, p95, p99 and total time.

pt-query-digest 3.2.1 `--output json` gives, per class, `checksum`, `fingerprint`,
`distillate`, `query_count`, `example` and `metrics`, where every metric is
`{min,max,avg,median,pct_95,stddev,sum,pct}` and every value is a *string*.
It has no p99, and its pct_95 comes from log-scale buckets (about 5% wide).

When the per-event Query_time samples are known (tools.percona collects them in
the same pt-query-digest run, keyed by the same checksum), p95 and p99 are exact
nearest-rank percentiles and `percentiles == "exact"`. Without samples (a plain
pt-query-digest JSON file) p95 is pt's bucketed value and p99 is unavailable.

All times are seconds; reports convert.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from dbmigrate.exceptions import UsageError
from dbmigrate.redact import redact

FORMAT = "dbmigrate.digest/1"


class DigestFormatError(UsageError):
    """A digest file is not pt-query-digest JSON nor a dbmigrate digest."""


def nearest_rank(sorted_values: list[float], q: float) -> float | None:
    """The q-quantile (0 < q <= 1) by nearest rank: a value that really occurred."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _num(value: Any, where: str) -> float:
    """pt-query-digest writes every number as a string ("0.000250")."""
    if value is None or value == "":
        return 0.0
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DigestFormatError(f"{where}: expected a number, got {value!r}",
                                hint="is this the output of pt-query-digest --output json?") from None


@dataclass(frozen=True)
class Metric:
    """One pt-query-digest metric (seconds for Query_time/Lock_time)."""

    min: float = 0.0
    max: float = 0.0
    avg: float = 0.0
    median: float = 0.0
    p95: float = 0.0
    stddev: float = 0.0
    sum: float = 0.0

    @classmethod
    def from_pt(cls, data: dict[str, Any] | None, where: str) -> "Metric":
        d = data or {}
        return cls(min=_num(d.get("min"), f"{where}.min"), max=_num(d.get("max"), f"{where}.max"),
                   avg=_num(d.get("avg"), f"{where}.avg"), median=_num(d.get("median"), f"{where}.median"),
                   p95=_num(d.get("pct_95"), f"{where}.pct_95"), stddev=_num(d.get("stddev"), f"{where}.stddev"),
                   sum=_num(d.get("sum"), f"{where}.sum"))


@dataclass(frozen=True)
class QueryClass:
    checksum: str
    fingerprint: str
    distillate: str
    count: int
    total_time: float
    avg: float
    p95: float
    p99: float | None
    max: float
    rows_examined_avg: float | None = None
    example: str = ""
    tables: tuple[str, ...] = ()
    first_seen: str = ""
    last_seen: str = ""

    @property
    def label(self) -> str:
        """The fingerprint, shortened: distillates ("SELECT orders") do not tell two classes apart."""
        text = self.fingerprint or self.distillate
        return text if len(text) <= 72 else text[:71] + "…"


@dataclass
class Digest:
    classes: list[QueryClass]
    query_count: int
    total_time: float
    avg: float
    p95: float | None
    p99: float | None
    duration_s: float | None = None
    percentiles: str = "pt-query-digest buckets"  # or "exact"
    source: dict[str, Any] = field(default_factory=dict)

    # -- derived -------------------------------------------------------------
    def by_checksum(self) -> dict[str, QueryClass]:
        return {c.checksum: c for c in self.classes}

    def rate(self, count: int) -> float | None:
        """Queries per second over the capture, or None when its duration is unknown."""
        if not self.duration_s or self.duration_s <= 0:
            return None
        return count / self.duration_s

    @property
    def qps(self) -> float | None:
        return self.rate(self.query_count)

    # -- building ------------------------------------------------------------
    @classmethod
    def from_pt_json(cls, data: dict[str, Any] | None, samples: dict[str, list[float]] | None = None,
                     duration_s: float | None = None, source: dict[str, Any] | None = None,
                     where: str = "digest") -> "Digest":
        """Build from pt-query-digest JSON; `samples` maps checksum -> Query_time of every event."""
        data = data or {}
        if not isinstance(data, dict) or (data and "classes" not in data and "global" not in data):
            raise DigestFormatError(f"{where}: no 'global' or 'classes' key",
                                    hint="expected pt-query-digest --output json, or a file written by dbmigrate digest")
        exact = samples is not None  # collected, even if the log was empty
        classes = []
        for i, raw in enumerate(data.get("classes") or []):
            w = f"{where}: classes[{i}]"
            if not isinstance(raw, dict) or "checksum" not in raw:
                raise DigestFormatError(f"{w}: a class needs a checksum")
            metrics = raw.get("metrics") or {}
            qt = Metric.from_pt(metrics.get("Query_time"), f"{w}.metrics.Query_time")
            count = int(_num(raw.get("query_count"), f"{w}.query_count"))
            checksum = str(raw["checksum"]).upper()
            own = sorted(samples.get(checksum, [])) if samples else []
            p95, p99 = qt.p95, None
            if own:
                p95, p99 = nearest_rank(own, 0.95), nearest_rank(own, 0.99)
            rex = metrics.get("Rows_examined")
            example = raw.get("example") or {}
            classes.append(QueryClass(
                checksum=checksum, fingerprint=str(raw.get("fingerprint") or ""),
                distillate=str(raw.get("distillate") or ""), count=count, total_time=qt.sum, avg=qt.avg,
                p95=p95, p99=p99, max=qt.max,
                rows_examined_avg=Metric.from_pt(rex, f"{w}.metrics.Rows_examined").avg if rex else None,
                # Example queries carry literal values: masked like everything we store.
                example=redact(str(example.get("query") or "")),
                tables=tuple(_table_names(raw.get("tables") or [])),
                first_seen=str(raw.get("ts_min") or ""), last_seen=str(raw.get("ts_max") or "")))
        glob = data.get("global") or {}
        gqt = Metric.from_pt((glob.get("metrics") or {}).get("Query_time"), f"{where}: global.metrics.Query_time")
        count = int(_num(glob.get("query_count"), f"{where}: global.query_count")) if glob else \
            sum(c.count for c in classes)
        all_samples = sorted(t for ts in (samples or {}).values() for t in ts)
        if all_samples:
            p95, p99 = nearest_rank(all_samples, 0.95), nearest_rank(all_samples, 0.99)
        else:
            p95, p99 = (gqt.p95 if count else None), None
        total = gqt.sum if glob else sum(c.total_time for c in classes)
        return cls(classes=classes, query_count=count, total_time=total,
                   avg=(total / count) if count else 0.0, p95=p95, p99=p99, duration_s=duration_s,
                   percentiles="exact" if exact else "pt-query-digest buckets", source=dict(source or {}))

    # -- files ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = FORMAT
        for c in d["classes"]:
            c["tables"] = list(c["tables"])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "digest") -> "Digest":
        try:
            classes = [QueryClass(**{**c, "tables": tuple(c.get("tables") or ())}) for c in d["classes"]]
            fields = {k: d[k] for k in ("query_count", "total_time", "avg", "p95", "p99")}
        except (KeyError, TypeError) as e:
            raise DigestFormatError(f"{where}: not a valid dbmigrate digest ({e})",
                                    hint="write it again with dbmigrate digest capture") from None
        return cls(classes=classes, duration_s=d.get("duration_s"), percentiles=d.get("percentiles", ""),
                   source=d.get("source") or {}, **fields)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Digest":
        """A dbmigrate digest file, or raw pt-query-digest --output json."""
        path = Path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise DigestFormatError(f"digest file {path} does not exist",
                                    hint="make one with: dbmigrate digest capture ... --out FILE") from None
        if not text.strip():
            return cls.from_pt_json({}, source={"file": str(path)})  # pt-query-digest prints nothing for an empty log
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DigestFormatError(f"{path}:{e.lineno}: not JSON ({e.msg})",
                                    hint="pass a file written by dbmigrate digest capture or pt-query-digest --output json") from None
        if isinstance(data, dict) and data.get("format") == FORMAT:
            return cls.from_dict(data, where=str(path))
        return cls.from_pt_json(data, source={"file": str(path)}, where=str(path))


def _table_names(tables: Iterable[Any]) -> Iterable[str]:
    # pt gives {"create": "SHOW CREATE TABLE `app`.`t`\\G", ...}; keep `app`.`t`.
    for t in tables:
        text = str((t or {}).get("create", "")) if isinstance(t, dict) else str(t)
        name = text.removeprefix("SHOW CREATE TABLE ").removesuffix("\\G").strip()
        if name:
            yield name


def format_latency(seconds: float | None) -> str:
    """707 µs, 12.3 ms, 1.52 s: the unit a person reads at a glance."""
    if seconds is None:
        return "n/a"
    us = seconds * 1e6
    if abs(us) < 1000:
        return f"{us:.0f} µs"
    if abs(us) < 1_000_000:
        ms = us / 1000
        return f"{ms:.2f} ms" if abs(ms) < 10 else f"{ms:.1f} ms" if abs(ms) < 100 else f"{ms:.0f} ms"
    return f"{seconds:.2f} s"
