"""A physical copy's progress and what it costs the source: the progress figures never say
100% or 0 s before the copy ends, the estimate grows when the copy outgrows it, the backup's
locking stages are read from its stderr, and the copy is never paced (nor paused) while the
source holds the backup's commit lock."""

from __future__ import annotations

import threading
import time

import pytest

from dbmigrate.procedures.consolidate.backup_phases import BackupPhases
from dbmigrate.procedures.consolidate.physical_seed import NOT_COPIED, backup_command, copy_estimate
from dbmigrate.procedures.consolidate.throttle import MB, Limits, Meter, Valve, Watcher, mb_text, progress_of


@pytest.mark.parametrize("done", [0, 1, 10 * MB, 98 * MB, 99 * MB, 99.6 * MB, 100 * MB, 140 * MB, 10_000 * MB])
def test_a_running_copy_never_reads_100_percent_nor_0_s(done):
    p = progress_of(int(done), 100 * MB, 5 * MB)
    assert p.pct is not None and p.pct <= 99.0
    assert round(100 * p.done / p.total) <= 99  # any share a board computes from these bytes too
    assert p.total >= p.done
    assert p.eta_s is None or p.eta_s >= 1
    assert "100%" not in p.share_text() and p.eta_text() != "0 s"


def test_the_estimate_grows_when_the_copy_outgrows_it_and_the_eta_becomes_unknown():
    within = progress_of(50 * MB, 100 * MB, 10 * MB)
    assert (within.total, within.grown, within.eta_s) == (100 * MB, False, 5.0)
    assert within.share_text() == "50 MB of ~100 MB (50%)"
    past = progress_of(120 * MB, 100 * MB, 10 * MB)
    assert past.grown and past.total > 120 * MB and past.eta_s is None and past.eta_text() == "?"
    assert "past the estimate of 100 MB" in past.share_text() and "(99%" in past.share_text()


def test_only_the_end_says_100_percent():
    end = progress_of(120 * MB, 100 * MB, 10 * MB, finished=True)
    assert (end.pct, end.eta_s, end.total, end.finished) == (100.0, 0.0, 120 * MB, True)
    assert end.share_text() == "120 MB copied (done)"


@pytest.mark.parametrize("estimate", [None, 0])
def test_no_estimate_gives_no_share_and_no_eta_never_of_0_mb(estimate):
    p = progress_of(14 * MB, estimate, 1 * MB)
    assert (p.total, p.pct, p.eta_s) == (None, None, None)
    assert p.share_text() == "14 MB copied" and "of ~" not in p.share_text()


def test_a_small_estimate_is_never_shown_as_0_mb():
    p = progress_of(100_000, 300_000, 1 * MB)
    assert p.share_text() == "0.1 MB of ~0.3 MB (33%)"
    assert mb_text(2_000) == "2 kB" and mb_text(0) == "0 MB" and mb_text(5.25 * MB) == "5.2 MB"


class _Host:
    """A host's `du`: records the command it was asked to run."""

    name = "h"

    def __init__(self, out: str):
        self.out, self.argv = out, None

    def tree_bytes(self, path, exclude=()):
        from dbmigrate.hosts.base import parse_du_bytes

        self.argv = (path, list(exclude))
        return parse_du_bytes(self.out, self.name, path)


def test_the_estimate_is_the_datadir_without_logs_and_runtime_files():
    h = _Host("734003200\t/var/lib/mysql\n")
    assert copy_estimate(h, "/var/lib/mysql", ["mysql-bin", "relay-bin"]) == 734003200
    path, exclude = h.argv
    assert path == "/var/lib/mysql" and {"mysql-bin.*", "relay-bin.*", "ib_logfile*"} <= set(exclude)
    assert set(NOT_COPIED) <= set(exclude)


def test_the_backup_polls_its_redo_copy_often_so_its_commit_lock_is_short():
    argv = backup_command("/tmp/x/backup.cnf", "/tmp/x/t", "/var/lib/mysql")
    assert argv[1] == "--defaults-file=/tmp/x/backup.cnf" and "--log-copy-interval=10" in argv


# mariadb-backup 10.11's stderr at the end of a copy, as measured (prefixes shortened).
TAIL = """[00] 2026-11-28 02:21:13 Finished BACKUP STAGE START
[00] 2026-11-28 02:21:13 Starting BACKUP STAGE FLUSH
[00] 2026-11-28 02:21:13 Acquired locks for BACKUP STAGE FLUSH
[00] 2026-11-28 02:21:14 Started BACKUP STAGE BLOCK_DDL
[01] 2026-11-28 02:21:14 Streaming ./shard/items.frm to <STDOUT>
[00] 2026-11-28 02:21:14 Starting BACKUP STAGE BLOCK_COMMIT
[00] 2026-11-28 02:21:14 Acquired locks for BACKUP STAGE BLOCK_COMMIT
[00] 2026-11-28 02:21:14 Waiting for log copy thread to read lsn 51718389
[00] 2026-11-28 02:21:15 Streaming xtrabackup_binlog_info
[00] 2026-11-28 02:21:15 Executing FLUSH NO_WRITE_TO_BINLOG ENGINE LOGS...
[00] 2026-11-28 02:21:16 Finishing BACKUP STAGE BLOCK_COMMIT
[00] 2026-11-28 02:21:16 Starting BACKUP STAGE END
[00] 2026-11-28 02:21:16 Executing BACKUP STAGE END
[00] 2026-11-28 02:21:16 All tables unlocked
[00] 2026-11-28 02:21:16 completed OK!""".splitlines()


def test_the_locking_stages_are_read_from_the_backups_stderr_and_timed():
    now = [0.0]
    seen = []
    ph = BackupPhases(clock=lambda: now[0], on_change=lambda p: seen.append((p.phase, p.locking)))
    ph.feed("[00] 2026-11-28 02:21:04 Streaming ./shard/items.ibd")
    assert not ph.locking and ph.reason() is None
    for i, line in enumerate(TAIL):
        now[0] = float(i)
        ph.feed(line)
        if "Starting BACKUP STAGE BLOCK_COMMIT" in line:
            assert ph.locking and "BLOCK_COMMIT" in ph.reason()
    assert not ph.locking and ph.phase == "completed"
    # FLUSH (line 1) to the unlock (line 13); BLOCK_COMMIT (line 5) to the unlock.
    assert ph.locked_s == 12.0 and ph.commit_lock_s == 8.0
    assert seen[0] == ("BACKUP STAGE FLUSH", True) and ("unlocked", False) in seen


def test_ftwrl_of_older_servers_counts_as_a_commit_lock():
    now = [0.0]
    ph = BackupPhases(clock=lambda: now[0])
    ph.feed("[00] Executing FLUSH TABLES WITH READ LOCK...")
    assert ph.locking and "FTWRL" in ph.reason()
    now[0] = 0.5
    ph.feed("[00] All tables unlocked")
    assert not ph.locking and ph.commit_lock_s == 0.5


def _wait(pred, s=5.0):
    deadline = time.monotonic() + s
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.02)
    return pred()


def test_the_copy_is_neither_paced_nor_paused_while_the_backup_holds_its_lock():
    locked = threading.Event()
    valve = Valve()
    w = Watcher(valve, Meter(), probe=lambda: None, lag=lambda: None, cap=lambda: 2 * MB,
                limits=Limits(2 * MB, 50, None), total_bytes=None, probe_per_s=50, window_s=1, progress_every_s=60,
                report=lambda t, f: None, held=lambda: True,  # the operator paused the copies
                locked=lambda: "not paced: the backup holds BACKUP STAGE BLOCK_COMMIT on the source"
                if locked.is_set() else None)
    w.start()
    try:
        assert _wait(lambda: valve.rate == 0), w.decision  # held by the operator
        locked.set()
        assert _wait(lambda: valve.rate is None), w.decision
        assert "BLOCK_COMMIT" in w.decision.reason
        locked.clear()
        assert _wait(lambda: valve.rate == 0), w.decision
    finally:
        w.stop()


def test_slow_commits_pause_the_copy_but_those_under_the_backups_lock_do_not():
    slow, locked = threading.Event(), threading.Event()
    valve = Valve()
    w = Watcher(valve, Meter(), probe=lambda: None, lag=lambda: None, cap=lambda: None,
                limits=Limits(None, 20, None), total_bytes=None, probe_per_s=100, window_s=0.5, progress_every_s=60,
                report=lambda t, f: None, write_probe=lambda: time.sleep(0.04 if slow.is_set() else 0),
                write_probe_per_s=100, locked=lambda: "locked" if locked.is_set() else None)
    w.start()
    try:
        time.sleep(0.5)
        assert valve.rate is None and w.pauses == 0  # quick reads, quick commits
        slow.set()
        assert _wait(lambda: valve.rate == 0), w.decision  # reads still quick: the writes paused it
        assert "p99.9" in w.decision.reason and w.worst_write_p999_ms >= 20
        locked.set()
        assert _wait(lambda: valve.rate is None)
        slow.clear()
        time.sleep(0.1)
        locked.clear()
        # The slow commits of the lock stay out of the decision: the copy goes on at once.
        assert _wait(lambda: w.decision.reason != "locked", 2) and valve.rate is None, w.decision
        assert w.longest_write_under_lock_ms is not None and w.longest_write_ms >= 40
    finally:
        w.stop()
    text, fig = w.progress()
    assert fig["longest_write_ms"] >= 40 and "writes" in text


def test_provisioning_says_each_task_and_at_least_every_10_s_which_instances_it_finished():
    from dbmigrate.hosts.ansible import AnsibleProgress

    now, said = [0.0], []
    p = AnsibleProgress(said.append, every_s=10, clock=lambda: now[0])
    p.tick()
    assert said == []  # nothing started yet
    p.feed("TASK [system tables of each instance] *****************************")
    assert said == ["provisioning (0 s): system tables of each instance"]
    now[0] = 4
    p.feed("changed: [h1] => (item=h1-1)")
    p.tick()
    assert len(said) == 1  # less than 10 s since the last line
    now[0] = 10
    p.tick()
    assert said[-1] == "provisioning (10 s): system tables of each instance running for 10 s; done for h1-1"
    now[0] = 15
    p.feed("changed: [h2] => (item=h2-1)")
    p.tick()
    assert len(said) == 2
    now[0] = 20
    p.tick()
    assert said[-1].endswith("running for 20 s; done for h1-1, h2-1")
    now[0] = 21
    p.feed("TASK [start each instance] ****")
    assert said[-1] == "provisioning (21 s): start each instance"
