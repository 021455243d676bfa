"""Shard consolidation killed at its cutover, then resumed or rolled back, on real servers.

Two old servers hold shard_1, shard_2 and shard_3, shard_4; applications find each
shard's writer in a DSN file, and one writer per shard follows it and records every
acknowledged id. The consolidate playbook runs as a child process (as an operator's
`dbmigrate run` would), paused by the fault points (dbmigrate.faultpoint):

  in-fence     right after the first old server was made read-only (its cutover begun)
  after-open   right after the first old server's instance opened and its routes moved,
               when the old server's reverse connection is set up (CHANGE MASTER sent, not
               started): what the instance takes from then on comes back only through it
  between      right after the first old server's cutover completed (its forward
               connection removed), before the second one's began

There the tool is killed (-9) and the operator's one command follows (`dbmigrate
rollback RUN` or `dbmigrate resume RUN`), or it is told to stop (SIGTERM) and must end
by itself. Then: every shard routed to one writable server (its old server after a
rollback, its new instance after a resume), the other side of the shard read-only
(never two writable servers for a shard, checked all along by a poller), writes flow
again, and every acknowledged id is on the server that serves the shard.

Each scenario plans fresh instances (their own names and ports) on the same two old
servers; the scenario ends rolled back, so the next one starts from the old servers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from dbmigrate.config import HostSpec
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.faultpoint import ENV_FILE, ENV_MAX_S, ENV_POINT
from dbmigrate.procedures.consolidate.plan import connection_name, measure_shards, plan
from dbmigrate.procedures.consolidate.resources import ConsolidateState
from dbmigrate.rehearsal.faultmatrix.harness import run_status, wait_exit, wait_pause
from dbmigrate.rehearsal.verify.shard_writer import ShardWriter, ids_on
from dbmigrate.rehearsal.writable_monitor import WritableMonitor
from dbmigrate.routing.dsn_file import DsnFileRouter

from tests.integration.shard_kit import legacy_shards

pytestmark = pytest.mark.integration

NAME = "cfault"
OLD = {"cfault-1": ["shard_1", "shard_2"], "cfault-old2": ["shard_3", "shard_4"]}
SHARDS = [s for shards in OLD.values() for s in shards]
FIRST = "cfault-1"  # old servers are cut over in name order: this one first
POINTS = {
    "in-fence": "in:cut over:read_only=on",
    "between": f"in:cut over:reset slave '{connection_name(FIRST)}' all",
    "after-open": "in:cut over:change master",  # the reverse connection: after the open
}
TOOL_TIMEOUT_S = 150


@pytest.fixture(scope="module")
def legacy(boxes):
    state, inv, routes = legacy_shards(boxes, NAME, OLD, rows=100)
    measured = measure_shards(inv, sample_s=0.2)
    yield Legacy(boxes, state, inv, routes, measured)
    boxes.down(NAME)


@dataclass
class Legacy:
    boxes: object
    state: object
    inv: object
    routes: Path
    measured: list
    planned: int = 0


@dataclass
class Scenario:
    """One run of the consolidate playbook on fresh instances, with its writers and pollers."""

    legacy: Legacy
    work: Path
    playbook: Path
    journal: Path
    instances: dict[str, str]  # instance -> host:port
    target: dict[str, str]  # shard -> its instance's host:port
    writers: dict[str, ShardWriter] = field(default_factory=dict)
    monitors: list[WritableMonitor] = field(default_factory=list)
    run_id: str | None = None

    def env(self, point: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in (ENV_POINT, ENV_FILE, ENV_MAX_S)}
        env.update({"DBMIGRATE_JOURNAL": str(self.journal), "COLUMNS": "200"})
        if point:
            env.update({ENV_POINT: point, ENV_FILE: str(self.work / "paused"), ENV_MAX_S: "60"})
        return env

    def status(self) -> str | None:
        self.run_id, status = run_status(self.journal)
        return status

    def cli(self, *args: str, name: str) -> int | None:
        """An operator's command (`resume RUN`, `rollback RUN`), as a child process; its exit code."""
        with open(self.work / f"{name}.out", "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", *args, "--yes", "--json"], env=self.env(),
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=str(Path(__file__).resolve().parents[2]))
        return wait_exit(proc, TOOL_TIMEOUT_S)

    def tail(self, name: str) -> str:
        try:
            return "\n".join((self.work / f"{name}.out").read_text(errors="replace").strip().splitlines()[-12:])
        except OSError:
            return ""


def address(inv, server: str) -> str:
    spec = inv.cluster(NAME).servers[server]
    return f"{spec.host}:{spec.port}"


def source_of(shard: str) -> str:
    return next(s for s, shards in OLD.items() if shard in shards)


def new_scenario(lg: Legacy, label: str) -> Scenario:
    """A plan of its own (fresh instance names and ports) and a playbook that runs it."""
    from dbmigrate.rehearsal.sandbox.ports import free_port_range

    lg.planned += 1
    host = f"f{lg.planned}"
    made = plan(lg.measured, {host: HostSpec(cores=2, memory_gb=1, disk_gb=5, max_instances=2, sandbox=NAME,
                                             base_port=free_port_range(2))}, lg.inv.planning, "instance-per-group")
    assert [i.sources for i in made.instances] == [[FIRST], ["cfault-old2"]], made.to_dict()
    work = lg.state.path / "faults" / label
    work.mkdir(parents=True, exist_ok=True)
    plan_file = work / "plan.json"
    plan_file.write_text(json.dumps(made.to_dict()))
    pb = work / "consolidate.yaml"
    pb.write_text(yaml.safe_dump({
        "procedure": "consolidate", "inventory": str(lg.inv.path), "cluster": NAME,
        "params": {"plan": str(plan_file), "strategy": "instance-per-group", "catchup_timeout_s": 5,
                   "fence_drain_timeout_s": 0.3, "gate_timeout_s": 20, "seed": {"method": "logical"}}}))
    instances = {i.name: f"127.0.0.1:{i.port}" for i in made.instances}
    target = {sh: instances[i.name] for i in made.instances for sh in i.shards}
    return Scenario(lg, work, pb, work / "journal.sqlite", instances, target)


def start_load(sc: Scenario) -> None:
    """One writer per shard, following the DSN file as an application must."""
    creds = sc.legacy.inv.app_credentials(NAME)
    sc.writers = {sh: ShardWriter(sc.legacy.routes, sh, creds, interval_s=0.004) for sh in SHARDS}
    for w in sc.writers.values():
        w.start()
    for sh, w in sc.writers.items():
        assert w.wait_acks_on(w.writer(), 20, timeout_s=30), f"{sh}: no writes acknowledged before the run"


def start_pollers(sc: Scenario) -> None:
    """A poller of read_only on each old server and its instance, from the fault on (the instances
    exist and are read-only by then; a new instance is writable for a moment while it is created)."""
    inv = sc.legacy.inv
    admin = inv.credentials_for(inv.cluster(NAME).servers[FIRST])
    for old in OLD:
        pair = {old: address(inv, old), **{n: a for n, a in sc.instances.items()
                                           if a in {sc.target[sh] for sh in OLD[old]}}}
        sc.monitors.append(WritableMonitor({n: (a.rpartition(":")[0], int(a.rpartition(":")[2]), admin)
                                            for n, a in pair.items()}, interval_s=0.01).start())


def stop_load(sc: Scenario) -> list[str]:
    """Stop the writers and pollers; the moments two servers of one shard were writable."""
    for w in sc.writers.values():
        w.stop_flag.set()
    for w in sc.writers.values():
        w.join(10)
    problems = []
    for m in sc.monitors:
        report = m.stop()
        problems += [f"{', '.join(i.servers)} both writable for {i.ms:.0f} ms" for i in report.two_writable]
    sc.monitors = []
    return problems


def open_address(sc: Scenario, addr: str) -> Server:
    inv = sc.legacy.inv
    host, _, port = addr.rpartition(":")
    return Server(addr, host, int(port), inv.credentials_for(inv.cluster(NAME).servers[FIRST]))


def served(sc: Scenario, expect: dict[str, str]) -> None:
    """Every shard routes to `expect[shard]`, which is writable and takes the shard's writes again;
    the other server of the shard is read-only."""
    for sh in SHARDS:
        writer = DsnFileRouter(sh, sc.legacy.routes).current().writer
        assert writer == expect[sh], f"{sh} routes to {writer}, expected {expect[sh]}"
    for addr in set(expect.values()):
        with open_address(sc, addr) as srv:
            assert not Inspector(srv).read_only(), f"{addr} serves shards but is read-only"
    for sh in SHARDS:
        other = sc.target[sh] if expect[sh] != sc.target[sh] else address(sc.legacy.inv, source_of(sh))
        try:
            with open_address(sc, other) as srv:
                assert Inspector(srv).read_only(), f"{sh}: {other} is writable too (it serves {expect[sh]}'s shard)"
        except AssertionError:
            raise
        except Exception:
            pass  # an instance never created takes no writes
        w = sc.writers[sh]
        assert w.wait_acks_on(expect[sh], w.acked_on(expect[sh]) + 20, timeout_s=30), \
            f"{sh}: writes through the DSN file do not flow to {expect[sh]} (errors {w.errors})"


def nothing_lost(sc: Scenario, expect: dict[str, str]) -> None:
    for addr in set(expect.values()):
        with open_address(sc, addr) as srv:
            for sh in (s for s in SHARDS if expect[s] == addr):
                acked = {i for i, *_ in sc.writers[sh].acks}
                missing = acked - ids_on(srv, sh)
                assert not missing, f"{sh}: {len(missing)} acknowledged write(s) lost on {addr}, " \
                                    f"e.g. {sorted(missing)[:5]}"


def old_servers_clean(sc: Scenario) -> None:
    """After a rollback: the old servers replicate from nobody (reverse connections removed)."""
    inv = sc.legacy.inv
    for server in OLD:
        with inv.open(server) as srv:
            assert Inspector(srv).connection_names() == [], f"{server} still replicates"


def kill_at(sc: Scenario, point: str, sig: int) -> tuple[int | None, str | None]:
    """Run the playbook paused at `point`, send `sig`, let it end; (exit code, run status)."""
    marker = sc.work / "paused"
    with open(sc.work / "run.out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", "run", str(sc.playbook), "--yes", "--json"],
                                env=sc.env(point), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(Path(__file__).resolve().parents[2]))
    try:
        reached = wait_pause(proc, marker, 180)
        assert reached, f"the run never reached {point}: {sc.tail('run')}"
        assert int(marker.read_text().split()[0]) == proc.pid
        start_pollers(sc)
        proc.send_signal(sig)
        if sig != signal.SIGKILL:
            time.sleep(0.3)  # the signal is handled while paused; then the step goes on
        marker.unlink(missing_ok=True)
        rc = wait_exit(proc, TOOL_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        marker.unlink(missing_ok=True)
    return rc, sc.status()


def kill9_at(sc: Scenario, where: str) -> None:
    """kill -9 at the named point: the run is left as the journal has it, running."""
    rc, status = kill_at(sc, POINTS[where], signal.SIGKILL)
    assert rc == -signal.SIGKILL and status == "running", (rc, status, sc.tail("run"))


def journal_state(sc: Scenario) -> ConsolidateState:
    with Journal(sc.journal) as j:
        return ConsolidateState.load(j.all_state(sc.run_id))


def roll_back_and_check(sc: Scenario) -> None:
    """`dbmigrate rollback RUN`: every shard back on its writable old server, nothing lost."""
    rc = sc.cli("rollback", sc.run_id, name="rollback")
    assert (rc, sc.status()) == (0, "rolled_back"), sc.tail("rollback")
    old = {sh: address(sc.legacy.inv, source_of(sh)) for sh in SHARDS}
    served(sc, old)
    two = stop_load(sc)
    assert two == [], two
    nothing_lost(sc, old)
    old_servers_clean(sc)


def finish(sc: Scenario) -> None:
    stop_load(sc)
    for name in sc.instances:  # the next scenario plans instances of its own
        try:
            sc.legacy.boxes.stop_instance(NAME, name)
        except Exception:
            pass


def moved_before_reverse(sc: Scenario) -> None:
    """Killed at after-open: the first old server's shards route to its writable instance, whose
    position is journaled, and the old server's reverse connection is not running."""
    st = journal_state(sc)
    assert FIRST in st.fencing and FIRST not in st.cut and set(st.reverse.get(FIRST, {})) == {
        i for i, a in sc.instances.items() if a == sc.target[OLD[FIRST][0]]}, st
    for sh in OLD[FIRST]:
        assert DsnFileRouter(sh, sc.legacy.routes).current().writer == sc.target[sh]
    with open_address(sc, sc.target[OLD[FIRST][0]]) as srv:
        assert not Inspector(srv).read_only()
    with open_address(sc, address(sc.legacy.inv, FIRST)) as srv:
        assert Inspector(srv).read_only()


@pytest.mark.parametrize("where", ["in-fence", "after-open", "between"])
def test_kill9_at_the_cutover_then_rollback_puts_every_shard_back(legacy, where):
    t0 = time.monotonic()
    sc = new_scenario(legacy, f"kill9-{where}-rollback")
    start_load(sc)
    try:
        kill9_at(sc, where)
        st = journal_state(sc)
        assert (FIRST in st.cut) == (where == "between"), st.cut
        if where == "after-open":
            moved_before_reverse(sc)
            time.sleep(1)  # the writers write to the instance: rollback must bring those writes back
        roll_back_and_check(sc)
        st = journal_state(sc)
        assert st.cut == {} and st.reverse == {} and st.fencing == {}, st
    finally:
        finish(sc)
    print(f"kill9/{where}/rollback: {time.monotonic() - t0:.1f}s")


@pytest.mark.parametrize("where", ["in-fence", "after-open", "between"])
def test_kill9_at_the_cutover_then_resume_completes_the_consolidation(legacy, where):
    t0 = time.monotonic()
    sc = new_scenario(legacy, f"kill9-{where}-resume")
    start_load(sc)
    try:
        kill9_at(sc, where)
        if where == "after-open":
            moved_before_reverse(sc)
            time.sleep(1)
        rc = sc.cli("resume", sc.run_id, name="resume")
        assert (rc, sc.status()) == (0, "done"), sc.tail("resume")
        said = (sc.work / "resume.out").read_text()
        if where == "in-fence":  # fenced, its reverse position not journaled: put back, then done again
            assert f"the cutover of {FIRST} began earlier in this run and did not finish (it stopped before" in said
        if where == "after-open":  # journaled past its window: its steps go on from the first not in place
            assert f"the cutover of {FIRST} began earlier in this run and did not finish: going on from" in said
        served(sc, sc.target)
        st = journal_state(sc)
        assert set(st.cut) == set(OLD) and all(r["status"] == "done" for r in st.servers.values()), st
        for inst, addr in sc.instances.items():
            with open_address(sc, addr) as srv:
                assert [c for c in Inspector(srv).connection_names()] == [], f"{inst}: forward connections left"
        nothing_lost(sc, sc.target)
        # Undo the consolidation: the next scenario starts from the old servers.
        roll_back_and_check(sc)
    finally:
        finish(sc)
    print(f"kill9/{where}/resume: {time.monotonic() - t0:.1f}s")


def test_sigterm_in_the_fence_stops_the_run_in_a_consistent_state(legacy):
    """The first SIGTERM lets the running server's cutover finish and starts no other: exit 1,
    the run failed naming the server not started, each shard on exactly one writable server,
    nothing lost; `dbmigrate rollback RUN` then puts the moved server back."""
    t0 = time.monotonic()
    sc = new_scenario(legacy, "sigterm-in-fence")
    start_load(sc)
    try:
        rc, status = kill_at(sc, POINTS["in-fence"], signal.SIGTERM)
        out = sc.tail("run")
        # The fenced server's cutover finished; the next one never started; the run says so.
        assert (rc, status) == (1, "failed"), (rc, status, out)
        with Journal(sc.journal) as j:
            summary = j.list_runs(limit=1)[0]["summary"]
        assert "cfault-old2 not started: the operator asked the run to stop" in summary, summary
        st = journal_state(sc)
        assert set(st.cut) == {FIRST} and st.fencing == {}, st
        expect = {sh: sc.target[sh] if source_of(sh) in st.cut else address(legacy.inv, source_of(sh))
                  for sh in SHARDS}
        served(sc, expect)
        nothing_lost(sc, expect)
        # The failed run's cutover step is undone like a completed one: the moved server comes back.
        roll_back_and_check(sc)
    finally:
        finish(sc)
    print(f"sigterm/in-fence: {time.monotonic() - t0:.1f}s")
