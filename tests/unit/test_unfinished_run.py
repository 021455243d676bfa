"""A new run never decides beside a run of its cluster that stopped mid-change.

A process killed with -9 inside a cutover leaves its run `running` with steps done (or a statement on
the wire); a new `dbmigrate run` would read the half-done topology ("no writable primary", "already the
primary") and decide without settling what the dead process sent. The same playbook run again takes the
dead run over (it is resumed, its intents settled first); anything else is refused, naming the run and
the two commands that finish it (exit 5: nothing changed).
"""

from __future__ import annotations

import subprocess

import pytest

from dbmigrate.app.errors import REFUSED
from dbmigrate.app.runs import take_over_or_refuse, unfinished_run_of
from dbmigrate.engine.journal import Journal
from dbmigrate.exceptions import CommandFailed


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def started(journal: Journal, run_id: str, *, cluster: str = "orders", steps: str = "done") -> None:
    journal.create_run(run_id, procedure="promote", cluster=cluster)
    journal.step_started(run_id, 0, "cutover", "fence db-1")
    if steps == "done":
        journal.step_finished(run_id, 0, "cutover", "fence db-1", status="done", sentence="fenced")


def killed(journal: Journal, run_id: str) -> None:
    journal._write("UPDATE runs SET pid=? WHERE id=?", (dead_pid(), run_id))


def refuse_beside_unfinished(journal: Journal, cluster: str) -> None:
    """What a new run of another playbook meets."""
    run = unfinished_run_of(journal, cluster)
    if run is not None:
        take_over_or_refuse(run, "/elsewhere/other.yaml", "0" * 64, overridden=False)


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


def test_the_same_playbook_run_again_takes_the_dead_run_over_and_an_edited_or_overridden_one_is_refused(journal):
    journal.create_run("r1", procedure="promote", cluster="orders", playbook="/pb/promote.yaml",
                       playbook_sha="a" * 64)
    journal.step_started("r1", 0, "cutover", "fence db-1")
    killed(journal, "r1")
    dead = unfinished_run_of(journal, "orders")
    assert dead is not None and dead.id == "r1"
    take_over_or_refuse(dead, "/pb/promote.yaml", "a" * 64, overridden=False)  # taken over: no refusal
    with pytest.raises(CommandFailed, match="not the playbook it ran"):
        take_over_or_refuse(dead, "/pb/promote.yaml", "b" * 64, overridden=False)
    with pytest.raises(CommandFailed, match="not the playbook it ran"):
        take_over_or_refuse(dead, "/pb/promote.yaml", "a" * 64, overridden=True)


def test_a_failed_rollback_is_never_taken_over_even_by_its_own_playbook(journal):
    journal.create_run("r1", procedure="promote", cluster="orders", playbook="/pb/promote.yaml",
                       playbook_sha="a" * 64)
    journal.step_started("r1", 0, "cutover", "fence db-1")
    journal.finish_run("r1", "rollback_failed", "the router did not answer")
    dead = unfinished_run_of(journal, "orders")
    assert dead is not None
    with pytest.raises(CommandFailed, match="its rollback failed") as e:
        take_over_or_refuse(dead, "/pb/promote.yaml", "a" * 64, overridden=False)
    assert e.value.exit_code == REFUSED
