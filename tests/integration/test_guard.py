"""The latency guard on real servers under load: a regression rolls back by itself,
no regression does not, and a crash with a slow-log window open is repaired."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration import promote_kit as kit
from tests import jsonlines

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _hidden_from_the_tool(report: dict) -> None:
    """--remote: every instance reached over ssh, its directory out of the tool's sight (as root)."""
    remote = report["remote"]
    assert remote["hosts"] == "ssh"
    if os.geteuid() == 0:
        assert len(remote["hidden"]) == 4, remote  # primary, two replicas, candidate
    else:
        assert remote["not_hidden_because"], remote


def test_regression_rolls_back_within_30s_without_loss(cli):
    """Run from an ops host: the guard's baseline and windows come over ssh."""
    r = cli("rehearse", "promote", "--remote", "--regress", "--json", "--load-seconds", "2", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[:3000]
    report = jsonlines.result(r.stdout)
    assert report["rolled_back"] is True
    assert report["lost_writes"] == 0
    assert report["guard"], (report["run_status"], report.get("guard_windows"))  # the guard decided, not a failure
    assert report["guard"]["rollback"] is True and report["guard"]["reasons"]
    assert report["rollback_s"] is not None and report["rollback_s"] < 30
    assert report["new_primary"].endswith("-1")  # back on the old primary
    _hidden_from_the_tool(report)


def test_no_regression_no_rollback(cli):
    r = cli("rehearse", "promote", "--remote", "--json", "--load-seconds", "2", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[:3000]
    report = jsonlines.result(r.stdout)
    assert report["rolled_back"] is False and report["run_status"] == "done"
    assert report["lost_writes"] == 0
    judged = [w for w in report["guard_windows"] if not w["insufficient"]]
    assert judged, report["guard_windows"]  # the guard really compared traffic
    assert not any(w["rollback"] for w in report["guard_windows"])
    # The before/after comparison every cutover produces: baseline on the old primary vs the new one.
    assert report["digest"]["avg"].startswith("average query latency")
    assert report["digest"]["comparison"]["overall"]["p95"]["before"] > 0
    assert report["old_primary_replicating"] is True
    _hidden_from_the_tool(report)


def test_crash_with_window_open_is_restored_by_rollback(boxes):
    name = "guardcrash"
    state, inv = kit.topology(boxes, name)
    with inv.open(f"{name}-1") as p:
        p.execute("SET GLOBAL long_query_time=2.5")
        p.execute("SET GLOBAL slow_query_log=OFF")
    pb = kit.playbook(state, name, params={"baseline_seconds": 30},
                      guard={"window_s": 10, "min_samples": 10, "rules": [
                          {"metric": "avg", "scope": "overall", "max_regression_pct": 100}]})
    proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", "run", str(pb), "--yes", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=os.environ.copy())
    run_id = None
    deadline = time.monotonic() + 60
    try:
        for line in proc.stdout:
            ev = json.loads(line)
            run_id = ev.get("run_id") or run_id
            if ev.get("event") == "StepStarted" and ev.get("name") == "collect baseline digest":
                break
            assert time.monotonic() < deadline, "the run never reached the baseline capture"
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert run_id
    with inv.open(f"{name}-1") as p:
        assert float(p.scalar("SELECT @@GLOBAL.long_query_time")) == 0.0  # the window was left open
        assert int(p.scalar("SELECT @@GLOBAL.slow_query_log")) == 1
    time.sleep(1)  # the dead process's lock session is gone once the server notices
    r = subprocess.run([sys.executable, "-m", "dbmigrate", "rollback", run_id, "--yes"], capture_output=True,
                       text=True, cwd=ROOT, env=os.environ.copy(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with inv.open(f"{name}-1") as p:
        assert float(p.scalar("SELECT @@GLOBAL.long_query_time")) == 2.5
        assert int(p.scalar("SELECT @@GLOBAL.slow_query_log")) == 0
        assert p.scalar("SELECT @@GLOBAL.read_only") == 0
    boxes.down(name)
