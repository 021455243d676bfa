"""What the consolidation board shows, as plain data: every old server's stage and figures,
the throttle in force, the target hosts. Built from the playbook's plan, then updated by the
run's events (the fleet's per-server metrics, the copies' progress, the catch-up lags).
No Textual here, so the state machine is tested without a terminal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from dbmigrate.app.consolidate.board import FleetLayout, TargetInstance
from dbmigrate.engine.events import Event, GateDecided, Metric, StepFinished

MB = 1_000_000

# Sort order on the board: what needs the operator first.
ORDER = {"failed": 0, "stalled": 1, "paused": 2, "seeding": 3, "catching up": 4, "cutting over": 5,
         "rolling back": 5, "seeded": 6, "waiting": 7, "rolled back": 8, "seed undone": 8, "cut over": 9}


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def duration(s: float | None) -> str:
    if s is None:
        return "?"
    if s < 90:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


@dataclass
class ServerRow:
    name: str
    shards: list[str]
    targets: list[TargetInstance]
    stage: str = "waiting"
    reason: str = ""  # failed: why; rolled back / cut over: the sentence
    done_bytes: int | None = None
    total_bytes: int | None = None
    rate_mb_s: float | None = None
    eta_s: float | None = None
    p999_ms: float | None = None
    throttle: str = ""  # the copy's own decision: "capped at 4 MB/s", "paused: source p99.9 ..."
    lag_ms: float | None = None
    fenced_ms: float | None = None
    progress_at: float | None = None  # monotonic time of the last progress report

    @property
    def pct(self) -> float | None:
        if self.done_bytes is None or not self.total_bytes:
            return None
        return min(100.0, 100.0 * self.done_bytes / self.total_bytes)

    def target_text(self) -> str:
        return ", ".join(f"{t.name}@{t.host}" for t in self.targets)

    def figures(self) -> str:
        """The stage's figures, each with its unit: what the board's state column shows."""
        if self.stage in ("seeding", "stalled", "paused") and self.rate_mb_s is not None:
            pct = f"{self.pct:.0f}% · " if self.pct is not None else f"{(self.done_bytes or 0) / MB:,.0f} MB · "
            return f"{pct}{self.rate_mb_s:.1f} MB/s · ETA {duration(self.eta_s)}"
        if self.stage == "catching up" and self.lag_ms is not None:
            return f"lag {self.lag_ms:.0f} ms"
        if self.stage == "cut over" and self.fenced_ms is not None:
            return f"fenced {self.fenced_ms:.0f} ms"
        if self.stage == "failed":
            return self.reason
        return ""


class FleetBoard:
    def __init__(self, layout: FleetLayout, clock: Callable[[], float] = time.monotonic) -> None:
        self.layout = layout
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        self.rows = {name: ServerRow(name, shards, self.layout.targets.get(name, []))
                     for name, shards in self.layout.servers.items()}
        self.cap_mb_s: float = self.layout.throttle_mb_s  # in force for every copy; 0: no cap
        self.paused = False  # by the operator
        self.cap_by = "playbook"

    # ------------------------------------------------------------------ events

    def apply(self, event: Event) -> bool:
        """Fold one engine event in; True when something shown changed."""
        if isinstance(event, Metric):
            return self._metric(event)
        if isinstance(event, GateDecided) and event.gate == "caught-up":
            changed = False
            for key, d in event.details.items():
                src = key.partition("<-")[2]
                if src in self.rows and isinstance(d, dict) and d.get("seconds_behind") is not None:
                    row = self.rows[src]
                    row.lag_ms = float(d["seconds_behind"]) * 1000
                    if row.stage in ("seeded", "waiting"):
                        row.stage = "catching up"
                    changed = True
            return changed
        if isinstance(event, StepFinished) and event.action == "undo" and event.status == "undone" \
                and not event.parent:  # the fleet step's own undo ends the rollback of every server
            if event.phase == "cutover":
                for row in self.rows.values():
                    if row.stage in ("cut over", "cutting over"):
                        row.stage, row.reason = "rolled back", "the run was rolled back"
            elif event.phase == "seed":
                for row in self.rows.values():
                    if row.stage in ("seeded", "catching up", "seeding", "failed", "stalled", "paused"):
                        row.stage, row.reason = "seed undone", "the run was rolled back"
            return True
        return False

    def _metric(self, m: Metric) -> bool:
        labels = m.labels
        if m.name == "fleet_server_s":
            row = self.rows.get(labels.get("server", ""))
            if row is None:
                return False
            stage, status, text = labels.get("stage", ""), labels.get("status", ""), labels.get("text", "")
            if status == "started":
                row.stage = {"seed": "seeding", "cutover": "cutting over"}.get(stage, stage)
                row.reason = ""
                row.progress_at = self.clock()
            elif status == "done":
                row.stage = {"seed": "seeded", "cutover": "cut over", "rollback": "rolled back"}.get(stage, stage)
                row.reason = text
                if stage == "seed" and row.total_bytes:
                    row.done_bytes = row.total_bytes
            elif status == "failed":
                row.stage, row.reason = "failed", f"{stage} failed: {text}"
            elif status == "skipped":
                row.stage, row.reason = ("failed" if "failed" in text else "waiting"), f"{stage} {text}"
            return True
        if m.name == "seed_rate_mb_s":
            row = self.rows.get(labels.get("source", ""))
            if row is None or "bytes" not in labels:
                return False
            row.rate_mb_s = m.value
            row.done_bytes = int(_num(labels.get("bytes")) or 0)
            total = _num(labels.get("total_bytes"))
            row.total_bytes = int(total) if total else None
            row.eta_s = _num(labels.get("eta_s"))
            row.p999_ms = _num(labels.get("source_p999_ms"))
            row.throttle = labels.get("throttle", "")
            row.progress_at = self.clock()
            if row.stage in ("waiting", "seeding", "stalled", "paused"):
                row.stage = "paused" if row.throttle.startswith("paused") else "seeding"
            return True
        if m.name == "catchup_lag_ms":
            row = self.rows.get(labels.get("source", ""))
            if row is None:
                return False
            row.lag_ms = m.value
            return True
        if m.name == "fenced_window_ms":
            row = self.rows.get(labels.get("source", ""))
            if row is None:
                return False
            row.fenced_ms = m.value
            return True
        return False

    # ------------------------------------------------------------------ questions

    def stalled_after_s(self) -> float:
        return 3 * self.layout.progress_every_s + 5

    def tick(self) -> bool:
        """A copy that has reported nothing for a while is stalled (checked once a second)."""
        changed = False
        now = self.clock()
        for row in self.rows.values():
            if row.stage == "seeding" and row.progress_at is not None and \
                    now - row.progress_at > self.stalled_after_s():
                row.stage = "stalled"
                row.reason = f"no progress for {now - row.progress_at:.0f} s"
                changed = True
        return changed

    def ordered(self) -> list[ServerRow]:
        """Failed and stalled first, then those in progress, then waiting, then the finished ones."""
        return sorted(self.rows.values(), key=lambda r: (ORDER.get(r.stage, 5), r.name))

    def seeding(self) -> list[ServerRow]:
        return [r for r in self.rows.values() if r.stage in ("seeding", "stalled", "paused")]

    def worst_p999(self) -> float | None:
        figures = [r.p999_ms for r in self.seeding() if r.p999_ms is not None]
        return max(figures) if figures else None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows.values():
            out[row.stage] = out.get(row.stage, 0) + 1
        return out

    def throttle_line(self) -> str:
        cap = "no cap" if not self.cap_mb_s else f"{self.cap_mb_s:g} MB/s per copy"
        state = ("paused by the operator" if self.paused else f"running, {cap}") if self.seeding() \
            else f"none running ({cap} for the next copy)"
        limit = self.layout.max_source_p999_ms
        p999 = self.worst_p999()
        source = (f"source p99.9 {'-' if p999 is None else f'{p999:.1f} ms'} "
                  f"(worst copy, last {self.layout.progress_every_s:g} s) vs limit "
                  f"{'none' if limit is None else f'{limit:g} ms'}")
        return f"copies {state} (set by {self.cap_by}) · keys +/- p\n{source}"

    def detail(self, name: str) -> str:
        """Everything about one server, for the line under the table."""
        row = self.rows[name]
        parts = [f"{row.name}: {row.stage}", f"shards {', '.join(row.shards)}",
                 "→ " + ", ".join(f"{t.name} on {t.host} ({t.address}; plan {t.memory_gb:g} GB mem, "
                                  f"{t.disk_gb:g} GB disk)" for t in row.targets)]
        if row.rate_mb_s is not None and row.stage in ("seeding", "stalled", "paused", "seeded"):
            total = f" of ~{row.total_bytes / MB:,.0f} MB" if row.total_bytes else ""
            parts.append(f"copied {(row.done_bytes or 0) / MB:,.1f} MB{total} at {row.rate_mb_s:.1f} MB/s "
                         f"ETA {duration(row.eta_s)}")
            if row.throttle:
                parts.append(f"copy: {row.throttle}")
            if row.p999_ms is not None:
                parts.append(f"source p99.9 {row.p999_ms:.1f} ms")
        if row.lag_ms is not None and row.stage in ("seeded", "catching up", "cutting over"):
            parts.append(f"replication lag {row.lag_ms:.0f} ms")
        if row.fenced_ms is not None:
            parts.append(f"fenced for {row.fenced_ms:.0f} ms")
        if row.reason:
            parts.append(row.reason)
        return " · ".join(parts)

    def hosts_lines(self) -> list[str]:
        """One line per target host: its instances and planned memory and disk against what it offers
        (each instance's own share is in the detail line of the servers it takes)."""
        return [f"host {h.name}: {len(h.instances)} inst. · mem {h.memory_used_gb:g}/{h.memory_usable_gb:g} GB · "
                f"disk {h.disk_used_gb:g}/{h.disk_usable_gb:g} GB planned" for h in self.layout.hosts]
