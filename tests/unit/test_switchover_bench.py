"""The switchover benchmark's arithmetic on synthetic acks (no server): the gap counted at a
cutover, and the reference gaps while no cutover ran."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dbmigrate.rehearsal.verify.report import Ack

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import switchover as bench  # noqa: E402


def acks(*points: tuple[float, int]) -> list[Ack]:
    return [Ack(i, mono, 0.0, sid) for i, (mono, sid) in enumerate(points)]


def test_gap_in_counts_only_the_pause_that_overlaps_the_window():
    a = acks((0.000, 1), (0.001, 1), (0.050, 1), (0.051, 1), (0.100, 2), (0.101, 2))
    # 49 ms before the window, 49 ms across it: only the second counts.
    assert bench.gap_in(a, 0.060, 0.090) == pytest.approx(49.0)
    assert bench.gap_in(a, 0.0005, 0.0008) == pytest.approx(1.0)


def test_gaps_without_cutover_leave_out_the_cutovers_and_split_by_primary():
    a = acks((0.000, 1), (0.001, 1), (0.002, 1), (0.030, 1),  # a 28 ms stall with no cutover
             (0.5, 1), (0.6, 2),  # the cutover (0.45 .. 0.65): left out
             (1.0, 2), (1.001, 2), (1.002, 2))
    out = bench.gaps_without_cutover(a, [(0.45, 0.65)], {1: "db1", 2: "db2"}, margin_s=0.05)
    assert set(out) == {"db1", "db2"}
    assert out["db1"]["max"] == pytest.approx(28.0) and out["db1"]["over_10_ms"] == 1
    # db2: the pause from 0.6 to 1.0 overlaps the cutover's margin and is left out
    assert out["db2"]["gaps"] == 2 and out["db2"]["max"] == pytest.approx(1.0)


def test_gap_stats_empty_and_filled():
    assert bench.gap_stats([]) == {"p50": None, "p95": None, "max": None}
    assert bench.gap_stats([1.0, 2.0, 9.0]) == {"p50": 2.0, "p95": 9.0, "max": 9.0}


def test_the_windows_are_the_fence_attempts_not_the_pauses_between_them(monkeypatch):
    """A given-up attempt counts from its convergence to its giving up; the pause after it (writes
    flowing, nothing fenced) does not; the last attempt counts up to the flip and the open."""
    from dbmigrate.engine.events import Log, StepFinished, StepStarted

    clock = iter([0.0, 1.0, 1.008, 1.3, 1.31, 1.312, 1.315])
    monkeypatch.setattr(bench.time, "monotonic", lambda: next(clock))
    m = bench.Moments()
    converged = "db2 was 0 transaction(s) behind db1 (limit 10; at most 0 while waiting 1 ms)"
    for event in [StepStarted(index=0, phase="cutover", name="fence db1"),
                  Log(level="info", message=converged),
                  Log(level="warning", message="the fence on db1 waited 6 ms behind running statement(s) (...): "
                                               "gave up; trying again in 0.2s (attempt 2 of 5)"),
                  Log(level="info", message=converged),
                  StepFinished(index=0, phase="cutover", name="fence db1", status="done"),
                  StepFinished(index=2, phase="cutover", name="switch router", status="done"),
                  StepFinished(index=3, phase="cutover", name="open db2 for writes", status="done")]:
        m(event)
    assert m.windows() == [(1.0, 1.008), (1.3, 1.315)]
    assert m.from_first_convergence() == (1.0, 1.315)
    assert m.retries == ["the fence on db1 waited 6 ms behind running statement(s) (...): gave up"]
    # A 100 ms pause that starts inside the given-up attempt counts; a 191 ms stall of the
    # writer wholly inside the pause between attempts does not (only in the span from the first convergence).
    b = acks((1.0, 1), (1.1, 1), (1.299, 1), (1.3, 1), (1.316, 2))
    assert max(bench.gap_in(b, *w) for w in m.windows()) == pytest.approx(100.0)
    c = acks((1.0, 1), (1.009, 1), (1.2, 1), (1.29, 1), (1.299, 1), (1.316, 2))
    assert max(bench.gap_in(c, *w) for w in m.windows()) == pytest.approx(17.0)
    assert bench.gap_in(c, *m.from_first_convergence()) == pytest.approx(191.0)


def test_outside_window_gaps_are_the_runs_gaps_that_touch_no_window():
    a = acks((0.0, 1), (0.1, 1), (0.2, 1), (0.4, 1), (0.41, 2), (0.6, 2), (1.5, 2))
    # The run: 0.05 .. 0.7; its window 0.35 .. 0.45 (the 0.2 -> 0.4 and 0.4 -> 0.41 gaps touch it).
    out = bench.outside_window_gaps(a, (0.05, 0.7), [(0.35, 0.45)])
    assert [round(g[0]) for g in out] == [100, 100, 900]  # 0.6 -> 1.5 starts inside the run, so it counts
    # The reference: gaps wholly inside the spans of the same load with no tool (0.1 .. 0.45).
    assert [round(g) for g in bench.no_tool_gaps(a, [(0.1, 0.45)])] == [100, 200, 10]
    assert bench.no_tool_gaps(a, []) == []
    rounds = [{"outside_window_gaps_ms": [1.0, 2.0, 30.0], "outside_window_gaps_ms_before_fence": [1.0, 30.0],
               "outside_window_gaps_ms_after_window": [2.0]}]
    summary = bench.outside_window_summary(rounds, [1.0, 2.0, 10.0])
    assert summary["max"] == 30.0 and summary["no_tool_max"] == 10.0 and summary["max_ratio"] == 3.0
    assert summary["before_fence"]["max"] == 30.0 and summary["after_window"]["max"] == 2.0


def test_the_tool_is_given_cores_of_its_own_and_everything_else_the_others():
    import os
    import subprocess

    cores = sorted(os.sched_getaffinity(0))
    with pytest.raises(SystemExit, match="not all of them"):
        bench.pin_apart(",".join(map(str, cores)))  # refused before any change
    assert sorted(os.sched_getaffinity(0)) == cores
    if len(cores) < 2:
        pytest.skip("one core: nothing to set apart")
    # In a child: the pinning is for the bench's whole life.
    code = (f"import os, sys; sys.path.insert(0, {str(Path(bench.__file__).parent)!r}); import switchover as b; "
            f"rest = b.pin_apart('{cores[-1]}'); "
            "print(rest, b.TOOL_CPUS, ','.join(map(str, sorted(os.sched_getaffinity(0)))), sep='|')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    others = ",".join(map(str, cores[:-1]))
    assert out == f"{others}|{cores[-1]}|{others}"


def test_alternate_with_runs_the_other_checkouts_tool_and_labels_it_by_commit(tmp_path, monkeypatch):
    """--alternate-with: the other checkout's package first on the tool's path, its rounds
    summed apart from this checkout's, each labelled with its commit."""
    monkeypatch.setenv("DBMIGRATE_HOME", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(bench, "commit_of", lambda tree: "abc1234" if tree == tmp_path else "def5678")
    here, other = bench.tools_for(None, tmp_path)
    assert (here.label, here.tree, here.commit) == ("dbmigrate", None, "def5678")
    assert (other.label, other.via, other.commit) == ("dbmigrate@abc1234", "dbmigrate", "abc1234")
    assert bench.tool_env(other.tree)["PYTHONPATH"] == f"{tmp_path.resolve()}:/elsewhere"
    assert bench.tool_env(None)["PYTHONPATH"] == "/elsewhere"
    # With and without the hold: this checkout's tool twice; the other checkout's never gets it.
    labels = [(t.label, t.params, t.tree is None) for t in bench.tools_for(None, tmp_path, "both")]
    assert labels == [("dbmigrate", {}, True), ("dbmigrate+hold", {"hold_new_connections": True}, True),
                      ("dbmigrate@abc1234", {}, False)]
    assert bench.tools_for(None, None, "on")[0].params == {"hold_new_connections": True}
    base = {"via": "dbmigrate", "status": "done", "converge_wait_ms": None, "lag_at_fence_trx": None,
            "gap_ms_from_first_convergence": None, "refused": None, "load_tps": None, "writer_errors": {},
            "fence_given_up": [], "target": "db2"}
    rounds = [base | {"tool": "dbmigrate", "gap_ms": 10.0}, base | {"tool": "dbmigrate@abc1234", "gap_ms": 30.0},
              base | {"tool": "dbmigrate", "gap_ms": 12.0}]
    mine, theirs = bench.summary(rounds, here), bench.summary(rounds, other)
    assert (mine["rounds"], mine["gap_ms"]["max"], mine["commit"]) == (2, 12.0, "def5678")
    assert (theirs["rounds"], theirs["gap_ms"]["p50"], theirs["tool"]) == (1, 30.0, "dbmigrate@abc1234")


def test_the_other_checkouts_tool_may_drive_another_router(tmp_path, monkeypatch):
    """--router relay --alternate-router haproxy: this checkout's tool drives the relay, the
    other checkout's (which predates it) HAProxy; each router gets its own writer's table, and
    after a round the router it did not drive is pointed at the new writer, the other left alone."""
    monkeypatch.setattr(bench, "commit_of", lambda tree: "abc1234" if tree == tmp_path else "def5678")
    here, other = bench.tools_for(None, tmp_path, "on", "relay", "haproxy")
    assert (here.router, other.router) == ("relay", "haproxy")
    assert bench.routers_of([here, other]) == ["relay", "haproxy"]
    assert [t.router for t in bench.tools_for(None, tmp_path, "off", "relay")] == ["relay", "relay"]
    assert bench.verify_table("relay", ["relay"]) == {}
    assert bench.verify_table("haproxy", ["relay", "haproxy"]) == {"table": "app.dbmigrate_verify_haproxy"}
    switched: list[tuple[str, str]] = []

    class Router:
        def __init__(self, path):
            self.path = path

        def switch_writer(self, new):
            switched.append((self.path, new))

    monkeypatch.setattr(bench, "load_inventory", lambda path: path)
    monkeypatch.setattr(bench, "router_for", lambda inv, name: Router(inv))
    inventories = {"relay": Path("relay.yaml"), "haproxy": Path("haproxy.yaml")}
    bench.point_other_routers(inventories, "c1", "relay", "127.0.0.1:3307")
    assert switched == [(Path("haproxy.yaml"), "127.0.0.1:3307")]
    assert bench.summary([], other)["router"] == "haproxy"


def test_commit_of_names_a_checkout_with_changes(tmp_path):
    import subprocess

    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "f").write_text("1")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = bench.commit_of(tmp_path)
    assert len(head) == 7 and not head.endswith("+changes")
    (tmp_path / "f").write_text("2")
    assert bench.commit_of(tmp_path) == head + "+changes"
