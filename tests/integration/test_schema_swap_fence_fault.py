"""A schema swap whose fence takes effect and then fails (or whose tool is killed right
after read_only=ON): rollback must leave the original primary writable, the router on
it, the replicas under it, and lose no acknowledged write.

The fence is the one step undone even when it did not finish (undo_if_started): its
effect, read_only on the primary, is in place before the step can fail. A cutover
whose steps lose that flag leaves the primary read-only after a run that reports
`rolled_back`, which is what these tests catch.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from contextlib import contextmanager

import pytest
import yaml

from dbmigrate.app.runs import resolve_journal_path, start_run
from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit.switchover import Switchover
from dbmigrate.rehearsal.readload import create_orders
from dbmigrate.rehearsal.sandbox import haproxy
from dbmigrate.routing import router_for

from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

NAME = "swapfault"
PRIMARY, CANDIDATE, OTHER = f"{NAME}-1", f"{NAME}-2", f"{NAME}-3"


@pytest.fixture(scope="module")
def cluster(boxes):
    boxes.up(NAME, 2)
    haproxy.start(boxes, NAME)
    state = boxes.find(NAME)
    inv = load_inventory(state.inventory_file)
    with inv.open(PRIMARY) as p:
        create_orders(p, rows=2000, customers=200)
        pos = Inspector(p).gtid_binlog_pos()
    for r in (CANDIDATE, OTHER):
        with inv.open(r) as s:
            assert Inspector(s).wait_for_gtid(pos, 10)
    yield state, inv
    boxes.down(NAME)


def playbook(state, column: str):
    doc = {"procedure": "schema-swap", "inventory": str(state.inventory_file), "cluster": NAME,
           "params": {"ddl": [f"ALTER TABLE app.orders ADD COLUMN {column} INT NULL"], "candidate": CANDIDATE,
                      "drain_timeout_s": 2, "catchup_timeout_s": 3, "max_lag_ms": 2000}}
    path = state.path / f"fence-fault-{column}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def addr(inv, name: str) -> str:
    s = inv.cluster(NAME).servers[name]
    return f"{s.host}:{s.port}"


def assert_original_primary_serves(inv) -> None:
    shape = kit.shape(inv, NAME)
    assert kit.writers(shape) == [PRIMARY], shape
    for r in (CANDIDATE, OTHER):
        assert shape[r]["source"] == PRIMARY and shape[r]["running"], shape
    assert router_for(inv, NAME).current().writer == addr(inv, PRIMARY)


@contextmanager
def writes_through_the_router(inv):
    """The zero-loss verifier writes during the block; stopped at once if the block fails
    (the caller checks it with kit.finish_verifier once the cluster is asserted)."""
    v = kit.start_verifier(inv, NAME)
    try:
        yield v
    except BaseException:
        v.stop()
        raise


def fence_undo(run_id: str) -> list[dict]:
    with Journal(resolve_journal_path()) as j:
        steps = j.run_detail(run_id)["steps"]
    return [s for s in steps if s["action"] == "undo" and s["name"] == f"fence {PRIMARY}"]


def test_fence_that_fails_after_read_only_is_undone_by_the_rollback(cluster, monkeypatch):
    state, inv = cluster
    real_fence = Switchover.fence
    fenced = []

    def fence_then_fail(self, before_retry=None):
        sentence, pos = real_fence(self, before_retry)  # read_only=ON is in place on the primary
        if self.old == PRIMARY and not fenced:
            fenced.append(Inspector(self.server(self.old)).read_only())
            raise DbmigrateError(f"lost the connection to {self.old} right after read_only=ON")
        return sentence, pos

    monkeypatch.setattr(Switchover, "fence", fence_then_fail)
    with writes_through_the_router(inv) as v:
        outcome = start_run(playbook(state, "fault1"), assume_yes=True)
        monkeypatch.setattr(Switchover, "fence", real_fence)
        assert fenced == [True]  # the fence did take effect before its step failed
        assert outcome.status == "rolled_back", outcome.summary
        assert "right after read_only=ON" in outcome.summary
        assert_original_primary_serves(inv)
    report = kit.finish_verifier(v, inv, NAME)
    assert report.lost_total == 0, report.summary()
    assert fence_undo(outcome.run_id), "the failed fence step was not undone"


KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    from dbmigrate.app.runs import start_run
    from dbmigrate.procedures.kit.switchover import Switchover

    real_fence = Switchover.fence

    def fence_then_die(self, before_retry=None):
        real_fence(self, before_retry)  # read_only=ON is in place; the tool dies before its step finishes
        os.kill(os.getpid(), signal.SIGKILL)

    Switchover.fence = fence_then_die
    start_run(sys.argv[1], assume_yes=True)
""")


def test_tool_killed_after_read_only_then_rollback_restores_the_primary(cluster, cli):
    state, inv = cluster
    with writes_through_the_router(inv) as v:
        p = subprocess.run([sys.executable, "-c", KILLED_RUN, str(playbook(state, "fault2"))],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == -9, p.stderr[-2000:]
        with inv.open(PRIMARY) as s:
            assert Inspector(s).read_only()  # the fence outlived the tool
        with Journal(resolve_journal_path()) as j:
            run_id = j.list_runs(limit=1)[0]["id"]
        r = cli("rollback", run_id, "--yes", timeout=180)
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
        assert_original_primary_serves(inv)
    report = kit.finish_verifier(v, inv, NAME)
    assert report.lost_total == 0, report.summary()
    assert fence_undo(run_id), "the interrupted fence step was not undone"
