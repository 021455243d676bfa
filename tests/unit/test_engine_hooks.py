"""Hooks: real executables, environment, failure stops the run, output journaled."""

from __future__ import annotations

import stat
import time

import pytest

from dbmigrate.engine import Runner
from dbmigrate.engine.hooks import HookRunner, parse_hook_command
from tests.unit.test_engine_support import World, new_context, two_phase_procedure


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_hooks_get_dbmigrate_variables_but_no_secrets(journal, tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQL_PWD", "do-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nor-this")
    out = tmp_path / "env.txt"
    hook = script(tmp_path, "dump.sh", f"env >> {out}\necho ---- >> {out}\n")
    world = World()
    ctx = new_context(journal, dry_run=True)
    ctx.set_hook_env("OLD_PRIMARY", "db-1")
    ctx.set_hook_env("ADMIN_PASSWORD", "p4ss")
    runner = Runner(hooks=HookRunner({"before_phase": [str(hook)]}))
    assert runner.run(two_phase_procedure(world), ctx).status == "done"
    first = out.read_text().split("----")[0]
    env = dict(line.split("=", 1) for line in first.strip().splitlines())
    assert env["DBMIGRATE_RUN_ID"] == ctx.run_id
    assert env["DBMIGRATE_PROCEDURE"] == "demo" and env["DBMIGRATE_CLUSTER"] == "main"
    assert env["DBMIGRATE_PHASE"] == "prepare" and env["DBMIGRATE_HOOK"] == "before_phase"
    assert env["DBMIGRATE_DRY_RUN"] == "1" and env["DBMIGRATE_OLD_PRIMARY"] == "db-1"
    dumped = out.read_text()
    assert "do-not-leak" not in dumped and "nor-this" not in dumped and "p4ss" not in dumped
    assert "DBMIGRATE_PHASE=cutover" in dumped
    assert any("ADMIN_PASSWORD" in log["message"] for log in journal.run_detail(ctx.run_id)["logs"])


def test_failing_hook_stops_before_the_next_phase_and_journal_says_why(journal, tmp_path):
    hook = script(tmp_path, "drain.sh",
                  'if [ "$DBMIGRATE_PHASE" = prepare ]; then echo "drain failed: lb-1 unreachable" >&2; exit 3; fi\n')
    world = World()
    ctx = new_context(journal)
    outcome = Runner(hooks=HookRunner({"after_phase": [[str(hook), "--pool", "main"]]})).run(
        two_phase_procedure(world), ctx)
    assert outcome.status == "failed"
    assert world.runs() == ["run:a", "run:b"]  # nothing of phase cutover
    assert outcome.summary == (
        f"after_phase hook for phase 'prepare' failed: {hook} --pool main exited 3: drain failed: lb-1 unreachable")
    detail = journal.run_detail(ctx.run_id)
    row = detail["hooks"][0]
    assert (row["hook"], row["phase"], row["status"], row["exit_code"]) == ("after_phase", "prepare", "failed", 3)
    assert row["command"] == f"{hook} --pool main"
    assert row["stderr_tail"] == "drain failed: lb-1 unreachable"
    assert detail["status"] == "failed" and "exited 3" in detail["summary"]


def test_hook_timeout_kills_it_and_fails(journal, tmp_path):
    world = World()
    ctx = new_context(journal)
    started = time.monotonic()
    outcome = Runner(hooks=HookRunner({"before_phase": ["sh -c 'sleep 30 & sleep 30'"]}, timeout_s=0.3)).run(
        two_phase_procedure(world), ctx)
    assert time.monotonic() - started < 5
    assert outcome.status == "failed" and "timed out after 0.3s" in outcome.summary
    assert world.runs() == []
    assert journal.run_detail(ctx.run_id)["hooks"][0]["status"] == "timeout"


def test_missing_hook_program_fails_clearly(journal, tmp_path):
    ctx = new_context(journal)
    outcome = Runner(hooks=HookRunner({"before_phase": ["./nope.sh"]}, base_dir=tmp_path)).run(
        two_phase_procedure(World()), ctx)
    assert outcome.status == "failed" and "could not start: cannot execute" in outcome.summary


def test_success_and_failure_hooks_do_not_change_the_outcome(journal, tmp_path):
    ctx = new_context(journal)
    runner = Runner(hooks=HookRunner({"on_success": ["false"]}))
    assert runner.run(two_phase_procedure(World()), ctx).status == "done"
    assert journal.run_detail(ctx.run_id)["hooks"][0]["hook"] == "on_success"


def test_resume_does_not_repeat_hooks_that_already_succeeded(journal, tmp_path):
    count = tmp_path / "count"
    hook = script(tmp_path, "count.sh", f'echo "$DBMIGRATE_PHASE" >> {count}\n')
    world = World()
    procedure = two_phase_procedure(world)
    ctx = new_context(journal)
    procedure.phases[1].steps[0] = world.step("c", fail=True)
    hooks = HookRunner({"before_phase": [str(hook)]})
    assert Runner(hooks=hooks).run(procedure, ctx).status == "failed"
    assert Runner(hooks=hooks).run(two_phase_procedure(world), ctx, resume=True).status == "done"
    assert count.read_text().split() == ["prepare", "cutover"]


def test_relative_hook_paths_are_taken_from_the_playbook_directory(tmp_path):
    assert parse_hook_command("./hooks/n.sh --x 1", tmp_path).argv == (str(tmp_path / "hooks/n.sh"), "--x", "1")
    assert parse_hook_command(["notify", "a b"], tmp_path).argv == ("notify", "a b")  # PATH lookup kept
