"""run / plan / resume / rollback / runs through the command line, with a demo procedure."""

from __future__ import annotations

import textwrap

import pytest
import typer
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from dbmigrate.cli import runs
from dbmigrate.engine import Phase, Procedure
from dbmigrate.procedures import registry
from dbmigrate.procedures.contract import Prepared
from tests import jsonlines
from tests.unit.test_engine_support import FakeLockServer, World


class DemoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target: str = "db-2"


@pytest.fixture
def app():
    application = typer.Typer()
    runs.register(application)
    return application


@pytest.fixture
def world():
    return World()


@pytest.fixture
def lock_server():
    return FakeLockServer()


@pytest.fixture(autouse=True)
def demo(monkeypatch, world, lock_server, tmp_path):
    failing = set()
    world.failing = failing

    def build(ctx, params):
        steps = [world.step(name, fail=name in failing) for name in ("fence", "promote", "repoint")]
        return Procedure("demo", [Phase("preflight", [world.step("inspect", mutating=False)]),
                                  Phase("cutover", steps)])

    def prepare(playbook, state, *, old_gone=False):
        return Prepared(lock_session=lock_server.connect())

    entry = registry.ProcedureEntry("demo", build, params=DemoParams, prepare_resources=prepare,
                                    gates={"always": lambda ctx, p: (True, f"{p.target} is fine", {"target": p.target})})
    monkeypatch.setitem(registry._REGISTRY, "demo", entry)
    monkeypatch.setenv("DBMIGRATE_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.chdir(tmp_path)


def playbook(tmp_path, extra: str = "") -> str:
    (tmp_path / "demo.yaml").write_text(textwrap.dedent("""
        procedure: demo
        cluster: main
        params: {target: db-2}
        gates:
          - {name: go-ahead, kind: manual, before: cutover}
          - {name: always, kind: auto, before: cutover}
        """).lstrip() + extra)
    return "demo.yaml"


def invoke(app, *args):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_run_json_lines_then_runs_show_json(app, tmp_path, world):
    result = invoke(app, "run", playbook(tmp_path), "--yes", "--json")
    assert result.exit_code == 0, result.output
    events = jsonlines.events(result.stdout)
    assert events[-1]["event"] == "RunFinished" and events[-1]["status"] == "done"
    run_id = events[0]["run_id"]
    end = jsonlines.summary(result.stdout)
    assert (end["exit_code"], end["status"], end["run_id"]) == (0, "done", run_id)
    assert end["counts"]["steps"] == {"done": 4} and end["counts"]["event"] == len(events)
    assert world.runs() == ["run:inspect", "run:fence", "run:promote", "run:repoint"]

    shown = invoke(app, "runs", "show", run_id[:17], "--json")
    assert shown.exit_code == 0
    detail = jsonlines.result(shown.stdout)
    assert detail["status"] == "done" and detail["id"] == run_id
    assert [(s["phase"], s["name"], s["status"], s["sentence"]) for s in detail["steps"]] == [
        ("preflight", "inspect", "done", "did inspect"),
        ("cutover", "fence", "done", "did fence"),
        ("cutover", "promote", "done", "did promote"),
        ("cutover", "repoint", "done", "did repoint"),
    ]
    assert [(g["name"], g["ok"], g["decided_by"]) for g in detail["gates"]] == [
        ("go-ahead", True, "--yes"), ("always", True, "auto")]
    assert detail["gates"][1]["reason"] == "db-2 is fine"
    assert [s["sql"] for s in detail["statements"]][:2] == ["DO 'inspect'", "DO 'fence'"]
    assert detail["metrics"] == [] and detail["params"] == {"target": "db-2"}

    listed = jsonlines.result(invoke(app, "runs", "ls", "--json").stdout)
    assert [r["id"] for r in listed] == [run_id]


def test_runs_show_human_output(app, tmp_path):
    invoke(app, "run", playbook(tmp_path), "--yes")
    shown = invoke(app, "runs", "show", "last")
    assert shown.exit_code == 0
    assert "status done" in shown.stdout and "did promote" in shown.stdout and "go-ahead" in shown.stdout


def test_failed_run_exits_1_then_resume_completes_it(app, tmp_path, world, lock_server):
    world.failing.add("promote")
    result = invoke(app, "run", playbook(tmp_path), "--yes")
    assert result.exit_code == 1
    assert "promote exploded" in result.stdout
    assert "hint: fix the cause, then: dbmigrate resume" in result.stderr
    assert lock_server.owners == {}  # the lock session was closed

    world.failing.clear()
    world.calls.clear()
    resumed = invoke(app, "resume", "last", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert world.runs() == ["run:promote", "run:repoint"]  # inspect and fence already done: skipped


def test_rollback_undoes_a_finished_run(app, tmp_path, world):
    invoke(app, "run", playbook(tmp_path), "--yes")
    result = invoke(app, "rollback", "last", "--yes", "--json")
    assert result.exit_code == 0
    assert world.undos() == ["undo:repoint", "undo:promote", "undo:fence", "undo:inspect"]
    assert jsonlines.summary(result.stdout)["status"] == "rolled_back"


def test_manual_gate_without_terminal_or_yes_is_refused(app, tmp_path, world):
    result = invoke(app, "run", playbook(tmp_path))
    assert result.exit_code == 5  # refused before any change
    assert "no terminal to ask the operator; pass --yes" in result.stdout
    assert world.runs() == []  # known before the first step: not even the read-only one ran


def test_config_error_exits_2_with_file_line_and_field(app, tmp_path):
    path = playbook(tmp_path, "dry_run: maybe\n")
    result = invoke(app, "run", path, "--yes")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: demo.yaml:7: dry_run: 'maybe' is not valid")
    assert "hint: fix demo.yaml and try again" in result.stderr


def test_second_run_on_a_locked_cluster_is_refused(app, tmp_path, lock_server):
    holder = lock_server.connect()
    holder.query("SELECT GET_LOCK(%s, 0) AS got", ("dbmigrate:main",))
    result = invoke(app, "run", playbook(tmp_path), "--yes")
    assert result.exit_code == 5  # nothing changed: the same exit as any refusal before a change
    assert f"database lock 'dbmigrate:main' is held (MySQL connection {holder.connection_id})" in result.stderr
    listed = jsonlines.result(invoke(app, "runs", "ls", "--json").stdout)
    assert f"error: run {listed[0]['id']} refused before any change: cluster 'main'" in result.stderr
    assert listed[0]["status"] == "refused" and \
        listed[0]["summary"].startswith("refused before any change: cluster 'main'")


def test_dry_run_takes_the_lock_and_changes_nothing(app, tmp_path, world):
    result = invoke(app, "run", playbook(tmp_path), "--yes", "--dry-run", "--json")
    assert result.exit_code == 0
    assert world.runs() == ["run:inspect"]
    detail = jsonlines.result(invoke(app, "runs", "show", "last", "--json").stdout)
    assert detail["dry_run"] is True
    assert [s["status"] for s in detail["steps"]] == ["done", "dry-run", "dry-run", "dry-run"]
    assert [s["sql"] for s in detail["statements"] if s["dry_run"]][-1] == "DO 'repoint'"


def test_plan_shows_phases_steps_and_gates_without_connecting(app, tmp_path, lock_server):
    result = invoke(app, "plan", playbook(tmp_path))
    assert result.exit_code == 0
    for text in ("preflight", "cutover", "manual gate go-ahead", "auto gate always", "2. fence (undoable)", "inspect (read-only, undoable)"):
        assert text in result.stdout
    plan = jsonlines.result(invoke(app, "plan", playbook(tmp_path), "--json").stdout)
    assert [p["name"] for p in plan["phases"]] == ["preflight", "cutover"]
    assert plan["phases"][1]["gates"] == [{"name": "go-ahead", "kind": "manual"}, {"name": "always", "kind": "auto"}]
    assert lock_server.next_connection == 10  # prepare_resources was not called


def test_plan_refuses_a_missing_inventory_and_says_where_relative_paths_start(app, tmp_path):
    (tmp_path / "plays").mkdir()
    (tmp_path / "plays" / "demo.yaml").write_text("procedure: demo\ncluster: main\ninventory: inv.yaml\n")
    (tmp_path / "inv.yaml").write_text("clusters: {}\n")  # beside the current directory, not the playbook
    result = invoke(app, "plan", "plays/demo.yaml")
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"plays/demo.yaml:3: inventory: {tmp_path / 'plays' / 'inv.yaml'}: no such file" in said, said
    assert (f"hint: a relative path in a playbook is from the playbook's directory ({tmp_path / 'plays'}), "
            f"not from the current directory") in said


def test_plan_refuses_a_cluster_the_inventory_does_not_have(app, tmp_path):
    (tmp_path / "inv.yaml").write_text(textwrap.dedent("""
        version: 1
        defaults: {credentials: {password_env: DBM_PW, user: admin}}
        clusters:
          main: {servers: {db-1: {host: 127.0.0.1, port: 3306}}}
        """).lstrip())
    (tmp_path / "demo.yaml").write_text("procedure: demo\ncluster: mian\ninventory: inv.yaml\n")
    result = invoke(app, "plan", "demo.yaml")
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"demo.yaml:2: cluster: 'mian' is not a cluster of {tmp_path / 'inv.yaml'}" in said, said
    assert "hint: clusters there: main" in said
    (tmp_path / "demo.yaml").write_text("procedure: demo\ncluster: main\ninventory: inv.yaml\n")
    assert invoke(app, "plan", "demo.yaml").exit_code == 0


def test_unknown_run_is_a_usage_error(app):
    result = invoke(app, "runs", "show", "20990101")
    assert result.exit_code == 2 and "no run '20990101'" in result.stderr
