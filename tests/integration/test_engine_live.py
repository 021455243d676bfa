"""The runbook engine on real servers: dry-run, SIGKILL + resume, the cluster lock, hooks.

One topology (primary, two replicas, a candidate `-new`, HAProxy) serves the
whole module. The tests run in file order and each one leaves the cluster as
it found it (the old primary writable), except the last, which ends with the
candidate promoted; each test checks its starting shape first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dbmigrate.faultpoint import ENV_FILE, ENV_MAX_S, ENV_POINT
from dbmigrate.rehearsal.faultmatrix.harness import wait_pause
from dbmigrate.app.runs import resolve_journal_path, rollback_run, start_run
from dbmigrate.db.credentials import parse_option_file
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.routing import router_for

from tests.conftest import run_cli
from tests.integration import promote_kit as kit
from tests import jsonlines

pytestmark = pytest.mark.integration

NAME = "englive"
OLD, NEW = f"{NAME}-1", f"{NAME}-new"
REPLICAS = (f"{NAME}-2", f"{NAME}-3")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(boxes):
    state, inv = kit.topology(boxes, NAME)
    yield state, inv
    boxes.down(NAME)


# -- helpers ---------------------------------------------------------------------

def snapshot(inv) -> dict:
    """What a run may change: binlog position, read_only, replication source; and the router's writer."""
    out = {}
    for name in inv.cluster(NAME).servers:
        with inv.open(name) as srv:
            insp = Inspector(srv)
            st = insp.replica_status()
            out[name] = {"gtid_binlog_pos": insp.gtid_binlog_pos(), "read_only": insp.read_only(),
                         "source": (st.source_host, st.source_port) if st else None,
                         "running": bool(st and st.running)}
    out["router_writer"] = router_for(inv, NAME).current().writer
    return out


def assert_original_shape(inv) -> None:
    shape = kit.shape(inv, NAME)
    assert kit.writers(shape) == [OLD], shape
    for name in (*REPLICAS, NEW):
        assert shape[name]["source"] == OLD and shape[name]["running"], (name, shape[name])


def secrets(state) -> list[str]:
    groups = parse_option_file(state.credentials_file)
    found = [groups[g]["password"] for g in ("client-admin", "client-repl", "client-app") if groups[g].get("password")]
    assert len(found) == 3, "the sandbox credentials file should hold three passwords"
    return found


def assert_no_secret(what: str, data: bytes | str, state) -> None:
    blob = data if isinstance(data, bytes) else data.encode()
    for secret in secrets(state):
        assert secret.encode() not in blob, f"a password from credentials.cnf appears in {what}"


def show(run_id: str) -> tuple[dict, str]:
    r = run_cli("runs", "show", run_id, "--json")
    assert r.returncode == 0, r.stderr
    return jsonlines.result(r.stdout), r.stdout


def set_candidate_delay(inv, seconds: int) -> None:
    with inv.open(NEW) as c:
        c.execute("STOP SLAVE")
        c.execute(f"CHANGE MASTER TO MASTER_DELAY={int(seconds)}")
        c.execute("START SLAVE")


def run_id_from_json_lines(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("run_id"):
                return event["run_id"]
    raise AssertionError(f"no run id in the JSON output: {text[:500]}")


# -- 1. dry-run ----------------------------------------------------------------------

def test_dry_run_changes_nothing_and_lists_every_statement(cluster):
    state, inv = cluster
    assert_original_shape(inv)
    pb = kit.playbook(state, NAME)
    before = snapshot(inv)

    r = run_cli("run", str(pb), "--dry-run", "--yes")

    assert r.returncode == 0, r.stdout + r.stderr
    assert snapshot(inv) == before  # not a single GTID, flag, source or route changed
    assert "dry run" in r.stdout
    detail, raw = show("last")
    assert detail["playbook"] == str(pb.resolve()) and detail["dry_run"] is True
    assert detail["status"] == "done", detail["summary"]
    assert {s["status"] for s in detail["steps"]} <= {"dry-run", "skipped", "done"}
    statements = detail["statements"]
    assert statements and all(s["dry_run"] for s in statements)
    sent = [(s["server"], s["sql"]) for s in statements]
    assert (OLD, "SET GLOBAL read_only=ON") in sent  # the fence
    assert (NEW, "STOP SLAVE") in sent
    assert (NEW, "SET GLOBAL read_only=OFF") in sent
    assert (NEW, "RESET SLAVE ALL") in sent
    changes = [(srv, sql) for srv, sql in sent if sql.startswith("CHANGE MASTER TO")]
    # two replicas repointed to the candidate, the old primary under it (reverse replication)
    assert {srv for srv, _ in changes} == {*REPLICAS, OLD}, changes
    assert all("MASTER_PASSWORD='***'" in sql for _, sql in changes), changes
    new_port = inv.cluster(NAME).servers[NEW].port
    assert all(f"MASTER_PORT={new_port}" in sql for _, sql in changes)
    router = [sql for srv, sql in sent if srv == "router"]
    assert any("state ready" in line and "state maint" in line for line in router), router
    assert any(sql.startswith("REPLACE INTO dbmigrate.switchover_probe") for srv, sql in sent if srv == NEW)
    # Steps say what they would send rather than "does not describe".
    fence = next(s for s in detail["steps"] if s["name"] == f"fence {OLD}")
    assert fence["status"] == "dry-run" and "read_only=ON" in fence["sentence"], fence

    assert_no_secret("the CLI output", r.stdout + r.stderr, state)
    assert_no_secret("runs show --json", raw, state)
    journal = resolve_journal_path()
    for path in (journal, Path(f"{journal}-wal")):
        if path.exists():
            assert_no_secret(f"the journal file {path.name}", path.read_bytes(), state)


# -- 4. a failing hook ---------------------------------------------------------------

def test_failing_hook_stops_the_run_before_cutover(cluster):
    state, inv = cluster
    assert_original_shape(inv)
    hook = state.path / "change-freeze.sh"
    hook.write_text('#!/bin/sh\n'
                    'if [ "$DBMIGRATE_PHASE" = cutover ]; then\n'
                    '  echo "change freeze until 06:00: cutover refused by $DBMIGRATE_RUN_ID" >&2\n'
                    '  exit 3\n'
                    'fi\n')
    hook.chmod(0o755)
    pb = kit.playbook(state, NAME, hooks={"before_phase": [f"./{hook.name}"]})
    before = snapshot(inv)

    r = run_cli("run", str(pb), "--yes", "--json")

    assert r.returncode == 1, r.stdout + r.stderr
    run_id = run_id_from_json_lines(r.stdout)
    after = snapshot(inv)
    assert {n: v["read_only"] for n, v in after.items() if n != "router_writer"} == \
        {n: v["read_only"] for n, v in before.items() if n != "router_writer"}  # nothing fenced, nothing opened
    assert after["router_writer"] == before["router_writer"]
    assert_original_shape(inv)
    detail, _ = show(run_id)
    assert detail["status"] in ("rolled_back", "failed")
    assert "before_phase hook for phase 'cutover' failed" in detail["summary"], detail["summary"]
    assert not [s for s in detail["steps"] if s["phase"] == "cutover"], detail["steps"]
    failed = [h for h in detail["hooks"] if h["status"] != "ok"]
    assert len(failed) == 1, detail["hooks"]
    assert failed[0]["command"].endswith("change-freeze.sh")
    assert failed[0]["exit_code"] == 3 and failed[0]["phase"] == "cutover"
    assert f"change freeze until 06:00: cutover refused by {run_id}" in failed[0]["stderr_tail"]
    # the earlier phases' hooks ran and passed
    assert {h["phase"] for h in detail["hooks"] if h["status"] == "ok"} == {"preflight", "prepare"}


# -- 3 + 5. the cluster lock, and what a finished run shows ----------------------------

def test_second_run_is_refused_while_the_first_holds_the_lock(cluster):
    state, inv = cluster
    assert_original_shape(inv)
    v = kit.start_verifier(inv, NAME)
    pb_a = kit.playbook(state, NAME, gates=[{"name": "go", "kind": "manual", "before": "cutover"}])
    pb_b = kit.playbook(state, NAME)
    at_gate, release = threading.Event(), threading.Event()
    seen: dict = {}

    def slow_operator(waiting):
        seen["run_id"] = waiting.run_id
        at_gate.set()
        return release.wait(60), "approved after the other run was refused"

    result: dict = {}
    a = threading.Thread(target=lambda: result.update(outcome=start_run(pb_a, approver=slow_operator)))
    a.start()
    try:
        assert at_gate.wait(60), "run A never reached its manual gate"
        r = run_cli("run", str(pb_b), "--yes")
    finally:
        release.set()
        a.join(120)
    assert r.returncode == 5, r.stdout + r.stderr  # refused before any change
    assert f"cluster '{NAME}' is locked by run {seen['run_id']}" in r.stderr, r.stderr
    assert "hint: wait for that run to finish" in r.stderr
    outcome = result["outcome"]
    assert outcome.run_id == seen["run_id"]
    assert outcome.status == "done", outcome.summary
    shape = kit.shape(inv, NAME)
    assert kit.writers(shape) == [NEW], shape
    assert shape[OLD] == {"read_only": True, "source": NEW, "running": True}

    # runs show --json: every step with its status and the sentence of what it did
    detail, _ = show(outcome.run_id)
    assert detail["status"] == "done"
    steps = {(s["phase"], s["name"]): s for s in detail["steps"]}
    assert all(s["status"] in ("done", "skipped") and s["sentence"] for s in detail["steps"]), detail["steps"]
    # the catch-up wait may find the candidate already there (skipped); everything else did its work
    assert [k for k, s in steps.items() if s["status"] != "done"] in ([], [("cutover", f"wait for {NEW} to catch up")])
    assert "fenced" in steps[("cutover", f"fence {OLD}")]["sentence"]
    assert "router sends writes to" in steps[("cutover", "switch router")]["sentence"]
    assert f"{OLD} replicates from {NEW}" in steps[("cutover", f"reverse replication {OLD} <- {NEW}")]["sentence"]
    assert "reached" in steps[("verify", "verify writes flow")]["sentence"]
    gates = {g["name"]: g for g in detail["gates"]}
    assert gates["go"]["decided_by"] == "operator" and gates["preflight"]["ok"]
    # B never started anything: it was refused before any change and holds no step
    with Journal(resolve_journal_path()) as j:
        b = j.list_runs(5)
    b_run = next(x for x in b if x["playbook"] == str(pb_b.resolve()))
    assert b_run["status"] == "refused" and "locked by run" in b_run["summary"]

    back = rollback_run(outcome.run_id, assume_yes=True)
    assert back.status == "rolled_back", back.summary
    report = kit.finish_verifier(v, inv, NAME)
    assert report.lost_total == 0, report.summary()
    assert_original_shape(inv)


# -- 2. SIGKILL in the middle of a step, then resume -------------------------------------

def test_run_killed_mid_step_completes_under_resume(cluster):
    state, inv = cluster
    assert_original_shape(inv)
    v = kit.start_verifier(inv, NAME)
    set_candidate_delay(inv, 3)  # the catch-up wait after the fence now lasts ~3 s
    pb = kit.playbook(state, NAME, params={"max_lag_ms": 60000, "catchup_timeout_s": 30})
    catchup = f"wait for {NEW} to catch up"

    # Inside the fenced window the --json lines are written when it closes, so the kill is
    # timed by a pause point: right after the catch-up's first wait came back short.
    marker = Path(state.path) / "killed-mid-step.paused"
    proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", "run", str(pb), "--yes", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                            env={**os.environ, "COLUMNS": "200", ENV_POINT: "in:wait for:master_gtid_wait",
                                 ENV_FILE: str(marker), ENV_MAX_S: "60"})
    try:
        assert wait_pause(proc, marker, 90), "the run never reached the catch-up wait"
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        marker.unlink(missing_ok=True)
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    run_id = next(json.loads(line)["run_id"] for line in out.splitlines() if json.loads(line).get("run_id"))

    with Journal(resolve_journal_path()) as j:
        run = j.get_run(run_id)
        steps = {(s["phase"], s["name"]): s["status"] for s in j.step_rows(run_id)}
    assert run.status == "running" and run.finished_at is None
    assert steps[("cutover", f"fence {OLD}")] == "done"
    assert steps[("cutover", catchup)] == "started"  # the SIGKILL left it mid-step
    dead = kit.shape(inv, NAME)
    assert kit.writers(dead) == []  # fenced while the tool is dead; never two writers

    r = run_cli("resume", run_id, "--yes", timeout=120)

    assert r.returncode == 0, r.stdout + r.stderr
    detail, _ = show(run_id)
    assert detail["status"] == "done", detail["summary"]
    final = kit.shape(inv, NAME)
    assert kit.writers(final) == [NEW], final
    assert final[OLD] == {"read_only": True, "source": NEW, "running": True}
    for replica in REPLICAS:
        assert final[replica]["source"] == NEW and final[replica]["running"], (replica, final[replica])
    new_port = inv.cluster(NAME).servers[NEW].port
    assert router_for(inv, NAME).current().writer.endswith(f":{new_port}")
    report = kit.finish_verifier(v, inv, NAME)
    assert report.lost_total == 0, report.summary()
    assert report.acknowledged > 100
