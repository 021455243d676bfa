"""One rule for a run's exit code, over every way a run can end: nothing changed -> 5 (refused),
changed and undone -> 1, bad input -> 2, paused -> 4. The same rule as README's "Exit codes"."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from dbmigrate.app.errors import failure_of
from dbmigrate.app.runs import start_run
from dbmigrate.cli.render import console_approver
from dbmigrate.engine import Journal
from dbmigrate.exceptions import AuthFailed, ConfigError
from tests.unit.test_engine_cli import app, demo, lock_server, playbook, world  # noqa: F401 (fixtures)


def ended(tmp_path, **kwargs) -> tuple[int, str]:
    """(exit code, journaled status) of one run of the demo playbook, as the command line would exit."""
    try:
        outcome = start_run(tmp_path / playbook(tmp_path), **kwargs)
    except Exception as exc:  # refused before the runner: the command's error
        code = failure_of(exc).exit_code
    else:
        from dbmigrate.app.errors import exit_code_of_run

        code = exit_code_of_run(outcome.status)
    with Journal(tmp_path / "journal.sqlite") as j:
        runs = j.list_runs()
    return code, runs[0]["status"] if runs else "no run"


class NoTerminal(io.StringIO):
    def isatty(self) -> bool:
        return False


def declined(waiting):
    return False, "declined by operator"


def test_gate_declined_after_only_read_only_steps_is_refused_5(tmp_path, world):
    assert ended(tmp_path, approver=declined) == (5, "refused")
    assert world.runs() == ["run:inspect"]  # the read-only step ran; nothing to undo


def test_no_terminal_and_no_yes_is_known_before_the_first_step_5(tmp_path, world):
    approver = console_approver(stdin=NoTerminal())
    assert ended(tmp_path, approver=approver) == (5, "refused")
    assert world.runs() == []


def test_no_approver_at_all_is_refused_before_the_first_step_5(tmp_path, world):
    assert ended(tmp_path) == (5, "refused")
    assert world.runs() == []


def test_a_refused_login_while_opening_the_run_is_5(tmp_path, world, monkeypatch):
    from dbmigrate.procedures import registry

    def refuse(playbook, state, *, old_gone=False):
        raise AuthFailed("db-1 (127.0.0.1:3306) refused user 'admin': access denied",
                         hint="check the password in creds.cnf [client-admin]")

    monkeypatch.setitem(registry._REGISTRY, "demo", replace(registry._REGISTRY["demo"], prepare_resources=refuse))
    assert ended(tmp_path, assume_yes=True) == (5, "refused")
    assert world.runs() == []


def test_the_cluster_lock_held_is_5(tmp_path, world, lock_server):
    holder = lock_server.connect()
    holder.query("SELECT GET_LOCK(%s, 0) AS got", ("dbmigrate:main",))
    assert ended(tmp_path, assume_yes=True) == (5, "refused")


def test_bad_input_while_opening_the_run_stays_2(tmp_path, monkeypatch):
    from dbmigrate.procedures import registry

    def bad(playbook, state, *, old_gone=False):
        raise ConfigError("inv.yaml:3: clusters.main: no such server 'db-9'")

    monkeypatch.setitem(registry._REGISTRY, "demo", replace(registry._REGISTRY["demo"], prepare_resources=bad))
    assert ended(tmp_path, assume_yes=True)[0] == 2


def test_changed_and_failed_is_1(tmp_path, world):
    world.failing.add("repoint")
    assert ended(tmp_path, assume_yes=True) == (1, "failed")


def test_changed_and_undone_is_1(tmp_path, world, monkeypatch):
    from dbmigrate.procedures import registry

    entry = registry._REGISTRY["demo"]

    def build(ctx, params):
        procedure = entry.build(ctx, params)
        procedure.rollback_on_failure = True
        return procedure

    monkeypatch.setitem(registry._REGISTRY, "demo", replace(entry, build=build))
    world.failing.add("repoint")
    assert ended(tmp_path, assume_yes=True) == (1, "rolled_back")
    assert world.undos()[:2] == ["undo:promote", "undo:fence"]


def test_promotes_warm_up_is_a_read_only_step():
    """A gate refused after the warm-up (scan, replay or a buffer pool load) changed nothing: exit 5."""
    from dbmigrate.procedures.kit.warmup import WarmSpec
    from dbmigrate.procedures.promote.extras import warm_step

    for method in ("scan", "replay", "dump-load"):
        assert warm_step(WarmSpec(method=method, tables=["app.t"])).mutating is False, method


@pytest.mark.parametrize("args, code", [(["--yes"], 0), ([], 5)])
def test_cli_run_exit_codes(app, tmp_path, args, code):  # noqa: F811
    r = CliRunner().invoke(app, ["run", playbook(tmp_path), *args])
    assert r.exit_code == code, r.output


def test_gate_refused_after_an_observation_window_puts_it_back_and_is_5(tmp_path, world, monkeypatch):
    """The latency guard's slow-log windows open before the go-ahead: declined, they are put back,
    and the run changed nothing."""
    from dbmigrate.procedures import registry

    entry = registry._REGISTRY["demo"]

    def build(ctx, params):
        procedure = entry.build(ctx, params)
        window = world.step("open baseline window")
        window.observes_only = True
        procedure.phases[0].steps.append(window)
        procedure.rollback_on_failure = True
        return procedure

    monkeypatch.setitem(registry._REGISTRY, "demo", replace(entry, build=build))
    assert ended(tmp_path, approver=declined) == (5, "refused")
    assert "undo:open baseline window" in world.undos() and "undo:fence" not in world.undos()
    assert "open baseline window" not in world.state  # put back
