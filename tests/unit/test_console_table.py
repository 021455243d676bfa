"""Tables keep what operators copy: ids, addresses and numbers are never cut or
wrapped, at 80 columns, narrower, or piped; markup in a name is printed as is."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dbmigrate.cli.main import app
from dbmigrate.console_table import PIPE_WIDTH, Col, fit_to_output, show, styled

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "digest"

COLS = [Col("run", keep=True), Col("address", keep=True), Col("count", keep=True, right=True), Col("summary")]
ROWS = [["20261122-180501-a1b2", "127.0.0.1:33061", "1,234,567",
         "the old primary replicates from the new one, read-only, so that a rollback loses nothing"],
        ["20261122-180502-c3d4[/]", "[bold]10.0.0.12:3306", "12", styled("refused", "red")]]


def render(width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    show(console, COLS, ROWS, title="runs")
    return out.getvalue()


@pytest.mark.parametrize("width", [200, 80, 60, 40, 20])
def test_kept_values_are_whole_on_one_line_at_any_width(width):
    text = render(width)
    for row in ROWS:
        for value in row[:3]:
            assert any(str(value) in line for line in text.splitlines()), (value, text)
    assert "…" not in text


def test_sentences_wrap_between_words_not_inside_them():
    text = render(90)
    words = set(ROWS[0][3].replace(",", "").split())
    for line in text.splitlines():
        cell = line.split("│")[-2].strip() if line.count("│") >= 5 else ""
        for w in cell.replace(",", "").split():
            assert w in words or w in ("refused",), (w, text)


def test_narrow_terminal_gives_a_legend_or_records_not_cut_cells():
    at_70 = render(70)
    assert "summary: the old primary" in at_70  # legend under a table of the kept columns
    at_20 = render(20)
    assert "● 20261122-180501-a1b2" in at_20 and "address  127.0.0.1:33061" in at_20


def test_piped_output_gets_the_full_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = Console(file=io.StringIO())
    fit_to_output(console)
    assert console.width == PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "72")
    fit_to_output(console)
    assert console.width == 72


def run(columns: int, *args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


@pytest.mark.parametrize("columns", [80, 60])
def test_digest_show_keeps_every_number_column(columns):
    r = run(columns, "digest", "show", str(FIX / "after.json"))
    assert r.exit_code == 0, r.output
    for value in ("794F5440", "91%", "1,000", "2.00 ms", "5.00 ms", "50.0 ms", "100,000", "23DCA152"):
        assert value in r.stdout, (value, r.stdout)
    assert "…" not in r.stdout and max(len(line) for line in r.stdout.splitlines()) <= max(columns, 100)


@pytest.mark.parametrize("columns", [80, 60, 200])
def test_digest_compare_fits_the_width_and_keeps_numbers(columns):
    r = run(columns, "digest", "compare", str(FIX / "before.json"), str(FIX / "after.json"))
    assert r.exit_code == 0, r.output
    for value in ("794F5440", "200 µs → 2.00 ms", "▲ +900%", "▼ −50%", "1,000 → 1,000", "996859AA"):
        assert value in r.stdout, (value, r.stdout)
    table_lines = [ln for ln in r.stdout.splitlines() if re.match(r"^[┏┃┡│└]", ln)]
    assert all(len(ln) <= columns for ln in table_lines), r.stdout


def test_runs_ls_never_cuts_run_ids(tmp_path):
    from dbmigrate.engine.journal import Journal

    journal = tmp_path / "j.sqlite"
    ids = ["20261122-180501-a1b2", "20261122-180502-c3d4"]
    with Journal(journal) as j:
        for run_id in ids:
            j.create_run(run_id, procedure="promote", cluster="shop-cluster-eu-west-1",
                         params={}, playbook="playbooks/promote-replica.yaml")
            j.finish_run(run_id, "rolled_back", "rolled back: the guard saw p95 +300% on the new primary " * 2)
    for columns in (80, 50, 30):
        r = run(columns, "runs", "ls", "--journal", str(journal))
        assert r.exit_code == 0, r.output
        for run_id in ids:
            assert run_id in r.stdout, (columns, r.stdout)
        assert "shop-cluster-eu-west-1" in r.stdout
