"""Evidence reports from real runs, rendered by a real headless browser.

One promote rehearsal writes a report; the same run's report is rebuilt later from
the journal alone; `dbmigrate run --report` samples lag and the writer's round trip
beside a promote; chromium renders the page, and its DOM must hold charts with data.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def rehearsal(cli, tmp_path_factory):
    """One `rehearse promote --report` for the whole module (about 40 s)."""
    out = tmp_path_factory.mktemp("report") / "promote.html"
    r = cli("rehearse", "promote", "--load-seconds", "2", "--report", str(out), timeout=400)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-3000:]
    return r, out, json.loads(out.with_suffix(".json").read_text())


def test_rehearse_promote_prints_the_before_after_and_per_class_tables(rehearsal):
    r, out, data = rehearsal
    assert "Before and after the move" in r.stdout and "Per query class" in r.stdout
    assert f"report: {out}" in r.stdout
    tables = {t["key"]: t for t in data["tables"]}
    before_after = {v["metric"]: v for v in tables["before_after"]["values"]}
    for metric in ("median query latency (application side)", "average query time (server, pt-query-digest)",
                   "primary CPU (% of one core)"):
        assert before_after[metric]["before"] > 0 and before_after[metric]["after"] > 0, metric
    assert any("app.orders" in v["class"] for v in tables["per_class"]["values"])


def test_the_report_holds_the_run_timeline(rehearsal):
    _, _, data = rehearsal
    ev = data["evidence"]
    assert data["run"]["status"] == "done"
    assert ev["verifier"]["lost_total"] == 0
    assert sum(ev["acks"]["counts"]) == ev["verifier"]["acknowledged"]  # every acknowledgement is on the chart
    assert ev["acks"]["bin_ms"] == 10.0
    assert len({replica for _, replica, _ in ev["lag"]["points"]}) >= 3  # two replicas and the candidate, then
    # the old primary
    assert len(ev["latency"]["points"]) >= 5
    cutover = [s for s in data["steps"] if s["phase"] == "cutover"]
    assert cutover and all(s["end"] >= s["start"] for s in cutover)
    assert data["guard_windows"] and all(w["numbers"]["rules"] for w in data["guard_windows"])


def test_runs_report_rebuilds_the_same_report_from_the_journal(rehearsal, cli, tmp_path):
    _, _, data = rehearsal
    out = tmp_path / "again.html"
    r = cli("runs", "report", data["run"]["id"], "--out", str(out))
    assert r.returncode == 0, r.stderr
    again = json.loads(out.with_suffix(".json").read_text())
    assert again["evidence"] == data["evidence"] and again["steps"] == data["steps"]
    assert [t["rows"] for t in again["tables"]] == [t["rows"] for t in data["tables"]]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup installs Debian's chromium)")
def test_the_report_renders_in_headless_chromium_with_charts_that_hold_data(rehearsal, tmp_path):
    _, page, data = rehearsal
    shot, blank = tmp_path / "report.png", tmp_path / "blank.png"
    empty = tmp_path / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body></body></html>")
    for target, png in ((page, shot), (empty, blank)):
        r = _chromium("--window-size=1000,2400", f"--screenshot={png}", target.as_uri())
        assert png.exists(), r.stderr[-1000:]
    assert _png_size(shot) == (1000, 2400)
    assert shot.stat().st_size > 10 * blank.stat().st_size  # tables and charts, not a white page

    dom = _chromium("--dump-dom", page.as_uri()).stdout
    assert "<svg" in dom and "<script" not in dom

    def series(chart: str) -> dict[str, int]:
        svg = re.search(rf'<svg[^>]*data-chart="{chart}".*?</svg>', dom, re.S)
        assert svg, f"chart {chart} is missing"
        return {n: int(p) for n, p in re.findall(r'data-series="([^"]+)" data-points="(\d+)"', svg.group(0))}

    acks = series("timeline-acks")["acknowledged writes per 10 ms"]
    assert acks == len(data["evidence"]["acks"]["counts"]) and acks > 100
    assert series("timeline-acks-zoom")["acknowledged writes per 10 ms"] > 10
    lag = series("timeline-lag")
    assert len(lag) >= 3 and all(n > 3 for n in lag.values())
    assert series("timeline-latency")["p99"] >= 5
    assert len(series("guard-windows")) >= 1
    acks_chart = re.search(r'<svg[^>]*data-chart="timeline-acks".*?</svg>', dom, re.S).group(0)
    bands = re.findall(r'<rect class="band" data-step="([^"]+)"', acks_chart)
    assert any("fence" in b for b in bands) and len(bands) == len(data["steps"])
    bars = re.findall(r'data-chart="digest-avg".*?</svg>', dom, re.S)[0]
    values = [float(v) for v in re.findall(r'class="bar"[^>]*data-value="([\d.e-]+)"', bars)]
    assert values and all(v > 0 for v in values)
    assert 'data-table="before_after"' in dom and 'data-table="per_class"' in dom
    assert 'data-lost="0"' in dom


def test_run_report_samples_lag_and_latency_beside_a_real_promote(boxes, cli, tmp_path):
    name = "prorep"
    state, inv = kit.topology(boxes, name)
    v = kit.start_verifier(inv, name)  # writes flowing, so the heartbeat lag has something to show
    try:
        out = tmp_path / "run.html"
        r = cli("run", str(kit.playbook(state, name)), "--yes", "--report", str(out), timeout=300)
        assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
        assert f"report: {out}" in r.stdout
    finally:
        report = kit.finish_verifier(v, inv, name)
    assert report.lost_total == 0, report.summary()
    data = json.loads(out.with_suffix(".json").read_text())
    ev = data["evidence"]
    assert data["run"]["status"] == "done" and data["run"]["procedure"] == "promote"
    writers = [w for _, w in ev["lag"]["writers"]]
    assert writers[0] == f"{name}-1" and writers[-1] == f"{name}-new"  # the sampler saw the switch
    assert {replica for _, replica, _ in ev["lag"]["points"]} >= {f"{name}-2", f"{name}-3"}
    assert ev["latency"]["points"] and "round trip" in ev["latency"]["source"]
    assert "acks" not in ev  # no verifier of its own in a plain run: the chart says so instead of guessing
    page = out.read_text()
    assert 'data-chart="timeline-lag"' in page and "not recorded in this run" in page
    boxes.down(name)


def test_a_report_path_that_cannot_be_written_is_refused_before_anything_runs(cli, tmp_path):
    r = cli("run", str(tmp_path / "no-such-playbook.yaml"), "--report", str(tmp_path / "missing" / "r.html"))
    assert r.returncode == 2
    assert "directory" in r.stderr and "does not exist" in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error:")]) == 1
