"""Physical seeding's pure parts: the backup's position, the throttle's decisions and pace,
the relayed stream, and the fleet's lanes and failure policies."""

from __future__ import annotations

import threading
import time

import pytest

from dbmigrate.db.flavor import MARIADB
from dbmigrate.hosts import LocalHost, stream
from dbmigrate.procedures.consolidate.fleet import lanes_of, run_lanes
from dbmigrate.procedures.consolidate.physical_seed import (
    backup_command,
    major_minor,
    parse_binlog_info,
)
from dbmigrate.procedures.consolidate.plan import ConsolidationPlan, Demand, PlannedInstance, ShardDemand
from dbmigrate.procedures.consolidate.context import ConsolidateError
from dbmigrate.procedures.consolidate.throttle import (
    MB,
    Limits,
    Meter,
    Valve,
    decide,
    eta_s,
    percentile,
    relay,
)


def test_binlog_info_gives_file_position_and_gtid_of_every_domain():
    p = parse_binlog_info("mysql-bin.000001\t2298\t0-1-11\n")
    assert (p.log_file, p.log_pos, p.gtid) == ("mysql-bin.000001", 2298, "0-1-11")
    multi = parse_binlog_info("mysql-bin.000007\t385\t0-1-11,1-2-40\n")
    assert multi.gtid == "0-1-11,1-2-40"
    assert parse_binlog_info("mysql-bin.000002\t4\n").gtid == ""  # a source that never wrote a GTID
    with pytest.raises(ConsolidateError, match="not 'file, position"):
        parse_binlog_info("garbage")


def test_backup_command_keeps_the_password_out_of_argv():
    argv = backup_command("/tmp/w/backup.cnf", "/tmp/w/target", "/var/lib/mysql")
    assert argv[:2] == ["mariadb-backup", "--defaults-file=/tmp/w/backup.cnf"]  # must come first
    assert "--stream=xbstream" in argv and not any("password" in a for a in argv)


def test_versions_compare_by_major_and_minor():
    assert major_minor("10.11.19-MariaDB-0+deb12u1") == "10.11" == major_minor("10.11.6-MariaDB")
    assert major_minor("10.6.18-MariaDB") != major_minor("10.11.6-MariaDB")


def test_gtid_connection_sql_starts_from_the_slave_position():
    sql = MARIADB.named_source_gtid_sql("old_a", "10.0.0.1", 3306, "repl", "pw")
    assert sql == ("CHANGE MASTER 'old_a' TO MASTER_HOST='10.0.0.1', MASTER_PORT=3306, MASTER_USER='repl', "
                   "MASTER_PASSWORD='pw', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1")


LIMITS = Limits(cap_bps=50 * MB, max_p999_ms=50, max_lag_s=10)


def test_throttle_pauses_past_a_limit_slows_near_it_and_runs_at_the_cap_otherwise():
    assert decide(LIMITS, 12.0, 0.0).rate_bps == 50 * MB
    near = decide(LIMITS, 45.0, 0.0)
    assert near.rate_bps == 25 * MB and "half pace" in near.reason
    over = decide(LIMITS, 80.0, 0.0)
    assert over.paused and "p99.9 80.0 ms > 50 ms" in over.reason
    lag = decide(LIMITS, 5.0, 30)
    assert lag.paused and "replica lag 30 s > 10 s" in lag.reason
    assert decide(LIMITS, None, None).rate_bps == 50 * MB  # no samples yet: no pause
    assert decide(Limits(None, 50, None), 10.0, None).rate_bps is None  # no cap: full speed
    assert decide(Limits(None, 50, None), 45.0, None).rate_bps == -1.0  # half of the recent rate (caller)
    assert decide(Limits(None, None, None), 10_000.0, 10_000).rate_bps is None  # limits off


def test_percentile_and_eta():
    assert percentile([], 99.9) is None
    samples = [1.0] * 999 + [100.0]
    assert percentile(samples, 99.9) == 1.0 and percentile(samples + [100.0], 99.9) == 100.0
    assert eta_s(25 * MB, 100 * MB, 25 * MB) == 3.0
    assert eta_s(10, None, 5) is None and eta_s(100, 100, 5) == 0.0


def test_valve_paces_to_its_rate_and_holds_while_paused():
    valve = Valve(4 * MB)
    t = time.monotonic()
    for _ in range(12):
        valve.take(MB // 2)  # 6 MB at 4 MB/s with at most 1 MB of burst: at least 1.2 s
    assert time.monotonic() - t >= 1.2
    valve.set(0)
    passed = threading.Event()
    threading.Thread(target=lambda: (valve.take(1), passed.set()), daemon=True).start()
    assert not passed.wait(0.5)  # paused: nothing passes
    valve.set(None)
    assert passed.wait(2)
    assert valve.paused_s > 0.3


def test_relayed_stream_carries_every_byte_through_the_valve():
    meter = Meter()
    out = stream(LocalHost(), ["head", "-c", "3000000", "/dev/zero"], LocalHost(), ["wc", "-c"],
                 timeout=30, relay=relay(Valve(None), meter))
    assert out.decode().strip() == "3000000" and meter.bytes == 3_000_000


def test_relayed_stream_reports_the_failing_side():
    from dbmigrate.hosts import HostError

    with pytest.raises(HostError):
        stream(LocalHost(), ["sh", "-c", "echo partial; echo boom >&2; exit 3"], LocalHost(), ["cat"],
               timeout=10, relay=relay(Valve(None), Meter()))


def _plan(instances: dict[str, list[str]]) -> ConsolidationPlan:
    shards = [ShardDemand(f"{src}_s", src, 1, 1, 0.0) for srcs in instances.values() for src in srcs]
    insts = [PlannedInstance(name, "h", "127.0.0.1", 1, "/d", [f"{s}_s" for s in srcs], srcs, Demand(), 0.0,
                             shard_sources={f"{s}_s": s for s in srcs}) for name, srcs in instances.items()]
    return ConsolidationPlan("instance-per-group", {}, shards, insts, [])


def test_lanes_keep_old_servers_that_feed_one_instance_together():
    plan = _plan({"i1": ["a"], "i2": ["b", "c"], "i3": ["c", "d"], "i4": ["e"]})
    assert lanes_of(plan) == [["a"], ["b", "c", "d"], ["e"]]


def test_fleet_runs_lanes_in_parallel_up_to_the_limit_and_a_failure_stops_nothing_else():
    running, peak, lock = set(), [0], threading.Lock()

    def work(s: str) -> str:
        with lock:
            running.add(s)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.15)
        with lock:
            running.discard(s)
        if s == "b":
            raise ConsolidateError("b broke")
        return f"{s} moved"

    records = []
    r = run_lanes([["a"], ["b"], ["c"], ["d"], ["e"]], work, concurrency=2, on_failure="continue",
                  already_done=lambda s: s == "e", record=lambda s, st, text, secs: records.append((s, st)))
    assert peak[0] == 2
    assert r.done == {"a": "a moved", "c": "c moved", "d": "d moved"} and r.failed == {"b": "b broke"}
    assert r.already == ["e"] and ("b", "failed") in records


def test_fleet_stop_starts_nothing_after_a_failure():
    r = run_lanes([["a", "b", "c"]], lambda s: (_ for _ in ()).throw(ConsolidateError("x")) if s == "a" else s,
                  concurrency=1, on_failure="stop")
    assert r.failed == {"a": "x"} and set(r.skipped) == {"b", "c"} and not r.done
    blocked = run_lanes([["a", "b"]], lambda s: s, concurrency=1, on_failure="continue",
                        blocked=lambda s: "its seed failed" if s == "a" else None)
    assert blocked.skipped == {"a": "its seed failed"} and blocked.done == {"b": "b"}


def _ctx(journal, plan, **params):
    from dbmigrate.engine.events import EventBus
    from dbmigrate.engine.step import RunContext
    from dbmigrate.procedures.consolidate.context import ConsolidateParams, PlanOnly

    journal.create_run("r1", procedure="consolidate", cluster="c")
    return RunContext(run_id="r1", procedure="consolidate", cluster="c", journal=journal, bus=EventBus(),
                      params=ConsolidateParams(plan="p.json", **params), resources=PlanOnly(plan))


def test_fleet_step_journals_each_server_and_fails_naming_the_one_left_behind():
    from dbmigrate.engine.journal import Journal
    from dbmigrate.procedures.consolidate.fleet import fleet_step
    from dbmigrate.procedures.consolidate.resources import ConsolidateState

    plan = _plan({"i1": ["a"], "i2": ["b"], "i3": ["c"]})
    moved: set[str] = set()

    def work(ctx, s):
        if s == "b":
            raise ConsolidateError("b's instance does not keep up")
        moved.add(s)
        return f"{s} moved"

    step = fleet_step("cut over 3", "cutover", plan, work, done=lambda c, s: s in moved, blocked=lambda c, s: None,
                      undo=lambda c: "", describe=lambda c: [])
    with Journal(":memory:") as j:
        ctx = _ctx(j, plan, fleet={"concurrency": 2})
        with pytest.raises(ConsolidateError, match="2 old server.s. done.*b failed: b's instance does not keep up"):
            step.run(ctx)
        servers = ConsolidateState.load(ctx.state).servers
        assert {s: r["status"] for s, r in servers.items()} == {"a": "done", "b": "failed", "c": "done"}
        assert moved == {"a", "c"} and not step.check(ctx)  # resume runs it again...
        moved.add("b")
        assert step.check(ctx)  # ...and once b is done too, the step is done
        # Seeding defers: the step passes with b journaled as failed, so a and c go on to their cutover.
        moved.discard("b")
        seed = fleet_step("seed 3", "seed", plan, work, done=lambda c, s: s in moved, blocked=lambda c, s: None,
                          undo=lambda c: "", describe=lambda c: [], defer_failures=True)
        assert "b FAILED" in seed.run(ctx)


def test_watcher_pauses_the_copy_while_the_probe_is_slow_and_lets_it_go_when_it_recovers():
    from dbmigrate.procedures.consolidate.throttle import Watcher

    slow = threading.Event()
    slow.set()
    valve = Valve()
    reports = []
    w = Watcher(valve, Meter(), probe=lambda: time.sleep(0.03 if slow.is_set() else 0), lag=lambda: None,
                cap=lambda: 10 * MB, limits=Limits(10 * MB, 20, None), total_bytes=100 * MB, probe_per_s=200,
                window_s=0.5, progress_every_s=0.3, report=lambda text, fig: reports.append((text, fig)))
    w.start()
    try:
        deadline = time.monotonic() + 10
        while valve.rate != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert valve.rate == 0 and w.pauses == 1 and "p99.9" in w.decision.reason
        slow.clear()
        while valve.rate != 10 * MB and time.monotonic() < deadline:
            time.sleep(0.05)
        assert valve.rate == 10 * MB, w.decision
    finally:
        w.stop()
    assert reports and "MB/s, ETA" in reports[-1][0] and reports[-1][1]["total_bytes"] == 100 * MB


def test_live_throttle_is_written_where_a_running_copy_reads_it(tmp_path):
    from dbmigrate.app.consolidate.control import set_throttle
    from dbmigrate.engine.journal import Journal
    from dbmigrate.exceptions import UsageError
    from dbmigrate.procedures.consolidate.resources import LIVE_THROTTLE_KEY

    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        j.create_run("r1", procedure="consolidate", cluster="c")
        j.create_run("r2", procedure="promote", cluster="c")
    assert set_throttle("r1", mb_s=20, journal_path=path) == {"run_id": "r1", "throttle_mb_s": 20, "paused": False}
    assert set_throttle("r1", pause=True, journal_path=path)["paused"] is True
    with Journal(path) as j:
        assert j.get_state("r1", LIVE_THROTTLE_KEY) == {"mb_s": 20, "paused": True}
    with pytest.raises(UsageError, match="promote run"):
        set_throttle("r2", mb_s=5, journal_path=path)
    with pytest.raises(UsageError, match="--mb-s must be 0 or more"):
        set_throttle("r1", mb_s=-1, journal_path=path)


def test_a_probe_stuck_on_a_stalled_source_pauses_the_copy_before_it_returns():
    from dbmigrate.procedures.consolidate.throttle import Watcher

    valve = Valve()
    w = Watcher(valve, Meter(), probe=lambda: time.sleep(2), lag=lambda: None, cap=lambda: None,
                limits=Limits(None, 50, None), total_bytes=None, probe_per_s=100, window_s=5, progress_every_s=60,
                report=lambda text, fig: None)
    t = time.monotonic()
    w.start()
    try:
        while valve.rate != 0 and time.monotonic() - t < 1.5:
            time.sleep(0.02)
        assert valve.rate == 0 and time.monotonic() - t < 1.5  # paused while the first probe still hangs
    finally:
        w.stop()


def test_fleet_step_whose_every_server_declined_refuses_and_one_that_also_moved_a_server_fails():
    from dbmigrate.engine.journal import Journal
    from dbmigrate.exceptions import Refused
    from dbmigrate.procedures.consolidate.fleet import fleet_step
    from dbmigrate.procedures.consolidate.context import ConsolidateRefused

    plan = _plan({"i1": ["a"], "i2": ["b"]})

    def declines(ctx, s):
        raise ConsolidateRefused(f"not fenced: {s} is 12 s behind")

    def b_declines(ctx, s):
        if s == "b":
            raise ConsolidateRefused("not fenced: b is 12 s behind")
        return f"{s} moved"

    with Journal(":memory:") as j:
        ctx = _ctx(j, plan, fleet={"concurrency": 2})
        step = fleet_step("cut over 2", "cutover", plan, declines, done=lambda c, s: False,
                          blocked=lambda c, s: None, undo=lambda c: "", describe=lambda c: [])
        with pytest.raises(Refused, match="a failed: not fenced: a is 12 s behind; b failed"):
            step.run(ctx)
        mixed = fleet_step("cut over 2", "cutover", plan, b_declines, done=lambda c, s: False,
                           blocked=lambda c, s: None, undo=lambda c: "", describe=lambda c: [])
        with pytest.raises(ConsolidateError) as e:
            mixed.run(ctx)
        assert not isinstance(e.value, Refused)  # a moved: something changed


def test_a_stop_asked_during_a_cutover_fleet_lets_the_running_server_finish_and_starts_no_other():
    import threading as _t

    from dbmigrate.engine.journal import Journal
    from dbmigrate.procedures.consolidate.fleet import fleet_step

    plan = _plan({"i1": ["a"], "i2": ["b"]})
    moved: list[str] = []
    cancel = _t.Event()

    def work(ctx, s):
        cancel.set()  # SIGTERM while this server's cutover runs
        moved.append(s)
        return f"{s} moved"

    step = fleet_step("cut over 2", "cutover", plan, work, done=lambda c, s: s in moved, blocked=lambda c, s: None,
                      undo=lambda c: "", describe=lambda c: [], undo_if_started=True, stop_between_servers=True)
    assert step.undo_if_started  # a cutover the tool was killed in is undone by rollback
    with Journal(":memory:") as j:
        ctx = _ctx(j, plan)
        ctx.cancel = cancel
        with pytest.raises(ConsolidateError, match="1 old server.s. done.*b not started: the operator asked"):
            step.run(ctx)
    assert moved == ["a"]
    # Without a stop asked, both go (and a seed fleet never stops between servers).
    r = run_lanes([["a"], ["b"]], lambda s: s, concurrency=1, on_failure="continue", stopped=lambda: None)
    assert sorted(r.done) == ["a", "b"]


def test_cutover_undo_puts_back_a_cutover_the_tool_stopped_in_before_the_done_ones(monkeypatch):
    from dbmigrate.engine.journal import Journal
    from dbmigrate.procedures.consolidate import procedure
    from dbmigrate.procedures.consolidate.resources import ConsolidateState, CutRecord
    from dbmigrate.procedures.consolidate.context import ConsolidateParams

    plan = _plan({"i1": ["a"], "i2": ["b"], "i3": ["c"]})
    undone: list[str] = []
    monkeypatch.setattr(procedure, "undo_cutover", lambda ctx, s: undone.append(s) or "back")
    step = procedure.cutover_fleet(plan, ConsolidateParams(plan="p.json"))
    assert step.undo_if_started
    with Journal(":memory:") as j:
        ctx = _ctx(j, plan)
        with ConsolidateState.edit(ctx.state) as st:
            st.cut = {"a": CutRecord(targets=["i1"], at=1.0), "b": CutRecord(targets=["i2"], at=2.0)}
            st.fencing = {"c": 3.0}  # killed inside c's fence: neither cut nor undone
        assert "c: back" in step.undo(ctx)
    assert undone == ["c", "b", "a"]


def test_consolidate_state_of_version_1_reads_as_no_cutover_begun():
    from dbmigrate.procedures.consolidate.resources import ConsolidateState

    class Store(dict):
        def set(self, k, v):
            self[k] = v

        def items(self):
            return dict(self)

    store = Store({"consolidate": {"version": 1, "written_by": "old", "data": {"instances": {"i1": "h:1"}}}})
    st = ConsolidateState.load(store)
    assert st.instances == {"i1": "h:1"} and st.fencing == {}
