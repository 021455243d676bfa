"""`dbmigrate digest compare|evaluate|show` on fixture files (no server needed)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from dbmigrate.cli.main import app
from tests import jsonlines

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "digest"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "220"})


def test_compare_table_marks_and_noise_option():
    r = run("digest", "compare", str(FIX / "before.json"), str(FIX / "after.json"))
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if "794F5440" in ln)
    assert "▲ +900%" in line
    assert "▼ −50%" in next(ln for ln in r.output.splitlines() if "102435CD" in ln)
    items = next(ln for ln in r.output.splitlines() if "67696204" in ln)
    assert "· +4%" in items
    r = run("digest", "compare", str(FIX / "before.json"), str(FIX / "after.json"), "--noise-pct", "1", "--noise-us", "1")
    items = next(ln for ln in r.output.splitlines() if "67696204" in ln)
    assert "▲ +4% (+2 µs)" in items


def test_compare_json_and_markdown():
    r = run("digest", "compare", str(FIX / "before.json"), str(FIX / "after.json"), "--json")
    assert r.exit_code == 0
    assert jsonlines.result(r.stdout)["overall"]["p95"]["direction"] == "worse"
    r = run("digest", "compare", str(FIX / "before.json"), str(FIX / "after.json"), "--markdown")
    assert r.output.startswith("## Query latency before and after")
    r = run("digest", "compare", str(FIX / "before.json"), str(FIX / "after.json"), "--markdown", "--json")
    assert r.exit_code != 0


def test_evaluate_exit_code_says_rollback(tmp_path):
    policy = tmp_path / "guard.yaml"
    policy.write_text("min_samples: 100\nrules:\n  - {metric: p95, scope: top_time_share, share: 0.5, max_regression_pct: 30}\n")
    r = run("digest", "evaluate", "--policy", str(policy), str(FIX / "before.json"), str(FIX / "after.json"))
    assert r.exit_code == 3 and "ROLL BACK" in r.output
    r = run("digest", "evaluate", "--policy", str(policy), str(FIX / "before.json"), str(FIX / "before.json"), "--json")
    assert r.exit_code == 0 and jsonlines.result(r.stdout)["rollback"] is False


def test_show():
    r = run("digest", "show", str(FIX / "pt_sandbox_rw.json"))
    assert r.exit_code == 0 and "7,421 queries" in r.output
