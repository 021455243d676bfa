"""Pictures of each board (promote, schema swap, consolidation) at 80x24 and 132x43 in its key
states: the plan, a gate open with a failing check, work in progress (seeding; a side altered),
one server rolled back, the run done, the run rolled back. The states are made of the same
engine events a run emits (the live tests show that runs emit them); the SVGs under
__snapshots__ are reviewed pictures: a change that moves them shows in review, and
`pytest --snapshot-update` rewrites them after a deliberate change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from dbmigrate.engine.events import (GateDecided, GateWaiting, Metric, RunFinished, RunStarted, StepFinished,
                                     StepStarted)
from dbmigrate.app.monitor import ClusterSample
from dbmigrate.lag import LagSample
from dbmigrate.tui.session import CutoverApp
from dbmigrate.tui.messages import ClusterSampled, EngineEvent
from dbmigrate.tui.widgets import GateModal, LatencyPanel

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
SIZES = {"80x24": (80, 24), "132x43": (132, 43)}
RUN = "20261127-010203-a1b2"
SPACE_IDS = ("space ids differ on db-orders-4 for dbmigrate.sw_orders: the warm-up goes by replay instead of "
             "the page list")
PREFLIGHT = {
    "replication_running": {"ok": True, "reason": "every replica's IO and SQL threads run"},
    "lag": {"ok": True, "reason": "worst lag 3 ms (limit 1000 ms)"},
    "errant_gtids": {"ok": True, "reason": "no errant GTID on db-orders-4"},
    "binlog_settings": {"ok": True, "reason": "log_bin ON, binlog_format ROW, log_slave_updates ON everywhere"},
    "reverse_path": {"ok": True, "reason": "'dbm_repl'@'%' can replicate from db-orders-4 back to db-orders-1 "
                                           "once it is promoted"},
    "space_ids": {"ok": False, "reason": SPACE_IDS},
    "read_only_bypass": {"ok": True, "warn": True, "reason": "warning: 'ops'@'10.%' holds SUPER and is not "
                                                             "fenced by read_only"},
    "long_transactions": {"ok": True, "reason": "oldest open transaction 0.4 s (limit 30 s)"},
    "disk": {"ok": True, "reason": "db-orders-4 has 61% of its datadir's disk free"},
}


@pytest.fixture
def playbooks(tmp_path, monkeypatch):
    """The shipped playbooks in a directory of their own, named relative to it: the log's first line
    shows the same paths on every machine."""
    for name in ("promote-replica.yaml", "schema-ab-swap.yaml", "consolidate-shards.yaml",
                 "consolidate-plan.example.json", "inventory.example.yaml"):
        shutil.copy(PLAYBOOKS / name, tmp_path / name)
    # The shipped swap runs unattended; here an operator approves its switchover.
    with (tmp_path / "schema-ab-swap.yaml").open("a") as f:
        f.write('\ngates:\n  - {name: go-ahead, kind: manual, before: switchover, '
                'prompt: "Every replica is altered. Fence db-orders-1 and promote db-orders-2?"}\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def session(playbook: str) -> CutoverApp:
    return CutoverApp(Path(playbook), journal_path=Path("journal.sqlite"), monitor=False, stamp=lambda: "01:02:03")


def feed(app: CutoverApp, *events) -> None:
    for event in events:
        app.on_engine_event(EngineEvent(event))


def run_started(app: CutoverApp, *, rollback: bool = False) -> list:
    return [RunStarted(run_id=RUN, procedure=app.board.procedure_name, cluster=app.cluster, dry_run=False,
                       rollback=rollback)]


def gates_passed(app: CutoverApp, phase: str | None = None) -> list:
    out = []
    for gate in app.board.gates:
        if phase is None and gate.kind == "manual":
            out.append(GateDecided(phase=gate.phase, gate=gate.name, kind="manual", ok=True, by="operator",
                                   reason="approved by operator"))
        if (phase is None or gate.phase == phase) and gate.kind == "auto":
            details = PREFLIGHT if gate.name.endswith("preflight") else {}
            out.append(GateDecided(phase=gate.phase, gate=gate.name, kind="auto", ok=True, by="auto",
                                   reason=f"all {len(details)} checks run, 1 failed and 1 warned (neither blocks)"
                                   if details else "passed", details=details))
    return out


def steps(app: CutoverApp, upto: int | None = None, status: str = "done", action: str = "run") -> list:
    rows = app.board.steps[:upto]
    if action == "undo":
        rows = list(reversed(rows))
    out = []
    for row in rows:
        out.append(StepStarted(index=row.index, phase=row.phase, name=row.name, action=action))
        out.append(StepFinished(index=row.index, phase=row.phase, name=row.name, status=status, action=action,
                                duration_ms=40.0 + 7 * row.index,
                                sentence=f"{'undid' if action == 'undo' else 'did'}: {row.name}"))
    return out


def open_gate(app: CutoverApp, phase: str, gate: str, prompt: str) -> None:
    app.push_screen(GateModal(GateWaiting(phase=phase, gate=gate, kind="manual", prompt=prompt),
                              app.board.automatic_verdicts(phase)))


def failed_then_undone(app: CutoverApp, failing: int, error: str) -> list:
    row = app.board.steps[failing]
    return (steps(app, failing)
            + [StepStarted(index=row.index, phase=row.phase, name=row.name),
               StepFinished(index=row.index, phase=row.phase, name=row.name, status="failed", duration_ms=3000.0,
                            error=error)]
            + steps(app, failing, status="undone", action="undo"))


# -- promote -------------------------------------------------------------------------

def promote_state(state: str) -> Callable:
    async def run_before(pilot) -> None:
        app = pilot.app
        if state == "gate":
            feed(app, *run_started(app), *gates_passed(app, "preflight"))
            open_gate(app, "cutover", "go-ahead", "Preflight passed. Fence db-orders-1 and promote db-orders-4 now?")
        elif state == "done":
            feed(app, *run_started(app), *gates_passed(app), *steps(app),
                 Metric(name="fenced_window_ms", value=61.4, unit="ms"),
                 RunFinished(run_id=RUN, status="done", summary="promote finished: 10 done"))
        elif state == "rolled_back":
            feed(app, *run_started(app), *gates_passed(app),
                 *failed_then_undone(app, 1, "db-orders-4 did not apply the final position within 5 s"),
                 RunFinished(run_id=RUN, status="rolled_back", summary="wait for db-orders-4 failed; rollback: "
                                                                      "1 step undone"))
        await pilot.pause(0.2)
    return run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("state", ["plan", "gate", "done", "rolled_back"])
def test_promote_board(snap_compare, playbooks, state, size):
    assert snap_compare(session("promote-replica.yaml"), terminal_size=SIZES[size],
                        run_before=promote_state(state))


# -- schema swap -----------------------------------------------------------------------

def swap_state(state: str) -> Callable:
    async def run_before(pilot) -> None:
        app = pilot.app
        alter2 = [i for i, r in enumerate(app.board.steps) if r.phase in ("preflight", "alter db-orders-2",
                                                                          "return db-orders-2")]
        if state == "gate":
            before = [r for r in app.board.steps if app.board.phases.index(r.phase)
                      < app.board.phases.index("switchover")]
            feed(app, *run_started(app),
                 *[g for g in gates_passed(app) if g.kind == "auto" and app.board.phases.index(g.phase)
                   <= app.board.phases.index("switchover")],
                 *steps(app, len(before)))
            open_gate(app, "switchover", "go-ahead", "Every replica is altered. Fence db-orders-1 and promote "
                                                     "db-orders-2?")
        elif state == "side":
            feed(app, *run_started(app), *gates_passed(app, "preflight"), *steps(app, alter2[-1]),
                 Metric(name="hit_ratio_after", value=0.987, labels={"server": "db-orders-2"}),
                 StepStarted(index=alter2[-1], phase="return db-orders-2",
                             name=app.board.steps[alter2[-1]].name))
        elif state == "done":
            feed(app, *run_started(app), *gates_passed(app), *steps(app),
                 *[Metric(name="hit_ratio_after", value=0.99, labels={"server": s})
                   for s in ("db-orders-1", "db-orders-2", "db-orders-3", "db-orders-4")],
                 RunFinished(run_id=RUN, status="done", summary="schema-swap finished: 37 done"))
        elif state == "rolled_back":
            feed(app, *run_started(app), *gates_passed(app),
                 *failed_then_undone(app, 9, "Duplicate column name 'note'"),
                 RunFinished(run_id=RUN, status="rolled_back", summary="apply DDL on db-orders-3 failed; rollback: "
                                                                      "9 steps undone"))
        await pilot.pause(0.2)
    return run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("state", ["plan", "gate", "side", "done", "rolled_back"])
def test_schema_swap_board(snap_compare, playbooks, state, size):
    assert snap_compare(session("schema-ab-swap.yaml"), terminal_size=SIZES[size], run_before=swap_state(state))


# -- consolidation -----------------------------------------------------------------------

def fleet(server: str, stage: str, status: str, text: str = "") -> Metric:
    return Metric(name="fleet_server_s", value=2.0, unit="s",
                  labels={"server": server, "stage": stage, "status": status, "text": text})


def copy(server: str, done_mb: int, total_mb: int, rate: float, eta: int) -> Metric:
    return Metric(name="seed_rate_mb_s", value=rate, unit="MB/s",
                  labels={"source": server, "instance": "db-multi-1-1", "bytes": str(done_mb * 1_000_000),
                          "total_bytes": str(total_mb * 1_000_000), "eta_s": str(eta), "source_p999_ms": "7.4",
                          "throttle": "full speed", "paused_s": "0"})


def moved(server: str) -> list:
    return [fleet(server, "seed", "started"), fleet(server, "seed", "done", f"copied {server} physically"),
            fleet(server, "cutover", "started"),
            Metric(name="fenced_window_ms", value=212.0, unit="ms", labels={"source": server}),
            fleet(server, "cutover", "done", f"routes of {server}'s shards switched")]


def consolidate_state(state: str) -> Callable:
    async def run_before(pilot) -> None:
        app = pilot.app
        if state == "gate":
            feed(app, *run_started(app), *gates_passed(app, "preflight"), *steps(app, 4),
                 *[fleet(s, "seed", "done", "seeded") for s in ("db-legacy-1", "db-legacy-2")],
                 GateDecided(phase="cutover", gate="caught-up", kind="auto", ok=True, by="auto",
                             reason="2 connection(s) running, each within 5s",
                             details={"db-multi-1-1<-db-legacy-1": {"seconds_behind": 0, "io": "Yes", "sql": "Yes"},
                                      "db-multi-1-2<-db-legacy-2": {"seconds_behind": 1, "io": "Yes", "sql": "Yes"}}))
            open_gate(app, "cutover", "go-ahead", "Fence db-legacy-1 and db-legacy-2 and route their shards?")
        elif state == "seeding":
            seed = app.board.steps[3]
            feed(app, *run_started(app), *gates_passed(app, "preflight"), *steps(app, 3),
                 StepStarted(index=seed.index, phase=seed.phase, name=seed.name),
                 fleet("db-legacy-1", "seed", "started"), copy("db-legacy-1", 172_000, 430_000, 38.6, 6700),
                 fleet("db-legacy-2", "seed", "started"), copy("db-legacy-2", 61_000, 412_000, 36.9, 9500))
        elif state in ("server_rolled_back", "done"):
            feed(app, *run_started(app), *gates_passed(app), *steps(app), *moved("db-legacy-1"),
                 *moved("db-legacy-2"), RunFinished(run_id=RUN, status="done", summary="consolidate finished: 6 done"))
            if state == "server_rolled_back":
                feed(app, fleet("db-legacy-2", "rollback", "done", "routes shard_3, shard_4 back to db-legacy-2; "
                                                                  "db-legacy-2 is writable again"))
        elif state == "rolled_back":
            feed(app, *run_started(app), *gates_passed(app), *moved("db-legacy-1"),
                 fleet("db-legacy-2", "cutover", "failed", "not fenced: db-multi-1-2 <- db-legacy-2 is 41s behind"),
                 *failed_then_undone(app, 4, "cutover: db-legacy-2 failed: not fenced"),
                 RunFinished(run_id=RUN, status="rolled_back", summary="cut over failed; rollback: 4 steps undone"))
        await pilot.pause(0.3)
    return run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("state", ["plan", "gate", "seeding", "server_rolled_back", "done", "rolled_back"])
def test_consolidation_board(snap_compare, playbooks, state, size):
    assert snap_compare(session("consolidate-shards.yaml"), terminal_size=SIZES[size],
                        run_before=consolidate_state(state))


# -- 80x24: what a newcomer saw cut, stale or lost ---------------------------------------------------
# The lag panel's limit whole, the plan's long lines wrapped under their own text, the warm-up panel
# naming the server it warms now, the log keeping five lines beside it (promote); the swap's stage
# and last step whole while the next side warms; all four old servers of a consolidation and its
# footer on one screen.

def lag_sample(writer: str, replicas: dict[str, float]) -> ClusterSampled:
    return ClusterSampled(ClusterSample(writer=writer, writer_note="", latency_ms=1.8, lag=[
        LagSample(name=n, address="10.20.6.4:3306", lag_ms=ms, heartbeat="fresh", limit_ms=1000.0, ok=ms <= 1000,
                  reason="" if ms <= 1000 else f"{ms:.0f} ms behind (limit 1000 ms)") for n, ms in replicas.items()]))


def sampled(app: CutoverApp, writer: str, replicas: dict[str, float], times: int = 12) -> None:
    for i in range(times):
        app.on_cluster_sampled(lag_sample(writer, {n: ms * (1 + (i % 4) / 3) for n, ms in replicas.items()}))


def warming(server: str, progress: float, message: str) -> Metric:
    return Metric(name="warm_progress", value=progress, labels={"server": server, "message": message})


def promote_warming(pilot_app: CutoverApp) -> list:
    app = pilot_app
    warm = next(i for i, r in enumerate(app.board.steps) if r.name.startswith("warm"))
    row = app.board.steps[warm]
    return [*run_started(app), *gates_passed(app, "preflight"), *steps(app, warm),
            StepStarted(index=row.index, phase=row.phase, name=row.name),
            warming("db-orders-4", 0.62, "scanned 2 of 3 tables (app.orders, app.customers)"),
            Metric(name="hit_ratio_before", value=0.412, labels={"server": "db-orders-4"}),
            Metric(name="resident_pages_before", value=1200, unit="pages", labels={"server": "db-orders-4"})]


@pytest.fixture
def warm_promote(playbooks):
    """The shipped promote playbook with a warm-up of its candidate before the cutover."""
    path = playbooks / "promote-replica.yaml"
    text = path.read_text()
    if "\n  warm:" not in text:  # the shipped template warms its candidate already
        path.write_text(text.replace("params:\n", "params:\n  warm: {method: scan, tables: [app.orders, "
                                                  "app.customers, app.order_lines], seconds: 120}\n", 1))
    return path


async def _promote_warming(pilot) -> None:
    app = pilot.app
    sampled(app, "db-orders-1", {"db-orders-2": 3.0, "db-orders-3": 4.0, "db-orders-4": 180.0})
    for i in range(12):
        app.query_one(LatencyPanel).add_probe("db-orders-1", 1.2 + (i % 3) * 0.4)
    feed(app, *promote_warming(app))
    await pilot.pause(0.3)


def test_promote_board_warming_80x24(snap_compare, warm_promote):
    app = session("promote-replica.yaml")
    assert any(r.name.startswith("warm") for r in app.board.steps), [r.name for r in app.board.steps]
    assert snap_compare(app, terminal_size=(80, 24), run_before=_promote_warming)


async def _swap_next_side_warming(pilot) -> None:
    app = pilot.app
    third = [i for i, r in enumerate(app.board.steps) if r.phase == "alter db-orders-3"]
    warm3 = next(i for i in third if app.board.steps[i].name.startswith("warm"))
    row = app.board.steps[warm3]
    feed(app, *run_started(app), *gates_passed(app, "preflight"), *steps(app, warm3),
         warming("db-orders-2", 1.0, "hit ratio 0.987 reached the target 0.9"),
         Metric(name="hit_ratio_after", value=0.987, labels={"server": "db-orders-2"}),
         StepStarted(index=row.index, phase=row.phase, name=row.name),
         warming("db-orders-3", 0.35, "scanned 1 of 1 tables (app.orders) 35%"))
    await pilot.pause(0.3)


def test_schema_swap_board_next_side_warming_80x24(snap_compare, playbooks):
    assert snap_compare(session("schema-ab-swap.yaml"), terminal_size=(80, 24), run_before=_swap_next_side_warming)


@pytest.fixture
def four_servers(playbooks):
    """The shipped consolidation with two more old servers onto a second host: four on the board."""
    plan_file = playbooks / "consolidate-plan.example.json"
    plan = json.loads(plan_file.read_text())
    more = json.loads(json.dumps(plan).replace("db-legacy-1", "db-legacy-3").replace("db-legacy-2", "db-legacy-4")
                      .replace("db-multi-1", "db-multi-2").replace("10.20.6.31", "10.20.6.32")
                      .replace("shard_1", "shard_5").replace("shard_2", "shard_6").replace("shard_3", "shard_7")
                      .replace("shard_4", "shard_8").replace("db_legacy_1", "db_legacy_3")
                      .replace("db_legacy_2", "db_legacy_4"))
    for key in ("shards", "instances", "hosts"):
        plan[key] += more[key]
    plan_file.write_text(json.dumps(plan, indent=2))
    return plan_file


async def _four_seeding(pilot) -> None:
    app = pilot.app
    seed = app.board.steps[3]
    feed(app, *run_started(app), *gates_passed(app, "preflight"), *steps(app, 3),
         StepStarted(index=seed.index, phase=seed.phase, name=seed.name),
         fleet("db-legacy-1", "seed", "started"), copy("db-legacy-1", 172_000, 430_000, 38.6, 6700),
         fleet("db-legacy-3", "seed", "started"), copy("db-legacy-3", 61_000, 412_000, 36.9, 9500))
    await pilot.pause(0.3)


def test_consolidation_board_four_servers_80x24(snap_compare, four_servers):
    app = session("consolidate-shards.yaml")
    assert app.fleet is not None and len(app.fleet.rows) == 4
    assert snap_compare(app, terminal_size=(80, 24), run_before=_four_seeding)
