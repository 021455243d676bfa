"""Fault matrix pure logic: the fault-injection pause point, the writable monitor's intervals,
the scenario list and the verdict."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from dbmigrate import faultpoint
from dbmigrate.engine.events import Log, StepFinished, StepStarted
from dbmigrate.rehearsal.faultmatrix.harness import Result, paused_target
from dbmigrate.rehearsal.faultmatrix.scenarios import (FAST, INFLIGHT_FAULT, INFLIGHT_KILL_AFTER_S, RELAY_FAST,
                                                       RELAY_POINTS, all_scenarios, select)
from dbmigrate.rehearsal.writable_monitor import certain_spans, no_writer, two_writable


# -- pause points --------------------------------------------------------------------------

def test_pause_points_parse_and_reject_malformed():
    assert faultpoint.parse_point("before:Fence") == faultpoint.PausePoint("before", "fence")
    assert faultpoint.parse_point("in:switch router:set server") == \
        faultpoint.PausePoint("in", "switch router", "set server")
    assert str(faultpoint.parse_point("in:fence:read_only=ON")) == "in:fence:read_only=on"
    for bad in ("fence", "during:fence", "before:", "in:fence", "in::x"):
        with pytest.raises(ValueError):
            faultpoint.parse_point(bad)


def test_off_unless_asked_and_needs_a_marker(monkeypatch):
    monkeypatch.delenv(faultpoint.ENV_POINT, raising=False)
    assert faultpoint.from_environment() is None
    monkeypatch.setenv(faultpoint.ENV_POINT, "before:fence")
    monkeypatch.delenv(faultpoint.ENV_FILE, raising=False)
    with pytest.raises(ValueError):
        faultpoint.from_environment()


def _started(name, action="run"):
    return StepStarted(index=0, phase="cutover", name=name, action=action)


def _finished(name, status="done"):
    return StepFinished(index=0, phase="cutover", name=name, status=status)


@dataclass
class Recorder:
    """A pauser whose pause only records where it happened."""

    pauser: faultpoint.Pauser

    def __post_init__(self):
        self.where: list[str] = []
        self.targets: list[str | None] = []
        original = self.pauser.pause
        def pause(target=None):
            if not self.pauser.done:
                self.where.append(self.pauser.step or "between steps")
                self.targets.append(target)
            original(target)

        self.pauser.pause = pause


def _recorder(spec, tmp_path):
    return Recorder(faultpoint.Pauser(faultpoint.parse_point(spec), tmp_path / "paused", max_s=0.01))


def test_before_and_after_match_the_steps_run_forward_only(tmp_path):
    r = _recorder("before:fence", tmp_path)
    r.pauser.on_event(_started("fence db-1", action="undo"))
    r.pauser.on_event(Log(level="info", message="fence db-1"))
    assert r.where == []
    r.pauser.on_event(_started("fence db-1"))
    assert r.where == ["fence db-1"]
    a = _recorder("after:wait for", tmp_path)
    a.pauser.on_event(_started("wait for db-4 to catch up"))
    assert a.where == []
    a.pauser.on_event(_finished("wait for db-4 to catch up", status="skipped"))  # a skipped step is a boundary too
    assert a.where == ["between steps"]


def test_in_matches_a_statement_sent_during_its_step_once(tmp_path):
    r = _recorder("in:fence:read_only=on", tmp_path)
    r.pauser.on_sent("db-1", "SET GLOBAL read_only=ON")  # no step running
    r.pauser.on_event(_started("open db-4 for writes"))
    r.pauser.on_sent("db-4", "SET GLOBAL read_only=ON")  # another step
    r.pauser.on_event(_finished("open db-4 for writes"))
    r.pauser.on_event(_started("fence db-1"))
    r.pauser.on_sent("db-1", "SELECT @@GLOBAL.read_only")
    assert r.where == []
    r.pauser.on_sent("db-1", "SET STATEMENT lock_wait_timeout=2 FOR SET GLOBAL read_only=ON")
    r.pauser.on_sent("db-1", "SET STATEMENT lock_wait_timeout=2 FOR SET GLOBAL read_only=ON")
    assert r.where == ["fence db-1"]


def test_sending_pauses_before_a_statement_of_its_step_and_names_its_target(tmp_path):
    r = _recorder("sending:open:read_only=off", tmp_path)
    r.pauser.on_event(_started("fence db-1"))
    r.pauser.on_sending("db-1", "SET GLOBAL read_only=OFF")  # another step
    r.pauser.on_event(_finished("fence db-1"))
    r.pauser.on_event(_started("open db-4 for writes"))
    r.pauser.on_sent("db-4", "SET GLOBAL read_only=OFF")  # sent already: an `in:` point's business
    r.pauser.on_sending("db-1", "DROP EVENT IF EXISTS mysql.dbmigrate_fence_expiry")
    assert r.where == []
    r.pauser.on_sending("db-4", "SET GLOBAL read_only=OFF")
    r.pauser.on_sending("db-4", "SET GLOBAL read_only=OFF")
    assert r.where == ["open db-4 for writes"] and r.targets == ["db-4"]
    assert str(faultpoint.parse_point("sending:open:read_only=off")) == "sending:open:read_only=off"
    with pytest.raises(ValueError):
        faultpoint.parse_point("sending:open")


def test_sending_reaches_listeners_only_while_listening():
    got = []
    fn = lambda target, text: got.append((target, text))  # noqa: E731
    faultpoint.add_sending_listener(fn)
    faultpoint.sending("router haproxy", "set server writer/db-4 state ready")
    faultpoint.remove_sending_listener(fn)
    faultpoint.sending("db-1", "SET GLOBAL read_only=ON")
    assert got == [("router haproxy", "set server writer/db-4 state ready")]


def test_the_pause_file_names_the_statements_target_for_the_harness(tmp_path):
    marker = tmp_path / "paused"
    p = faultpoint.Pauser(faultpoint.parse_point("sending:fence:read_only=on"), marker, max_s=5)
    seen = []

    def harness():
        while not marker.exists():
            time.sleep(0.001)
        seen.append(paused_target(marker))
        marker.unlink()

    t = threading.Thread(target=harness)
    t.start()
    p.on_event(_started("fence db-1"))
    p.on_sending("db-1", "SET STATEMENT lock_wait_timeout=2 FOR SET GLOBAL read_only=ON")
    t.join(5)
    assert seen == ["db-1"]


def test_every_in_flight_row_pauses_before_a_statement_and_has_every_operator_command():
    rows = [s for s in all_scenarios() if s.fault == INFLIGHT_FAULT]
    assert {s.procedure for s in rows} == {"promote", "schema-swap", "consolidate"}
    for s in rows:
        assert faultpoint.parse_point(s.pause).when == "sending", s.id
        assert s.hold_s and s.hold_s > INFLIGHT_KILL_AFTER_S and s.after_exit_s >= 30, s.id
    by_step = {}
    for s in rows:
        by_step.setdefault((s.procedure, s.where), set()).add(s.recovery)
    assert all(cmds == {"rollback", "resume", "rerun"} for cmds in by_step.values())
    assert {w for p, w in by_step if p == "promote"} == {"fence", "open", "router-flip", "reset", "repoint",
                                                         "reverse"}


def test_pause_writes_the_marker_and_lasts_until_it_is_removed(tmp_path):
    marker = tmp_path / "paused"
    p = faultpoint.Pauser(faultpoint.parse_point("before:fence"), marker, max_s=10)
    seen = []

    def harness():
        while not marker.exists():
            time.sleep(0.001)
        seen.append(marker.read_text())
        marker.unlink()

    t = threading.Thread(target=harness)
    t.start()
    t0 = time.monotonic()
    p.on_event(_started("fence db-1"))
    t.join(5)
    assert seen and seen[0].split()[1] == "before:fence" and int(seen[0].split()[0]) > 0
    assert time.monotonic() - t0 < 5 and not marker.exists()


def test_pause_is_bounded_when_nobody_releases_it(tmp_path):
    p = faultpoint.Pauser(faultpoint.parse_point("before:fence"), tmp_path / "paused", max_s=0.05)
    t0 = time.monotonic()
    p.on_event(_started("fence db-1"))
    assert 0.05 <= time.monotonic() - t0 < 2 and not (tmp_path / "paused").exists()


def test_router_commands_reach_listeners_only_while_listening():
    got = []
    fn = lambda target, text: got.append((target, text))  # noqa: E731
    faultpoint.add_router_listener(fn)
    faultpoint.router_command_sent("set server writer/db-4 state ready")
    faultpoint.remove_router_listener(fn)
    faultpoint.router_command_sent("set server writer/db-1 state ready")
    assert got == [("router", "set server writer/db-4 state ready")]


# -- the writable monitor's intervals --------------------------------------------------------

def test_spans_hold_only_between_agreeing_samples():
    samples = [(0.0, True), (1.0, True), (2.0, False), (3.0, False), (4.0, False), (5.0, True)]
    assert certain_spans(samples, True) == [(0.0, 1.0)]
    assert certain_spans(samples, False) == [(2.0, 4.0)]


def test_a_clean_switchover_has_neither_two_writers_nor_a_long_gap():
    timelines = {
        "old": [(0.000, True), (0.005, True), (0.010, False), (0.015, False), (0.020, False)],
        "new": [(0.001, False), (0.006, False), (0.011, False), (0.016, True), (0.021, True)],
        "r": [(0.002, False), (0.022, False)],
    }
    assert two_writable(timelines) == []
    gaps = no_writer(timelines)
    assert len(gaps) == 1 and gaps[0].start == 0.010 and gaps[0].end == 0.011  # surely nobody: 1 ms
    assert round(gaps[0].ms, 3) == 1.0


def test_two_writable_servers_are_found_and_named():
    timelines = {
        "a": [(0.0, True), (0.010, True), (0.020, True)],
        "b": [(0.005, False), (0.012, True), (0.018, True), (0.030, False)],
        "c": [(0.0, False), (0.030, False)],
    }
    found = two_writable(timelines)
    assert len(found) == 1 and found[0].servers == ("a", "b")
    assert (found[0].start, found[0].end) == (0.012, 0.018)
    assert no_writer(timelines) == []


def test_a_silent_server_counts_as_not_writable():
    # "down" samples are (time, False): a fenced old primary and a dead candidate leave no writer.
    timelines = {"old": [(0.0, False), (2.0, False)], "cand": [(0.1, False), (0.5, False), (1.9, False)]}
    assert [round(i.ms) for i in no_writer(timelines)] == [1800]


# -- scenarios and verdicts -------------------------------------------------------------------

def test_scenario_ids_are_unique_and_cover_the_asked_faults():
    ids = [s.id for s in all_scenarios()]
    assert len(ids) == len(set(ids))
    assert FAST <= set(ids)
    for sig in ("kill9", "sigterm", "sigint"):
        for where in ("before-fence", "in-fence", "in-open", "in-flip", "in-repoint", "in-reverse", "after-verify"):
            for rec in ("resume", "rollback"):
                assert f"promote/{sig}/{where}/{rec}" in ids
    for fault in ("freeze-candidate", "kill-old-primary", "kill-haproxy", "lock-at-fence", "bad-setting"):
        assert any(f"/{fault}/" in i for i in ids), fault


def test_the_relay_rows_kill_it_at_each_point_of_a_held_promote():
    rows = [s for s in all_scenarios() if s.router == "relay"]
    ids = {s.id for s in rows}
    assert RELAY_FAST <= ids
    for where in ("after-hold", "in-fence", "in-move", "after-move", "after-open"):
        for when in ("now", "5s"):
            for rec in ("resume", "rollback"):
                assert f"promote/kill-relay/{where}@{when}/{rec}" in ids
    assert {"promote/freeze-relay/move@2.5s/rollback", "promote/freeze-relay/move@10s/rollback"} <= ids
    for where in RELAY_POINTS:  # and the tool itself killed at each of them, the relay left running
        for rec in ("resume", "rollback"):
            assert f"promote/kill9/{where}@relay/{rec}" in ids
    for s in rows:
        assert dict(s.settings)["hold_new_connections"] is True  # the relay holds, and moves at the open
        assert s.after_exit_s == 30 and s.pause is not None
        faultpoint.parse_point(s.pause)
    # Every other row keeps HAProxy.
    assert all(s.router == "haproxy" for s in all_scenarios() if "relay" not in s.fault + s.where)
    assert RELAY_POINTS["in-move"].startswith("sending:")  # the move is sent into the frozen relay


def test_select_by_glob_and_fast():
    picked = select(all_scenarios(), "promote/kill9/in-fence/*,*/huge-timeout/*")
    assert [s.id for s in picked] == ["promote/kill9/in-fence/resume", "promote/kill9/in-fence/rollback",
                                      "promote/bad-setting/huge-timeout/none"]
    assert {s.id for s in select(all_scenarios(), fast=True)} == FAST | RELAY_FAST
    assert select(all_scenarios(), "nothing/like/this") == []


def test_verdict_names_every_reason():
    ok = Result("x", False, lost={"a": 0}, acknowledged=10, bound_ms=1000, longest_no_writer_ms=10, writer_gap_ms=20,
                healthy=True)
    assert ok.verdict == "PASS" and ok.why == []
    bad = Result("y", False, lost={"a": 2, "b": 0}, acknowledged=10, two_writable=1, bound_ms=1000,
                 longest_no_writer_ms=1500, writer_gap_ms=1600, healthy=False, problems=["unhealthy: 2 writable"])
    assert bad.verdict == "FAIL"
    text = "; ".join(bad.why)
    for part in ("2 acknowledged write(s) lost", "two writable", "1500 ms (bound 1000 ms)", "1600 ms", "unhealthy"):
        assert part in text


def test_a_resume_that_ends_rolled_back_is_safe_not_passed():
    safe = Result("z", False, lost={"a": 0}, acknowledged=10, bound_ms=1000, healthy=True, action="resume",
                  action_status="rolled_back", run_status="running")
    assert safe.end == "rolled_back" and safe.verdict == "SAFE"
    done = Result("z", False, lost={"a": 0}, acknowledged=10, bound_ms=1000, healthy=True, action="rollback",
                  action_status="rolled_back", run_status="running")
    assert done.verdict == "PASS"
    by_itself = Result("z", False, acknowledged=10, bound_ms=1000, healthy=True, run_status="rolled_back")
    assert by_itself.end == "rolled_back" and by_itself.verdict == "PASS"


# -- faults of the network and of the tool's process ---------------------------------------

def test_network_rows_cover_every_role_statement_partition_and_length():
    from dbmigrate.rehearsal.faultmatrix.scenarios import (LENGTHS, NETWORK_FAULTS, ROLE_STATEMENTS, SETTINGS,
                                                           network_matrix, procedure_settings)

    rows = network_matrix(SETTINGS)
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids))
    for procedure, statements in ROLE_STATEMENTS.items():
        for key, st in statements.items():
            bound = st.bound_s(procedure_settings(procedure, SETTINGS))
            mine = [r for r in rows if r.procedure == procedure and r.statement == key]
            assert sorted((r.fault, r.hold_s) for r in mine if r.fault in NETWORK_FAULTS) == \
                sorted((f, round(k * bound, 2)) for f in NETWORK_FAULTS for k in LENGTHS)
            frozen = [r for r in mine if r.fault == "freeze-tool"]
            assert [(r.hold_s, r.pause) for r in frozen] == [(2 * bound, st.after)]
    assert {r.fault for r in rows if r.statement is None} == {"cut-repl-link", "ddl-at-fence", "big-trx-at-fence"}
    assert all(r.after_exit_s == 30 and r.recovery == "rollback" for r in rows)
    assert not any(r.fast for r in rows)  # the test suite runs the reproductions, not the whole grid


def test_role_statement_bounds_follow_each_procedures_settings():
    from dbmigrate.rehearsal.faultmatrix.scenarios import ROLE_STATEMENTS, SETTINGS, procedure_settings

    fence, opening = ROLE_STATEMENTS["promote"]["fence"], ROLE_STATEMENTS["promote"]["open"]
    assert fence.bound_s(SETTINGS) == SETTINGS["fence_timeout_s"] + 1
    assert opening.bound_s(SETTINGS) == SETTINGS["catchup_timeout_s"]
    swap = procedure_settings("schema-swap", SETTINGS)  # no fence_timeout_s of its own: the kit's default
    assert ROLE_STATEMENTS["schema-swap"]["switch-back-fence"].bound_s(swap) == 5.0 + 1
    # The open is told from the fence's expiry body, which carries read_only=OFF too.
    assert opening.text.startswith("*/") and ROLE_STATEMENTS["schema-swap"]["switch-back-open"].server == "old"


def test_issue_reproductions_are_the_measured_faults():
    from dbmigrate.rehearsal.faultmatrix.scenarios import all_scenarios, issue_reproductions

    rows = {r.id: r for r in issue_reproductions()}
    a = rows["promote/partition-candidate/open@4.6s/rollback"]
    assert (a.hold_s, dict(a.settings)["catchup_timeout_s"]) == (4.6, 5.0)
    assert rows["promote/partition-own-conn/open@4.6s/rollback"].hold_s == 4.6
    assert rows["promote/partition-old/fence@3.5s/rollback"].hold_s == 3.5
    frozen = rows["promote/freeze-tool/fence@40s/rollback"]
    assert (frozen.hold_s, frozen.pause) == (40.0, "in:fence:read_only=on")
    assert set(rows) <= {s.id for s in all_scenarios()}


def _held_result(**kw):
    from dbmigrate.rehearsal.faultmatrix.harness import Result
    from dbmigrate.rehearsal.faultmatrix.scenarios import issue_reproductions

    fault = kw.pop("fault")
    sc = next(s for s in issue_reproductions() if s.fault == fault)
    return sc, Result(sc.id, False, **kw)


def test_bounds_of_a_partition_and_of_a_frozen_tool():
    from dbmigrate.rehearsal.faultmatrix import harness
    from dbmigrate.rehearsal.faultmatrix.scenarios import SETTINGS

    sc, res = _held_result(fault="partition-old")
    fault = harness._Fault.__new__(harness._Fault)
    fault.sc, fault.repair_ms, fault.relay_outage = sc, 0.0, None
    base = SETTINGS["catchup_timeout_s"] * 1000 + harness.TOOL_OVERHEAD_MS
    # 3.5 s from a fence bounded at 3 s: its bound, then the partition's remaining 0.5 s.
    assert harness._bound_ms(res, fault) == base + 3500
    res.action = "rollback"
    assert harness._bound_ms(res, fault) == base + 3500 + harness.RECOVERY_ALLOWANCE_MS
    sc, res = _held_result(fault="freeze-tool")
    fault.sc = sc
    # Frozen 40 s: the fence expires on the server; the bound is the expiry's, not the freeze's.
    assert harness._bound_ms(res, fault) == base + harness.frozen_tool_bound_s(SETTINGS) * 1000 < base + 40_000


def test_bounds_of_the_relay_rows_count_the_time_it_was_out():
    from dbmigrate.rehearsal.faultmatrix import harness, relayfault
    from dbmigrate.rehearsal.faultmatrix.scenarios import SETTINGS, relay_matrix

    rows = {s.id: s for s in relay_matrix()}
    base = SETTINGS["catchup_timeout_s"] * 1000 + harness.TOOL_OVERHEAD_MS
    fault = harness._Fault.__new__(harness._Fault)
    fault.sc, fault.repair_ms = rows["promote/kill-relay/in-move@5s/resume"], 0.0
    fault.relay_outage = relayfault.RelayOutage(None, "x", frozen_at=100.0)
    fault.relay_outage.back_at = 106.5  # frozen 1.5 s, then killed, started again 5 s later
    res = harness.Result(fault.sc.id, False)
    assert harness._bound_ms(res, fault) == base + 6500
    res.action = "resume"
    assert harness._bound_ms(res, fault) == base + 6500 + harness.RECOVERY_ALLOWANCE_MS
    fault.sc, fault.relay_outage = rows["promote/freeze-relay/move@10s/rollback"], None
    assert harness._bound_ms(harness.Result(fault.sc.id, False), fault) == base + 10_000


def test_a_statement_belongs_to_the_step_of_the_thread_that_sends_it(tmp_path):
    """A fleet runs each old server's steps in a thread of its own: another lane's step ending
    does not end this one, and a sub-step that ends hands its thread back to its parent."""
    import threading

    r = _recorder("in:cut over a:read_only=on", tmp_path)
    r.pauser.on_event(_started("cut over 2 old server(s)"))  # the fleet step, on the run's thread
    seen = []

    def lane(name: str, other_done: threading.Event | None, mine_started: threading.Event) -> None:
        r.pauser.on_event(StepStarted(index=0, phase="cutover", name=f"cut over {name}: fence", parent="x"))
        mine_started.set()
        if other_done is not None:
            other_done.wait(5)
            r.pauser.on_sent(name, "SET GLOBAL read_only=ON")
            seen.append(r.pauser.step)

    a_started, b_done = threading.Event(), threading.Event()
    a = threading.Thread(target=lane, args=("a", b_done, a_started))
    a.start()
    a_started.wait(5)
    b = threading.Thread(target=lambda: (lane("b", None, threading.Event()),
                                         r.pauser.on_event(StepFinished(index=0, phase="cutover", status="done",
                                                                        name="cut over b: fence", parent="x"))))
    b.start()
    b.join()
    b_done.set()
    a.join()
    assert r.where == ["cut over a: fence"] and seen == ["cut over a: fence"]


def test_the_consolidation_boundaries_name_the_first_old_servers_steps():
    from dbmigrate.procedures.consolidate.cutover import server_steps
    from dbmigrate.rehearsal.faultmatrix.scenarios import CONSOLIDATE_BOUNDARIES

    names = [s.name for s in server_steps("cm-1")]
    for where, pause in CONSOLIDATE_BOUNDARIES.items():
        point = faultpoint.parse_point(pause.format(old="cm-1"))
        assert point.when == "after" and [n for n in names if n.lower().startswith(point.step)], where
    assert len(CONSOLIDATE_BOUNDARIES) == len(names)  # one after each step
    kills = [s for s in all_scenarios() if s.procedure == "consolidate" and s.fault == "kill9"]
    assert len(kills) == 2 * len(names) and all(s.after_exit_s == 30 for s in kills)


def test_the_relay_is_seen_stopped_and_its_log_read():
    import os
    import signal
    import subprocess

    from dbmigrate.rehearsal.faultmatrix import relayfault

    p = subprocess.Popen(["sleep", "30"])
    try:
        assert not relayfault.all_stopped(p.pid)
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not relayfault.all_stopped(p.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert relayfault.all_stopped(p.pid)
    finally:
        p.kill()
        p.wait()
    assert not relayfault.all_stopped(p.pid)  # gone
    held = "x hold: sessions wait | y move: backend is now 1.2.3.4:5 (generation 2) | z relay: listening on a"
    assert relayfault.moved_before_restart(held) is True
    assert relayfault.moved_before_restart("x hold | z relay: listening on a | w move: backend is now b") is False
    assert relayfault.moved_before_restart("x hold | w move: backend is now b") is None
