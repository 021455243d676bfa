"""The rehearsal's fenced window is the gap across the cutover's own window; any other gap of
the application's writes is reported apart, with the step it fell in."""

from __future__ import annotations

import datetime as dt

from dbmigrate.rehearsal.verify.report import Ack
from dbmigrate.rehearsal.write_gaps import cutover_window, write_gaps

T0 = 1_800_000_000.0


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(T0 + t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def step(phase: str, name: str, start: float, end: float, action: str = "run") -> dict:
    return {"phase": phase, "name": name, "action": action, "started_at": iso(start), "finished_at": iso(end)}


def acks(times: list[float]) -> list[Ack]:
    return [Ack(i, T0 + t, T0 + t) for i, t in enumerate(times)]


STEPS = [step("prepare", "collect baseline digest", 1.0, 7.0),
         step("cutover", "fence db-1", 8.6, 8.62), step("cutover", "wait for db-new to catch up", 8.62, 8.7),
         step("cutover", "open db-new for writes", 8.7, 8.72), step("cutover", "switch router", 8.72, 8.75),
         step("cutover", "repoint replicas", 8.75, 9.5)]


def test_a_stall_during_the_baseline_is_reported_apart_from_the_fenced_window():
    # writes every 10 ms, except a 3.6 s..3.77 s stall (baseline) and 8.59 s..8.78 s (the cutover)
    times = [t / 100 for t in range(0, 360)] + [3.77] + [t / 100 for t in range(378, 859)] + [8.78, 8.79, 8.8]
    out = write_gaps(acks(times), STEPS)
    assert out["fenced_ms"] == 200.0
    assert out["fenced_window"]["gap"]["start"] == iso(8.58)
    assert out["other_write_gaps"] == [{"ms": 180.0, "start": iso(3.59), "end": iso(3.77),
                                        "steps": ["collect baseline digest"]}]
    assert out["longest_write_gap_ms"] == 200.0


def test_the_longest_gap_elsewhere_is_not_the_fenced_window():
    times = [0.0, 0.01, 3.0, 3.01, 8.55, 8.8, 8.81, 12.0, 12.01]
    out = write_gaps(acks(times), STEPS)
    assert out["fenced_ms"] == 250.0  # 8.55 -> 8.8 lies across the cutover
    assert [g["ms"] for g in out["other_write_gaps"]] == [5540.0, 3190.0, 2990.0]
    assert out["other_write_gaps"][0]["steps"] == ["collect baseline digest"]  # 3.01 -> 8.55
    assert out["other_write_gaps"][1]["steps"] == ["repoint replicas"]  # 8.81 -> 12.0, after the switch
    assert out["longest_write_gap_ms"] == 5540.0


def test_a_gap_outside_every_step_says_so_and_small_pauses_are_not_named():
    times = [0.0, 0.05, 0.5, 8.59, 8.7]
    out = write_gaps(acks(times), STEPS)
    by_ms = {g["ms"]: g["steps"] for g in out["other_write_gaps"]}
    assert by_ms == {450.0: ["between steps"], 8090.0: ["collect baseline digest"]}  # 0.0 -> 0.05: too short


def test_without_a_fence_there_is_no_fenced_window():
    out = write_gaps(acks([0.0, 0.5, 1.0]), [step("prepare", "collect baseline digest", 0.1, 0.9)])
    assert out["fenced_ms"] is None and out["fenced_window"] is None
    assert [g["ms"] for g in out["other_write_gaps"]] == [500.0, 500.0]


def test_the_cutover_window_ends_at_the_router_switch():
    assert cutover_window(STEPS) == (T0 + 8.6, T0 + 8.75)
    no_router = [s for s in STEPS if s["name"] != "switch router"]
    assert cutover_window(no_router) == (T0 + 8.6, T0 + 9.5)  # the fence's phase's last step


def test_a_swap_has_two_cutovers_and_the_alter_between_them_is_not_the_fenced_window():
    from dbmigrate.rehearsal.write_gaps import cutover_windows

    swap = [step("switchover", "fence db-1", 2.0, 2.01), step("switchover", "switch router", 2.01, 2.05),
            step("alter db-1", "apply DDL on db-1 (binlog off)", 3.0, 6.0),
            step("finish", "fence db-2", 7.0, 7.01), step("finish", "switch router", 7.01, 7.04)]
    assert cutover_windows(swap) == [(T0 + 2.0, T0 + 2.05), (T0 + 7.0, T0 + 7.04)]
    # writes every 10 ms; 100 and 90 ms gaps at the cutovers, a 410 ms stall during the DDL
    times = ([t / 100 for t in range(0, 199)] + [t / 100 for t in range(208, 400)] + [t / 100 for t in range(440, 699)]
             + [t / 100 for t in range(707, 800)])
    out = write_gaps(acks(times), swap)
    assert out["fenced_ms"] == 100.0  # the longer of the two cutovers (1.98 s -> 2.08 s)
    assert out["other_write_gaps"][0]["ms"] == 410.0
    assert out["other_write_gaps"][0]["steps"] == ["apply DDL on db-1 (binlog off)"]
