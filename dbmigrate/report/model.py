"""What a report shows, collected from what a run recorded.

Sources, all written while the run happened (nothing is re-measured here):
- the journal: the run, its steps with start and end times (the timeline's bands),
  the guard's decisions per window and the baseline digest's file;
- the journal's evidence of the run (`Journal.record_evidence`): acknowledged writes
  per 10 ms, replica lag and query latency samples, load and CPU before/after,
  warm-up curves, scaling figures, latency beside a background copy;
- the digest files the guard wrote (baseline on the old primary, windows on the new one).

Benchmarks that run no playbook build a model from their evidence alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbmigrate.engine.events import utc_now_iso
from dbmigrate.engine.journal import Journal
from dbmigrate.report.series import iso_to_epoch

# Evidence names (one JSON document each per run).
ACKS = "acks"                      # bin_counts() of the verifier's acknowledgements
LATENCY = "latency"                # {"source", "points": [[second, p50, p99, n], ...]}
LAG = "lag"                        # {"source", "points": [[epoch, replica, ms], ...]}
LOAD = "load"                      # {"before": sysbench, "after": sysbench}
CPU = "cpu"                        # {"before": {"server", "pct", "seconds"}, "after": {...}}
CLIENT_LATENCY = "client_latency"  # {"source", "before": summarize_ms, "after": summarize_ms}
WARMUP = "warmup"                  # {"source", "cases": {case: [[second, qps, hit_ratio], ...]}}
SCALING = "scaling"                # {"workload", "rows": [{"instances", "tpm", "avg_ms", "p999_ms", ...}]}
BACKGROUND_COPY = "background_copy"  # {"copy", "without": summarize_ms, "with": summarize_ms}
DIGEST = "digest"                  # a Comparison.to_dict(), when not derived from the guard's files
SAMPLER = "sampler"                # {"interval_s", "samples", "failed"}: how well the lag sampler kept up
VERIFIER = "verifier"              # the zero-loss verifier's summary (acknowledged, lost, longest gap)
WRITE_GAPS = "write_gaps"          # {"fenced_ms", "fenced_window", "other_write_gaps": [{"ms", "steps"}, ...]}


@dataclass
class ReportModel:
    title: str
    run: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)  # start/end as epoch seconds
    evidence: dict[str, Any] = field(default_factory=dict)
    digest: dict[str, Any] | None = None
    guard_windows: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # the run's journaled metrics (warm-up progress...)
    notes: list[str] = field(default_factory=list)
    generated_at: str = field(default_factory=utc_now_iso)
    show_empty: bool = True  # a run's report says what it did not record; a benchmark's shows what it measured

    def origin(self) -> float | None:
        """Time zero of the timeline: the first step's start, else the first sample."""
        starts = [s["start"] for s in self.steps if s.get("start") is not None]
        acks = self.evidence.get(ACKS) or {}
        if acks.get("start") is not None:
            starts.append(acks["start"])
        for key in (LATENCY, LAG):
            points = (self.evidence.get(key) or {}).get("points") or []
            if points:
                starts.append(points[0][0])
        return min(starts) if starts else None

    @property
    def has_timeline(self) -> bool:
        return bool((self.evidence.get(ACKS) or {}).get("counts") or (self.evidence.get(LATENCY) or {}).get("points")
                    or (self.evidence.get(LAG) or {}).get("points"))


def steps_of(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """The journal's step rows as bands: forward and undo executions that took time."""
    out = []
    for row in detail.get("steps", []):
        start, end = iso_to_epoch(row.get("started_at")), iso_to_epoch(row.get("finished_at"))
        if start is None:
            continue
        out.append({"phase": row["phase"], "name": row["name"], "action": row["action"], "status": row["status"],
                    "start": start, "end": end if end is not None else start,
                    "duration_ms": row.get("duration_ms"), "sentence": row.get("sentence") or ""})
    return out


def from_journal(journal: Journal, run_ref: str) -> ReportModel:
    """Everything a run recorded, for `runs report RUN` and `--report` after a run."""
    run_id = journal.resolve_run_id(run_ref)
    detail = journal.run_detail(run_id)
    run = {k: detail.get(k) for k in ("id", "procedure", "cluster", "status", "summary", "started_at",
                                      "finished_at", "playbook", "dry_run")}
    model = ReportModel(title=f"{detail['procedure']} on {detail['cluster']}: run {run_id}", run=run,
                        steps=steps_of(detail), evidence=journal.evidence(run_id),
                        metrics=list(detail.get("metrics") or []))
    guard = _guard_state(detail.get("state") or {}, model.notes)
    model.guard_windows = list(guard.get("guard_decisions") or [])
    model.digest = model.evidence.get(DIGEST) or _guard_digest(guard, len(model.guard_windows), model.notes)
    if not model.has_timeline:
        model.notes.append("no timeline samples were recorded for this run (they are recorded by "
                           "`dbmigrate run --report` and by rehearsals)")
    return model


def from_evidence(title: str, evidence: dict[str, Any], notes: list[str] | None = None) -> ReportModel:
    """A report of a benchmark: its evidence alone, no journal."""
    return ReportModel(title=title, evidence=evidence, digest=evidence.get(DIGEST), notes=list(notes or []),
                       show_empty=False)


class _StateRead:
    """A run's journaled state as read back, as a typed state loads from a store (read-only)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def get(self, key: str, default: Any = None) -> Any:
        return self._state.get(key, default)

    def set(self, key: str, value: Any) -> None:
        raise TypeError(f"a report does not change the run's state ({key})")

    def items(self) -> dict[str, Any]:
        return dict(self._state)


def _guard_state(state: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    from dbmigrate.exceptions import DbmigrateError
    from dbmigrate.procedures.kit.guard import GuardState

    try:
        return GuardState.load(_StateRead(state)).model_dump()
    except DbmigrateError as exc:  # written by another version: the report goes on without it
        notes.append(f"the guard's journaled state is not readable here: {exc.message}")
        return {}


def _guard_digest(state: dict[str, Any], windows: int, notes: list[str]) -> dict[str, Any] | None:
    """Before (baseline on the old primary) against after (the guard's last window on the new one)."""
    baseline = state.get("baseline_digest")
    if not baseline or not windows:
        return None
    from dbmigrate.digest.compare import compare
    from dbmigrate.digest.model import Digest

    after = Path(baseline).with_name("guard.digest.json")  # the guard's whole window
    if not after.exists():
        after = Path(baseline).with_name(f"guard-{windows}.digest.json")
    missing = [str(p) for p in (Path(baseline), after) if not p.exists()]
    if missing:
        notes.append(f"digest files of this run are gone ({', '.join(missing)}): no before/after per query class")
        return None
    return compare(Digest.load(baseline), Digest.load(after)).to_dict()
