"""A late statement can never undo a later decision, on real servers: the tool is killed -9 with a
role change in flight (its packets dropped by an iptables rule on the target's sandbox port, so
the dead process's kernel retransmits them after the heal), then the operator's one command
(`rollback`, `resume`) runs at once after the heal. Judged for 30 s after that command exits: never two
writable servers (a poller reading @@read_only of every server over unix sockets, every 10 ms),
no acknowledged write lost.

Before the fencing generations and the write-ahead intent, the first made two writable servers
for the rest of the run (the late open landed after the rollback had read the candidate
read-only and unfenced the old primary), the second too (the late fence re-armed the fence's
expiry on the old primary, by then a replica, and the expiry opened it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dbmigrate.engine.journal import Journal
from dbmigrate.rehearsal.faultmatrix import netfault
from dbmigrate.rehearsal.writable_monitor import WritableMonitor
from tests.integration import promote_kit


def _can_partition() -> bool:
    return shutil.which("iptables") is not None and \
        subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True).returncode == 0


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not _can_partition(), reason="needs iptables and the right to use it (root)"),
]

NAME = "late"
KILL_AFTER_S = 1.5  # the tool is killed this long after the statement's first packet (before it gives up)
# The partition ends this long after the statement. The dead process's kernel retransmits with a
# doubling backoff (measured here: the open landed 13.5 s after it was sent when healed at 7 s,
# 6.3 s after the heal). Healed at 7 s, the late statement lands while the operator's command is
# still starting on a busy 2-core machine (measured: the rollback read the candidate 6 s after it
# began, after the late open, and switched back safely by timing). Healed at 14 s it lands at the
# next retransmission, about 27 s after it was sent: after the command has decided, which is the
# hazard under test.
HEAL_AT_S = 14.0
JUDGED_S = 30.0  # after the operator's command exits
# What each role change looks like on the wire (the tool's tag is right before the open; the
# fence's own request carries `read_only=0` only, in its expiry's body).
OPEN_TEXT = "*/ SET GLOBAL read_only=OFF"
FENCE_TEXT = "read_only=ON"


@pytest.fixture(scope="module")
def cluster(boxes):
    state, inv = promote_kit.topology(boxes, NAME)
    yield state, inv
    assert netfault.remove_leftovers() == 0, "a fault rule outlived its test"


def _tool(*args: str, env: dict[str, str], out: Path) -> subprocess.Popen:
    with open(out, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "dbmigrate", *args], env=env, stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _monitor(state, inv) -> WritableMonitor:
    """@@read_only of every server over its unix socket: a partitioned port does not blind it."""
    app = inv.app_credentials(NAME)
    servers, sockets = {}, {}
    for n, spec in inv.cluster(NAME).servers.items():
        servers[n] = (spec.host, spec.port, app or inv.credentials_for(spec))
        sock = str(state.instance(n).spec.socket)
        if len(sock.encode()) < 100:
            sockets[n] = sock
    return WritableMonitor(servers, interval_s=0.01, sockets=sockets)


def _transitions(monitor: WritableMonitor, since: float) -> dict[str, list[tuple[float, bool]]]:
    """When each server became writable or not, in seconds after `since` (Unix time): what the
    verdict rests on, said in the failure message."""
    out = {}
    for name, samples in monitor.timelines.items():
        changes, last = [], None
        for t, writable in samples:
            if writable != last:
                changes.append((round(t - since, 2), writable))
                last = writable
        out[name] = changes
    return out


def _last_run(journal: Path) -> tuple[str, str]:
    with Journal(journal) as j:
        run = j.list_runs(1)[0]
    return run["id"], run["status"]


def _killed_in_flight(state, inv, tmp_path: Path, *, port: int, text: str, recovery: str,
                      params: dict, scope: netfault.Scope = "port") -> dict:
    """Run a promote, kill it -9 KILL_AFTER_S after `text` first reached `port` (dropped from
    then on), heal at HEAL_AT_S, run `recovery` at once; returns what was seen."""
    journal = tmp_path / "journal.sqlite"
    env = {**os.environ, "DBMIGRATE_JOURNAL": str(journal), "COLUMNS": "200"}
    out = tmp_path / "tool.out"
    pb = promote_kit.playbook(state, NAME, params)
    verifier = promote_kit.start_verifier(inv, NAME)
    monitor = _monitor(state, inv).start()
    seen: dict = {}
    at: dict[str, float] = {}
    try:
        with netfault.partition_at_statement(port, text, scope=scope) as trigger:
            proc = _tool("run", str(pb), "--yes", "--json", env=env, out=out)
            try:
                assert trigger.wait(90, alive=lambda: proc.poll() is None), \
                    f"the statement was never sent: {out.read_text()[-1500:]}"
                at["sent"] = time.time()
                time.sleep(KILL_AFTER_S)
                assert proc.poll() is None, f"the tool ended before it was killed: {out.read_text()[-1500:]}"
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                at["killed"] = time.time()
                time.sleep(HEAL_AT_S - KILL_AFTER_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
        at["healed"] = time.time()
        run_id, seen["run_status"] = _last_run(journal)
        recovering = _tool(recovery, run_id, "--yes", "--json", env=env, out=out)
        seen["recovery_exit"] = recovering.wait(180)
        at["recovered"] = time.time()
        seen["recovery_status"] = _last_run(journal)[1]
        time.sleep(JUDGED_S)
    finally:
        report = monitor.stop()
        since = at.get("sent", time.time())
        seen["at"] = {k: round(v - since, 2) for k, v in at.items()}
        seen["transitions"] = _transitions(monitor, since)
        seen["two_writable"] = report.two_writable_moments
        seen["monitor"] = report.to_dict()
        result = promote_kit.finish_verifier(verifier, inv, NAME)
    seen["lost"] = {n: len(ids) for n, ids in result.lost.items() if ids}
    seen["acknowledged"] = result.acknowledged
    seen["writers"] = promote_kit.writers(promote_kit.shape(inv, NAME))
    seen["output"] = out.read_text()[-2500:]
    return seen


def test_killed_with_the_open_in_flight_then_rollback_never_makes_two_writable(cluster, tmp_path):
    state, inv = cluster
    candidate = inv.cluster(NAME).servers[f"{NAME}-new"]
    seen = _killed_in_flight(state, inv, tmp_path, port=candidate.port, text=OPEN_TEXT, recovery="rollback",
                             params={"catchup_timeout_s": 5})
    summary = {k: v for k, v in seen.items() if k != "output"}
    assert seen["run_status"] == "running", summary  # killed: the journal still says running
    assert seen["recovery_exit"] == 0 and seen["recovery_status"] == "rolled_back", seen
    assert seen["two_writable"] == 0, summary
    assert seen["lost"] == {} and seen["acknowledged"] > 0, summary
    assert seen["writers"] == [f"{NAME}-1"], summary


def test_killed_with_the_fence_in_flight_then_resume_never_makes_two_writable(cluster, tmp_path):
    state, inv = cluster
    old = promote_kit.writers(promote_kit.shape(inv, NAME))
    assert old == [f"{NAME}-1"], "the previous test left the cluster elsewhere"
    # Only the fence's own connection is cut: the dead process's other sessions (its cluster lock
    # among them) close at once, as after a kill on a network that loses one flow's packets.
    seen = _killed_in_flight(state, inv, tmp_path, port=inv.cluster(NAME).servers[old[0]].port, text=FENCE_TEXT,
                             recovery="resume", params={"fence_timeout_s": 5, "catchup_timeout_s": 5},
                             scope="connection")
    summary = {k: v for k, v in seen.items() if k != "output"}
    assert seen["recovery_exit"] == 0 and seen["recovery_status"] == "done", seen
    assert seen["two_writable"] == 0, summary
    assert seen["lost"] == {} and seen["acknowledged"] > 0, summary
    assert seen["writers"] == [f"{NAME}-new"], summary
