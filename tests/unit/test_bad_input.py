"""Malformed input to the commands that read files: each one is one clear line on
stderr and exit 2, quickly, with no traceback (and, having connected to nothing,
no server changed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dbmigrate.cli.main import app

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "digest"
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def refused(r, *words: str) -> str:
    """Exit 2 and one `error:` line (plus at most a hint), naming `words`."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error: "), r.stderr
    assert len(lines) <= 2 and all(ln.startswith(("error: ", "hint: ")) for ln in lines), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def alias_bomb(levels: int = 12) -> str:
    text = 'version: 1\na: &a ["x","x","x","x","x","x","x","x","x"]\n'
    for i in range(1, levels):
        prev, cur = f"l{i - 1}" if i > 1 else "a", f"l{i}"
        text += f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    return text


INVENTORY = """version: 1
defaults:
  credentials: {defaults_file: creds.cnf, group: client}
clusters:
  c:
    replication_credentials: {defaults_file: creds.cnf, group: client}
    servers:
      s1: {host: 127.0.0.1, port: 1, role: primary}
      s2: {host: 127.0.0.1, port: 2, role: replica}
"""


@pytest.fixture
def inventory(tmp_path):
    (tmp_path / "creds.cnf").write_text("[client]\nuser=u\npassword=p\n")
    os.chmod(tmp_path / "creds.cnf", 0o600)
    f = tmp_path / "inv.yaml"
    f.write_text(INVENTORY)
    return f


# -- YAML readers ---------------------------------------------------------------------
@pytest.mark.parametrize("command", [["inventory", "check"], ["plan"]])
def test_yaml_alias_bomb_is_refused_at_once(tmp_path, command):
    f = tmp_path / "bomb.yaml"
    f.write_text(alias_bomb())
    started = time.monotonic()
    refused(run(*command, str(f)), "expands to more than", "aliases")
    # 9**12 nodes: an expansion would not end for hours; the bound is generous for a loaded host
    # (the first import of the command's modules took 10 s at load average 21).
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("name, content, words", [
    ("latin1.yaml", b"version: 1\n# caf\xe9\nclusters: {}\n", [":2:", "not UTF-8", "0xe9"]),
    ("deep.yaml", b"version: 1\nx: " + b"[" * 5000 + b"]" * 5000 + b"\n", ["nested more than"]),
    ("deep-64.yaml", b"version: 1\nx: " + b"[" * 80 + b"]" * 80 + b"\n", ["nested more than 64"]),
    ("recursive.yaml", b"version: 1\nx: &a [1, *a]\n", ["contains it"]),
])
def test_unreadable_yaml_is_one_line(tmp_path, name, content, words):
    f = tmp_path / name
    f.write_bytes(content)
    for command in (["inventory", "check"], ["plan"]):
        refused(run(*command, str(f)), str(f), *words)


def test_directory_device_and_long_path_instead_of_a_yaml_file(tmp_path):
    refused(run("inventory", "check", str(tmp_path)), "is a directory")
    refused(run("plan", "/dev/zero"), "larger than")
    refused(run("inventory", "check", str(tmp_path / ("x" * 300))), "File name too long")


def test_host_name_longer_than_dns_allows(inventory):
    inventory.write_text(INVENTORY.replace("s1: {host: 127.0.0.1", "s1: {host: " + "a" * 64 + ".example.com"))
    refused(run("inventory", "check", str(inventory)), ":8:", "servers.s1.host", "at most 63")


def test_empty_host_is_refused(inventory):
    inventory.write_text(INVENTORY.replace("s1: {host: 127.0.0.1", "s1: {host: ''"))
    refused(run("inventory", "check", str(inventory)), "servers.s1.host", "empty")


@pytest.mark.parametrize("value", ["1.0e+20", "100000000000000000000"])
def test_read_timeout_is_bounded(inventory, value):
    inventory.write_text(INVENTORY.replace("defaults:\n", f"defaults:\n  read_timeout: {value}\n"))
    refused(run("inventory", "check", str(inventory)), "defaults.read_timeout")


# -- journal and home -----------------------------------------------------------------
def test_journal_that_is_not_a_journal(tmp_path):
    import sqlite3

    refused(run("runs", "ls", "--journal", str(tmp_path)), "is a directory")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    refused(run("runs", "ls", "--journal", str(text)), "not a dbmigrate journal")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (a)")
    refused(run("runs", "ls", "--journal", str(other)), "another program")
    refused(run("runs", "ls", "--journal", str(tmp_path / ("y/" * 2100))), "too long")
    refused(run("runs", "ls", "--journal", str(text / "j.sqlite")), "is not a directory")
    refused(run("runs", "ls", env={"DBMIGRATE_JOURNAL": str(text)}), "not a dbmigrate journal")


def test_dbmigrate_home_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for home in (str(f), str(tmp_path / ("z" * 300))):
        p = subprocess.run([sys.executable, "-m", "dbmigrate", "runs", "ls"], capture_output=True, text=True,
                           env={**os.environ, "DBMIGRATE_HOME": home, "DBMIGRATE_JOURNAL": ""}, cwd=ROOT,
                           timeout=60)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.startswith("error: DBMIGRATE_HOME") and len(p.stderr.strip().splitlines()) == 2


# -- digests --------------------------------------------------------------------------
def _ours() -> dict:
    from dbmigrate.digest.model import Digest

    return Digest.load(FIX / "after.json").to_dict()


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d.update(query_count="many"), ["query_count", "expected a number"]),
    (lambda d: d.update(classes={"a": 1}), ["classes", "expected a list"]),
    (lambda d: d["classes"][0].update(count=None), ["classes[0].count"]),
    (lambda d: d["classes"][0].update(avg=float("nan")), ["classes[0].avg"]),
    (lambda d: d["classes"][0].update(p95=-1), ["classes[0].p95"]),
    (lambda d: d["classes"][0].update(tables="app.t"), ["classes[0].tables"]),
    (lambda d: d["classes"].append("x"), ["classes[", "expected an object"]),
    (lambda d: d.update(source=[1]), ["source", "expected an object"]),
    (lambda d: d.pop("total_time"), ["missing", "total_time"]),
])
def test_dbmigrate_digest_with_wrongly_typed_fields(tmp_path, mutate, words):
    d = _ours()
    mutate(d)
    f = tmp_path / "bad.digest.json"
    f.write_text(json.dumps(d))
    refused(run("digest", "compare", str(FIX / "before.json"), str(f)), str(f), *words)
    refused(run("digest", "show", str(f)), *words)


@pytest.mark.parametrize("doc, words", [
    ({"classes": [{"checksum": "A", "metrics": ["x"]}]}, ["classes[0].metrics", "expected an object"]),
    ({"classes": [{"checksum": "A", "example": "q"}]}, ["classes[0].example"]),
    ({"classes": [{"checksum": "A", "query_count": "1e999"}]}, ["query_count"]),
    ({"classes": [{"checksum": {"x": 1}}]}, ["classes[0].checksum"]),
    ({"global": [], "classes": []}, ["global", "expected an object"]),
    ({"classes": "all"}, ["classes", "expected a list"]),
])
def test_pt_json_with_wrongly_typed_fields(tmp_path, doc, words):
    f = tmp_path / "pt.json"
    f.write_text(json.dumps(doc))
    refused(run("digest", "compare", str(FIX / "before.json"), str(f)), *words)


def test_empty_device_nested_and_binary_digests(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    line = refused(run("digest", "compare", str(FIX / "before.json"), str(empty)), "is empty")
    assert "100%" not in line
    started = time.monotonic()
    refused(run("digest", "compare", "/dev/zero", str(FIX / "after.json")), "not a regular file")
    assert time.monotonic() - started < 5
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    refused(run("digest", "show", str(deep)), "nested too deeply")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"classes": "\xe9"}')
    refused(run("digest", "show", str(binary)), "not UTF-8")
    refused(run("digest", "evaluate", "--policy", str(tmp_path / "none.yaml"), str(empty), str(empty)))


def test_digest_with_no_query_does_not_compare_as_minus_100_percent(tmp_path):
    from dbmigrate.digest.model import Digest

    none = Digest.from_pt_json({}, samples={}, duration_s=10)
    f = none.save(tmp_path / "none.digest.json")
    line = refused(run("digest", "compare", str(FIX / "before.json"), str(f)), "holds no query")
    assert "100%" not in line


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1", "0", "1e9"])
def test_capture_seconds_must_be_a_real_window(seconds, inventory):
    refused(run("digest", "capture", "-i", str(inventory), "-s", "s1", "--seconds", seconds), "--seconds")


# -- warm-up arguments ------------------------------------------------------------------
def test_scan_without_tables_asks_for_tables_not_replay(inventory):
    line = refused(run("warm", "-i", str(inventory), "--target", "s2", "--method", "scan"), "scan needs --tables")
    assert "replay" not in line


def test_replay_plan_reads_a_dbmigrate_digest_file(tmp_path):
    from dbmigrate.digest.model import Digest
    from dbmigrate.warm.methods import replay_plan_from_file

    # `digest capture` output, as an operator would pass it to --slow-log
    ours = Digest.load(FIX / "after.json").save(tmp_path / "after.digest.json")
    plan = replay_plan_from_file(ours)
    assert plan.hot_tables() == ["app.orders", "app.items"] == replay_plan_from_file(FIX / "after.json").hot_tables()
    assert sorted(r for _, r in plan.refused) == ["not a SELECT (INSERT)", "not a SELECT (UPDATE)"]


# -- rich markup in names ---------------------------------------------------------------
def test_brackets_in_names_are_printed_not_parsed(inventory):
    inventory.write_text(INVENTORY.replace("s1:", '"s[/]1":').replace("  c:\n", '  "[/]c[b]":\n'))
    r = run("inventory", "check", str(inventory))
    assert r.exit_code == 1 and isinstance(r.exception, (SystemExit, type(None))), r.exception  # unreachable
    assert "s[/]1" in r.stdout and "[/]c[b]" in r.stdout
    r = run("check", "-i", str(inventory), "-c", "[/]c[b]", "--candidate", "s[/]9")
    line = refused(r, "s[/]9")
    assert "unknown server" in line


# -- accepted but wrong -----------------------------------------------------------------
@pytest.mark.parametrize("shard", ["mysql", "Performance_Schema", "sys", "''"])
def test_system_schema_or_empty_name_as_a_shard(inventory, shard):
    inventory.write_text(INVENTORY.replace("role: primary}", f"role: primary, shards: [app, {shard}]}}"))
    refused(run("inventory", "check", str(inventory)), "servers.s1.shards")


@pytest.mark.parametrize("field", ["inventory", "journal"])
def test_empty_path_in_a_playbook_names_the_field(tmp_path, inventory, field):
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"procedure: promote\ncluster: c\ninventory: {inventory}\nparams: {{candidate: s2}}\n"
                  .replace(f"{field}: {inventory}", f"{field}: ''") + ("journal: ''\n" if field == "journal" else ""))
    line = refused(run("plan", str(pb)), str(pb), field)
    assert "Is a directory" not in line


@pytest.mark.parametrize("field", ["inventory", "journal"])
@pytest.mark.parametrize("command", [["plan"], ["run", "--dry-run"]])
def test_path_too_long_in_a_playbook_is_one_line(tmp_path, inventory, field, command):
    pb = tmp_path / "pb.yaml"
    long_path = "a" * 5000
    pb.write_text(f"procedure: promote\ncluster: c\ninventory: {inventory}\nparams: {{candidate: s2}}\n"
                  .replace(f"inventory: {inventory}", f"inventory: {long_path}" if field == "inventory"
                           else f"inventory: {inventory}\njournal: {long_path}"))
    line = refused(run(*command, str(pb), env={"DBMIGRATE_HOME": str(tmp_path / "home")}), field)
    assert len(line) < 400, line


def test_dry_run_that_cannot_read_its_option_file_journals_no_run(tmp_path, inventory):
    (tmp_path / "creds.cnf").unlink()
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"procedure: promote\ncluster: c\ninventory: {inventory}\nparams: {{candidate: s2}}\n")
    # A journal of its own: the session's shared one holds the live tests' runs.
    env = {"DBMIGRATE_HOME": str(tmp_path / "home"), "DBMIGRATE_JOURNAL": str(tmp_path / "home" / "journal.sqlite")}
    r = run("run", str(pb), "--dry-run", env=env)
    assert r.exit_code != 0 and "creds.cnf" in r.stderr, (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    listed = run("runs", "ls", "--json", env=env)
    assert listed.exit_code == 0, listed.stderr
    records = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    runs = [run for rec in records if rec.get("record") == "result" for run in rec["result"]]
    assert runs == [], runs
