"""Runs one fault scenario on a real sandbox and measures what an operator cares about.

Per scenario: sysbench (2 threads) and the zero-loss verifier write through HAProxy, the
writable monitor polls @@read_only on every server, `dbmigrate run` runs as a child process
paused at the scenario's point (dbmigrate.faultpoint), the fault is injected, the child
ends, and when its run did not end by itself the operator's one command follows (`resume`
or `rollback`, as a child process too). Then the load stops and the cluster is checked:
lost acknowledged writes per server, moments with two writable servers, the longest time
with none, final health, what the operator had to do.

The "operator" acts as soon as the tool is gone, so the time without a writer is the
tool's own, plus the start of one command; an operator woken at 3 a.m. adds minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from dbmigrate.config import load_inventory
from dbmigrate.engine.journal import Journal
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.faultpoint import ENV_FILE, ENV_MAX_S, ENV_POINT
from dbmigrate.rehearsal.faultmatrix import health, netfault, relayfault
from dbmigrate.rehearsal.faultmatrix.scenarios import (INFLIGHT_FAULT, INFLIGHT_KILL_AFTER_S, NETWORK_FAULTS,
                                                       RELAY_FAULTS, SETTINGS, Scenario, procedure_settings,
                                                       statement_of)
from dbmigrate.rehearsal.faultmatrix.workload import BigStatement, LongStatement, swap_ddl
from dbmigrate.rehearsal.sandbox import haproxy
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.rehearsal.sysbench import Sysbench
from dbmigrate.rehearsal.verify import ZeroLossVerifier
from dbmigrate.rehearsal.verify.writer import VerifierError
from dbmigrate.rehearsal.writable_monitor import WritableMonitor

Say = Callable[[str], None]

# Fence, the bounded catch-up, open, and the undo when the catch-up gives up.
TOOL_OVERHEAD_MS = 1000
# One operator command: start the program, open the servers, skip what is done.
RECOVERY_ALLOWANCE_MS = 5000
TOOL_TIMEOUT_S = 150  # a run or a recovery still going after this is ended (and the scenario fails)
# After freezing the candidate, how long the run gets to give up by itself (its bound, and some).
FROZEN_GIVE_UP_S = SETTINGS["catchup_timeout_s"] + SETTINGS["probe_timeout_s"] + TOOL_OVERHEAD_MS / 1000 + 10
TERMINAL_OK = ("done", "rolled_back", "refused")
# A fence outliving a frozen tool ends on the server by itself within its bounds and this much more.
FENCE_EXPIRY_SLACK_S = 5.0
LOAD_RATE_TPS = 300  # sysbench is background load; the verifier is the judge (see README, sysbench #527)


@dataclass
class Result:
    id: str
    fast: bool
    run_status: str | None = None  # the run's status when the tool had gone
    action: str = "nothing"  # nothing, resume, rollback
    action_status: str | None = None
    lost: dict[str, int] = field(default_factory=dict)
    acknowledged: int = 0
    two_writable: int = 0
    longest_no_writer_ms: float = 0.0
    bound_ms: float = 0.0
    writer_gap_ms: float | None = None  # the verifier's longest gap between acks through HAProxy
    healthy: bool = False
    problems: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> str | None:
        """How the run ended: after the operator's command, or by itself."""
        return self.action_status if self.action != "nothing" else self.run_status

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    @property
    def why(self) -> list[str]:
        """Why the scenario fails; empty when it passes."""
        out = list(self.problems)
        if self.lost_total:
            out.append(f"{self.lost_total} acknowledged write(s) lost")
        if self.two_writable:
            out.append(f"{self.two_writable} moment(s) with two writable servers")
        if self.longest_no_writer_ms > self.bound_ms:
            out.append(f"no writable server for {self.longest_no_writer_ms:.0f} ms (bound {self.bound_ms:.0f} ms)")
        if (self.writer_gap_ms or 0) > self.bound_ms:
            out.append(f"the application could not write through the router for {self.writer_gap_ms:.0f} ms "
                       f"(bound {self.bound_ms:.0f} ms)")
        if not self.healthy and not any(p.startswith("unhealthy") for p in out):
            out.append("unhealthy at the end")
        return out

    @property
    def verdict(self) -> str:
        """FAIL: an invariant broke or work is left. SAFE: every invariant held, but the operator's
        resume ended the run rolled back (the change is undone; a new run is needed), or the new
        run was refused or rolled back. PASS otherwise."""
        if self.why:
            return "FAIL"
        if self.action == "resume" and self.end == "rolled_back":
            return "SAFE"
        # A new run that was refused or rolled itself back: every invariant held, the change is not made.
        return "SAFE" if self.action == "rerun" and self.end in ("rolled_back", "refused") else "PASS"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "fast": self.fast, "verdict": self.verdict, "why": self.why,
                "run_status": self.run_status, "end": self.end, "operator_action": self.action, "action_status": self.action_status,
                "lost_by_server": self.lost, "acknowledged": self.acknowledged,
                "two_writable_moments": self.two_writable, "longest_no_writer_ms": self.longest_no_writer_ms,
                "no_writer_bound_ms": self.bound_ms, "writer_gap_ms": self.writer_gap_ms, "healthy": self.healthy,
                "duration_s": round(self.duration_s, 1), "details": self.details}


class FaultCluster:
    """One 3-server sandbox (a primary, two replicas) behind HAProxy, with sysbench tables.
    Reused while scenarios leave it healthy (the next one promotes a replica of whoever is
    the primary now); rebuilt when one does not."""

    def __init__(self, boxes: Sandboxes, name: str, say: Say = lambda m: None):
        self.boxes, self.name, self.say = boxes, name, say
        self.up_and_healthy = False
        self.small_disk = None  # the candidate's datadir on a filesystem of its own (disk.SmallDatadir)

    @property
    def state(self):
        return self.boxes.find(self.name)

    @property
    def inventory(self):
        return load_inventory(self.state.inventory_file)

    def ensure(self) -> None:
        if self.up_and_healthy:
            return
        if any(s.name == self.name for s in self.boxes.list()):
            self.say(f"rebuilding sandbox {self.name}")
            self.boxes.down(self.name)
        self.boxes.up(self.name, 2)
        haproxy.start(self.boxes, self.name)
        self.load().prepare()
        self.up_and_healthy = True

    def load(self) -> Sysbench:
        return Sysbench.for_cluster(self.inventory, self.name, workload="oltp_write_only", tables=2,
                                    table_size=1000, threads=2)

    def down(self) -> None:
        if any(s.name == self.name for s in self.boxes.list()):
            self.boxes.down(self.name)
        self.up_and_healthy = False


def _dbmigrate(*args: str) -> list[str]:
    return [sys.executable, "-m", "dbmigrate", *args]


def _playbook(cluster: FaultCluster, sc: Scenario, candidate: str, work: Path, env: dict[str, str]) -> Path:
    """The promote playbook of the scenario; bad settings get their variant of it (or of the inventory)."""
    state = cluster.state
    inv_path = state.inventory_file
    params = {"candidate": candidate, **SETTINGS}
    if sc.fault == "bad-setting":
        doc = yaml.safe_load(inv_path.read_text())
        spec = doc["clusters"][cluster.name]
        if sc.where == "missing-router-socket":
            spec["router"]["admin_socket"] = str(work / "nowhere.sock")
        elif sc.where == "unknown-writer-backend":
            spec["router"]["writer_backend"] = "writers"
        elif sc.where == "wrong-repl-password":
            user = cluster.inventory.replication_credentials(cluster.name).user
            spec["replication_credentials"] = {"user": user, "password_env": "DBM_FAULT_WRONG_REPL_PW"}
            env["DBM_FAULT_WRONG_REPL_PW"] = "not-the-password"
        elif sc.where == "huge-timeout":
            params["catchup_timeout_s"] = 86400
        # Beside the original: its relative paths (the credentials file) must still resolve.
        inv_path = inv_path.with_name(f"inventory-{sc.where}.yaml")
        inv_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    if sc.procedure == "schema-swap":
        params = _swap_params(candidate)
    params.update(dict(sc.settings))
    pb = {"procedure": sc.procedure, "inventory": str(inv_path), "cluster": cluster.name, "params": params}
    path = work / "playbook.yaml"
    path.write_text(yaml.safe_dump(pb, sort_keys=False))
    return path


def _swap_params(candidate: str) -> dict[str, Any]:
    """A new secondary index on a sysbench table (a name of its own per run), dropped by rollback."""
    index = f"fm_{time.time_ns() // 1_000_000 % 10**9}"
    keep = {k: SETTINGS[k] for k in ("catchup_timeout_s", "fence_drain_timeout_s", "replica_timeout_s",
                                     "verify_timeout_s", "max_lag_ms")}
    ddl, undo = swap_ddl(index)
    return {"ddl": [ddl], "undo_ddl": [undo],
            "candidate": candidate, "primary": "switchover", "switch_back": True,
            "drain_timeout_s": SETTINGS["fence_drain_timeout_s"], **keep}


def run_status(journal: Path) -> tuple[str | None, str | None]:
    """(run id, status) of the scenario's run, from its own journal."""
    if not journal.exists():
        return None, None
    with Journal(journal) as j:
        runs = j.list_runs(limit=1)
    return (runs[0]["id"], runs[0]["status"]) if runs else (None, None)


def _status_of(journal: Path, run_id: str) -> str | None:
    with Journal(journal) as j:
        run = j.get_run(run_id)
    return run.status if run else None


def _summary(journal: Path) -> str:
    with Journal(journal) as j:
        runs = j.list_runs(limit=1)
    return str(runs[0].get("summary") or "") if runs else ""


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return None


def wait_pause(proc: subprocess.Popen, marker: Path, timeout_s: float) -> bool:
    """Has the run paused at its fault point (the pause file holds "<pid> <point>")?"""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text().strip():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    return False


class _Fault:
    """Injects the scenario's fault at the pause and repairs the environment afterwards
    (what an operator would do before recovering: restart what died, thaw what froze)."""

    def __init__(self, cluster: FaultCluster, sc: Scenario, old: str, candidate: str):
        self.cluster, self.sc, self.old, self.candidate = cluster, sc, old, candidate
        self.repair_ms = 0.0
        self.long: LongStatement | BigStatement | None = None
        self.frozen_pid: int | None = None
        self.held: _Held | None = None  # a partition or a frozen tool, undone by its own thread
        self.cut_off_target: str | None = None  # kill9-in-flight: the paused statement's target
        self.relay_outage: relayfault.RelayOutage | None = None  # kill-relay: from its kill (or freeze) to its restart
        self.problems: list[str] = []

    def port(self, role: str) -> int:
        name = self.old if role == "old" else self.candidate
        return self.cluster.inventory.cluster(self.cluster.name).servers[name].port

    def arm(self, proc_alive) -> None:
        """Before the run starts: a partition that starts with its statement's first packet."""
        if self.sc.fault not in NETWORK_FAULTS:
            return
        st = statement_of(self.sc)
        assert st is not None and self.sc.hold_s is not None, self.sc.id
        at = self.port(st.server)
        if self.sc.fault == "partition-own-conn":
            cm = netfault.partition_at_statement(at, st.text, scope="connection")
        else:
            drop = self.port("old" if self.sc.fault == "partition-old" else "candidate")
            cm = netfault.partition_at_statement(at, st.text, drop_port=drop)
        self.held = _Held(cm, self.sc.hold_s, proc_alive).start()

    def inject(self, proc: subprocess.Popen, marker: Path) -> None:
        f = self.sc.fault
        if f in RELAY_FAULTS:
            self._inject_relay_fault(marker)
            return
        if f == INFLIGHT_FAULT:
            self.held, self.cut_off_target = kill_in_flight(proc, marker, self.sc.hold_s or 0.0, self._cut_off)
            if self.held is None:
                self.problems.append("the pause named no target: nothing was cut off")
            return
        if f == "freeze-tool":
            # Stopped at its pause, right after the statement; released while stopped, so it
            # goes on from there once continued.
            self.held = _Held(netfault.freeze(proc.pid), self.sc.hold_s or 0.0, None, fired=True).start()
        elif f == "cut-repl-link":
            # The candidate's replication connection to the old primary (its I/O thread), only it.
            mysqld = self.cluster.state.instance(self.candidate).pid()
            ports = netfault.client_ports(mysqld, self.port("old")) if mysqld else []
            if ports:
                self.held = _Held(netfault.partition_connection(self.port("old"), ports[0]), None,
                                  lambda: proc.poll() is None, fired=True).start()
            else:
                self.problems.append(f"no replication connection of {self.candidate} to {self.old} to cut")
        elif f in ("ddl-at-fence", "big-trx-at-fence"):
            s = self.cluster.inventory.cluster(self.cluster.name).servers[self.old]
            creds = self.cluster.inventory.app_credentials(self.cluster.name)
            self.long = BigStatement(s.host, s.port, creds, "ddl" if f == "ddl-at-fence" else "trx").start()
            time.sleep(0.5)  # in flight on the old primary, half a second before the fence
        elif f == "disk-full-candidate" and self.cluster.small_disk is not None:
            self.cluster.small_disk.fill()  # right after the open: the new primary cannot commit
        self._inject_process_faults(proc)
        marker.unlink(missing_ok=True)  # release the pause

    def _inject_relay_fault(self, marker: Path) -> None:
        """The relay killed -9 (restarted at once, or hold_s later while the tool goes on), or frozen
        for hold_s; at a `sending:` point the tool's request goes out into the frozen relay first."""
        boxes, name, delay = self.cluster.boxes, self.cluster.name, self.sc.hold_s or 0.0
        if self.sc.fault == "freeze-relay":
            self.held = _Held(relayfault.frozen(self.cluster), delay, None, fired=True).start()
            marker.unlink(missing_ok=True)
            return
        frozen_at = None
        if self.sc.pause and self.sc.pause.startswith("sending:"):
            # Frozen, the request is sent into its socket; killed before the tool's wait for an answer ends.
            frozen_at = relayfault.freeze_now(self.cluster)
            marker.unlink(missing_ok=True)
            time.sleep(INFLIGHT_KILL_AFTER_S)
        self.relay_outage = relayfault.RelayOutage(boxes, name, frozen_at)
        if delay:
            self.held = _Held(self.relay_outage, delay, None, fired=True).start()
        else:
            with self.relay_outage:
                pass  # killed, and started again before the tool goes on
        marker.unlink(missing_ok=True)

    def _cut_off(self, target: str):
        """The fault that cuts off the paused statement's target: its port both ways, or HAProxy frozen."""
        if target.startswith("router"):
            return netfault.freeze(self.cluster.state.haproxy["pid"])
        return netfault.partition(self.cluster.inventory.cluster(self.cluster.name).servers[target].port,
                                  both_ways=True)

    def _inject_process_faults(self, proc: subprocess.Popen) -> None:

        f = self.sc.fault
        boxes, name = self.cluster.boxes, self.cluster.name
        if f in ("kill9", "sigterm", "sigint"):
            sig = {"kill9": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}[f]
            proc.send_signal(sig)
            if sig != signal.SIGKILL:
                # A tool that finishes its step on a signal is still paused: let the step end.
                time.sleep(0.3)
        elif f == "freeze-candidate":
            self.frozen_pid = self.cluster.state.instance(self.candidate).pid()
            os.kill(self.frozen_pid, signal.SIGSTOP)
        elif f == "kill-old-primary":
            boxes.kill_instance(name, self.old)
        elif f == "kill-haproxy":
            pid = self.cluster.state.haproxy["pid"]
            os.kill(pid, signal.SIGKILL)
        elif f == "lock-at-fence":
            s = self.cluster.inventory.cluster(name).servers[self.old]
            creds = self.cluster.inventory.app_credentials(name)
            self.long = LongStatement(s.host, s.port, creds, seconds=SETTINGS["fence_timeout_s"] + 3).start()
            time.sleep(0.3)  # the UPDATE holds its locks before the fence asks for read_only

    def repair(self) -> None:
        t0 = time.monotonic()
        boxes, name = self.cluster.boxes, self.cluster.name
        if self.held is not None:
            self.held.finish()  # the partition heals (the frozen tool goes on) when its time is up
        if self.cluster.small_disk is not None:
            self.cluster.small_disk.free()  # space freed before the operator's command, and the server
            if not self.cluster.small_disk.wait_resumed():  # writing again (its retry comes every 60 s)
                self.problems.append("the candidate still waited for disk space 90 s after it was freed")
        if self.frozen_pid is not None:
            os.kill(self.frozen_pid, signal.SIGCONT)
            self.frozen_pid = None
        if self.sc.fault == "kill-old-primary":
            boxes.start_instance(name, self.old)
        elif self.sc.fault == "kill-haproxy":
            haproxy.restart(boxes, name)
        if self.long is not None:
            self.long.join(SETTINGS["fence_timeout_s"] + 60)
        self.repair_ms = (time.monotonic() - t0) * 1000 if self.sc.fault in (
            "freeze-candidate", "kill-old-primary", "kill-haproxy", "disk-full-candidate") else 0.0


class _Held:
    """A fault (a context manager) held on a thread of its own: entered now, left `hold_s`
    after it started (a statement partition starts with its statement's packet), or, with
    no `hold_s`, once `alive()` turns false (the tool exited). Always left by finish()."""

    def __init__(self, cm, hold_s: float | None, alive, fired: bool = False):
        self.cm, self.hold_s, self.alive, self.fired = cm, hold_s, alive, fired
        self.started_at: float | None = None  # monotonic: when the fault began
        self.healed_at: float | None = None
        self.error: BaseException | None = None
        self._ready, self._abort = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="held-fault", daemon=True)

    def start(self) -> "_Held":
        self._thread.start()
        self._ready.wait(30)
        if self.error is not None:
            raise self.error
        return self

    def _run(self) -> None:
        try:
            with self.cm as trigger:
                self._ready.set()
                if not self.fired:
                    # Armed: it starts with the statement, if the run gets there at all.
                    while not self._abort.is_set() and not trigger.wait(0.05, self.alive or (lambda: True)):
                        if self.alive is not None and not self.alive():
                            break
                    if trigger.fired():
                        self.started_at = trigger.fired_at
                else:
                    self.started_at = time.monotonic()
                if self.started_at is not None:
                    if self.hold_s is not None:
                        self._abort.wait(max(0.0, self.started_at + self.hold_s - time.monotonic()))
                    else:
                        while not self._abort.is_set() and self.alive():
                            self._abort.wait(0.05)
                self.healed_at = time.monotonic()
        except BaseException as e:  # reported by finish()
            self.error = e
            self._ready.set()

    def finish(self, timeout_s: float = 120) -> None:
        """Wait for the fault's time to be up (an armed partition whose run never reached
        its statement is disarmed once the run is gone), then make sure it is undone."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._abort.set()
            self._thread.join(30)
        if self.error is not None:
            raise self.error


def paused_target(marker: Path) -> str | None:
    """The server (or `router <kind> ...`) the paused statement goes to, from the pause file."""
    try:
        lines = marker.read_text().splitlines()
    except OSError:
        return None
    return next((ln[len("target "):].strip() for ln in lines if ln.startswith("target ")), None)


def kill_in_flight(proc: subprocess.Popen, marker: Path, heal_after_s: float,
                   cut_off) -> "tuple[_Held | None, str | None]":
    """The run is paused right before a statement: cut its target off (`cut_off(target)`, a
    context manager), let the run send the statement into the cut, kill -9 the tool
    INFLIGHT_KILL_AFTER_S later (before its bound gives up on it: the statement stays in the
    dead process's send queue), and heal `heal_after_s` after the send (by the returned fault's
    own thread; repair() waits for it). Returns (that fault, the target)."""
    target = paused_target(marker)
    held = _Held(cut_off(target), heal_after_s, None, fired=True).start() if target else None
    marker.unlink(missing_ok=True)  # released: the statement goes out into the cut
    time.sleep(INFLIGHT_KILL_AFTER_S)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    return held, target


def run_scenario(cluster: FaultCluster, sc: Scenario, say: Say = lambda m: None,
                 after_exit_s: float | None = None) -> Result:
    started = time.monotonic()
    res = Result(sc.id, sc.fast)
    cluster.ensure()
    relayfault.use_router(cluster, sc.router)
    inv, name = cluster.inventory, cluster.name
    before = health.check(inv, name, checksums=False)
    if not before.healthy:
        cluster.up_and_healthy = False
        cluster.ensure()
        inv = cluster.inventory
        before = health.check(inv, name, checksums=False)
    old = before.writer or f"{name}-1"
    replicas = sorted(n for n in inv.cluster(name).servers if n != old)
    candidate, other = replicas[0], replicas[1]
    work = cluster.state.path / "faults" / sc.id.replace("/", "_")
    work.mkdir(parents=True, exist_ok=True)
    journal = work / "journal.sqlite"
    env = {**os.environ, "DBMIGRATE_JOURNAL": str(journal), "COLUMNS": "200"}
    pb = _playbook(cluster, sc, candidate, work, env)
    marker = work / "paused"
    if sc.pause:
        env.update({ENV_POINT: sc.pause, ENV_FILE: str(marker), ENV_MAX_S: "60"})
    relay_log_at = relayfault.log_offset(cluster) if sc.router == "relay" else 0
    say(f"{sc.id}: {old} -> {candidate}")

    after_exit_s = sc.after_exit_s if after_exit_s is None else after_exit_s
    load = cluster.load().start_background(time_s=120 + int(after_exit_s), rate=LOAD_RATE_TPS, report_interval=1)
    verifier = ZeroLossVerifier.for_cluster(inv, name)
    verifier.prepare()
    verifier.start()
    monitor = _monitor(cluster).start()
    fault = _Fault(cluster, sc, old, candidate)
    unchanged_before = None
    try:
        verifier.wait_for_acks(30)
        if sc.refusal:
            if sc.where == "down-replica":
                cluster.boxes.stop_instance(name, other)
            unchanged_before = _comparable(inv, name, skip=other if sc.where == "down-replica" else None)
        with open(work / "run.out", "wb") as out:
            launched = time.monotonic()
            proc = subprocess.Popen(_dbmigrate("run", str(pb), "--yes", "--json"), env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            fault.arm(lambda: proc.poll() is None)
            if sc.pause:
                if wait_pause(proc, marker, TOOL_TIMEOUT_S):  # a loaded machine may take a minute to get there
                    fault.inject(proc, marker)
                else:
                    res.problems.append(f"the run never reached {sc.pause}")
            limit = FROZEN_GIVE_UP_S if sc.fault == "freeze-candidate" else TOOL_TIMEOUT_S + (sc.hold_s or 0)
            rc = wait_exit(proc, limit)
            res.details["run_wall_s"] = round(time.monotonic() - launched, 2)  # start to exit, as the harness saw it
            if rc is None:
                res.problems.append(f"the run had not ended {limit:g} s after the fault: killed")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            marker.unlink(missing_ok=True)
            fault.repair()
            res.problems += fault.problems
        res.details["run_exit"] = rc
        run_id, res.run_status = run_status(journal)
        res.details["run_output_tail"] = _tail(work / "run.out")
        if sc.refusal:
            _judge_refusal(res, sc, rc, inv, name, unchanged_before, other)
            if sc.where == "down-replica":
                cluster.boxes.start_instance(name, other)
        elif res.run_status not in TERMINAL_OK and run_id is not None:
            res.action = sc.recovery if sc.recovery != "none" else "nothing"
            if sc.recovery == "none":
                res.problems.append(f"the run ended '{res.run_status}' where nothing should be needed")
            else:
                command = ("run", str(pb)) if sc.recovery == "rerun" else (sc.recovery, run_id)
                with open(work / "recovery.out", "wb") as out:
                    recovering = time.monotonic()
                    rproc = subprocess.Popen(_dbmigrate(*command, "--yes", "--json"), env={
                        k: v for k, v in env.items() if k not in (ENV_POINT, ENV_FILE, ENV_MAX_S)},
                        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                rrc = wait_exit(rproc, TOOL_TIMEOUT_S)
                res.details["recovery_started_after_run_s"] = round(recovering - launched, 2)
                res.details["recovery_wall_s"] = round(time.monotonic() - recovering, 2)
                _, res.action_status = run_status(journal)
                res.details["recovery_exit"] = rrc
                res.details["recovery_output_tail"] = _tail(work / "recovery.out")
                res.details["recovery_summary"] = _summary(journal)
                if sc.recovery == "rerun":
                    res.details["first_run_status_after"] = _status_of(journal, run_id)
                # Rolled back is a safe end too (the run could not go on and undid itself): the
                # table shows it; a new run may also be refused (health says whether that is
                # safe); anything else leaves work for a second command.
                ok_ends = ("done", "rolled_back", "refused") if sc.recovery == "rerun" else ("done", "rolled_back")
                if res.action_status not in ok_ends:
                    res.problems.append(f"`dbmigrate {command[0]}` exited {rrc} and left the run "
                                        f"'{res.action_status}'")
        elif run_id is None:
            res.problems.append("the run left no journal")
        if after_exit_s:
            # A statement given up on may still land: the verdict covers a while after the tool exits.
            time.sleep(after_exit_s)
            res.details["judged_after_exit_s"] = after_exit_s
            res.details["status_after_exit_window"] = run_status(journal)[1]
    finally:
        _finish_load(res, load, verifier, monitor, inv, name)
    if fault.cut_off_target:
        res.details["cut_off"] = fault.cut_off_target
    if sc.router == "relay":
        res.details["relay_log"] = relayfault.log_since(cluster, relay_log_at)
        res.details["relay_moved_before_restart"] = relayfault.moved_before_restart(res.details["relay_log"])
        said = " ".join(_text(work / f) for f in ("run.out", "recovery.out"))
        # Did the run (or the operator's command) meet a relay change in doubt, and settle it?
        res.details["router_change_in_doubt"] = "in doubt" in said
        res.details["router_change_settled"] = "is settled" in said or "gone with the router's process" in said
    if fault.relay_outage is not None:
        res.details["relay_out_ms"] = round(fault.relay_outage.out_ms)
    if fault.held is not None:
        res.details["fault_started"] = fault.held.started_at is not None
        if fault.held.started_at is not None and fault.held.healed_at is not None:
            res.details["fault_held_s"] = round(fault.held.healed_at - fault.held.started_at, 2)
    res.bound_ms = _bound_ms(res, fault)
    h = health.check(inv, name)
    res.healthy = h.healthy
    res.problems += [f"unhealthy: {p}" for p in h.problems]
    res.details["final"] = h.to_dict()
    cluster.up_and_healthy = h.healthy
    res.duration_s = time.monotonic() - started
    return res


def _bound_ms(res: Result, fault: _Fault) -> float:
    """The longest time without a writable server the playbook allows, for this scenario."""
    bound = SETTINGS["catchup_timeout_s"] * 1000 + TOOL_OVERHEAD_MS + fault.repair_ms
    if fault.sc.fault == "freeze-candidate":
        # The undo asks the frozen candidate once whether it is writable (never two writable
        # servers), bounded by probe_timeout_s, before the old primary takes writes again.
        bound += SETTINGS["probe_timeout_s"] * 1000
    if fault.relay_outage is not None:
        # Nothing routes writes while the relay is out (killed, or frozen then killed): from then
        # until it answers again.
        bound += fault.relay_outage.out_ms
    if fault.sc.fault == "freeze-relay":
        bound += (fault.sc.hold_s or 0.0) * 1000  # the relay frozen: every session waits in it
    if fault.sc.fault == INFLIGHT_FAULT:
        # The target cut off from the statement's send until it heals (the app through HAProxy
        # waits that long when the target is the primary or HAProxy itself).
        bound += (fault.sc.hold_s or 0.0) * 1000
    st = statement_of(fault.sc)
    if st is not None and fault.sc.hold_s is not None:
        settings = procedure_settings(fault.sc.procedure, {**SETTINGS, **dict(fault.sc.settings)})
        if fault.sc.fault == "freeze-tool":
            # A frozen tool: the fence expires on the server by itself (its bound), or the tool goes on first.
            bound += min(fault.sc.hold_s, frozen_tool_bound_s(settings)) * 1000
        else:
            # Partitioned from its statement: the statement's own bound, then the partition's
            # remainder before the statement's session can be seen dead (KILL) and the state read.
            bound += (st.bound_s(settings) + max(0.0, fault.sc.hold_s - st.bound_s(settings))) * 1000
    if fault.sc.fault == "disk-full-candidate":
        # A new primary that cannot commit: the verify step's probe write gives up after its bound.
        bound += SETTINGS["verify_timeout_s"] * 1000
    if res.action in ("resume", "rollback", "rerun"):
        bound += RECOVERY_ALLOWANCE_MS
    return float(round(bound))


def frozen_tool_bound_s(settings: dict) -> float:
    """How long a fence may outlive a frozen tool: the fence's own bound, the fenced catch-up's
    and the open's, and a few seconds for the server to notice."""
    return float(settings["fence_timeout_s"]) + 1 + float(settings["catchup_timeout_s"]) + FENCE_EXPIRY_SLACK_S


def _monitor(cluster: FaultCluster) -> WritableMonitor:
    """@@read_only of every server, every 10 ms, as the application's account over each server's
    unix socket: a partition of a server's port does not blind it (over TCP an unanswered poll
    counts as not writable, which would hide two writable servers)."""
    inv, name = cluster.inventory, cluster.name
    app = inv.app_credentials(name)
    servers, sockets = {}, {}
    for n, spec in inv.cluster(name).servers.items():
        servers[n] = (spec.host, spec.port, app or inv.credentials_for(spec))
        sock = str(cluster.state.instance(n).spec.socket)
        if len(sock.encode()) < 100:  # the limit of a unix socket's path
            sockets[n] = sock
    return WritableMonitor(servers, interval_s=0.01, sockets=sockets)


def _finish_load(res: Result, load, verifier: ZeroLossVerifier, monitor: WritableMonitor, inv, name: str) -> None:
    """Writes must flow again; then stop everything and count what was lost where."""
    try:
        verifier.wait_for_acks(len(verifier.acks) + 20, timeout_s=20)
    except VerifierError as e:
        res.problems.append(f"writes through the router did not resume: {e.message}")
    try:
        load.stop()
    except Exception:
        pass  # sysbench 1.0.20 dies on its first reconnect after a flip (#527): it is background load only
    report = monitor.stop()
    res.two_writable = report.two_writable_moments
    res.longest_no_writer_ms = report.longest_no_writer_ms
    res.details["monitor"] = report.to_dict()
    try:
        verifier.stop()
    except VerifierError as e:
        res.problems.append(e.message)
    servers = []
    for n in inv.cluster(name).servers:
        s = inv.open(n)
        try:
            s.connect()
            servers.append(s)
        except DbmigrateError:
            res.problems.append(f"{n} does not answer: its writes cannot be checked")
    try:
        vr = verifier.check(servers, catch_up_timeout_s=30)
        res.lost = {n: len(ids) for n, ids in vr.lost.items()}
        res.acknowledged = vr.acknowledged
        res.writer_gap_ms = vr.max_gap_ms
        res.details["verifier_errors"] = vr.errors
    finally:
        for s in servers:
            s.close()


def _comparable(inv, name: str, skip: str | None = None) -> dict[str, Any]:
    """What must not change when a run is refused: who is writable, replication, the route."""
    s = health.shape(inv, name)
    if skip:
        s.pop(skip, None)
    try:
        routed = health.router_writer(inv, name)
    except DbmigrateError as e:
        routed = f"error: {e.message}"
    return {"shape": s, "router_writer": routed}


def _judge_refusal(res: Result, sc: Scenario, rc: int | None, inv, name: str, before, skip: str) -> None:
    # 2: bad input refused when the playbook is read; 5: a run refused before any change.
    expected_rc = 2 if sc.where == "huge-timeout" else 5
    out = res.details.get("run_output_tail", "")
    if rc != expected_rc:
        res.problems.append(f"exit {rc}, expected {expected_rc}")
    if expected_rc == 5 and res.run_status != "refused":
        res.problems.append(f"run ended '{res.run_status}', not refused")
    if expected_rc == 5 and "refused before any change" not in out:
        res.problems.append("the output does not say it was refused before any change")
    after = _comparable(inv, name, skip=skip if sc.where == "down-replica" else None)
    if after != before:
        res.problems.append(f"servers changed: {before} -> {after}")
    res.details["refusal"] = next((ln for ln in reversed(out.splitlines()) if "refused" in ln or "error" in ln), "")


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


# For the other row runners (consolidate_rows.py): the same held faults and journal readings.
Held = _Held
run_summary = _summary
status_of = _status_of
output_tail = _tail
