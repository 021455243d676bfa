"""The fence under plain application load: `SET GLOBAL read_only=ON` waits for running
statements, and every new write queues behind it. An UPDATE waiting on another transaction's
row lock would hold the fence (and so every write) for the whole lock_wait_timeout; the
watchdog bounds that to fence_block_s (half a second by default), or to its early look when
the statement waits on a row lock, then gives up or ends the blocking statement, per the
playbook. Before the fence, the convergence waits (bounded) for a moment with no row-lock wait."""

from __future__ import annotations

import threading
import time

import pymysql
import pytest

from dbmigrate.engine.events import StepStarted

from dbmigrate.app.runs import start_run
from dbmigrate.config import load_inventory
from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError
from dbmigrate.db.inspector import Inspector
from dbmigrate.procedures.kit.fence_watch import FenceWatch
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration


class RowLockChain:
    """T1 holds a row lock in an idle open transaction; T2's UPDATE of that row waits on it
    (a running statement the fence must wait for), as two application sessions would."""

    def __init__(self, inv, cluster: str, server: str) -> None:
        spec, creds = inv.cluster(cluster).servers[server], inv.app_credentials(cluster)
        self.connect = lambda: pymysql.connect(host=spec.host, port=spec.port, user=creds.user,
                                               password=creds.password or "", autocommit=True, ssl_disabled=True)
        self.t1, self.t2 = self.connect(), self.connect()
        self.t2_error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "RowLockChain":
        with self.t1.cursor() as c:
            c.execute("CREATE TABLE IF NOT EXISTS app.fence_block (id INT PRIMARY KEY, v INT NOT NULL)")
            c.execute("INSERT IGNORE INTO app.fence_block VALUES (1, 0)")
            c.execute("BEGIN")
            c.execute("UPDATE app.fence_block SET v = v + 1 WHERE id = 1")
        self._thread = threading.Thread(target=self._blocked_update, daemon=True)
        self._thread.start()
        return self

    def _blocked_update(self) -> None:
        try:
            with self.t2.cursor() as c:
                c.execute("UPDATE app.fence_block SET v = v + 2 WHERE id = 1")
        except BaseException as e:  # ended by the watchdog (kill_blockers) or the rollback below
            self.t2_error = e

    def release_after(self, seconds: float) -> threading.Timer:
        """T1 commits after `seconds`: T2's UPDATE then runs and the fence is no longer blocked."""
        timer = threading.Timer(seconds, self.t1.commit)
        timer.start()
        return timer

    def __exit__(self, *exc: object) -> None:
        try:
            self.t1.rollback()
        except pymysql.err.OperationalError:
            pass  # its session was ended by the cutover (end application sessions)
        finally:
            if self._thread is not None:
                self._thread.join(timeout=30)
            self.t1.close()
            self.t2.close()



class release_when_the_fence_step_starts:
    """Ends the row-lock chain `seconds` after the run's fence step starts (a run subscriber)."""

    def __init__(self, chain: "RowLockChain", seconds: float) -> None:
        self.chain, self.seconds = chain, seconds
        self.timer: threading.Timer | None = None

    def on_event(self, event: object) -> None:
        if isinstance(event, StepStarted) and event.name.startswith("fence ") and self.timer is None:
            self.timer = self.chain.release_after(self.seconds)

    def join(self) -> None:
        assert self.timer is not None, "the fence step never started"
        self.timer.join()

def test_a_fence_behind_a_row_lock_wait_gives_up_at_the_early_look_not_after_fence_block_s(boxes):
    """The statement the fence waits for waits on a row lock whose holder cannot go on: the
    watchdog sees it at its early look (5 ms) and gives up then, not after fence_block_s (0.5 s)."""
    name = "fblock"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    with RowLockChain(inv, name, f"{name}-1"):
        outcome = start_run(kit.playbook(state, name), assume_yes=True)  # fence_block_s: the default
    assert outcome.status == "refused", outcome.summary
    waited_ms = int(outcome.summary.split("waited ")[1].split(" ms behind running statement(s)")[0])
    assert 5 <= waited_ms < 100, outcome.summary
    assert "(row lock wait): 'UPDATE app.fence_block" in outcome.summary and "nothing changed" in outcome.summary
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-1"]
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    # Writes were held back by the fence for about fence_block_s, not lock_wait_timeout (5 s).
    assert report.max_gap_ms is not None and report.max_gap_ms < 1500, report.summary()
    boxes.down(name)


def test_a_kill_that_reaches_the_fence_session_before_its_statement_is_sent_again(boxes):
    """A KILL QUERY that reaches a session before the server began its statement is dropped
    when the statement begins (a starved core can delay the fence's start by ms): the watchdog
    kills the fence again until it returns, instead of leaving it, and every write behind it,
    to its lock_wait_timeout."""
    name = "fdrop"
    boxes.up(name, 1)
    inv = load_inventory(boxes.find(name).inventory_file)
    server = inv.open(f"{name}-1")
    server.scalar("SELECT 1")  # the session whose id the watchdog kills
    side = server.watcher(10)
    try:
        with RowLockChain(inv, name, f"{name}-1"):
            time.sleep(0.1)  # T2 now waits for T1's row lock: the early look counts it
            watch = FenceWatch(Inspector(side), Applier(side), Inspector(server).connection_id(), block_s=2.0)
            started = time.monotonic()
            with pytest.raises(QueryError) as failed:
                with watch:
                    time.sleep(0.1)  # the watchdog's first KILL reaches the idle session: dropped
                    Applier(server).fence_and_read_binlog_pos(4)
            took = time.monotonic() - started
        assert failed.value.errno == 1317, failed.value  # interrupted, not lock_wait_timeout (1205)
        assert watch.gave_up and watch.fence_kills >= 2, watch.timeline
        assert took < 1.0, watch.timeline
        assert not Inspector(server).read_only()
    finally:
        server.close()
        boxes.down(name)


def test_kill_blockers_ends_the_waiting_statement_and_the_cutover_goes_on(boxes):
    name = "fkill"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    with RowLockChain(inv, name, f"{name}-1") as chain:
        outcome = start_run(kit.playbook(state, name, {"on_fence_blocked": "kill_blockers"}), assume_yes=True)
    assert outcome.status == "done", outcome.summary
    assert chain.t2_error is not None and "interrupted" in str(chain.t2_error).lower(), chain.t2_error
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-new"]
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    assert report.max_gap_ms is not None and report.max_gap_ms < 1500, report.summary()
    boxes.down(name)


def test_a_blocked_fence_tried_again_after_the_blocker_ended_completes_the_cutover(boxes):
    name = "fretry"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    with RowLockChain(inv, name, f"{name}-1") as chain:
        # The first attempt (after the calm wait's 0.5 s) gives up at the early look; the second, 1 s later,
        # comes after T1 committed at 1.0 s and goes through.
        # Counted from the fence step's start (a loaded machine may spend longer than that in preflight).
        timers = release_when_the_fence_step_starts(chain, 1.0)
        outcome = start_run(kit.playbook(state, name, {"fence_attempts": 3, "fence_retry_pause_s": 1}),
                            assume_yes=True, subscribers=[timers.on_event])
        timers.join()
    assert outcome.status == "done", outcome.summary
    assert chain.t2_error is None
    fence = kit.fence_sentence(outcome.run_id)
    assert "(attempt 2 of 3)" in fence, fence
    shape = kit.shape(inv, name)
    assert kit.writers(shape) == [f"{name}-new"]
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    # Each attempt holds writes back for at most fence_block_s; they flow in between.
    assert report.max_gap_ms is not None and report.max_gap_ms < 1500, report.summary()
    boxes.down(name)


def test_the_fence_waits_outside_the_window_for_a_moment_with_no_row_lock_wait(boxes):
    """A row-lock chain that ends by itself (T1 commits after 0.3 s) while the candidate has
    converged: the fence is set only once no transaction waits for a row lock, at the first
    attempt, and no write waited behind it."""
    name = "fcalm"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)
    with RowLockChain(inv, name, f"{name}-1") as chain:
        # Counted from the fence step's start, not the run's: a loaded machine may spend
        # longer than the release delay in preflight, and the chain would be gone before it.
        timers = release_when_the_fence_step_starts(chain, 0.3)
        outcome = start_run(kit.playbook(state, name, {"fence_calm_wait_s": 5}), assume_yes=True,
                            subscribers=[timers.on_event])
        timers.join()
    assert outcome.status == "done", outcome.summary
    assert chain.t2_error is None
    fence = kit.fence_sentence(outcome.run_id)
    assert "attempt" not in fence and f"ms for no row-lock wait on {name}-1" in fence, fence
    waited_ms = float(fence.split("; waited ")[1].split(" ms for no row-lock wait")[0])
    assert 0 < waited_ms < 5000, fence
    assert kit.writers(kit.shape(inv, name)) == [f"{name}-new"]
    report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    boxes.down(name)



def test_a_refused_fence_names_what_blocks_writes_not_a_get_lock_mutex(boxes):
    """Applications take GET_LOCK mutexes (cron singletons, migrations) and keep them idle, and the
    tool holds its cluster lock the same way. MariaDB lists a user lock in METADATA_LOCK_INFO as
    MDL_SHARED_NO_WRITE, the mode of a write-blocking table lock; it blocks no write, so a fence
    given up behind a row-lock wait names that wait, never a mutex holder as a cause."""
    name = "fmutex"
    state, inv = kit.topology(boxes, name)
    spec, creds = inv.cluster(name).servers[f"{name}-1"], inv.app_credentials(name)
    app = pymysql.connect(host=spec.host, port=spec.port, user=creds.user, password=creds.password or "",
                          autocommit=True, ssl_disabled=True)
    try:
        with app.cursor() as c:
            c.execute("SELECT GET_LOCK('app_nightly_job', 0)")
            assert c.fetchone()[0] == 1
        with RowLockChain(inv, name, f"{name}-1"):
            outcome = start_run(kit.playbook(state, name), assume_yes=True)
    finally:
        app.close()
    assert outcome.status == "refused", outcome.summary
    assert "(row lock wait): 'UPDATE app.fence_block" in outcome.summary, outcome.summary
    assert "holds" not in outcome.summary, outcome.summary
    assert kit.writers(kit.shape(inv, name)) == [f"{name}-1"]
    boxes.down(name)
