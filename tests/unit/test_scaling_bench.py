"""bench/scaling.py names what bounds each instance count on the host it ran on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scaling.py"


def _bench():
    spec = importlib.util.spec_from_file_location("scaling_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_share_is_read_from_the_counters_difference():
    b = _bench()
    # user nice system idle iowait irq softirq steal
    share = b.cpu_share([100, 0, 100, 700, 100, 0, 0, 0], [190, 0, 190, 710, 110, 0, 0, 0])
    assert share["busy_pct"] == 90.0 and share["iowait_pct"] == 5.0


def test_the_limit_is_named_from_what_was_measured(monkeypatch):
    b = _bench()
    monkeypatch.setattr(b, "mem_available_mb", lambda: 20_000)
    assert b.limit_of({"busy_pct": 97, "iowait_pct": 1, "cores": 2}, 10, 2, 256).startswith("CPU (97% busy: 20 go-tpc")
    assert b.limit_of({"busy_pct": 40, "iowait_pct": 35, "cores": 2}, 5, 2, 256).startswith("disk (iowait 35%")
    assert b.limit_of({"busy_pct": 40, "iowait_pct": 5, "cores": 2}, 10, 2, 2048).startswith("memory (10 x 2048 MB")
    assert b.limit_of({"busy_pct": 40, "iowait_pct": 5, "cores": 2}, 1, 2, 256).startswith("neither CPU")
