"""The cluster lease on real servers: two operators with two journals cannot interleave on one
cluster, and the lease follows the primary (a run started after the primary moved is refused
by the lease row the new primary carries, where a fresh GET_LOCK would have been granted)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dbmigrate.db.inspector import Inspector
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _spawn(playbook: Path, journal: Path, pause: str | None = None, marker: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, COLUMNS="200")
    if pause:
        env.update(DBMIGRATE_FAULT_PAUSE=pause, DBMIGRATE_FAULT_PAUSE_FILE=str(marker), DBMIGRATE_FAULT_PAUSE_S="60")
    return subprocess.Popen([sys.executable, "-m", "dbmigrate", "run", str(playbook), "--yes", "--journal",
                             str(journal)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(ROOT))


def _wait_file(path: Path, procs: list[subprocess.Popen], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return
        if all(p.poll() is not None for p in procs):
            break
        time.sleep(0.01)
    outs = [p.communicate() if p.poll() is not None else ("(running)", "") for p in procs]
    raise AssertionError(f"{path.name} never appeared: {outs}")


def _runs(journal: Path) -> list[dict]:
    db = sqlite3.connect(str(journal))
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT id, status, summary FROM runs")]
    finally:
        db.close()


def _lease_row(inv, server: str, cluster: str) -> dict | None:
    with inv.open(server) as s:
        rows = s.query("SELECT run_id, holder, host, pid FROM dbmigrate.cluster_lease WHERE cluster=%s", (cluster,))
    return rows[0] if rows else None


def _finish(proc: subprocess.Popen, timeout_s: float = 90) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_two_runs_with_two_journals_started_together_one_proceeds_the_other_is_refused(boxes, tmp_path):
    name = "lease2"
    state, inv = kit.topology(boxes, name)
    playbook = kit.playbook(state, name)
    ja, jb = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    ma, mb = tmp_path / "a.paused", tmp_path / "b.paused"
    # Both would pause before the fence: whoever gets there holds the lease at that moment.
    a, b = _spawn(playbook, ja, "before:fence", ma), _spawn(playbook, jb, "before:fence", mb)
    procs = {"a": (a, ja, ma), "b": (b, jb, mb)}
    try:
        deadline = time.monotonic() + 60
        while not (ma.exists() or mb.exists()) and time.monotonic() < deadline:
            time.sleep(0.01)
        winner = "a" if ma.exists() else "b"
        loser = "b" if winner == "a" else "a"
        lp, ljournal, lmarker = procs[loser]
        lout, lerr = _finish(lp, 60)  # refused while the winner holds the cluster, paused
        assert not lmarker.exists(), "both runs reached the fence"
        wp, wjournal, wmarker = procs[winner]
        winner_run = _runs(wjournal)[0]["id"]
        row = _lease_row(inv, f"{name}-1", name)
        assert row is not None and row["run_id"] == winner_run and row["pid"] == wp.pid, row
        wmarker.unlink()  # let the winner go on
        wout, werr = _finish(wp)
    finally:
        for p, _, m in procs.values():
            m.unlink(missing_ok=True)
            if p.poll() is None:
                p.kill()
    assert lp.returncode == 5, (lout, lerr)  # refused before any change
    assert f"cluster '{name}' is leased to run {winner_run}" in lerr, lerr
    assert f"pid {wp.pid}" in lerr, lerr
    (loser_run,) = _runs(ljournal)
    assert loser_run["status"] == "refused" and "refused before any change" in loser_run["summary"], loser_run
    assert wp.returncode == 0, (wout, werr)
    assert _runs(wjournal)[0]["status"] == "done"
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-new"], shape
    # The winner released the lease on the server it made primary; every server saw it (replicated).
    for server in inv.cluster(name).servers:
        assert _lease_row(inv, server, name)["run_id"] == "", server
    boxes.down(name)


def test_a_run_started_after_the_primary_moved_is_refused_by_the_lease_the_new_primary_carries(boxes, tmp_path):
    name = "leasemv"
    state, inv = kit.topology(boxes, name)
    ja, jb = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    marker = tmp_path / "a.paused"
    a = _spawn(kit.playbook(state, name), ja, "after:reverse replication", marker)
    try:
        _wait_file(marker, [a])
        # The primary moved: NAME-new is writable, NAME-1 replicates from it. Run A is still alive.
        assert kit.writers(kit.shape(inv, name)) == [f"{name}-new"]
        run_a = _runs(ja)[0]["id"]
        assert _lease_row(inv, f"{name}-new", name)["run_id"] == run_a
        # Another operator, another journal, another candidate: its GET_LOCK would be on NAME-new.
        b = _spawn(kit.playbook(state, name, {"candidate": f"{name}-2"}), jb)
        bout, berr = _finish(b, 60)
        marker.unlink()
        aout, aerr = _finish(a)
    finally:
        marker.unlink(missing_ok=True)
        if a.poll() is None:
            a.kill()
    assert b.returncode == 5, (bout, berr)  # refused before any change
    assert f"cluster '{name}' is leased to run {run_a}" in berr, berr
    (run_b,) = _runs(jb)
    assert run_b["status"] == "refused" and "refused before any change" in run_b["summary"], run_b
    assert a.returncode == 0, (aout, aerr)
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-new"], shape  # B changed nothing
    assert shape[f"{name}-2"]["source"] == f"{name}-new" and shape[f"{name}-2"]["running"], shape
    boxes.down(name)


# -- the old primary dies right after the fence -----------------------------------------------

def _live_shape(inv, cluster: str, dead: str) -> dict:
    addr = {f"{s.host}:{s.port}": n for n, s in inv.cluster(cluster).servers.items()}
    out = {}
    for n in inv.cluster(cluster).servers:
        if n == dead:
            continue
        with inv.open(n) as srv:
            i = Inspector(srv)
            st = i.replica_status()
            out[n] = {"read_only": i.read_only(), "running": bool(st and st.running),
                      "source": addr.get(f"{st.source_host}:{st.source_port}") if st and st.source_host else None}
    return out


def test_old_primary_killed_after_the_fence_then_resume_without_it_completes_with_nothing_lost(boxes, tmp_path, cli):
    import signal

    from dbmigrate.routing import router_for

    name = "oldgone"
    state, inv = kit.topology(boxes, name)
    old_pid = state.instance(f"{name}-1").pid()
    journal = tmp_path / "j.sqlite"
    marker = tmp_path / "paused"
    v = kit.start_verifier(inv, name)
    proc = _spawn(kit.playbook(state, name), journal, "after:fence", marker)
    try:
        _wait_file(marker, [proc])
        time.sleep(0.3)  # the candidate and replicas receive the last writes before the fence
        os.kill(old_pid, signal.SIGKILL)
        marker.unlink()
        out, err = _finish(proc)
    finally:
        marker.unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
    (run,) = _runs(journal)
    assert run["status"] in ("failed", "rollback_failed"), (run, out, err)
    shape = _live_shape(inv, name, f"{name}-1")
    assert kit.writers(shape) == [], shape  # nobody writable: the old is dead, the candidate was never opened

    done = cli("resume", run["id"], "--without-old-primary", "--yes", "--journal", str(journal))
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert f"{name}-1 does not answer" in said and "final position journaled at the fence" in said, said
    assert f"{name}-new holds everything known" in said, said
    (run,) = _runs(journal)
    assert run["status"] == "done", run
    shape = _live_shape(inv, name, f"{name}-1")
    assert kit.writers(shape) == [f"{name}-new"], shape
    assert shape[f"{name}-new"]["source"] is None, shape
    for r in (f"{name}-2", f"{name}-3"):
        assert shape[r]["source"] == f"{name}-new" and shape[r]["running"], shape
    new = inv.cluster(name).servers[f"{name}-new"]
    assert router_for(inv, name).current().writer == f"{new.host}:{new.port}"
    v.wait_for_acks(len(v.acks) + 20, timeout_s=15)  # writes flow again, through the router, to NAME-new
    v.stop()
    servers = [inv.open(n) for n in inv.cluster(name).servers if n != f"{name}-1"]
    try:
        report = v.check(servers, catch_up_timeout_s=30)
    finally:
        for s in servers:
            s.close()
    assert report.acknowledged > 20 and report.lost_total == 0, report.summary()
    boxes.down(name)


def test_a_lease_left_by_a_killed_run_on_this_host_does_not_block_the_next_run(boxes, tmp_path):
    name = "leasekill"
    state, inv = kit.topology(boxes, name)
    ja, jb, marker = tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "a.paused"
    a = _spawn(kit.playbook(state, name), ja, "before:fence", marker)
    try:
        _wait_file(marker, [a])
        run_a = _runs(ja)[0]["id"]
        assert _lease_row(inv, f"{name}-1", name)["run_id"] == run_a
        a.kill()  # SIGKILL: the lease row stays, live for up to 30 s
        a.wait(timeout=10)
    finally:
        marker.unlink(missing_ok=True)
        if a.poll() is None:
            a.kill()
    b = _spawn(kit.playbook(state, name), jb)
    out, err = _finish(b)
    assert b.returncode == 0, (out, err)
    assert _runs(jb)[0]["status"] == "done"
    assert kit.writers(kit.shape(inv, name)) == [f"{name}-new"]
    boxes.down(name)
