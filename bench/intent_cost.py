#!/usr/bin/env python3
"""What the write-ahead intent and the fencing generation cost inside the fenced window.

1. The journal: an intent recorded before a statement and its outcome after (two SQLite
   commits), with synchronous=NORMAL (the journal's setting: in WAL mode a commit is written to
   the WAL file, in the operating system, before the statement leaves: it survives kill -9 of
   the tool) and with FULL (an fsync per commit: it would also survive a power loss of the
   tool's host).
2. A real server (a one-server sandbox): `SET GLOBAL read_only=OFF` sent as it was, and guarded
   by the generation (one request: the named lock, the check, the statement, the result read);
   and the bump a decision makes on each server once, before the window.

    python bench/intent_cost.py [--statements 2000] [--rounds 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.db.generation import bump, send_guarded
from dbmigrate.engine.journal import Journal
from dbmigrate.rehearsal.sandbox.manager import Sandboxes

NAME = "intentbench"


def journal_cost(statements: int, synchronous: str) -> dict[str, float]:
    """Microseconds per statement for its intent and outcome, in a journal on this machine's disk."""
    with tempfile.TemporaryDirectory(dir=Path.home()) as d, Journal(Path(d) / "j.sqlite", synchronous) as j:
        took = []
        for i in range(statements):
            t0 = time.perf_counter()
            intent = j.record_intent("bench", "c", dict(server="db1", address="127.0.0.1:3306", session_id=i,
                                                        user="dbmigrate", statement="SET GLOBAL read_only=OFF",
                                                        kind="open", generation=1, at=time.time()))
            j.intent_outcome(intent, "done")
            took.append((time.perf_counter() - t0) * 1e6)
    return _summary(took)


def _summary(us: list[float]) -> dict[str, float]:
    us = sorted(us)
    return {"p50_us": round(statistics.median(us), 1), "p99_us": round(us[int(len(us) * 0.99) - 1], 1),
            "max_us": round(us[-1], 1)}


def server_cost(rounds: int) -> dict[str, dict[str, float]]:
    boxes = Sandboxes()
    state = boxes.up(NAME, 0)
    try:
        inv = load_inventory(state.inventory_file)
        with inv.open(next(iter(inv.cluster(NAME).servers))) as server:
            server.execute("SET GLOBAL read_only=OFF")
            plain, guarded, bumps = [], [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                bump(server, "bench")
                bumps.append((time.perf_counter() - t0) * 1e6)
            generations = server.ledger.generations
            generations.arm("bench")  # a decision: the next statement bumps once more, then holds it
            try:
                generations.ensure(server)
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    server.execute("SET GLOBAL read_only=OFF")
                    plain.append((time.perf_counter() - t0) * 1e6)
                    t0 = time.perf_counter()
                    send_guarded(server, ["SET GLOBAL read_only=OFF"])
                    guarded.append((time.perf_counter() - t0) * 1e6)
            finally:
                generations.disarm()
    finally:
        boxes.down(NAME)
    return {"plain": _summary(plain), "guarded": _summary(guarded), "bump": _summary(bumps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--statements", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = {"journal_normal": journal_cost(a.statements, "NORMAL"), "journal_full": journal_cost(a.statements, "FULL"),
           **server_cost(a.rounds)}
    out["ratio_full_to_normal_p50"] = round(out["journal_full"]["p50_us"] / out["journal_normal"]["p50_us"], 1)
    out["guard_extra_p50_us"] = round(out["guarded"]["p50_us"] - out["plain"]["p50_us"], 1)
    if a.json:
        print(json.dumps(out))
        return
    for k in ("journal_normal", "journal_full", "plain", "guarded", "bump"):
        v = out[k]
        print(f"{k:16s} p50 {v['p50_us']:8.1f} us   p99 {v['p99_us']:8.1f} us   max {v['max_us']:9.1f} us")
    print(f"FULL / NORMAL (p50): {out['ratio_full_to_normal_p50']}x; the guard adds {out['guard_extra_p50_us']} us "
          f"per role change (p50)")


if __name__ == "__main__":
    main()
