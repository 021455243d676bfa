"""`resume last` / `rollback last`: the newest run of the cluster named, never a rehearsal's,
and every confirmation names the cluster and shows [y/N]."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dbmigrate.app.runs import pick_last
from dbmigrate.cli.main import app
from dbmigrate.cli.render import console_approver, console_chooser
from dbmigrate.engine import Journal, Runner
from dbmigrate.engine.events import GateWaiting
from dbmigrate.exceptions import UsageError
from tests.unit.test_engine_support import World, new_context, two_phase_procedure


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def journal(tmp_path):
    with Journal(tmp_path / "journal.sqlite") as j:
        # Oldest first: an operator's promote on orders, a swap on billing, then a rehearsal's run.
        j.create_run("20261120-100000-aaaa", procedure="promote", cluster="orders")
        j.finish_run("20261120-100000-aaaa", "failed", "x")
        j.create_run("20261120-110000-bbbb", procedure="schema_swap", cluster="billing")
        j.finish_run("20261120-110000-bbbb", "done", "x")
        j.create_run("20261120-120000-cccc", procedure="promote", cluster="orders")
        j.mark_rehearsal("20261120-120000-cccc")
        yield j


def test_last_is_the_named_clusters_newest_run_never_a_rehearsal(journal):
    assert pick_last(journal, "orders") == "20261120-100000-aaaa"
    assert pick_last(journal, "billing") == "20261120-110000-bbbb"
    assert pick_last(journal, "orders", rehearsals=True) == "20261120-120000-cccc"
    with pytest.raises(UsageError) as e:
        pick_last(journal, "nope")
    assert "no run of cluster 'nope'" in e.value.message and "orders" in e.value.hint


def test_last_with_runs_of_several_clusters_asks_naming_cluster_procedure_status_and_age(journal):
    with pytest.raises(UsageError) as e:
        pick_last(journal)  # nobody to ask: refused, with what it could have meant
    for word in ("orders", "billing", "promote", "schema_swap", "failed", "done", "ago", "--cluster"):
        assert word in e.value.message + e.value.hint, word
    assert "cccc" not in e.value.message

    shown = io.StringIO()
    choose = console_chooser(Console(file=shown, width=200), Tty("2\n"))
    assert pick_last(journal, choose=choose) == "20261120-100000-aaaa"  # newest first: billing, then orders
    out = shown.getvalue()
    assert "1. cluster billing: schema_swap run 20261120-110000-bbbb, done" in out
    assert "2. cluster orders: promote run 20261120-100000-aaaa, failed" in out and " ago" in out

    with pytest.raises(UsageError):  # no answer: nothing chosen, nothing done
        pick_last(journal, choose=console_chooser(Console(file=io.StringIO()), Tty("\n")))


def test_last_with_one_operator_cluster_needs_no_question(tmp_path):
    with Journal(tmp_path / "j.sqlite") as j:
        j.create_run("20261120-100000-aaaa", procedure="promote", cluster="orders")
        j.create_run("20261120-120000-cccc", procedure="promote", cluster="rehearsal-1a2b")
        j.mark_rehearsal("20261120-120000-cccc")
        assert pick_last(j) == "20261120-100000-aaaa"


def test_cli_rollback_last_without_a_cluster_refuses_when_ambiguous(journal):
    r = CliRunner().invoke(app, ["rollback", "last", "--yes", "--journal", journal.path], env={"COLUMNS": "200"})
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert "ambiguous" in r.stderr and "orders" in r.stderr and "billing" in r.stderr
    r = CliRunner().invoke(app, ["rollback", "20261120-110000-bbbb", "--cluster", "orders", "--journal",
                                 journal.path], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "cluster 'billing', not 'orders'" in r.stderr, r.stderr


def test_every_confirmation_shows_y_n_and_the_cluster(tmp_path):
    shown = io.StringIO()
    approve = console_approver(Console(file=shown, width=300), Tty("n\n"))
    waiting = GateWaiting(run_id="r", phase="cutover", gate="go-ahead", kind="manual", prompt="Cut over?",
                          cluster="orders")
    assert approve(waiting)[0] is False
    assert "cluster orders: Cut over? [y/N]" in shown.getvalue()

    asked: list[GateWaiting] = []
    with Journal(tmp_path / "j.sqlite") as j:
        world = World()
        ctx = new_context(j, cluster="orders")
        procedure = two_phase_procedure(world)
        assert Runner(assume_yes=True).run(procedure, ctx).ok
        Runner(approver=lambda w: (asked.append(w), (False, "no"))[1]).rollback(procedure, ctx)
    assert asked and asked[0].cluster == "orders"
    assert "on cluster orders" in asked[0].prompt and "started " in asked[0].prompt
