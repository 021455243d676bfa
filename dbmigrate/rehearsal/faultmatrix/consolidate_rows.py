"""Consolidation's rows of the fault matrix: the first old server's cutover partitioned or
frozen at its fence (the old server's read_only=ON) or at the open of its new instance
(read_only=OFF), judged like the promote rows.

Per row: fresh instances planned on the reused old servers, one writer per shard following
the DSN file, `dbmigrate run` of the consolidate playbook as a child process. A partition is
armed when the run reaches the first cutover (paused there for the moment it takes) and
starts with the statement's first packet; a frozen tool is stopped right after the
statement (paused there) for 2x its bound. When the run did not end by itself (done,
rolled back, refused), the operator runs `dbmigrate rollback RUN` once. The verdict covers
30 s after the last exit: every acknowledged id on the server its shard's route names,
never both servers of a shard writable, the longest time a shard had no writable server
within the row's bound, healthy (each shard on one writable server taking its writes, the
other side read-only). A run that completed is rolled back afterwards (not counted), so
the next row starts from the old servers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable

from dbmigrate.faultpoint import ENV_FILE, ENV_MAX_S, ENV_POINT
from dbmigrate.rehearsal.faultmatrix import netfault
from dbmigrate.rehearsal.faultmatrix.consolidate_cluster import ConsolidationRun, ShardCluster
from dbmigrate.rehearsal.faultmatrix.harness import (RECOVERY_ALLOWANCE_MS, TOOL_OVERHEAD_MS, TOOL_TIMEOUT_S,
                                                     TERMINAL_OK, Held, Result, frozen_tool_bound_s, kill_in_flight,
                                                     output_tail, run_status, run_summary, status_of, wait_exit,
                                                     wait_pause)
from dbmigrate.rehearsal.faultmatrix.scenarios import (CONSOLIDATE_READ_TIMEOUT_S, CONSOLIDATE_SETTINGS, INFLIGHT_FAULT,
                                                       Scenario, consolidate_settings, statement_of)
from dbmigrate.rehearsal.sandbox.manager import Sandboxes

Say = Callable[[str], None]
ARM_AT = "before:cut over"  # the first old server's cutover step has started, nothing sent yet


def shard_cluster(boxes: Sandboxes, name: str, say: Say = lambda m: None) -> ShardCluster:
    """The old servers the consolidation rows share (their inventory's read_timeout bounds the open)."""
    return ShardCluster(boxes, name, say, read_timeout_s=CONSOLIDATE_READ_TIMEOUT_S)


def _env(run: ConsolidationRun, point: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_POINT, ENV_FILE, ENV_MAX_S)}
    env.update({"DBMIGRATE_JOURNAL": str(run.journal), "COLUMNS": "200"})
    if point:
        env.update({ENV_POINT: point, ENV_FILE: str(run.work / "paused"), ENV_MAX_S: "120"})
    return env


def _cli(run: ConsolidationRun, *args: str, name: str) -> tuple[int | None, float]:
    """A `dbmigrate` command as a child process: (exit code, seconds)."""
    t0 = time.monotonic()
    with open(run.work / f"{name}.out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", *args, "--yes", "--json"], env=_env(run, None),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return wait_exit(proc, TOOL_TIMEOUT_S), time.monotonic() - t0


class _ConsolidateFault:
    """Arms the row's partition at the first cutover, or freezes the tool right after its statement."""

    def __init__(self, run: ConsolidationRun, sc: Scenario):
        self.run, self.sc = run, sc
        self.st = statement_of(sc)
        self.held: Held | None = None
        self.problems: list[str] = []
        self.cut_off_target: str | None = None
        c = run.cluster
        self.old = c.first
        self.new = run.new_of[c.first]

    def port(self, role: str) -> int:
        addr = self.run.cluster.address(self.old) if role == "old" else self.run.instances[self.new]
        return int(addr.rpartition(":")[2])

    @property
    def pause(self) -> str:
        if self.sc.fault == INFLIGHT_FAULT:
            return self.sc.pause or ""
        if self.sc.fault == "kill9":  # a boundary between two steps of the first old server's cutover
            return (self.sc.pause or "").format(old=self.old)
        return self.st.after if self.sc.fault == "freeze-tool" else ARM_AT

    def _cut_off(self, target: str):
        """The paused statement's target (an old server, an instance, or the DSN file route's
        new writer) cut off both ways."""
        if target.startswith("router"):
            addr = target.split()[-1]
        elif target in self.run.instances:
            addr = self.run.instances[target]
        else:
            addr = self.run.cluster.address(target)
        return netfault.partition(int(addr.rpartition(":")[2]), both_ways=True)

    def inject(self, proc: subprocess.Popen, marker) -> None:
        if self.sc.fault == "kill9":
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            return
        if self.sc.fault == INFLIGHT_FAULT:
            self.held, self.cut_off_target = kill_in_flight(proc, marker, self.sc.hold_s or 0.0, self._cut_off)
            if self.held is None:
                self.problems.append("the pause named no target: nothing was cut off")
            return
        assert self.st is not None and self.sc.hold_s is not None, self.sc.id
        if self.sc.fault == "freeze-tool":
            self.held = Held(netfault.freeze(proc.pid), self.sc.hold_s, None, fired=True).start()
            return
        at = self.port(self.st.server)
        if self.sc.fault == "partition-own-conn":
            cm = netfault.partition_at_statement(at, self.st.text, scope="connection")
        else:
            drop = self.port("old" if self.sc.fault == "partition-old" else "candidate")
            cm = netfault.partition_at_statement(at, self.st.text, drop_port=drop)
        self.held = Held(cm, self.sc.hold_s, lambda: proc.poll() is None).start()

    def finish(self) -> None:
        if self.held is not None:
            self.held.finish()


def bound_ms(sc: Scenario, operator: bool) -> float:
    """The longest time a shard may have no writable server in this row: the fenced catch-up
    and the tool's own second, the statement's bound and what the partition lasts beyond it
    (a frozen tool: the fence's expiry, or the freeze when shorter), one operator command."""
    settings = consolidate_settings()
    st = statement_of(sc)
    bound = settings["catchup_timeout_s"] * 1000 + TOOL_OVERHEAD_MS
    if sc.fault == INFLIGHT_FAULT:
        bound += (sc.hold_s or 0.0) * 1000  # the target cut off from the statement's send until it heals
    if sc.fault == "kill9":
        # Killed between two steps: the fenced window stays open until the operator's command
        # (the fence's expiry at the latest), as for a frozen tool.
        bound += frozen_tool_bound_s(settings) * 1000
    if st is not None and sc.hold_s is not None:
        if sc.fault == "freeze-tool":
            bound += min(sc.hold_s, frozen_tool_bound_s(settings)) * 1000
        else:
            bound += (st.bound_s(settings) + max(0.0, sc.hold_s - st.bound_s(settings))) * 1000
    if operator:
        bound += RECOVERY_ALLOWANCE_MS
    return float(round(bound))


def run_consolidate_scenario(cluster: ShardCluster, sc: Scenario, say: Say = lambda m: None,
                             after_exit_s: float | None = None) -> Result:
    started = time.monotonic()
    res = Result(sc.id, sc.fast)
    cluster.ensure()
    after_exit_s = sc.after_exit_s if after_exit_s is None else after_exit_s
    run = cluster.new_run(sc.id.replace("/", "_"), dict(CONSOLIDATE_SETTINGS))
    fault = _ConsolidateFault(run, sc)
    say(f"{sc.id}: {cluster.first} -> {fault.new}")
    marker = run.work / "paused"
    status = None
    try:
        run.start_writers()
        with open(run.work / "run.out", "wb") as out:
            launched = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", "run", str(run.playbook), "--yes", "--json"],
                                    env=_env(run, fault.pause), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        try:
            if not run.start_pollers_when_fenceable(lambda: proc.poll() is None):
                res.problems.append("the new instances never became read-only: no poller started")
            if wait_pause(proc, marker, TOOL_TIMEOUT_S):
                fault.inject(proc, marker)
                marker.unlink(missing_ok=True)
            else:
                res.problems.append(f"the run never reached {fault.pause}")
            rc = wait_exit(proc, TOOL_TIMEOUT_S + (sc.hold_s or 0))
            res.details["run_wall_s"] = round(time.monotonic() - launched, 2)
            if rc is None:
                res.problems.append(f"the run had not ended {TOOL_TIMEOUT_S + (sc.hold_s or 0):g} s after it began: killed")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            marker.unlink(missing_ok=True)
            fault.finish()
            res.problems += fault.problems
        res.details["run_exit"] = rc
        run_id, res.run_status = run_status(run.journal)
        res.details["run_summary"] = run_summary(run.journal)
        res.details["run_output_tail"] = output_tail(run.work / "run.out")
        if run_id is None:
            res.problems.append("the run left no journal")
        elif res.run_status not in TERMINAL_OK:
            res.action = sc.recovery if sc.recovery in ("resume", "rerun") else "rollback"
            command = ("run", str(run.playbook)) if res.action == "rerun" else (res.action, run_id)
            rrc, took = _cli(run, *command, name="recovery")
            _, res.action_status = run_status(run.journal)
            res.details.update({"recovery_exit": rrc, "recovery_wall_s": round(took, 2),
                                "recovery_summary": run_summary(run.journal),
                                "recovery_output_tail": output_tail(run.work / "recovery.out")})
            if res.action == "rerun":
                res.details["first_run_status_after"] = status_of(run.journal, run_id)
            ok_ends = ("done", "rolled_back", "refused") if res.action == "rerun" else ("done", "rolled_back")
            if res.action_status not in ok_ends:
                res.problems.append(f"`dbmigrate {command[0]}` exited {rrc} and left the run '{res.action_status}'")
        status = res.end
        if after_exit_s:
            time.sleep(after_exit_s)  # a statement given up on may still land
            res.details["judged_after_exit_s"] = after_exit_s
            res.details["status_after_exit_window"] = run_status(run.journal)[1]
        unhealthy = run.health(status)
        res.problems += [f"unhealthy: {p}" for p in unhealthy]
        res.healthy = not unhealthy
        reports = run.stop()
        res.two_writable = sum(r.two_writable_moments for r in reports.values())
        res.longest_no_writer_ms = max((r.longest_no_writer_ms for r in reports.values()), default=0.0)
        res.details["monitor"] = {old: r.to_dict() for old, r in reports.items()}
        res.details["two_writable"] = [f"{', '.join(i.servers)} for {i.ms:.0f} ms from "
                                       f"{time.strftime('%H:%M:%S', time.gmtime(i.start))}.{int(i.start % 1 * 1000):03d}Z"
                                       for r in reports.values() for i in r.two_writable]
        res.lost, res.acknowledged, problems = run.lost()
        res.problems += problems
        res.writer_gap_ms = round(max((w.longest_gap_ms() for w in run.writers.values()), default=0.0), 1)
        res.details["writer_errors"] = {sh: w.errors for sh, w in run.writers.items() if w.errors}
    finally:
        run.stop()
        if fault.cut_off_target:
            res.details["cut_off"] = fault.cut_off_target
        if fault.held is not None:
            res.details["fault_started"] = fault.held.started_at is not None
            if fault.held.started_at is not None and fault.held.healed_at is not None:
                res.details["fault_held_s"] = round(fault.held.healed_at - fault.held.started_at, 2)
        _put_back(run, res, say)
    res.bound_ms = bound_ms(sc, res.action != "nothing")
    res.duration_s = time.monotonic() - started
    return res


def _put_back(run: ConsolidationRun, res: Result, say: Say) -> None:
    """Leave the old servers serving their shards for the next row: a completed run is rolled
    back (not the operator's command: the row is judged already); anything else rebuilds them."""
    run_id, status = run_status(run.journal)
    if run_id is not None and status not in ("rolled_back", "refused"):
        rc, _ = _cli(run, "rollback", run_id, name="cleanup")
        status = run_status(run.journal)[1]
        res.details["cleanup"] = status
    healthy = status in ("rolled_back", "refused", None)
    c = run.cluster
    for sh in c.shards:
        if run.routed(sh) != c.address(c.source_of(sh)):
            healthy = False
    run.remove_instances()
    if not healthy:
        say(f"  the old servers are not as they were after {res.id}: rebuilt for the next row")
        c.up_and_healthy = False
