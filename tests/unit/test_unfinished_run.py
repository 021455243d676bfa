"""A new run is refused, before any change, on a cluster whose last run stopped mid-change.

A process killed with -9 inside a cutover leaves its run `running` with steps done (or a statement on
the wire); a new `dbmigrate run` would read the half-done topology ("no writable primary", "already the
primary") and decide without settling what the dead process sent. It names the run and the two
commands that finish it instead (exit 5: nothing changed).
"""

from __future__ import annotations

import subprocess

import pytest

from dbmigrate.app.errors import REFUSED
from dbmigrate.app.runs import refuse_beside_unfinished
from dbmigrate.engine.journal import Journal
from dbmigrate.exceptions import CommandFailed


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def journal(tmp_path):
    with Journal(tmp_path / "journal.sqlite") as j:
        yield j


def started(journal: Journal, run_id: str, *, cluster: str = "orders", steps: str = "done") -> None:
    journal.create_run(run_id, procedure="promote", cluster=cluster)
    journal.step_started(run_id, 0, "cutover", "fence db-1")
    if steps == "done":
        journal.step_finished(run_id, 0, "cutover", "fence db-1", status="done", sentence="fenced")


def killed(journal: Journal, run_id: str) -> None:
    journal._write("UPDATE runs SET pid=? WHERE id=?", (dead_pid(), run_id))


@pytest.mark.parametrize("steps", ["done", "in flight"])
def test_a_run_whose_process_died_mid_change_refuses_a_new_one_naming_both_commands(journal, steps):
    started(journal, "r1", steps=steps)
    killed(journal, "r1")
    with pytest.raises(CommandFailed) as e:
        refuse_beside_unfinished(journal, "orders")
    assert e.value.exit_code == REFUSED
    assert "refused before any change: run r1 of cluster orders stopped mid-change" in e.value.message
    assert "dbmigrate resume r1" in e.value.hint and "dbmigrate rollback r1" in e.value.hint


def test_a_failed_rollback_refuses_a_new_run(journal):
    started(journal, "r1")
    journal.finish_run("r1", "rollback_failed", "the router did not answer")
    with pytest.raises(CommandFailed, match="its rollback failed"):
        refuse_beside_unfinished(journal, "orders")


def test_a_living_run_a_finished_one_another_cluster_or_a_dead_one_that_did_nothing_are_let_be(journal):
    started(journal, "alive")  # this process: alive; the cluster lock refuses a second run itself
    refuse_beside_unfinished(journal, "orders")
    journal.finish_run("alive", "done", "ok")
    started(journal, "other", cluster="users")
    killed(journal, "other")
    refuse_beside_unfinished(journal, "orders")  # another cluster's dead run is not this cluster's business
    journal.create_run("idle", procedure="promote", cluster="orders")
    killed(journal, "idle")
    refuse_beside_unfinished(journal, "orders")  # died before its first step: nothing to finish
