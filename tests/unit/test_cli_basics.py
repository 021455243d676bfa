"""--version, shell completion, an example in every command's --help, and a dry run
that stops never claims to have undone anything."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dbmigrate.cli.main import app
from dbmigrate.cli.examples import EXAMPLES, add_examples
from dbmigrate.engine import FunctionStep, Journal, Phase, Procedure, Runner
from tests.unit.test_engine_support import new_context


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.stdout.startswith("dbmigrate ") and r.stdout.split()[1][0].isdigit()


def test_shell_completion_is_offered():
    r = run("--help")
    assert "--install-completion" in r.stdout and "--show-completion" in r.stdout


def test_every_command_has_an_example_in_its_help():
    assert add_examples(app) == []  # no command without an example
    for name, example in EXAMPLES.items():
        r = run(*name.split(), "--help")
        assert r.exit_code == 0, name
        assert "Example: " + example in " ".join(r.stdout.split()), (name, r.stdout[-400:])


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_parses_with_the_commands_own_parser(name):
    """What people copy from --help works: every option exists, every required one is there,
    every value has the right type (the command's parser, as it runs; no server is contacted)."""
    import shlex

    import typer.main

    words = shlex.split(EXAMPLES[name])
    assert words[0] == "dbmigrate"
    command, path = typer.main.get_command(app), []
    words = words[1:]
    while hasattr(command, "commands") and words and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words.pop(0)]
    assert " ".join(path) == name, (name, path)
    command.make_context(name, list(words))  # raises on an unknown option, a missing one or a bad value


@pytest.mark.parametrize("name", ["runs ls", "sandbox ls"])
def test_examples_that_need_no_server_run(name, tmp_path):
    import shlex

    r = CliRunner().invoke(app, shlex.split(EXAMPLES[name])[1:],
                           env={"COLUMNS": "200", "DBMIGRATE_HOME": str(tmp_path),
                                "DBMIGRATE_JOURNAL": str(tmp_path / "j.sqlite")})
    assert r.exit_code == 0, (name, r.output)


def test_a_dry_run_that_stops_says_nothing_was_changed(tmp_path):
    def boom(ctx):
        raise RuntimeError("cannot read the candidate")

    procedure = Procedure("demo", [Phase("p", [FunctionStep("read", boom, mutating=False)])],
                          rollback_on_failure=True)
    with Journal(tmp_path / "j.sqlite") as journal:
        outcome = Runner().run(procedure, new_context(journal, dry_run=True))
    assert outcome.summary.startswith("dry run stopped: ")
    assert "undone" not in outcome.summary + outcome.error.hint and "rolled back" not in outcome.summary
    assert outcome.error.hint == "nothing was changed (dry run)"


def test_ctrl_c_on_a_live_lag_watch_exits_130(monkeypatch, tmp_path):
    from contextlib import contextmanager

    from dbmigrate.app import lag as lag_use

    @contextmanager
    def target(*_args):
        yield type("Target", (), {"title": "lag of c"})()

    def watch(*_args, **_kw):
        raise KeyboardInterrupt
        yield  # a generator, as the real watch is

    monkeypatch.setattr(lag_use, "open_lag_target", target)
    monkeypatch.setattr(lag_use, "watch", watch)
    r = run("lag", "watch", "-i", str(tmp_path / "inv.yaml"), "-c", "c")
    assert r.exit_code == 130, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.startswith("error: interrupted")


def test_the_readme_lists_every_exit_code_the_tool_uses():
    from pathlib import Path

    from dbmigrate.app.errors import INTERRUPTED, PAUSED, REFUSED

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    codes = readme.split("Exit codes:", 1)[1].split("\n\n", 1)[0]
    for code, words in ((0, "success"), (1, "rolled back"), (2, "bad input"), (3, "digest evaluate"),
                        (PAUSED, "paused"), (REFUSED, "refused"), (INTERRUPTED, "Ctrl-C")):
        assert f"{code} " in codes and words in codes, (code, words)


def test_rehearse_promote_names_its_sandbox_and_refuses_a_bad_name_before_building(monkeypatch):
    from dbmigrate.exceptions import UsageError
    from dbmigrate.rehearsal import rehearse as rehearsal

    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        raise UsageError("stopped here by the test")

    monkeypatch.setattr(rehearsal, "rehearse_promote", fake)
    r = run("rehearse", "promote", "--name", "9-not-a-name")
    assert r.exit_code == 2 and "invalid sandbox name '9-not-a-name'" in r.stderr and seen == {}
    r = run("rehearse", "promote", "--name", "drill-7", "--keep")
    assert r.exit_code == 2 and "stopped here by the test" in r.stderr
    assert seen["name"] == "drill-7" and seen["keep"] is True


def test_sandbox_status_names_haproxys_ports_whole():
    from dbmigrate.cli.sandbox import haproxy_line

    line = haproxy_line({"pid": None, "writer_port": 40001, "reader_port": 40002, "admin_socket": "/s/admin.sock"})
    assert line == ("HAProxy (stopped, pid -): writer 127.0.0.1:40001, readers 127.0.0.1:40002, "
                    "admin socket /s/admin.sock")
    assert haproxy_line(None) == ""


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_no_help_cuts_a_word_at_80_columns(name):
    r = CliRunner().invoke(app, [*name.split(), "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout, [line for line in r.stdout.splitlines() if "…" in line]


def test_after_a_rollback_the_rehearsal_names_the_original_primary_as_such():
    from dbmigrate.cli.rehearse import other_gaps_sentence, primary_sentence

    back = primary_sentence({"rolled_back": True, "new_primary": "r-1", "candidate": "r-new",
                             "old_primary_replicating": False})
    assert back.startswith("primary after the rollback: [bold]r-1[/]") and "new primary" not in back
    assert "r-new was promoted, then the cutover was rolled back" in back
    kept = primary_sentence({"rolled_back": False, "new_primary": "r-new", "candidate": "r-new",
                             "old_primary_replicating": True})
    assert kept.startswith("new primary: [bold]r-new[/]")
    assert other_gaps_sentence([{"ms": 3012.4, "steps": ["collect baseline digest"]}]) == \
        "3012.4 ms during collect baseline digest"
    assert other_gaps_sentence([]) == "none worth naming"
