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
# pt-query-digest JSON of 100,000 queries in 1,000 classes is a few MB; a bigger file
# is not a digest (or is a device such as /dev/zero) and would be read until memory runs out.
MAX_DIGEST_BYTES = 64 * 1024 * 1024


class DigestFormatError(UsageError):
    """A digest file is not pt-query-digest JSON nor a dbmigrate digest."""


def nearest_rank(sorted_values: list[float], q: float) -> float | None:
    """The q-quantile (0 < q <= 1) by nearest rank: a value that really occurred."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _num(value: Any, where: str) -> float:
    """pt-query-digest writes every number as a string ("0.000250"). Counts and
    times are finite and not negative; anything else is not a digest."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DigestFormatError(f"{where}: expected a number, got {_shown(value)}",
                                hint="is this the output of pt-query-digest --output json?")
    try:
        number = float(value)
    except ValueError:
        raise DigestFormatError(f"{where}: expected a number, got {_shown(value)}",
                                hint="is this the output of pt-query-digest --output json?") from None
    if not math.isfinite(number) or number < 0:
        raise DigestFormatError(f"{where}: {_shown(value)} is not a count or a time (finite, not negative)",
                                hint="is this the output of pt-query-digest --output json?")
    return number


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """An optional JSON object: absent is empty, anything else but an object is an error."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DigestFormatError(f"{where}: expected an object, got {_shown(value)}",
                                hint="is this the output of pt-query-digest --output json?")
    return value


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise DigestFormatError(f"{where}: expected text, got {_shown(value)}")
    return str(value)


def _one_value(attribute: Any) -> str:
    """pt-query-digest's string attribute (user, host, db): `{"value": X}` when every event had X."""
    value = attribute.get("value") if isinstance(attribute, dict) else None
    return value if isinstance(value, str) else ""


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
        d = _mapping(data, where)
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
    user: str = ""  # the account that sent the class's queries, when pt-query-digest saw only one
    db: str = ""  # the sessions' default database (unqualified tables are read there), when only one

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
        if not isinstance(data.get("classes") or [], list):
            raise DigestFormatError(f"{where}: classes: expected a list, got {_shown(data.get('classes'))}")
        exact = samples is not None  # collected, even if the log was empty
        classes = []
        for i, raw in enumerate(data.get("classes") or []):
            w = f"{where}: classes[{i}]"
            if not isinstance(raw, dict) or "checksum" not in raw:
                raise DigestFormatError(f"{w}: a class needs a checksum")
            metrics = _mapping(raw.get("metrics"), f"{w}.metrics")
            qt = Metric.from_pt(metrics.get("Query_time"), f"{w}.metrics.Query_time")
            count = int(_num(raw.get("query_count"), f"{w}.query_count"))
            checksum = _text(raw["checksum"], f"{w}.checksum").upper()
            own = sorted(samples.get(checksum, [])) if samples else []
            own_p95 = nearest_rank(own, 0.95)  # None without samples: pt's bucketed p95, no p99
            p95, p99 = (qt.p95 if own_p95 is None else own_p95), nearest_rank(own, 0.99)
            rex = metrics.get("Rows_examined")
            example = _mapping(raw.get("example"), f"{w}.example")
            if not isinstance(raw.get("tables") or [], list):
                raise DigestFormatError(f"{w}.tables: expected a list, got {_shown(raw.get('tables'))}")
            classes.append(QueryClass(
                checksum=checksum, fingerprint=_text(raw.get("fingerprint"), f"{w}.fingerprint"),
                distillate=_text(raw.get("distillate"), f"{w}.distillate"), count=count, total_time=qt.sum, avg=qt.avg,
                p95=p95, p99=p99, max=qt.max,
                rows_examined_avg=Metric.from_pt(rex, f"{w}.metrics.Rows_examined").avg if rex else None,
                # Example queries carry literal values: masked like everything we store.
                example=redact(_text(example.get("query"), f"{w}.example.query")),
                tables=tuple(_table_names(raw.get("tables") or [])),
                first_seen=str(raw.get("ts_min") or ""), last_seen=str(raw.get("ts_max") or ""),
                user=_one_value(metrics.get("user")), db=_one_value(metrics.get("db"))))
        glob = _mapping(data.get("global"), f"{where}: global")
        gqt = Metric.from_pt(_mapping(glob.get("metrics"), f"{where}: global.metrics").get("Query_time"),
                             f"{where}: global.metrics.Query_time")
        count = int(_num(glob.get("query_count"), f"{where}: global.query_count")) if glob else \
            sum(c.count for c in classes)
        all_samples = sorted(t for ts in (samples or {}).values() for t in ts)
        if all_samples:
            all_p95, all_p99 = nearest_rank(all_samples, 0.95), nearest_rank(all_samples, 0.99)
        else:
            all_p95, all_p99 = (gqt.p95 if count else None), None
        total = gqt.sum if glob else sum(c.total_time for c in classes)
        return cls(classes=classes, query_count=count, total_time=total,
                   avg=(total / count) if count else 0.0, p95=all_p95, p99=all_p99, duration_s=duration_s,
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
        """A dbmigrate digest file, every field checked: a hand-edited or truncated
        file is one line naming the field, never a crash in the comparison."""
        def num(value: Any, at: str) -> float:
            if value is None or isinstance(value, str):
                raise DigestFormatError(f"{where}: {at}: expected a number, got {_shown(value)}",
                                        hint="write it again with dbmigrate digest capture")
            return _num(value, f"{where}: {at}")

        def optional_num(value: Any, at: str) -> float | None:
            return None if value is None else num(value, at)

        try:
            if not isinstance(d.get("classes"), list):
                raise DigestFormatError(f"{where}: classes: expected a list, got {_shown(d.get('classes'))}")
            classes = []
            for i, c in enumerate(d["classes"]):
                at = f"classes[{i}]"
                c = _mapping(c, f"{where}: {at}")
                tables = c.get("tables") or []
                if not isinstance(tables, list):
                    raise DigestFormatError(f"{where}: {at}.tables: expected a list, got {_shown(tables)}")
                classes.append(QueryClass(
                    checksum=_text(c["checksum"], f"{where}: {at}.checksum"),
                    fingerprint=_text(c.get("fingerprint"), f"{where}: {at}.fingerprint"),
                    distillate=_text(c.get("distillate"), f"{where}: {at}.distillate"),
                    count=int(num(c["count"], f"{at}.count")), total_time=num(c["total_time"], f"{at}.total_time"),
                    avg=num(c["avg"], f"{at}.avg"), p95=num(c["p95"], f"{at}.p95"),
                    p99=optional_num(c.get("p99"), f"{at}.p99"), max=num(c["max"], f"{at}.max"),
                    rows_examined_avg=optional_num(c.get("rows_examined_avg"), f"{at}.rows_examined_avg"),
                    example=_text(c.get("example"), f"{where}: {at}.example"),
                    tables=tuple(_text(t, f"{where}: {at}.tables") for t in tables),
                    first_seen=_text(c.get("first_seen"), f"{where}: {at}.first_seen"),
                    last_seen=_text(c.get("last_seen"), f"{where}: {at}.last_seen"),
                    user=_text(c.get("user"), f"{where}: {at}.user"),
                    db=_text(c.get("db"), f"{where}: {at}.db")))
            return cls(classes=classes, query_count=int(num(d["query_count"], "query_count")),
                       total_time=num(d["total_time"], "total_time"), avg=num(d["avg"], "avg"),
                       p95=optional_num(d.get("p95"), "p95"), p99=optional_num(d.get("p99"), "p99"),
                       duration_s=optional_num(d.get("duration_s"), "duration_s"),
                       percentiles=_text(d.get("percentiles"), f"{where}: percentiles"),
                       source=_mapping(d.get("source"), f"{where}: source"))
        except KeyError as e:
            raise DigestFormatError(f"{where}: not a valid dbmigrate digest (missing {e})",
                                    hint="write it again with dbmigrate digest capture") from None

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
            if path.is_dir():
                raise DigestFormatError(f"digest file {path} is a directory", hint="name a digest file")
            if path.exists() and not path.is_file():
                raise DigestFormatError(f"digest file {path} is not a regular file", hint="name a digest file")
            with open(path, "rb") as f:
                raw = f.read(MAX_DIGEST_BYTES + 1)
        except FileNotFoundError:
            raise DigestFormatError(f"digest file {path} does not exist",
                                    hint="make one with: dbmigrate digest capture ... --out FILE") from None
        except OSError as e:
            raise DigestFormatError(f"digest file {path} cannot be read: {e.strerror or e}") from None
        if len(raw) > MAX_DIGEST_BYTES:
            raise DigestFormatError(f"digest file {path} is larger than {MAX_DIGEST_BYTES // (1024 * 1024)} MB: "
                                    "not a digest", hint="pass a file written by dbmigrate digest capture")
        if not raw.strip():
            # pt-query-digest prints nothing for an empty slow log: no queries is not "−100%".
            raise DigestFormatError(f"digest file {path} is empty: it holds no query to compare",
                                    hint="capture again while the application sends queries")
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise DigestFormatError(f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                                    "not a digest", hint="pass a file written by dbmigrate digest capture") from None
        except json.JSONDecodeError as e:
            raise DigestFormatError(f"{path}:{e.lineno}: not JSON ({e.msg})",
                                    hint="pass a file written by dbmigrate digest capture or pt-query-digest --output json") from None
        except RecursionError:
            raise DigestFormatError(f"{path}: JSON nested too deeply: not a digest") from None
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
