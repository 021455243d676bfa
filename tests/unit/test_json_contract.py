"""The one --json contract, on every command that has --json (found by walking the command tree):
stdout is JSON lines with a `record` key, an error is a record, and a summary record with the
exit code, the duration and counts always ends the output. Bad input needs no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from dbmigrate.cli.main import app
from tests import jsonlines

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "digest"


def json_commands() -> dict[str, str]:
    """Every command with a --json option: its path -> the option's parameter name."""
    out: dict[str, str] = {}

    def walk(command, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, path + [name])
            return
        for param in command.params:
            if "--json" in param.opts:
                out[" ".join(path)] = param.name

    walk(typer.main.get_command(app), [])
    return out


# Bad input for each command with --json, refused before anything is contacted or started.
MISSING = "/nonexistent/dbmigrate-test/x.yaml"
BAD_INPUT = {
    "check": ["check", "-i", MISSING, "-c", "c", "--candidate", "s2"],
    "checksum": ["checksum", "-i", MISSING, "-c", "c", "-d", "app"],
    "run": ["run", MISSING, "--yes"],
    "plan": ["plan", MISSING],
    "resume": ["resume", "last", "--journal", "{tmp}"],
    "rollback": ["rollback", "last", "--yes", "--journal", "{tmp}"],
    "warm": ["warm", "-i", MISSING, "--target", "s2", "--from", "s1", "--method", "scan"],
    "sandbox up": ["sandbox", "up", "--name", "9-not-a-name"],
    "sandbox status": ["sandbox", "status", "no-such-sandbox"],
    "sandbox ls": ["sandbox", "ls"],  # with DBMIGRATE_HOME a file (below)
    "inventory check": ["inventory", "check", MISSING],
    "topology show": ["topology", "show", "-i", MISSING, "-c", "c"],
    "lag watch": ["lag", "watch", "-i", MISSING, "-c", "c"],  # --json without --once
    "runs ls": ["runs", "ls", "--journal", "{tmp}"],
    "runs show": ["runs", "show", "last", "--journal", "{tmp}"],
    "runs report": ["runs", "report", "last", "--journal", "{tmp}"],
    "rehearse promote": ["rehearse", "promote", "--report", "{tmp}"],
    "rehearse consolidate": ["rehearse", "consolidate", "--rows", "0"],
    "rehearse schema-swap": ["rehearse", "schema-swap", "--rows", "5"],
    "digest capture": ["digest", "capture", "-i", MISSING, "-s", "s1", "--seconds", "nan"],
    "shape capture": ["shape", "capture", "-i", MISSING, "-c", "c", "-o", "{tmp}/shape"],
    "digest compare": ["digest", "compare", MISSING, MISSING],
    "digest evaluate": ["digest", "evaluate", "--policy", MISSING, MISSING, MISSING],
    "consolidate plan": ["consolidate", "plan", "--sizes", MISSING, "--hosts", MISSING],
    "consolidate provision": ["consolidate", "provision", "--plan", MISSING, "--inventory", MISSING],
    "consolidate status": ["consolidate", "status", "--plan", MISSING, "--inventory", MISSING],
    "consolidate run": ["consolidate", "run", MISSING, "--yes"],
    "consolidate throttle": ["consolidate", "throttle", "last", "--pause", "--resume"],
}


def invoke(args: list[str], tmp_path: Path, env: dict | None = None):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    return CliRunner().invoke(app, args, env={"COLUMNS": "200", "DBMIGRATE_HOME": str(tmp_path / "home"),
                                              **(env or {})})


def check_contract(r, command: str) -> list[dict]:
    assert r.stdout.strip(), (command, r.stderr)
    records = [json.loads(line) for line in r.stdout.splitlines()]  # every line is one JSON object
    assert all(isinstance(rec, dict) and rec.get("record") in ("event", "result", "error", "summary")
               for rec in records), records
    end = records[-1]
    assert end["record"] == "summary" and [x["record"] for x in records].count("summary") == 1
    assert end["command"] == command and end["exit_code"] == r.exit_code
    assert isinstance(end["duration_s"], float) and end["duration_s"] >= 0
    kinds = [x["record"] for x in records[:-1]]
    assert end["counts"]["event"] == kinds.count("event") and end["counts"]["result"] == kinds.count("result")
    assert end["counts"]["error"] == kinds.count("error")
    return records


def test_every_command_with_json_has_a_bad_input_case():
    assert set(json_commands()) == set(BAD_INPUT)


@pytest.mark.parametrize("command", sorted(BAD_INPUT))
def test_bad_input_under_json_is_an_error_record_and_a_summary(command, tmp_path):
    assert command in json_commands()
    env = {}
    if command == "sandbox ls":
        (tmp_path / "home-file").write_text("not a directory")
        env["DBMIGRATE_HOME"] = str(tmp_path / "home-file")
    r = invoke(BAD_INPUT[command] + ["--json"], tmp_path, env)
    assert r.exit_code == 2, (command, r.exit_code, r.stdout, r.stderr, r.exception)
    records = check_contract(r, command)
    errors = [x for x in records if x["record"] == "error"]
    assert len(errors) == 1 and errors[0]["exit_code"] == 2 and errors[0]["message"], records
    assert "Traceback" not in r.stdout + r.stderr
    assert r.stderr.startswith("error: ")  # people watching still read it on stderr


def test_a_result_is_one_record_before_the_summary(tmp_path):
    r = invoke(["digest", "compare", str(FIX / "before.json"), str(FIX / "after.json"), "--json"], tmp_path)
    records = check_contract(r, "digest compare")
    assert r.exit_code == 0 and [x["record"] for x in records] == ["result", "summary"]
    assert jsonlines.result(r.stdout)["overall"]["p95"]["direction"] == "worse"
    assert records[-1]["counts"] == {"event": 0, "result": 1, "error": 0}


def test_an_exit_code_other_than_an_error_is_in_the_summary(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - {metric: p95, scope: overall, max_regression_pct: 10, min_abs_us: 1}\n"
                      "min_samples: 1\n")
    r = invoke(["digest", "evaluate", "--policy", str(policy), str(FIX / "before.json"), str(FIX / "after.json"),
                "--json"], tmp_path)
    assert r.exit_code == 3, (r.stdout, r.stderr)
    records = check_contract(r, "digest evaluate")
    assert records[-1]["exit_code"] == 3 and jsonlines.result(r.stdout)["rollback"] is True
    # a non-zero exit that is no error of input is still said: the reason and a hint, on stdout and stderr
    errors = [x for x in records if x["record"] == "error"]
    assert len(errors) == 1 and errors[0]["exit_code"] == 3, records
    assert errors[0]["message"].startswith("the policy calls for a rollback: ") and errors[0]["hint"]
    assert f"error: {errors[0]['message']}" in " ".join(r.stderr.split())


def test_lists_are_results_too(tmp_path):
    r = invoke(["runs", "ls", "--json", "--journal", str(tmp_path / "j.sqlite")], tmp_path)
    check_contract(r, "runs ls")
    assert r.exit_code == 0 and jsonlines.result(r.stdout) == []


@pytest.mark.parametrize("argv, message", [
    (["inventory", "check", "--json", "--bogus"], "No such option: --bogus"),
    (["digest", "compare", "--json"], "Missing argument 'before'."),
])
def test_an_error_the_argument_parser_finds_is_a_record_too(argv, message):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "dbmigrate", *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["record"] for x in lines] == ["error", "summary"]
    assert lines[0]["message"] == message and lines[0]["exit_code"] == 2
    assert lines[0]["command"] == " ".join(a for a in argv[:2] if not a.startswith("-"))
    assert lines[1]["exit_code"] == 2
    assert f"error: {message}" in r.stderr


def _raw_exits(tree) -> list[int]:
    """Lines that raise typer.Exit with an exit code other than 0: an exit without a stated reason."""
    import ast

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            f = node.exc.func
            if isinstance(f, ast.Attribute) and f.attr == "Exit" and node.exc.args:
                arg = node.exc.args[0]
                if not (isinstance(arg, ast.Constant) and arg.value == 0):
                    lines.append(node.lineno)
    return lines


def test_no_command_with_json_exits_non_zero_without_a_reason():
    """Every non-zero exit of a command with --json is an error (CommandFailed or another
    DbmigrateError), which the one boundary writes as an `error` record with its reason and hint
    and as the same line on stderr. Only the boundary itself turns errors into exit codes."""
    import ast
    import inspect

    checked = set()
    for command in typer.main.get_command(app).commands.values():
        for sub in getattr(command, "commands", {command.name: command}).values():
            if not any("--json" in p.opts for p in sub.params):
                continue
            module = inspect.getmodule(inspect.unwrap(sub.callback))
            if module in checked:
                continue
            checked.add(module)
            raw = _raw_exits(ast.parse(inspect.getsource(module)))
            assert not raw, f"{module.__name__} exits without a reason at line(s) {raw}: raise CommandFailed"
    assert len(checked) >= 10


def test_an_exit_without_an_error_record_still_gets_one(tmp_path):
    """The boundary's safety net: a bare non-zero typer.Exit under --json is an error record too."""
    from dbmigrate.cli.common import guarded

    extra = typer.Typer()

    @extra.command()
    @guarded
    def probe(json_out: bool = typer.Option(False, "--json")) -> None:
        raise typer.Exit(7)

    @extra.command()
    def other() -> None:
        pass

    r = CliRunner().invoke(extra, ["probe", "--json"])
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.exit_code == 7 and [x["record"] for x in records] == ["error", "summary"]
    assert records[0]["exit_code"] == 7 and records[0]["message"] and records[0]["hint"]
