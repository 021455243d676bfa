#!/usr/bin/env python3
"""The tool's own work inside the fenced window, without servers.

Between read_only=ON on the old primary and read_only=OFF on the candidate, every
microsecond the tool spends in Python (engine steps, journal, events, state) is write
downtime, and on a loaded machine it costs more than its CPU time. This runs the
cutover's fence -> catch up -> router -> open steps on the engine, with the real journal
(SQLite in WAL mode), the event bus and the console renderer, against the in-memory
topology the unit tests use (no server, no network), and reports per window:
- CPU time of the tool's thread from the fence statement to the open statement (us);
- Python function calls in that span (deterministic: the same code makes the same calls);
- journal writes in that span.

    python bench/window_overhead.py [--windows 300] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from dbmigrate.cli.render import ConsoleRenderer  # noqa: E402
from dbmigrate.engine import Journal, Phase, Procedure, Runner  # noqa: E402
from dbmigrate.engine.journal import Journal as JournalClass  # noqa: E402
from dbmigrate.procedures.kit import cutover as kit  # noqa: E402
from dbmigrate.procedures.kit.switchover import Switchover, SwitchoverParams  # noqa: E402
from tests.unit.fake_topology import FakeRouter, FakeTopology, cluster  # noqa: E402
from tests.unit.test_engine_support import new_context  # noqa: E402


class Marks:
    """Where the window starts and ends: the fence and open statements, as the fake servers get them."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.cpu_us: list[float] = []
        self.profile: cProfile.Profile | None = None
        self.writes = 0
        self.writes_in: list[int] = []

    def sent(self, sql: str) -> None:
        if "read_only=ON" in sql and self.start is None:
            self.start, self.writes = time.thread_time(), 0
            if self.profile is not None:
                self.profile.enable()
        elif sql.endswith("read_only=OFF") and self.start is not None:
            if self.profile is not None:
                self.profile.disable()
            self.cpu_us.append((time.thread_time() - self.start) * 1e6)
            self.writes_in.append(self.writes)
            self.start = None


def one_window(journal: Journal, marks: Marks, console: ConsoleRenderer) -> None:
    topo: FakeTopology = cluster(("db1", "db2", "db3"))
    send = topo.send

    def watched(name: str, sql: str) -> int:
        marks.sent(sql)
        return send(name, sql)

    topo.send = watched  # type: ignore[method-assign]
    router = FakeRouter(topo, "db1")
    settings = SwitchoverParams()

    def make(ctx, record, routed):
        return Switchover(topo, "db1", "db2", settings, routed(router, settings), dry_run=ctx.dry_run or record is not None,
                          log=ctx.log, record=record or ctx.record_statement, clock=topo.clock)

    cut = kit.Cutover(old="db1", new="db2", switchover=make)
    steps = kit.cutover_steps(cut)[:4]  # fence, catch up, router, open: the fenced window
    procedure = Procedure("promote", [Phase("cutover", steps)])
    ctx = new_context(journal, procedure="promote")
    ctx.bus.subscribe(console)
    outcome = Runner(assume_yes=True).run(procedure, ctx)
    if outcome.status != "done":
        raise SystemExit(f"the window did not complete: {outcome.summary}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    marks = Marks()
    original_write = JournalClass._write

    def counted_write(self, sql, params=()):
        marks.writes += 1
        return original_write(self, sql, params)

    JournalClass._write = counted_write  # type: ignore[method-assign]
    console = ConsoleRenderer(Console(file=open(os.devnull, "w"), force_terminal=True, width=160))
    with tempfile.TemporaryDirectory(prefix="dbm-window-") as tmp, Journal(Path(tmp) / "journal.sqlite") as journal:
        for _ in range(20):  # warm up: imports, caches, the journal's first pages
            one_window(journal, marks, console)
        marks.cpu_us.clear(), marks.writes_in.clear()
        for _ in range(args.windows):
            one_window(journal, marks, console)
        cpu = sorted(marks.cpu_us)
        marks.profile = cProfile.Profile()
        one_window(journal, marks, console)
        calls = pstats.Stats(marks.profile).total_calls
    out = {"windows": len(cpu), "cpu_us": {"p50": round(statistics.median(cpu)), "p90": round(cpu[int(len(cpu) * 0.9)]),
                                           "min": round(cpu[0])},
           "python_calls_per_window": calls, "journal_writes_per_window": statistics.median(marks.writes_in)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"fenced window, tool's own work (no servers): CPU p50 {out['cpu_us']['p50']} us, "
              f"p90 {out['cpu_us']['p90']} us, min {out['cpu_us']['min']} us over {out['windows']} windows; "
              f"{calls} Python calls and {out['journal_writes_per_window']:g} journal writes per window")
    return 0


if __name__ == "__main__":
    sys.exit(main())
