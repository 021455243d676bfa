"""The fleet benchmark's arithmetic on synthetic figures (no server): the gap counted at a
server's cutover, the windows each server spent in a fleet stage, the process tree counted as
the tool's, and the verdicts across N."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import fleet_figures as fig  # noqa: E402


def test_gap_in_counts_only_the_pause_that_overlaps_the_cutover():
    acks = [0.000, 0.010, 0.200, 0.210, 0.500, 0.510]
    # 190 ms before the cutover, 290 ms across it: only the second counts.
    assert fig.gap_in(acks, 0.300, 0.400) == pytest.approx(290.0)
    # A window between two close acks still sees the pause it lies in.
    assert fig.gap_in(acks, 0.203, 0.205) == pytest.approx(10.0)


def test_gap_in_is_none_when_the_writer_never_came_back():
    assert fig.gap_in([0.0, 0.01], 0.5, 0.6) is None
    assert fig.gap_in([], 0.5, 0.6) is None


def metric(server: str, stage: str, status: str, at: str) -> dict:
    return {"name": "fleet_server_s", "at": at, "labels": {"server": server, "stage": stage, "status": status}}


def test_stage_windows_pair_each_start_with_its_end_per_stage():
    ms = [metric("a", "seed", "started", "2026-01-01T00:00:00+00:00"),
          metric("b", "seed", "started", "2026-01-01T00:00:01+00:00"),
          metric("a", "seed", "done", "2026-01-01T00:00:05+00:00"),
          metric("b", "seed", "failed", "2026-01-01T00:00:03+00:00"),
          metric("a", "cutover", "started", "2026-01-01T00:00:10+00:00"),
          {"name": "fenced_window_ms", "at": "2026-01-01T00:00:11+00:00", "labels": {"source": "a"}}]
    seeds = fig.stage_windows(ms, "seed")
    assert seeds["a"][1] - seeds["a"][0] == pytest.approx(5.0)
    assert seeds["b"][1] - seeds["b"][0] == pytest.approx(2.0)
    assert fig.stage_windows(ms, "cutover") == {}  # begun, never ended: no window
    assert fig.most_at_once(seeds.values()) == 2


def test_most_at_once_counts_touching_windows_apart():
    assert fig.most_at_once([(0, 1), (1, 2), (2, 3)]) == 1
    assert fig.most_at_once([(0, 3), (1, 2), (1.5, 4)]) == 3


def test_within_keeps_samples_inside_any_window():
    samples = [(0.5, 1.0), (1.5, 2.0), (3.5, 4.0)]
    assert fig.within(samples, [(0, 1), (3, 4)]) == [1.0, 4.0]


def test_descendants_walks_the_whole_tree_and_nothing_else():
    from dbmigrate.rehearsal.processes import below

    parents = {10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20}
    assert below(parents, [10]) == [11, 13, 12]  # nearer ones first
    assert below(parents, [12]) == []
    assert below(parents, [11, 20]) == [12, 21]


def row(n: int, wall_per_mb: float, gap50: float, gapmax: float, p999: float) -> dict:
    return {"n": n, "wall_s_per_mb": wall_per_mb, "gap_ms": {"beyond_pace_p50": gap50, "beyond_pace_max": gapmax},
            "source_p999_ms": {"seeding": p999}}


def test_scaling_verdicts_compare_the_largest_fleet_with_the_smallest():
    v = fig.scaling_verdicts([row(16, 0.12, 50, 130, 30), row(4, 0.1, 50, 100, 40), row(8, 9.0, 900, 900, 900)])
    assert v["between"] == [4, 16]
    assert v["ratios"] == {"wall_per_mb": 1.2, "gap_p50": 1.0, "gap_max": 1.3, "source_p999": 0.75}
    assert v["met"] == {"wall_per_mb": True, "gap_p50": True, "gap_max": False, "source_p999": True}


def test_a_missing_figure_is_not_met():
    v = fig.scaling_verdicts([row(4, 0.1, 50, 100, None), row(16, 0.1, 50, 100, 30)])
    assert v["ratios"]["source_p999"] is None and v["met"]["source_p999"] is False


def test_beside_each_window_tells_fenced_neighbours_from_busy_ones():
    fenced = {"a": (10.0, 10.1), "b": (10.05, 10.2), "c": (20.0, 20.1)}
    cutovers = {"a": (9.0, 11.0), "b": (9.5, 11.0), "c": (19.0, 21.0), "d": (19.5, 20.5)}
    beside = fig.beside_each_window(fenced, cutovers)
    assert beside["a"] == {"fenced": 1, "outside_window": 0}
    assert beside["c"] == {"fenced": 0, "outside_window": 1}  # d was cutting over, not fenced (yet)
    split = fig.split_by({"a": 40.0, "b": 50.0, "c": 90.0}, beside, "outside_window")
    assert split == {"none_beside": 40.0, "some_beside": 90.0, "servers_none": 2, "servers_some": 1}


def test_fenced_windows_end_when_the_metric_was_journaled():
    w = fig.fenced_windows([{"name": "fenced_window_ms", "value": 250.0, "at": "2026-01-01T00:00:01+00:00",
                             "labels": {"source": "a"}}])
    assert w["a"][1] - w["a"][0] == pytest.approx(0.25)


def test_window_parts_read_the_cutover_sentence():
    text = ("copy verified before the fence (2 range(s), 3045 row(s) equal), 0 range(s) compared in it; fenced "
            "old-1 (read_only=ON) in 3.3 ms; final position ('mysql-bin.000001', 703418); caught up in 4 ms; "
            "routes shard_01->h1-1 after 22 ms fenced; then 0 app session(s) on old-1 ended")
    assert fig.window_parts(text) == {"fence_ms": 3.3, "caught_up_ms": 4.0, "window_ms": 22.0}
    assert fig.window_parts("not fenced: behind")["window_ms"] is None


def test_a_long_pause_is_placed_against_the_servers_own_window_and_the_fleet_beside_it():
    acks = [0.0, 0.04, 0.08, 0.30, 0.34, 0.38, 0.42, 0.80, 0.84]
    cut = (0.05, 0.40)
    fenced = (0.35, 0.37)  # 20 ms, inside the 40 ms pace: the long pause (0.08 -> 0.30) came before it
    span = fig.gap_around(acks, *cut)
    assert span == (0.08, 0.30)
    g = fig.where_gap(span, fenced, others_fenced=[(0.10, 0.12)], others_cutting=[(0.0, 0.5), (0.6, 0.9)])
    assert g == {"ms": 220.0, "where": "before the fence", "from_fence_ms": -270.0, "window_ms": 20.0,
                 "others_fenced": 1, "others_cutting_outside_window": 0}
    assert fig.where_gap((0.42, 0.80), fenced, [], [])["where"] == "after the open"
    assert fig.where_gap((0.34, 0.38), fenced, [], [])["where"] == "in the window"
    assert fig.gap_around([0.0], 0.1, 0.2) is None
