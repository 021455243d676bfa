"""Faults in the middle of a promote, on real servers behind HAProxy under live writes: a frozen
candidate, a dead router, a fence blocked by a running statement. Each ends with one writable
server, the others replicating, and no acknowledged write lost, within the run's own bounds."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dbmigrate.app.runs import start_run
from dbmigrate.db import connection
from dbmigrate.engine.journal import Journal
from dbmigrate.app.runs import resolve_journal_path
from dbmigrate.rehearsal.sandbox import haproxy
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

FENCE = "SET STATEMENT lock_wait_timeout"  # inside the fence's request (after its expiry), not its start
UNFENCE = "SET GLOBAL read_only=OFF"
CATCH_UP = "SELECT MASTER_GTID_WAIT"


class Timeline:
    """When statements were sent, by (server, statement prefix); optionally acts on one."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, str], float] = {}
        self.actions: list[tuple[str, str, object]] = []

    def on(self, server: str, prefix: str, action) -> None:
        self.actions.append((server, prefix, action))

    def __call__(self, server: str, sql: str, ms: float) -> None:
        for prefix in (FENCE, UNFENCE):
            if self._sends(sql, prefix):
                self.at.setdefault((server, prefix), time.monotonic())
        for i, (who, prefix, action) in enumerate(list(self.actions)):
            if who == server and self._sends(sql, prefix):
                self.actions.pop(i)
                action()  # type: ignore[operator]

    @staticmethod
    def _sends(sql: str, prefix: str) -> bool:
        """Does this request carry a statement starting with `prefix`? Requests carry several, and a
        role change inside a run is one guarded compound statement (`... THEN /* dbmigrate */ SET ...`)."""
        bare = re.sub(r"/\*.*?\*/", " ", sql)
        return any(re.match(r"\s*(?:.*\bTHEN\s+)?" + re.escape(prefix), part) for part in bare.split(";"))

    def __enter__(self) -> "Timeline":
        connection.add_statement_listener(self)
        return self

    def __exit__(self, *exc: object) -> None:
        connection.remove_statement_listener(self)


def _last_run(run_id: str) -> dict:
    with Journal(resolve_journal_path()) as j:
        return j.run_detail(run_id)


def _replicating_from(shape: dict, source: str, names: list[str]) -> None:
    for n in names:
        assert shape[n]["source"] == source and shape[n]["running"], (n, shape[n])


def test_a_candidate_frozen_during_catch_up_leads_to_unfencing_within_the_bound(boxes):
    name = "fzcand"
    state, inv = kit.topology(boxes, name)
    cand_pid = state.instance(f"{name}-new").pid()
    v = kit.start_verifier(inv, name)
    try:
        with Timeline() as t:
            t.on(f"{name}-1", FENCE, lambda: os.kill(cand_pid, signal.SIGSTOP))
            outcome = start_run(kit.playbook(state, name, {"catchup_timeout_s": 3, "probe_timeout_s": 2}),
                                assume_yes=True)
        fenced_s = t.at[(f"{name}-1", UNFENCE)] - t.at[(f"{name}-1", FENCE)]
    finally:
        os.kill(cand_pid, signal.SIGCONT)
    assert outcome.status == "rolled_back", outcome.summary
    assert "did not answer" in outcome.summary
    # catch-up bound (3 s) + one probe of the frozen candidate (2 s): not 60 s read timeouts
    assert fenced_s <= 3 + 2 + 1.0, fenced_s
    catch_up = [s for s in _last_run(outcome.run_id)["steps"] if s["name"].startswith("wait for")][0]
    assert catch_up["status"] == "failed" and 2.9 <= catch_up["duration_ms"] / 1000 <= 3.5, catch_up
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"]
    _replicating_from(shape, f"{name}-1", [f"{name}-2", f"{name}-3", f"{name}-new"])
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_haproxy_dead_before_the_flip_rolls_back_without_touching_the_router(boxes):
    name = "hadead"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    killed = threading.Event()

    def kill_haproxy():
        os.kill(state.haproxy["pid"], signal.SIGKILL)
        killed.set()

    with Timeline() as t:
        t.on(f"{name}-new", CATCH_UP, kill_haproxy)  # the candidate has caught up; the router is next
        outcome = start_run(kit.playbook(state, name), assume_yes=True)
    assert killed.is_set()
    assert outcome.status == "rolled_back", outcome.summary
    undone = [s["sentence"] for s in _last_run(outcome.run_id)["steps"] if s["action"] == "undo" and s["sentence"]]
    assert any("router not changed" in s and f"it still sends writes to {name}-1" in s for s in undone), undone
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"]
    _replicating_from(shape, f"{name}-1", [f"{name}-2", f"{name}-3", f"{name}-new"])
    haproxy.restart(boxes, name)  # the application's path comes back, to the old primary
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def _spawn_run(playbook) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dbmigrate", "run", str(playbook), "--yes"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).resolve().parents[2]))


def _run_ids() -> set[str]:
    try:
        db = sqlite3.connect(str(resolve_journal_path()), timeout=5)
        try:
            return {r[0] for r in db.execute("SELECT id FROM runs")}
        finally:
            db.close()
    except sqlite3.OperationalError:
        return set()


def _wait_for_step(name_prefix: str, status: str, before: set[str], timeout_s: float = 60) -> str:
    """The run id once a run started after `before` (the run ids journaled before the spawn: the
    shared journal holds earlier tests' runs) journals a step starting with `name_prefix` in `status`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            db = sqlite3.connect(str(resolve_journal_path()), timeout=5)
            rows = db.execute("SELECT r.id FROM runs r JOIN steps s ON s.run_id = r.id WHERE s.name LIKE ? "
                              "AND s.status = ? AND s.action = 'run'", (name_prefix + "%", status)).fetchall()
            db.close()
            fresh = [r[0] for r in rows if r[0] not in before]
            if fresh:
                return fresh[0]
        except sqlite3.OperationalError:
            pass
        time.sleep(0.005)
    raise AssertionError(f"no step {name_prefix!r} {status} within {timeout_s}s")


def test_sigterm_during_the_cutover_finishes_the_step_then_rolls_back(boxes):
    name = "sigterm"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    before = _run_ids()
    proc = _spawn_run(kit.playbook(state, name))
    try:
        run_id = _wait_for_step("fence", "done", before)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out, err)
    assert "SIGTERM: stopping" in err
    run = _last_run(run_id)
    assert run["status"] == "rolled_back" and "cancelled by the operator" in run["summary"], run["summary"]
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"]
    _replicating_from(shape, f"{name}-1", [f"{name}-2", f"{name}-3", f"{name}-new"])
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)


def test_a_second_sigterm_interrupts_the_step_and_says_so_then_rollback_converges(boxes, cli):
    name = "sigtwice"
    state, inv = kit.topology(boxes, name)
    replica_pid = state.instance(f"{name}-3").pid()
    v = kit.start_verifier(inv, name)
    before = _run_ids()
    proc = _spawn_run(kit.playbook(state, name))
    try:
        run_id = _wait_for_step("fence", "done", before)
        os.kill(replica_pid, signal.SIGSTOP)  # repointing it will wait (up to replica_timeout_s, 30 s)
        _wait_for_step("repoint replicas", "started", before)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        os.kill(replica_pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "SIGTERM again: interrupting in step 'repoint replicas'" in err
    run = _last_run(run_id)
    assert run["status"] == "interrupted"
    assert "in step 'repoint replicas', which may be half done" in run["summary"], run["summary"]
    assert f"dbmigrate rollback {run_id}" in run["summary"]
    back = cli("rollback", run_id, "--yes")
    assert back.returncode == 0, back.stdout + back.stderr
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"]
    _replicating_from(shape, f"{name}-1", [f"{name}-2", f"{name}-3", f"{name}-new"])
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)
